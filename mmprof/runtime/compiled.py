"""The compile rung (`Switches(compile=True)`): the static decode step's math through torch.compile (Inductor).

Regional compilation: each region's math is a pure function of tensors and Python scalars (layers.py,
attention.py, indexer.py, moe.py), and `call` runs it through one `torch.compile(fn, fullgraph=True,
dynamic=False)` per function, shared by every layer (the same shapes in every layer: one compilation, no
recompiles per layer). The mmprof scopes (record_function / NVTX ranges), the dispatch log, the KV-cache writes
and the tensor-parallel collectives (forward hooks on `o_proj` and `moe.reduce`) stay in Python around the
compiled calls, so every Inductor kernel runs inside the region that owns it and a trace attributes it by scope
as in the eager rungs. Fusion happens inside a region (norm + RoPE, the SwiGLU between the two grouped GEMMs, the
router's sigmoid / bias / top-k / renormalisation, the masks of the indexer and of sparse attention), and across
one boundary by construction: the residual add joins the next RMSNorm (`add_rms_norm`), inside the
`layers.{i}.norm` scope (or `final_norm`).

Only the static decode step compiles (device-tensor position, every shape fixed: graph_runner.py); its CUDA/HIP graph
capture is the runtime's own (Inductor's "reduce-overhead" graphs are not used), so the graph replays the
Inductor kernels like any other. Prefill and the eager decode path run as before. The first static step compiles
(seconds); `mmprof run` warms up before it profiles, so the trace holds no compilation.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from mmprof.errors import CaptureUnavailable

_COMPILED: dict[Callable, Callable] = {}
RECOMPILE_LIMIT = 256


def compiled(fn: Callable) -> Callable:
    """`fn` through torch.compile (Inductor), once per function for the whole process."""
    c = _COMPILED.get(fn)
    if c is None:
        import torch
        import torch._dynamo

        # one compilation per (function, shapes, which optional inputs are given): a process that decodes several
        # batch sizes or cache capacities (ladder.py) needs more than Dynamo's default of 8, past which it would
        # silently run the function uncompiled
        cfg = torch._dynamo.config
        name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
        setattr(cfg, name, max(getattr(cfg, name), RECOMPILE_LIMIT))
        c = _COMPILED[fn] = torch.compile(fn, fullgraph=True, dynamic=False)
    return c


def call(enabled: bool, fn: Callable, *args: Any) -> Any:
    """fn(*args), compiled when `enabled` (the state's compile flag: the compile rung's static step). A failure
    of torch.compile itself (no Triton, no C++ compiler, an op Dynamo cannot trace) is one line
    (CaptureUnavailable) naming the function."""
    if not enabled:
        return fn(*args)
    from torch._dynamo.exc import TorchDynamoException

    try:
        return compiled(fn)(*args)
    except TorchDynamoException as e:
        if os.environ.get("MMPROF_COMPILE_DEBUG"):  # the whole Dynamo / Inductor error, for a bug report
            raise
        msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise CaptureUnavailable(f"torch.compile failed on {fn.__name__} ({msg}); run without --compile") from None


def reset() -> None:
    """Forget the compiled functions (tests; torch._dynamo.reset() clears Dynamo's own caches)."""
    _COMPILED.clear()
