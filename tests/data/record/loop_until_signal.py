"""Runs annotated torch steps until it is signalled (at most ~60 s); prints "ready" after 2 steps.
Has no signal handling of its own: used to check that SIGTERM to `mmprof record` reaches it and that its
trace is still written."""
import sys
import time

import torch

w = torch.randn(16, 16)
for i in range(6000):
    with torch.profiler.record_function(f"mmprof.step.{i}"):
        y = torch.randn(4, 16) @ w
    if i == 2:
        print("ready", flush=True)
    time.sleep(0.01)
sys.exit(0)
