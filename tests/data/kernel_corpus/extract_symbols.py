"""Kernel symbols of engine wheels (how tests/data/kernel_corpus/corpus.tsv's wheel rows were found).

Usage: python extract_symbols.py DIR... > symbols.tsv
       python extract_symbols.py --wrappers FILE.so... > wrappers.txt
For each ELF file under DIR (.so host libraries, .cubin / .co / .hsaco device code) it lists the kernels:
nvcc host stubs `__device_stub__Z...` (every CUDA kernel of the library), FUNC symbols of cubins and AMD
code objects. Names are demangled with mmprof.names.demangle, the way Kineto / nsys print them. One row per
distinct qualified function name (the first instance), with the file it came from. The labelled corpus is a
hand-picked, hand-labelled subset of this output (README.md).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

from mmprof.names import demangle, function_name


def symbols(path: str) -> list[str]:
    try:
        out = subprocess.run(["readelf", "-Ws", "--wide", path], capture_output=True, text=True, timeout=300).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    names = []
    device = path.endswith((".cubin", ".co", ".hsaco"))
    for line in out.splitlines():
        f = line.split()
        if len(f) < 8 or f[3] not in ("FUNC", "OBJECT"):
            continue
        s = f[-1]
        # nvcc's host stub `__device_stub__Z<kernel>`, often only left in the names of its static locals
        # (`_ZZL92__device_stub__ZN3cub...E8__handle`): the <len> digits before it bound the kernel's name
        m = re.search(r"(\d+)__device_stub__Z", s)
        if m:
            names.append("_" + s[m.end(1) + len("__device_stub__"):m.end(1) + int(m.group(1))])
        elif s.startswith("__device_stub__Z"):
            names.append("_" + s[len("__device_stub__"):])
        elif device and f[3] == "FUNC" and not s.startswith(("__", "$")):
            names.append(s)
    return names


def wrappers(files: list[str]) -> None:
    """One `file \t name` line per distinct kernel type inside cutlass::device_kernel / Kernel / Kernel2 / kentry
    (the library-wide dedup by function name would keep only one of them)."""
    for f in files:
        seen: set[tuple[str, str, str]] = set()
        for s in symbols(f):
            n = demangle(s)
            fn = function_name(n)
            if not re.search(r"(?:device_kernel|Kernel2?|kentry)$", fn):
                continue
            m = re.search(r"(?:device_kernel|Kernel2?)<\s*([\w:]+)", n)
            m2 = re.search(r"(?:device_kernel|Kernel2?)<\s*[\w:]+<\s*([\w:]+)", n)
            key = (fn, m.group(1) if m else "", m2.group(1) if m2 else "")
            if key not in seen:
                seen.add(key)
                print(os.path.basename(f), "\t", n)


def main(dirs: list[str]) -> None:
    seen: set[str] = set()
    for d in dirs:
        for root, _, files in os.walk(d):
            for fn in sorted(files):
                p = os.path.join(root, fn)
                if not fn.endswith((".so", ".cubin", ".co", ".hsaco")):
                    continue
                for s in symbols(p):
                    s = s.split("@")[0]
                    name = demangle(s)
                    key = function_name(name)
                    if key in seen:
                        continue
                    seen.add(key)
                    print(f"{name}\t{os.path.relpath(p, d)}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--wrappers"]:
        wrappers(sys.argv[2:])
    else:
        main(sys.argv[1:])
