"""Drive `mmprof record`'s GPU-build start path on a CPU build of torch (imported by test programs BEFORE
`import torch`).

Under `mmprof record` the start-up hook is the process's `sitecustomize` module. On a GPU build it starts the
capture at the program's first GPU use, by queueing its start on torch.cuda's lazy-init queue. This module
makes the hook believe torch is a GPU build and swaps that queue for a plain list, which `first_gpu_use()`
runs: the program calls it where a GPU program would first touch the GPU (`.cuda()`), so the session starts
exactly there, as `torch.cuda._lazy_init` would start it. Forked children inherit the list (and the parent's
queued start, as they inherit torch.cuda's queue), just as on a GPU.
"""
import sys

_hook = sys.modules.get("sitecustomize")
if _hook is None or not hasattr(_hook, "_on_first_gpu_use"):
    sys.exit("fake_gpu: run this program under `mmprof record` (the mmprof start-up hook is not loaded)")
if "torch" in sys.modules:
    sys.exit("fake_gpu: import fake_gpu before torch")

_queued = []
_hook._gpu_build = lambda torch: True
_hook._on_first_gpu_use = _queued.append


def first_gpu_use() -> None:
    """What torch.cuda._lazy_init does with its queue at the first GPU use: run every queued call once."""
    while _queued:
        _queued.pop(0)()
