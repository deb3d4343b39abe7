"""Result types of `mmprof shapes`: per-rank GEMM problems, attention heads and cache bytes, findings, and
observed (live or traced) calls compared with them.

Pure data (no torch, no runtime): the runtime builds `ShapesResult`s on the meta device
(`mmprof.runtime.shapes`), analyses judge them (`mmprof.analysis.checks.shapes_*`), renderers print them.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from typing import Any

SHAPE_DTYPES = ("bf16", "fp16", "fp32")


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
    v_head_dim: int = 0  # the value head dim when it differs from head_dim (MLA); 0: head_dim

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
    """The analytic expectation for all ranks, plus findings (mmprof.analysis.checks.shapes_*)."""

    model: str
    tp: int
    ep: int
    dtype: str
    workload: Workload
    ranks: list[RankShapes]
    config: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)
    comparison: Comparison | None = None  # for --live / --profile
    notes: list[str] = field(default_factory=list)
    layout: str = "runtime"  # the engine layout of the shapes (rules/layouts.toml): runtime, vllm-cuda, ...
    engine: dict[str, Any] = field(default_factory=dict)  # --profile: the engine that wrote the trace, and why

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
        return {"model": self.model, "layout": self.layout, "tp": self.tp, "ep": self.ep, "dtype": self.dtype,
                "workload": self.workload.to_dict(), "rank_groups": self.rank_groups(),
                "ranks": [r.to_dict() for r in self.ranks],
                "findings": [f.to_dict() for f in self.findings],
                "comparison": self.comparison.to_dict() if self.comparison is not None else None,
                "notes": self.notes, "config": self.config, "engine": self.engine}


@dataclass
class Finding:
    code: str
    severity: str  # info | warning | error
    title: str
    message: str
    layers: list[int] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    cost: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Call:
    """One observed GEMM-like or attention call on one rank."""

    rank: int
    op: str
    shapes: list[list[int]]
    scope: str = ""  # full innermost label, e.g. layers.3.attn.qkv
    phase: str = ""
    step: int = -1
    dtype: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Comparison:
    """Observed calls judged against the analytic expectation (SH006) and across ranks (SH005)."""

    source: str  # live | profile
    calls: int
    matched: int
    unmatched: list[dict[str, Any]]
    unscoped: int  # GEMM-like calls outside any known scope (not judged)
    unjudged: int  # calls in a known scope whose shapes do not give M, N, K (not judged)
    per_rank: dict[int, dict[str, int]]  # rank -> role -> calls
    findings: list[Finding]
    differ: int = 0    # calls whose shapes differ (calls == matched + differ + unjudged + unscoped when compared)
    missing: int = 0   # expected GEMMs of a region that no call showed (not calls: listed in `unmatched` too)
    compared: bool = True  # False: no model config, the calls were compared across ranks only

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "calls": self.calls, "compared": self.compared, "matched": self.matched,
                "differ": self.differ, "unjudged": self.unjudged, "unscoped": self.unscoped, "missing": self.missing,
                "unmatched": self.unmatched, "per_rank": self.per_rank, "findings": [f.to_dict() for f in self.findings]}
