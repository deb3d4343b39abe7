"""Work on long kernel names is linear in their length; prints one JSON line.

Issue 25: "a 1 MiB kernel name makes `summary` take 43 s and `report` 79 s: quadratic work on names". Names are
cut at import (mmprof.profiles.profile.MAX_NAME_CHARS, head + tail + hash), so a command never sees more than that;
this measures the name functions on UNCUT names of growing length (a caller that skips the cut must still be
linear) and the commands on a trace holding names of 1 MiB.

For each shape of name (plain identifier, nested templates, a long template argument list, a mangled name, a
namespace chain, unbalanced brackets) and each function (`display_name`, `demangle`, `classify_name`,
`distinct_display_names`), the time at length L and at 4L: a ratio near 4 is linear, near 16 quadratic. Goal:
every ratio < 8 (a quadratic step would show 16). Then `summary` and `report` on a trace whose two kernels have
1 MiB names, in seconds (goal: well under a second of name work; the import dominates).

    python benchmarks/long_names.py [--length 65536]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mmprof.analysis.attribution.classify import classify_name, default_rules  # noqa: E402
from mmprof.cli import main as cli_main  # noqa: E402
from mmprof.names import demangle, display_name  # noqa: E402
from mmprof.names_distinct import distinct_display_names  # noqa: E402
from tests.fuzz_corpus import kineto_seed  # noqa: E402


def shapes(n: int) -> dict[str, str]:
    """Names of about n characters."""
    return {
        "plain": "gemm_" + "x" * n,
        "nested_templates": "void k" + "<a" * (n // 2) + ">" * (n // 2) + "(int)",
        "template_args": "void at::native::elementwise_kernel<" + ", ".join(["float"] * (n // 7)) + ">(int)",
        "mangled": "_ZN7cutlass6KernelI" + "N2at6native" * (n // 11) + "EEvT_",
        "namespaces": "void " + "::".join(["ns"] * (n // 4)) + "::kernel<float>(float*)",
        "unbalanced": "void k" + "<(" * (n // 2) + "(int)",
        "commas_parens": "void k(" + "(int, " * (n // 6) + ")",
        # a kernel rule's own prefix repeated: each occurrence is a match start that scans to the end of the name
        "repeated_vllm": "vllm::" * (n // 6),
        "repeated_cvt": "cvt_" * (n // 4),
    }


FUNCS = {
    "display_name": lambda s: display_name(s),
    "demangle": lambda s: demangle(s),
    "classify_name": lambda s: (default_rules()._cache.clear(), classify_name(s)),
    "distinct_display_names": lambda s: distinct_display_names([s, s + "a"]),
}


def _clear() -> None:
    for f in (display_name, demangle):
        cache_clear = getattr(f, "cache_clear", None)
        if cache_clear:
            cache_clear()


def timed(fn, s: str) -> float:
    best = float("inf")
    for _ in range(3):
        _clear()
        t0 = time.perf_counter()
        fn(s)
        best = min(best, time.perf_counter() - t0)
    return best


def cli_seconds(args: list[str]) -> float:
    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            cli_main(args)
        except SystemExit:
            pass
    return round(time.perf_counter() - t0, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--length", type=int, default=65536, help="L: names of L and 4L characters are timed")
    a = ap.parse_args()
    res: dict = {"benchmark": "long_names", "python": platform.python_version(), "machine": platform.machine(),
                 "length": a.length, "ratios": {}, "seconds_at_4L": {}}
    small, big = shapes(a.length), shapes(4 * a.length)
    worst = 0.0
    for shape in small:
        for fname, fn in FUNCS.items():
            t1, t4 = timed(fn, small[shape]), timed(fn, big[shape])
            ratio = t4 / max(t1, 1e-6)
            key = f"{shape}/{fname}"
            res["ratios"][key] = round(ratio, 1)
            res["seconds_at_4L"][key] = round(t4, 4)
            if t4 > 1e-3:  # below a millisecond the ratio is noise
                worst = max(worst, ratio)
    res["worst_ratio"] = round(worst, 1)
    with tempfile.TemporaryDirectory() as tmp:
        doc = kineto_seed()
        ks = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
        ks[0]["name"] = shapes(2**20)["nested_templates"]
        ks[1]["name"] = shapes(2**20)["template_args"]
        f = Path(tmp) / "long.json"
        f.write_text(json.dumps(doc))
        res["summary_1MiB_s"] = cli_seconds(["summary", str(f)])
        res["report_1MiB_s"] = cli_seconds(["report", str(f)])
    res["when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(json.dumps(res))


if __name__ == "__main__":
    main()
