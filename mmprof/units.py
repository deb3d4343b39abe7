"""Small shared helpers for units and their text: durations, shares, integer ranges, element sizes."""

from __future__ import annotations

from typing import Iterable

# bytes per element, by dtype name as profilers and configs spell it (lower case, `c10::` / `torch.` stripped)
_DTYPE_BYTES = {
    "float": 4, "float32": 4, "fp32": 4, "double": 8, "float64": 8, "fp64": 8,
    "half": 2, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1, "fp8": 1,
    "long": 8, "long int": 8, "int64": 8, "int": 4, "int32": 4, "short": 2, "short int": 2, "int16": 2,
    "char": 1, "signed char": 1, "int8": 1, "byte": 1, "unsigned char": 1, "uint8": 1, "bool": 1,
    "uint16": 2, "uint32": 4, "uint64": 8,
    "complexfloat": 8, "complex<float>": 8, "complex64": 8, "complexdouble": 16, "complex<double>": 16,
    "complex128": 16,
}


def dtype_bytes(dtype: str | None) -> int | None:
    """Bytes per element of a dtype name (`c10::BFloat16`, `torch.float32`, `long int`, `bf16`); None if unknown."""
    if not dtype or not isinstance(dtype, str):
        return None
    return _DTYPE_BYTES.get(dtype.strip().lower().replace("c10::", "").replace("torch.", ""))


def fmt_ns(ns: float | None) -> str:
    """1234567 -> '1.23 ms'; None -> '-'."""
    if ns is None or ns != ns:
        return "-"
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


def fmt_ms(ns: float) -> str:
    """1234567 -> '1.235' (milliseconds, for table columns headed 'ms')."""
    return f"{ns / 1e6:,.3f}"


def fmt_pct(x: float | None, signed: bool = False) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:+.1%}" if signed else f"{x:.1%}"


def fmt_ranges(xs: Iterable[int], sep: str = ",") -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8' (negative values, e.g. 'no layer', are left out); '-' when empty."""
    vals = sorted({int(x) for x in xs if x is not None and int(x) >= 0})
    if not vals:
        return "-"
    out, start, prev = [], vals[0], vals[0]
    for x in vals[1:] + [None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if x is not None:
            start = prev = x
    return sep.join(out)


def rank_label(ranks: Iterable[int]) -> str:
    """[0,1,2,3] -> 'ranks 0-3'; [5] -> 'rank 5'; [0,2] -> 'ranks 0,2'."""
    rs = sorted(set(ranks))
    return f"rank {rs[0]}" if len(rs) == 1 else f"ranks {fmt_ranges(rs)}"


def gib(b: int) -> str:
    return f"{b / 2**30:,.2f} GiB"


def fmt_si(x: float | None, unit: str = "") -> str:
    """621.4e12 -> '621 T', 1.67e12 -> '1.67 T', 3.5e10 -> '35.0 G' (3 significant digits); None -> '-'."""
    if x is None or x != x:
        return "-"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")):
        if abs(x) >= scale or scale == 1.0:
            v = x / scale
            num = f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"
            return f"{num} {prefix}{unit}".rstrip()
    return f"{x:g}"  # pragma: no cover


def fmt_ns_pair(a: float | None, b: float | None) -> tuple[str, str]:
    """Two durations in one unit, so a before -> after pair reads like for like: the unit of the smaller non-zero
    one (of the larger where they are more than 100x apart): (742_700, 1_090_000) -> ('742.7 us', '1,090.0 us');
    a None side is '-'."""
    vals = [abs(v) for v in (a, b) if v is not None and v == v]
    if not vals:
        return "-", "-"
    nz = [v for v in vals if v > 0]
    ref = (min(nz) if max(nz) <= 100 * min(nz) else max(nz)) if nz else 0.0
    div, unit, nd = ((1e9, "s", 2) if ref >= 1e9 else (1e6, "ms", 2) if ref >= 1e6 else (1e3, "us", 1) if ref >= 1e3
                     else (1.0, "ns", 0))

    def one(v):
        return "-" if v is None or v != v else f"{v / div:,.{nd}f} {unit}"
    return one(a), one(b)
