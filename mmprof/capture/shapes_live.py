"""Live shape capture (`mmprof shapes --live`): start N real ranks of the reference runtime and record the
shapes each rank actually receives for every GEMM, grouped GEMM and attention call.

Capture is at dispatch level: a `TorchDispatchMode` sees the aten ops after autograd and composite
decomposition (F.linear arrives as aten.mm, einsum/matmul as aten.bmm, F.grouped_mm as aten._grouped_mm,
SDPA as the backend's fused op), i.e. the problems the kernels get. The current scope label comes from the
runtime's `tracked_scopes()` (the names of the open scopes); phase and step from `mmprof.prefill|decode` and
`mmprof.step.N` on that stack (read by `mmprof.labels`).

Ranks are started with torch.multiprocessing (spawn): gloo over a file:// rendezvous on CPU, NCCL on
`cuda` (one GPU per rank). Each rank writes its calls as JSON into a temporary directory; the parent reads
them back. torch is imported only inside functions.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmprof.errors import BadInput, CaptureUnavailable
from mmprof.labels import is_marker, phase_of_path, step_of_path
from mmprof.shapes_model import Call

_RECORD = re.compile(r"^aten\.(mm|addmm|bmm|baddbmm|_grouped_mm|_scaled_mm|_scaled_grouped_mm|"
                     r"_scaled_dot_product_\w+|_flash_attention_forward|_efficient_attention_forward)\.")
CPU_LIVE_LIMIT_BYTES = 4 << 30  # refuse a CPU live run whose weights per rank exceed this (use tiny or cuda)


@dataclass
class LiveCapture:
    """What the ranks recorded."""

    tp: int
    ep: int
    device: str
    model: str
    batch: int
    prompt_len: int
    decode_steps: int
    calls: list[Call]
    plans: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def tokens(self) -> dict[str, int]:
        return {"prefill": self.batch * self.prompt_len, "decode": self.batch}

    def to_dict(self) -> dict[str, Any]:
        return {"tp": self.tp, "ep": self.ep, "device": self.device, "model": self.model, "batch": self.batch,
                "prompt_len": self.prompt_len, "decode_steps": self.decode_steps, "calls": len(self.calls)}


def where(stack: list[str]) -> tuple[str, str, int]:
    """(innermost label that is not a phase / step marker, phase, step) of the open scopes."""
    inner = next((n for n in reversed(stack) if not is_marker(n)), "")
    return inner, phase_of_path(stack) or "", step_of_path(stack)


def _recorder(rank: int, stack: list[str], out: list[dict[str, Any]]):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class ShapeRecorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func)
            if _RECORD.match(name):
                shapes = [list(a.shape) if isinstance(a, torch.Tensor) else [] for a in args]
                dt = next((str(a.dtype).replace("torch.", "") for a in args if isinstance(a, torch.Tensor)), "")
                sc, ph, st = where(stack)
                out.append({"rank": rank, "op": name, "shapes": shapes, "scope": sc, "phase": ph, "step": st,
                            "dtype": dt})
            return func(*args, **(kwargs or {}))

    return ShapeRecorder()


def run_rank(rank: int, world: int, ep: int, model: str, device: str, batch: int, prompt_len: int,
             decode_steps: int, init_file: str, out_dir: str) -> None:
    """One rank: process group, build, capture a short prefill + decode, write rank{N}.json."""
    import torch
    import torch.distributed as dist

    from mmprof.runtime import Workload, build_model, generate, load_config, scopes
    from mmprof.runtime.moe import grouped_mm_unavailable

    torch.set_num_threads(1)
    cuda = device == "cuda"
    dev = torch.device(f"cuda:{rank}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    dtype = torch.bfloat16 if cuda else torch.float32
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{init_file}", rank=rank,
                                world_size=world)
    try:
        args = load_config(model)
        m = build_model(args, tp=world, ep=ep, rank=rank, device=dev, dtype=dtype,
                        group=dist.group.WORLD if world > 1 else None, seed=0)
        grouped_mm_unavailable(dev, dtype)  # probe outside the capture (its test call is not the model's)
        calls: list[dict[str, Any]] = []
        with scopes.tracked_scopes() as stack, _recorder(rank, stack, calls):
            generate(m, Workload(batch=batch, prompt_len=prompt_len, decode_steps=decode_steps, seed=0))
        doc = {"rank": rank, "plan": m.plan.to_dict(), "calls": calls, "dispatch": m.dispatch.rows()}
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(doc))
    finally:
        if world > 1 and dist.is_initialized():
            dist.destroy_process_group()


def capture_live(model: str, tp: int, ep: int = 1, device: str = "cpu", batch: int = 2, prompt_len: int = 64,
                 decode_steps: int = 2, weight_bytes_per_rank: int | None = None) -> LiveCapture:
    """Start `tp` ranks, run a short prefill + decode, return every rank's recorded calls."""
    import torch
    import torch.multiprocessing as mp

    if device not in ("cpu", "cuda"):
        raise BadInput(f"--device must be cpu or cuda, not {device!r}")
    if device == "cuda" and torch.cuda.device_count() < tp:
        raise CaptureUnavailable(f"--live --device cuda --tp {tp} needs {tp} GPUs; "
                                 f"{torch.cuda.device_count()} visible")
    if device == "cpu" and weight_bytes_per_rank is not None and weight_bytes_per_rank > CPU_LIVE_LIMIT_BYTES:
        raise BadInput(f"live run of {model} on CPU needs {weight_bytes_per_rank / 2**30:.1f} GiB of weights per rank; "
                       "use --model tiny (or small) on CPU, or --device cuda")
    with tempfile.TemporaryDirectory(prefix="mmprof-shapes-") as tmp:
        try:
            mp.spawn(run_rank, args=(tp, ep, model, device, batch, prompt_len, decode_steps,
                                     os.path.join(tmp, "init"), tmp), nprocs=tp, join=True)
        except Exception as e:  # noqa: BLE001 - a rank failed: one line, the rank's own error
            msg = str(e).strip().splitlines()
            raise CaptureUnavailable(f"live shape capture failed: {msg[-1] if msg else type(e).__name__}") from None
        calls, plans = [], {}
        for r in range(tp):
            p = Path(tmp, f"rank{r}.json")
            if not p.exists():
                raise CaptureUnavailable(f"live shape capture: rank {r} wrote no result")
            doc = json.loads(p.read_text())
            plans[r] = doc["plan"]
            calls.extend(Call(**c) for c in doc["calls"])
    return LiveCapture(tp, ep, device, model, batch, prompt_len, decode_steps, calls, plans)
