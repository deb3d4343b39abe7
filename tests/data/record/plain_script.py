"""A plain torch program with no profiling code: two annotated steps of small matmuls, then exit code 3."""
import sys

import torch

print("plain_script: start")
w = torch.randn(16, 32)
for i in range(3):
    with torch.profiler.record_function(f"mmprof.step.{i}"):
        with torch.profiler.record_function("user.matmul"):
            y = torch.randn(8, 16) @ w
        y = torch.relu(y).sum()
print(f"plain_script: done {y.item() > -1e9}")
sys.stderr.write("plain_script: to stderr\n")
sys.exit(3)
