"""Kernel entry names of the device code inside binaries (how the wheel rows of corpus.tsv were found).

Usage: python extract_binary.py FILE... > names.tsv        (one `name \t file` row per distinct kernel)

Host stubs (where the device code is compressed, they are all there is): nvcc's `__device_stub__Z...` and clang/HIP's `_Z<n>__device_stub__...` name every kernel
of the library. Else CUDA: every kernel of an embedded cubin has a `.nv.constant0.<symbol>` (or `.nv.info.<symbol>`) section; that
string is read from the raw bytes of the .so (fat binaries are stored uncompressed in these wheels), so no CUDA tool
is needed. ROCm: every kernel of an AMD code object has a `<symbol>.kd` descriptor. Names are demangled with
mmprof.names.demangle, the way Kineto / nsys / rocprofv3 print them. Several instances of one template are kept (up to
three per qualified function name), as a profiler would show them.
"""
from __future__ import annotations

import os
import re
import sys
from collections import defaultdict

from mmprof.names import demangle, function_name

CUDA = re.compile(rb"\.nv\.(?:constant0|info)\.([A-Za-z_$][\w$.]*)")
ROCM = re.compile(rb"(_Z[\w$.]*?|[A-Za-z_][\w$]*)\.kd\x00")


STUB = re.compile(rb"(\d+)__device_stub__([\w$]+)|__device_stub__(Z[\w$]+)")


def _stub(m: re.Match) -> str:
    """The kernel's own symbol from a host stub. With a length before it (`_ZZL92__device_stub__ZN3cub...E8__handle`,
    nvcc's static locals, or clang/HIP's `_Z36__device_stub__kOptimizer...`), the length counts the 15-character
    prefix and bounds the name (nvcc: the mangled kernel follows `Z`; clang: the identifier, then the rest of the
    mangling); without one (`__device_stub__Z...`), the symbol runs to its end."""
    if m.group(3):
        return "_" + m.group(3).decode()
    n, rest = int(m.group(1)) - 15, m.group(2).decode()
    if rest.startswith("Z"):
        return "_" + rest[:n]
    return f"_Z{n}{rest}"


def kernels(path: str) -> list[str]:
    data = open(path, "rb").read()
    stubs = [_stub(m) for m in STUB.finditer(data)]
    out = stubs + [m.group(1).decode("ascii", "replace") for m in CUDA.finditer(data)]
    if b".kd\x00" in data:  # an AMD code object (HIP fat binary): kernel descriptors
        out += [m.group(1).decode("ascii", "replace") for m in ROCM.finditer(data)]
    return out


def main(files: list[str], per_function: int = 3) -> None:
    seen: set[str] = set()
    count: dict[str, int] = defaultdict(int)
    for p in files:
        for sym in kernels(p):
            if sym in seen:
                continue
            seen.add(sym)
            name = demangle(sym)
            key = function_name(name)
            if count[key] >= per_function:
                continue
            count[key] += 1
            print(f"{name}\t{os.path.basename(p)}")


if __name__ == "__main__":
    main(sys.argv[1:])
