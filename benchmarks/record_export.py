"""How long a captured process needs to write its trace when it is told to stop: plain JSON (what `mmprof record`'s
processes write since issue 37: Kineto's own writer) against gzip in the process (what they wrote before:
torch.profiler's `.gz` export runs Python's gzip at level 9 over the whole JSON).

A serving engine gives its workers a few seconds between SIGTERM and SIGKILL (vLLM 0.26: 5 s,
vllm/v1/utils.py:shutdown), so this time decides whether a long capture survives the engine's shutdown. One CPU
workload (`--ops` tiny additions under torch.profiler with shapes, in a fresh process per format), timed from
the stop to the file on disk; one JSON line per format and one with the ratio, measured in one run.

    python benchmarks/record_export.py --ops 100000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import os, sys, time, torch
from torch.profiler import profile, ProfilerActivity
n, path = int(sys.argv[1]), sys.argv[2]
x = torch.randn(16, 16)
p = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
p.start()
for _ in range(n):
    y = x + x
t0 = time.perf_counter()
p.stop()
p.export_chrome_trace(path)
dt = time.perf_counter() - t0
print(dt, os.path.getsize(path))
"""


def one(ops: int, path: str) -> tuple[float, int]:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    out = subprocess.run([sys.executable, "-c", CHILD, str(ops), path], capture_output=True, text=True, env=env,
                         check=True).stdout.split()
    return float(out[-2]), int(out[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=100_000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        plain_s, plain_b = one(a.ops, os.path.join(d, "t.pt.trace.json"))
        gz_s, gz_b = one(a.ops, os.path.join(d, "t.pt.trace.json.gz"))
    print(json.dumps({"bench": "record_export", "format": "plain", "ops": a.ops, "stop_to_file_s": round(plain_s, 3),
                      "bytes": plain_b}))
    print(json.dumps({"bench": "record_export", "format": "gzip-in-process", "ops": a.ops,
                      "stop_to_file_s": round(gz_s, 3), "bytes": gz_b}))
    print(json.dumps({"bench": "record_export", "ratio_gzip_over_plain": round(gz_s / plain_s, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
