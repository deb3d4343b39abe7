"""Device normalisation shared by the importers: a tool's device description -> one small dict.

Profilers describe GPUs differently (rocpd agents carry `gfx942` + "AMD Instinct MI300X" + CU count; nsys
carries "NVIDIA A100-SXM4-80GB" + compute capability + memory; Kineto on ROCm says only "AMD Radeon
Graphics"). `describe_device` turns any of these into `{name, vendor, arch, peak_key}`, where `peak_key` is a
key into the hardware peak table, or None when the product cannot be told apart from what the tool wrote.
"""

from __future__ import annotations

import re
from typing import Any

# (regex on the product name, peak_key); first match wins, so longer / more specific names come first.
_NAME_KEYS: list[tuple[str, str]] = [
    (r"MI\s*355\s*X", "MI355X"),
    (r"MI\s*350\s*X", "MI350X"),
    (r"MI\s*325\s*X", "MI325X"),
    (r"MI\s*308\s*X", "MI308X"),
    (r"MI\s*300\s*X", "MI300X"),
    (r"MI\s*300\s*A", "MI300A"),
    (r"MI\s*250\s*X", "MI250X"),
    (r"MI\s*250(?!\d)", "MI250"),
    (r"MI\s*210", "MI210"),
    (r"MI\s*100", "MI100"),
    (r"GB\s*300", "GB300"),
    (r"GB\s*200", "GB200"),
    (r"GH\s*200", "GH200"),
    (r"(?<![A-Z0-9])B\s*300", "B300"),
    (r"(?<![A-Z0-9])B\s*200", "B200"),
    (r"(?<![A-Z0-9])H\s*200", "H200"),
    (r"(?<![A-Z0-9])H\s*100", "H100"),
    (r"(?<![A-Z0-9])H\s*800", "H800"),
    (r"(?<![A-Z0-9])H\s*20(?!\d)", "H20"),
    (r"(?<![A-Z0-9])A\s*100", "A100"),
    (r"(?<![A-Z0-9])A\s*800", "A800"),
    (r"(?<![A-Z0-9])A\s*10G", "A10G"),
    (r"L\s*40\s*S", "L40S"),
    (r"(?<![A-Z0-9])L\s*40(?!\d|S)", "L40"),
    (r"(?<![A-Z0-9])L\s*4(?!\d)", "L4"),
    (r"V\s*100", "V100"),
]

_GIB = 1024**3


def _norm_arch(arch: Any) -> str | None:
    """'gfx942', 'sm_90', '9.0', (9, 0), 90 -> canonical 'gfx942' / 'sm_90'; None when empty."""
    if arch is None or arch == "":
        return None
    if isinstance(arch, (tuple, list)) and len(arch) == 2:
        return f"sm_{int(arch[0])}{int(arch[1])}"
    s = str(arch).strip().lower()
    m = re.match(r"^(gfx[0-9a-f]+)", s)
    if m:
        return m.group(1)
    m = re.match(r"^(?:sm_?|compute_)?(\d+)\.(\d+)$", s)
    if m:
        return f"sm_{m.group(1)}{m.group(2)}"
    m = re.match(r"^(?:sm_?|compute_)(\d+)([a-z]?)$", s)
    if m:
        return f"sm_{m.group(1)}{m.group(2)}"
    return str(arch).strip()


def _vendor(name: str | None, arch: str | None, vendor: str | None) -> str | None:
    if vendor:
        v = vendor.strip().lower()
        if "nvidia" in v:
            return "nvidia"
        if v in ("amd", "advanced micro devices, inc.") or "amd" in v or "ati" == v:
            return "amd"
        if v == "cpu":
            return "cpu"
    if arch:
        if arch.startswith("gfx"):
            return "amd"
        if arch.startswith("sm_"):
            return "nvidia"
    if name:
        n = name.upper()
        if any(k in n for k in ("NVIDIA", "TESLA", "GEFORCE", "QUADRO", "RTX")):
            return "nvidia"
        if any(k in n for k in ("AMD", "INSTINCT", "RADEON")):
            return "amd"
        for pattern, key in _NAME_KEYS:
            if re.search(pattern, n):
                return "amd" if key.startswith("MI") else "nvidia"
    return None


def _key_from_arch(arch: str | None, cus: int | None, memory_bytes: int | None) -> str | None:
    """Product from architecture + compute-unit count (+ memory where two products share both)."""
    if not arch:
        return None
    mem_gib = memory_bytes / _GIB if memory_bytes and memory_bytes > 0 else None
    if arch == "gfx942":
        if cus == 228:
            return "MI300A"
        if cus == 304:
            if mem_gib is None:
                return "MI300X"  # MI325X shares gfx942 + 304 CUs; without memory size MI300X is the common one
            return "MI325X" if mem_gib > 200 else "MI300X"
        if cus == 80:
            return "MI308X"
        return None
    if arch == "gfx90a":
        if cus in (110, 220):
            return "MI250X"
        if cus in (104, 208):
            return "MI250"
        return None
    if arch == "gfx908":
        return "MI100"
    if arch in ("sm_90", "sm_90a"):
        if cus == 78:
            return "H20"
        if mem_gib is not None:
            return "H200" if mem_gib > 100 else "H100"
        return None
    if arch in ("sm_80",):
        if cus == 108:
            return "A100"
        return None
    if arch == "sm_89" and cus == 142:
        return "L40S"
    if arch == "sm_70":
        return "V100"
    if arch in ("sm_103", "sm_103a"):
        return "B300"
    return None


def describe_device(name: str | None = None, arch: Any = None, vendor: str | None = None,
                    cus: int | None = None, memory_bytes: int | None = None) -> dict[str, Any]:
    """{name, vendor, arch, peak_key} for one device; unknown fields are None, never guessed.

    name: product name as the tool wrote it ("AMD Instinct MI300X", "NVIDIA A100-SXM4-80GB");
    arch: gfx target or CUDA compute capability ('gfx942', 'sm_80', '8.0', (8, 0));
    cus: compute units (AMD) or SMs (NVIDIA); memory_bytes: device memory size.
    """
    a = _norm_arch(arch)
    clean_name = name.strip() if isinstance(name, str) and name.strip() else None
    v = _vendor(clean_name, a, vendor)
    key = None
    if clean_name:
        upper = clean_name.upper()
        for pattern, k in _NAME_KEYS:
            if re.search(pattern, upper):
                key = k
                break
    if key is None and clean_name and re.fullmatch(r"gfx[0-9a-f]+", clean_name.lower()) and a is None:
        a = clean_name.lower()
    if key is None:
        key = _key_from_arch(a, int(cus) if cus not in (None, -1) else None, memory_bytes)
    if v is None and key is not None:
        v = "amd" if key.startswith("MI") else "nvidia"
    return {"name": clean_name, "vendor": v, "arch": a, "peak_key": key}
