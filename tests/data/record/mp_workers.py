"""multiprocessing workers that use torch, with no profiling code. argv[1] is the start method: spawn
(the vLLM model) or fork; with --cuda the workers use the GPU (the parent never does). Each worker runs two annotated steps (worker.I.step.K); the parent imports torch
too and runs none, so with --step-marker 'worker.*' --skip 1 --steps 1 only the workers' second steps are
captured (and the parent's profiler is never running when it forks). With --fake-gpu (CPU builds) the
start-up hook's GPU start path is forced (fake_gpu.py) and each worker "first uses the GPU" when it starts,
so this runs the `--cuda` case's sequence on a CPU: the parent never starts a capture, the workers do."""
import multiprocessing as mp
import sys

if "--fake-gpu" in sys.argv:
    import fake_gpu
else:
    fake_gpu = None

import torch


def work(i: int, device: str = "cpu") -> float:
    if fake_gpu is not None:
        fake_gpu.first_gpu_use()
    total = 0.0
    for k in range(2):
        with torch.profiler.record_function(f"worker.{i}.step.{k}"):
            total += float((torch.ones(4, 8, device=device) @ torch.ones(8, 2, device=device)).sum())
    return total


if __name__ == "__main__":
    method = sys.argv[1] if len(sys.argv) > 1 else "spawn"
    device = "cuda" if "--cuda" in sys.argv else "cpu"  # --cuda: workers use the GPU, the parent never does
    ctx = mp.get_context(method)
    procs = [ctx.Process(target=work, args=(i, device)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    with torch.profiler.record_function("parent.work"):
        torch.ones(2, 2).sum()
    print("exitcodes", [p.exitcode for p in procs], flush=True)
