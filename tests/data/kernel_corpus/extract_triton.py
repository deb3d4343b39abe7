"""Triton kernel names of a Python source tree (how corpus.tsv's Triton rows were found).

Usage: python extract_triton.py DIR... > triton.tsv
A Triton kernel shows in a trace under the name of its Python function: every `def NAME` right after a
`@triton.jit` / `@triton.autotune(...)` / `@triton.heuristics(...)` decorator (or `@tl.jit`, `@gluon.jit`)
is printed with its file.
"""
from __future__ import annotations

import os
import re
import sys

_DEF = re.compile(r"^[ \t]*@(?:triton|tl|gluon)\.(?:jit|autotune|heuristics)\b.*?^[ \t]*def\s+(\w+)", re.M | re.S)


def main(dirs: list[str]) -> None:
    for d in dirs:
        for root, _, files in os.walk(d):
            for fn in sorted(files):
                if not fn.endswith(".py"):
                    continue
                p = os.path.join(root, fn)
                try:
                    text = open(p, encoding="utf-8", errors="replace").read()
                except OSError:
                    continue
                for m in _DEF.finditer(text):
                    print(f"{m.group(1)}\t{os.path.relpath(p, d)}")


if __name__ == "__main__":
    main(sys.argv[1:])
