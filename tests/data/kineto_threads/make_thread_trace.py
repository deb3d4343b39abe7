"""Record a CPU Kineto trace whose work runs on several threads: the main thread with `ProfilerStep#N`, a side
thread doing torch ops inside each step, and a DataLoader with a worker process feeding the main thread.

    python tests/data/kineto_threads/make_thread_trace.py tests/data/kineto_threads/cpu_threads.json.gz

torch.profiler(activities=[CPU], record_shapes=True, experimental_config=_ExperimentalConfig(profile_all_threads=True))
with a schedule (wait 1, warmup 1, active 3): three steps
ProfilerStep#2..#4 on the main thread. In each step the main thread takes a batch from the DataLoader
(num_workers=1: the worker is another process and is not traced; the main thread's `enumerate(DataLoader)`
range is), starts a side thread that runs `side_work` (aten::mm / softmax / add on its own thread, no step marker
there), runs its own matmuls, then joins the side thread before the step ends. So the side thread's ops lie inside
the main thread's step windows in time; `tests/test_steps_threads.py` checks that mmprof gives them those steps.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import tempfile
import threading

import torch
from torch.utils.data import DataLoader, Dataset


class Batches(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, 64, generator=g)


def side_work(x: torch.Tensor, w: torch.Tensor, out: list) -> None:
    y = x
    for _ in range(6):
        y = torch.softmax(y @ w, dim=-1) + 1.0
    out.append(float(y.sum()))


def main(dest: str) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    w = torch.randn(64, 64)
    loader = DataLoader(Batches(), batch_size=4, num_workers=1)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)
    tmp = tempfile.mkdtemp()
    traces: list[str] = []

    def on_ready(prof) -> None:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        traces.append(path)

    # profile_all_threads: record the ops of every thread, not only the one that started the profiler
    cfg = torch.profiler._ExperimentalConfig(profile_all_threads=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                schedule=sched, on_trace_ready=on_ready, experimental_config=cfg) as prof:
        for i, batch in enumerate(loader):
            if i >= 5:
                break
            x = batch.reshape(-1, 64)
            out: list = []
            t = threading.Thread(target=side_work, args=(x, w, out), name="side")
            t.start()
            h = x
            for _ in range(4):
                h = torch.relu(h @ w)
            t.join()
            prof.step()
    with open(traces[-1], "rb") as f:
        data = json.load(f)
    with gzip.open(dest, "wt") as f:
        json.dump(data, f)
    print(dest)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu_threads.json.gz")
