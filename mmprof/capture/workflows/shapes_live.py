"""Live shape capture (`mmprof shapes --live`): start N real ranks of the reference runtime and record the
shapes each rank actually receives for every GEMM, grouped GEMM and attention call.

Capture is at dispatch level: a `TorchDispatchMode` sees the aten ops after autograd and composite
decomposition (F.linear arrives as aten.mm, einsum/matmul as aten.bmm, F.grouped_mm as aten._grouped_mm,
SDPA as the backend's fused op), i.e. the problems the kernels get. The current scope label comes from the
runtime's `tracked_scopes()` (the names of the open scopes); phase and step from `mmprof.prefill|decode` and
`mmprof.step.N` on that stack (read by `mmprof.labels`).

Ranks are started by `mmprof.capture.rank_launcher` (gloo on CPU, NCCL on `cuda`, one GPU per rank); each returns its
calls as JSON. torch is imported only inside the ranks.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from typing import Any

from mmprof.capture.rank_launcher import RankContext, spawn_ranks
from mmprof.errors import BadInput, CaptureUnavailable, MmprofError
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


RANK_MAIN = "mmprof.capture.workflows.shapes_live:rank_main"


def rank_main(payload: dict[str, Any], ctx: RankContext) -> dict[str, Any]:
    """One rank (started by `mmprof.capture.rank_launcher`): build its shard, capture a short prefill + decode."""
    import torch  # torch only inside a rank

    from mmprof.runtime import Workload, build_model, generate, load_config, scopes
    from mmprof.runtime.moe import grouped_mm_unavailable

    dev = torch.device(ctx.device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    args = load_config(payload["model"])
    m = build_model(args, tp=ctx.world_size, ep=payload["ep"], rank=ctx.rank, device=dev, dtype=dtype,
                    group=ctx.group, seed=0)
    grouped_mm_unavailable(dev, dtype)  # probe outside the capture (its test call is not the model's)
    calls: list[dict[str, Any]] = []
    with scopes.tracked_scopes() as stack, _recorder(ctx.rank, stack, calls):
        generate(m, Workload(batch=payload["batch"], prompt_len=payload["prompt_len"],
                             decode_steps=payload["decode_steps"], seed=0))
    return {"rank": ctx.rank, "plan": m.plan.to_dict(), "calls": calls, "dispatch": m.dispatch.rows()}


def capture_live(model: str, tp: int, ep: int = 1, device: str = "cpu", batch: int = 2, prompt_len: int = 64,
                 decode_steps: int = 2, weight_bytes_per_rank: int | None = None) -> LiveCapture:
    """Start `tp` ranks, run a short prefill + decode, return every rank's recorded calls."""
    if device not in ("cpu", "cuda"):
        raise BadInput(f"--device must be cpu or cuda, not {device!r}")
    if device == "cuda":
        import torch  # only to count GPUs

        if torch.cuda.device_count() < tp:
            raise CaptureUnavailable(f"--live --device cuda --tp {tp} needs {tp} GPUs; "
                                     f"{torch.cuda.device_count()} visible")
    if device == "cpu" and weight_bytes_per_rank is not None and weight_bytes_per_rank > CPU_LIVE_LIMIT_BYTES:
        other = "--model tiny, " if model != "tiny" else ""  # never advise the model that was just refused
        raise BadInput(f"live run of {model} on CPU needs {weight_bytes_per_rank / 2**30:.1f} GiB of weights per rank, "
                       f"more than the {CPU_LIVE_LIMIT_BYTES / 2**30:.0f} GiB a CPU run allows; use {other}a larger "
                       "--tp, or --device cuda")
    payload = {"model": model, "ep": ep, "batch": batch, "prompt_len": prompt_len, "decode_steps": decode_steps}
    with tempfile.TemporaryDirectory(prefix="mmprof-shapes-") as tmp:
        try:
            docs = spawn_ranks(RANK_MAIN, payload, tp, tmp, device, what="live shape capture")
        except MmprofError as e:
            raise CaptureUnavailable(str(e)) from None
    calls = [Call(**c) for d in docs for c in d["calls"]]
    return LiveCapture(tp, ep, device, model, batch, prompt_len, decode_steps, calls, {d["rank"]: d["plan"] for d in docs})
