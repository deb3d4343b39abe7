"""Analytic per-rank shapes after tensor / expert-parallel sharding (`mmprof shapes --tp N`).

Every number here is read from modules the reference runtime builds on the meta device with its own sharding
code (`mmprof.runtime.build_model(..., device='meta', tp, ep, rank)`), not from a second table of formulas.
To stay cheap (the CLI target is < 2 s on the real 60-layer M3), one representative layer is built per layer
*kind* (attention type x MLP type): layers of one kind are built by the same constructor from the same
ShardPlan, so their shapes are identical; the per-kind results are multiplied by the kind's layer count.

GEMM problems are M x N x K with M = tokens (batch for decode, batch*seq for prefill; the LM head sees only the
last position, M = batch, in both phases), N and K from the weight shapes. Routed experts are one grouped GEMM:
`groups` = local expert slots, M per expert = tokens*top_k/n_experts under uniform routing (an estimate, marked
`estimate=True`); the fused shared expert is an extra always-selected slot with M = tokens.

Findings live in `shape_findings.py`; comparisons of live / traced shapes with this expectation too.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from mmprof.errors import BadInput

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass
class Gemm:
    """One GEMM (or grouped GEMM) problem on one rank: C[M, N] = A[M, K] @ W[K, N] per group."""

    name: str  # role-qualified name, e.g. "attn.qkv", "moe.routed.gate_up"
    scope: str  # the runtime scope role it runs under, e.g. "attn.qkv", "moe.routed" (layer prefix omitted)
    m: float  # rows per group (tokens; expected rows per expert for routed experts)
    n: int
    k: int
    groups: int = 1
    dtype: str = "bf16"
    weight: str = ""  # parameter it reads
    estimate: bool = False  # M is an expectation (uniform routing), not a fixed fact
    extra_rows: int = 0  # rows of always-selected slots (fused shared expert) on top of groups*m
    weight_groups: int = 1  # leading dim of the stacked weight (local experts + the fused shared slot)

    @property
    def rows(self) -> float:
        """Total rows of A across groups."""
        return self.m * self.groups + self.extra_rows

    @property
    def flops(self) -> float:
        return 2.0 * self.rows * self.n * self.k

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["rows"], d["flops"] = self.rows, self.flops
        return d


@dataclass
class AttentionShape:
    """Heads held by one rank on one layer kind."""

    q_heads: int
    kv_heads: int
    kv_replicas: int  # ranks that hold a copy of each KV head
    head_dim: int
    sparse: bool
    index_q_heads: int = 0
    index_k_heads: int = 0  # 1 on sparse layers: replicated on every rank
    index_head_dim: int = 0
    context: int = 0  # keys each query can see at the end of the phase
    attended: int = 0  # keys actually read per query (selected blocks on sparse layers)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class LayerKindShapes:
    """One layer kind (attention type + MLP type) on one rank."""

    kind: str  # e.g. "full/dense", "sparse/moe"
    layers: list[int]
    weights: dict[str, list[int]]  # parameter (relative to the block) -> shape
    weight_dtypes: dict[str, str]
    gemms: list[Gemm]
    attention: AttentionShape
    weight_bytes: int  # one layer of this kind
    kv_bytes_per_token: int  # K + V, one layer
    index_bytes_per_token: int  # index keys, one layer (0 on full-attention layers)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "layers": self.layers, "weights": self.weights, "weight_dtypes": self.weight_dtypes,
                "gemms": [g.to_dict() for g in self.gemms], "attention": self.attention.to_dict(),
                "weight_bytes": self.weight_bytes, "kv_bytes_per_token": self.kv_bytes_per_token,
                "index_bytes_per_token": self.index_bytes_per_token}


@dataclass
class RankShapes:
    """Everything one rank holds and computes."""

    rank: int
    plan: dict[str, Any]
    kinds: list[LayerKindShapes]
    model_weights: dict[str, list[int]]  # embed, lm_head, final norm
    model_gemms: list[Gemm]  # lm_head
    weight_bytes: int  # the whole rank: all layers + model-level parameters
    kv_bytes_per_token: int  # all layers
    index_bytes_per_token: int  # all sparse layers

    def signature(self) -> str:
        """Everything that should be identical on every rank (global start offsets excluded)."""
        d = self.to_dict()
        d.pop("rank")
        d["plan"] = {k: v for k, v in d["plan"].items() if not (k == "rank" or k.endswith("_start"))}
        return json.dumps(d, sort_keys=True)

    def kind(self, name: str) -> LayerKindShapes:
        for k in self.kinds:
            if k.kind == name:
                return k
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "plan": self.plan, "kinds": [k.to_dict() for k in self.kinds],
                "model_weights": self.model_weights, "model_gemms": [g.to_dict() for g in self.model_gemms],
                "weight_bytes": self.weight_bytes, "kv_bytes_per_token": self.kv_bytes_per_token,
                "index_bytes_per_token": self.index_bytes_per_token}


@dataclass
class Workload:
    batch: int = 1
    seq: int = 1024
    phase: str = "decode"

    @property
    def tokens(self) -> int:
        return self.batch if self.phase == "decode" else self.batch * self.seq

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "seq": self.seq, "phase": self.phase, "tokens": self.tokens}


@dataclass
class ShapesResult:
    """The analytic expectation for all ranks, plus findings (filled by shape_findings.analyze)."""

    model: str
    tp: int
    ep: int
    dtype: str
    workload: Workload
    ranks: list[RankShapes]
    config: dict[str, Any]
    findings: list[Any] = field(default_factory=list)  # shape_findings.Finding
    comparison: Any = None  # shape_findings.Comparison for --live / --profile
    notes: list[str] = field(default_factory=list)

    def rank_groups(self) -> list[list[int]]:
        """Ranks whose shapes are identical, grouped (first-seen order)."""
        groups: dict[str, list[int]] = {}
        for r in self.ranks:
            groups.setdefault(r.signature(), []).append(r.rank)
        return list(groups.values())

    @property
    def has_errors(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "tp": self.tp, "ep": self.ep, "dtype": self.dtype,
                "workload": self.workload.to_dict(), "rank_groups": self.rank_groups(),
                "ranks": [r.to_dict() for r in self.ranks],
                "findings": [f.to_dict() for f in self.findings],
                "comparison": self.comparison.to_dict() if self.comparison is not None else None,
                "notes": self.notes, "config": self.config}


def rank_label(ranks: list[int]) -> str:
    """[0,1,2,3] -> 'ranks 0-3'; [5] -> 'rank 5'; [0,2] -> 'ranks 0,2'."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    s = sorted(ranks)
    if s == list(range(s[0], s[-1] + 1)):
        return f"ranks {s[0]}-{s[-1]}"
    return "ranks " + ",".join(map(str, s))


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
    from mmprof.runtime import build_model

    rep = dataclasses.replace(args, n_layers=len(kinds), mlp_types=[k.split("/")[1] for k in kinds],
                              attn_types=[k.split("/")[0] for k in kinds], slice_tp=1, slice_rank=0)
    with _skip_init_mode():
        model = build_model(rep, tp=tp, ep=ep, rank=rank, device="meta", dtype=_torch_dtype(dtype))
    plan = model.plan
    ebytes = DTYPE_BYTES[dtype]
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


def resolve_model(model: str):
    """`m3`, another runtime preset, or a config.json / checkpoint dir -> ModelArgs (BadInput when unknown)."""
    from mmprof.runtime import load_config

    return load_config(model)


def analytic(args, tp: int, ep: int = 1, batch: int = 1, seq: int = 1024, phase: str = "decode",
             dtype: str = "bf16") -> ShapesResult:
    """Per-rank shapes for all `tp` ranks, built on the meta device by the runtime. Raises ShardRefused."""
    from mmprof.runtime import shard_plan

    if phase not in ("prefill", "decode"):
        raise BadInput(f"phase must be prefill or decode, not {phase!r}")
    if dtype not in DTYPE_BYTES:
        raise BadInput(f"dtype must be one of {', '.join(DTYPE_BYTES)}, not {dtype!r}")
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

