"""cuda_script.py's sequence on a CPU build, with the start-up hook's GPU start path forced (fake_gpu): a CPU
randn, then the "first GPU use" (where cuda_script calls .cuda()), then `mmprof.step.N` steps of
randn + matmul + softmax. argv: [steps] [--in-step] -- with --in-step the first GPU use happens inside
step 0's range instead (after that step's randn), as in programs whose first GPU work is inside a step."""
import sys

import fake_gpu

import torch

args = [a for a in sys.argv[1:] if not a.startswith("--")]
steps = int(args[0]) if args else 4
in_step = "--in-step" in sys.argv
w = torch.randn(256, 256)             # before the first GPU use: not captured
if not in_step:
    fake_gpu.first_gpu_use()          # cuda_script.py: w = w.cuda()
for i in range(steps):
    with torch.profiler.record_function(f"mmprof.step.{i}"):
        x = torch.randn(64, 256)
        if in_step and i == 0:
            fake_gpu.first_gpu_use()
        x = x @ w
        y = torch.softmax(x, dim=-1).sum()
print(f"gpu_path_light: {steps} steps, {float(y) > 0}", flush=True)
