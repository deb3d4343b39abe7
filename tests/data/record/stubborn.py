"""Ignores SIGINT (argv[1] == "int") or SIGINT and SIGTERM (argv[1] == "int,term"), runs two annotated steps,
prints "ready", then sleeps up to ~120 s: a workload that does not stop when asked."""
import signal
import sys
import time

import torch

for name in sys.argv[1].split(","):
    signal.signal({"int": signal.SIGINT, "term": signal.SIGTERM}[name], signal.SIG_IGN)
w = torch.randn(16, 16)
for i in range(2):
    with torch.profiler.record_function(f"mmprof.step.{i}"):
        y = torch.randn(4, 16) @ w
print("ready", flush=True)
for _ in range(1200):
    time.sleep(0.1)
