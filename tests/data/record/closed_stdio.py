"""Closes its own stdout and stderr file descriptors, then runs three annotated matmul steps and prints (which
fails on the closed stdout: the program ends with exit code 1 and no output, with or without `mmprof record`)."""
import os

import torch

w = torch.randn(16, 16)
os.close(1)
os.close(2)
for i in range(3):
    with torch.profiler.record_function(f"mmprof.step.{i}"):
        y = torch.randn(4, 16) @ w
print("done")
