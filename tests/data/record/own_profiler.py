"""A program that runs torch.profiler itself (as vLLM/SGLang do when their profiler is configured).
mmprof record must not break it: its own trace is written and mmprof's capture steps aside."""
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile, record_function

out = sys.argv[1]
x = torch.randn(8, 8)
with record_function("before.own.profiler"):
    x = x @ x
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    with record_function("inside.own.profiler"):
        x = x @ x
prof.export_chrome_trace(out)
print("own trace written", os.path.exists(out), flush=True)
