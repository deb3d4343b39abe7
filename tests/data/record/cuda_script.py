"""A plain CUDA program (no profiling code) for the GPU test and benchmarks/h200/record_gpu.py: builds a
weight on the CPU, then runs annotated steps of matmul + softmax on the GPU (launch-bound: small tensors,
`--ops K` extra small elementwise kernels per step). Prints the mean step time of the timed steps.
Usage: cuda_script.py [steps] [--ops K]"""
import sys
import time

import torch

args = [a for a in sys.argv[1:] if not a.startswith("--")]
steps = int(args[0]) if args else 4
extra = int(sys.argv[sys.argv.index("--ops") + 1]) if "--ops" in sys.argv else 0
w = torch.randn(256, 256)           # CPU work before the first GPU use
w = w.cuda()
t0 = None
for i in range(steps):
    if i == min(2, steps - 1):
        torch.cuda.synchronize()
        t0, n0 = time.perf_counter(), i
    with torch.profiler.record_function(f"mmprof.step.{i}"):
        x = torch.randn(64, 256, device="cuda") @ w
        for _ in range(extra):
            x = x * 1.0001 + 0.0001
        y = torch.softmax(x, dim=-1).sum()
torch.cuda.synchronize()
ms = (time.perf_counter() - t0) * 1000 / max(1, steps - n0)
print(f"cuda_script: {steps} steps, {float(y) > 0}, step_ms={ms:.3f}", flush=True)
