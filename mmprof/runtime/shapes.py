"""Analytic per-rank shapes after tensor / expert-parallel sharding (`mmprof shapes --tp N`).

Every number here is read from modules this runtime builds on the meta device with its own sharding code
(`build_model(..., device='meta', tp, ep, rank)`), not from a second table of formulas. To stay cheap (the CLI
target is < 2 s on the real 60-layer M3), one representative layer is built per layer *kind* (attention type x
MLP type): layers of one kind are built by the same constructor from the same ShardPlan, so their shapes are
identical; the per-kind results are multiplied by the kind's layer count.

GEMM problems are M x N x K with M = tokens (batch for decode, batch*seq for prefill; the LM head sees only the
last position, M = batch, in both phases), N and K from the weight shapes. Routed experts are one grouped GEMM:
`groups` = local expert slots, M per expert = tokens*top_k/n_experts under uniform routing (an estimate, marked
`estimate=True`); the fused shared expert is an extra always-selected slot with M = tokens.

The result types live in `mmprof.shapes_model`; the findings in `mmprof.analysis.checks`.
"""

from __future__ import annotations

import dataclasses

from mmprof.errors import BadInput
from mmprof.shapes_model import SHAPE_DTYPES, AttentionShape, Gemm, LayerKindShapes, RankShapes, ShapesResult, Workload
from mmprof.units import dtype_bytes

from .tp import shard_plan


def layer_kinds(args) -> dict[str, list[int]]:
    """'attn/mlp' kind -> its layer indices, in first-appearance order."""
    kinds: dict[str, list[int]] = {}
    for i, (a, m) in enumerate(zip(args.attn_types, args.mlp_types)):
        kinds.setdefault(f"{a}/{m}", []).append(i)
    return kinds


def _torch_dtype(name: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def _dt(t) -> str:
    return {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}.get(str(t), str(t))


def _nbytes(p) -> int:
    return p.numel() * p.element_size()


def _block_gemms(block, wl: Workload, args) -> tuple[list[Gemm], AttentionShape]:
    """GEMM problems and attention heads of one built decoder block (read from its parameters)."""
    t = wl.tokens
    attn, mlp = block.attn, block.mlp
    gemms = []
    w = attn.qkv.weight
    gemms.append(Gemm("attn.qkv", "attn.qkv", t, w.shape[0], w.shape[1], dtype=_dt(w.dtype), weight="attn.qkv.weight"))
    w = attn.o_proj.weight
    gemms.append(Gemm("attn.o_proj", "attn.o_proj", t, w.shape[0], w.shape[1], dtype=_dt(w.dtype),
                      weight="attn.o_proj.weight"))
    if hasattr(mlp, "gate_up"):  # dense MLP
        for nm in ("gate_up", "down"):
            w = getattr(mlp, nm).weight
            gemms.append(Gemm(f"mlp.{nm}", "mlp", t, w.shape[0], w.shape[1], dtype=_dt(w.dtype), weight=f"mlp.{nm}.weight"))
    else:  # MoE
        w = mlp.gate.weight
        gemms.append(Gemm("moe.router", "moe.router", t, w.shape[0], w.shape[1], dtype=_dt(w.dtype), weight="mlp.gate.weight"))
        n_local, fused = mlp.n_local, mlp.fusable
        per_expert = t * args.top_k / args.n_experts  # uniform routing: an estimate
        extra = t if fused else 0
        for nm, wt in (("gate_up", mlp.w13), ("down", mlp.w2)):
            gemms.append(Gemm(f"moe.routed.{nm}", "moe.routed", per_expert, wt.shape[1], wt.shape[2], groups=n_local,
                              dtype=_dt(wt.dtype), weight=f"mlp.{'w13' if nm == 'gate_up' else 'w2'}", estimate=True,
                              extra_rows=extra, weight_groups=wt.shape[0]))
        if args.n_shared_experts > 0 and not fused:
            for nm, wt in (("gate_up", mlp.shared_w13), ("down", mlp.shared_w2)):
                gemms.append(Gemm(f"moe.shared.{nm}", "moe.shared", t, wt.shape[0], wt.shape[1], dtype=_dt(wt.dtype),
                                  weight=f"mlp.shared_{'w13' if nm == 'gate_up' else 'w2'}"))
    ctx = wl.seq
    attended = min(ctx, attn.topk * attn.block) if attn.sparse else ctx
    ash = AttentionShape(q_heads=attn.nh, kv_heads=attn.nkv, kv_replicas=1, head_dim=attn.hd, sparse=attn.sparse,
                         index_q_heads=attn.nih if attn.sparse else 0, index_k_heads=1 if attn.sparse else 0,
                         index_head_dim=attn.ihd if attn.sparse else 0, context=ctx, attended=attended)
    return gemms, ash


def _skip_init_mode():
    """A TorchFunctionMode that turns `torch.nn.init.*_` calls into no-ops while modules are built on meta.

    Initialising a meta tensor does nothing, but torch routes e.g. `normal_` on meta through its Python refs,
    which import torch._dynamo (about 2 s): the largest cost of `mmprof shapes` without this."""
    from torch.overrides import TorchFunctionMode

    class SkipInit(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__module__", "") == "torch.nn.init" and func.__name__.endswith("_"):
                t = args[0] if args else (kwargs or {}).get("tensor")
                if t is not None:
                    return t
            return func(*args, **(kwargs or {}))

    return SkipInit()


def _rank_shapes(args, kinds: dict[str, list[int]], tp: int, ep: int, rank: int, dtype: str, wl: Workload) -> RankShapes:
    from .transformer import build_model  # imports torch: only when shapes are built (torch stays lazy)

    rep = dataclasses.replace(args, n_layers=len(kinds), mlp_types=[k.split("/")[1] for k in kinds],
                              attn_types=[k.split("/")[0] for k in kinds], slice_tp=1, slice_rank=0)
    with _skip_init_mode():
        model = build_model(rep, tp=tp, ep=ep, rank=rank, device="meta", dtype=_torch_dtype(dtype))
    plan = model.plan
    ebytes = dtype_bytes(dtype)
    out_kinds, total_w, total_kv, total_idx = [], 0, 0, 0
    for (kind, layers), block in zip(kinds.items(), model.layers):
        params = dict(block.named_parameters())
        wbytes = sum(_nbytes(p) for p in params.values())
        gemms, ash = _block_gemms(block, wl, args)
        ash.kv_replicas = plan.kv_replicas
        kv = 2 * block.attn.nkv * block.attn.hd * ebytes
        idx = block.attn.ihd * ebytes if block.attn.sparse else 0
        out_kinds.append(LayerKindShapes(
            kind=kind, layers=list(layers), weights={n: list(p.shape) for n, p in params.items()},
            weight_dtypes={n: _dt(p.dtype) for n, p in params.items()}, gemms=gemms, attention=ash,
            weight_bytes=wbytes, kv_bytes_per_token=kv, index_bytes_per_token=idx))
        total_w += wbytes * len(layers)
        total_kv += kv * len(layers)
        total_idx += idx * len(layers)
    model_params = {n: p for n, p in model.named_parameters() if not n.startswith("layers.")}
    total_w += sum(_nbytes(p) for p in model_params.values())
    lm = model.lm_head.weight
    lm_gemm = Gemm("lm_head", "lm_head", wl.batch, lm.shape[0], lm.shape[1], dtype=_dt(lm.dtype), weight="lm_head.weight")
    return RankShapes(rank=rank, plan=plan.to_dict(), kinds=out_kinds,
                      model_weights={n: list(p.shape) for n, p in model_params.items()}, model_gemms=[lm_gemm],
                      weight_bytes=total_w, kv_bytes_per_token=total_kv, index_bytes_per_token=total_idx)


def analytic(args, tp: int, ep: int = 1, batch: int = 1, seq: int = 1024, phase: str = "decode",
             dtype: str = "bf16") -> ShapesResult:
    """Per-rank shapes for all `tp` ranks, built on the meta device by the runtime. Raises ShardRefused."""
    if phase not in ("prefill", "decode"):
        raise BadInput(f"phase must be prefill or decode, not {phase!r}")
    if dtype not in SHAPE_DTYPES:
        raise BadInput(f"dtype must be one of {', '.join(SHAPE_DTYPES)}, not {dtype!r}")
    if batch < 1 or seq < 1:
        raise BadInput("batch and seq must be >= 1")
    if tp < 1:
        raise BadInput(f"--tp must be >= 1, not {tp}")
    shard_plan(args, tp, ep, 0)  # vLLM's refusals first, before importing torch
    wl = Workload(batch, seq, phase)
    kinds = layer_kinds(args)
    ranks = [_rank_shapes(args, kinds, tp, ep, r, dtype, wl) for r in range(tp)]
    res = ShapesResult(model=args.name, tp=tp, ep=ep, dtype=dtype, workload=wl, ranks=ranks, config=args.to_dict())
    res.notes.append(f"built one layer per layer kind ({', '.join(f'{k} x{len(v)}' for k, v in kinds.items())}) "
                     "on the meta device; layers of one kind share constructor and ShardPlan")
    if any(g.estimate for r in ranks[:1] for k in r.kinds for g in k.gemms):
        res.notes.append("routed-expert M per expert assumes uniform routing (tokens*top_k/n_experts): an estimate")
    return res

