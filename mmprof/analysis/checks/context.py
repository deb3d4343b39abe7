"""What every check sees (`Context`), what it returns (`CheckResult`), and helpers they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.checks.spec import Assertion, glob_mask
from mmprof.errors import BadInput
from mmprof.labels import region_pattern
from mmprof.modelspec import ModelSpec
from mmprof.names import display_name
from mmprof.units import fmt_ns


@dataclass
class CheckResult:
    """The verdict of one assertion or built-in check. status: pass | fail | no_evidence | not_applicable (the
    model has no such part: neither a pass nor missing evidence; the exit code follows the other checks).
    `judged_from` names the evidence the verdict stands on (dispatch log, scope labels, module events, kernel
    classes, ...)."""

    id: str
    code: str
    kind: str
    status: str
    message: str
    description: str = ""
    evidence: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    judged_from: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "code": self.code, "kind": self.kind, "status": self.status, "message": self.message,
                "description": self.description, "evidence": self.evidence, "judged_from": self.judged_from,
                "data": self.data}


MAX_EVIDENCE = 12

# where an event's region label came from (mmprof.analysis.attribution.structure), for messages
LABEL_SOURCE = {"annotation": "scope labels", "module": "module events", "op": "engine custom ops",
                 "shape": "op shapes (--model)", "family": "kernel families",
                 "replay-name": "graph replays aligned with eager kernels",
                 "replay-family": "graph replays aligned with eager kernels",
                 "replay-between": "graph replays aligned with eager kernels"}


@dataclass
class Context:
    events: Any  # DataFrame: mmprof.analysis.timeline.events.EventFrame.frame() without memcpy rows
    dispatch: Any  # DataFrame of the dispatch table, strings decoded
    source: str
    meta: dict[str, Any]
    sparse_layers: Any = None
    moe_layers: Any = None
    phase_source: str | None = None  # where the events' phases come from (checks.steps.infer_phases); None: unknown
    step_source: str | None = None   # where the steps come from (checks.steps.infer_steps); None: no steps known
    model: Any = None  # the --model ModelSpec, when given: what the model has (experts, shared expert, indexer)
    engine: Any = None  # mmprof.analysis.shapes.engines.EngineGuess: the engine and platform that wrote the trace
    log: Any = None  # mmprof.analysis.logs.join.LogReport: the engine log's facts and their kernels (None: no log)
    op_names: frozenset = frozenset()  # the distinct CPU op names of the profile (engine custom ops among them)


def dispatch_frame(profile: Any) -> Any:
    cols = {}
    for c in ("rank", "step", "layer"):
        cols[c] = profile.col("dispatch", c)
    for c in ("phase", "op", "impl", "requested", "reason", "scope"):
        cols[c] = profile.col("dispatch", c, decode=True)
    return pd.DataFrame(cols)


def top_kernels(df: Any, n: int = 5) -> list[str]:
    if not len(df):
        return []
    g = df.groupby("name", sort=False)["dur_ns"].agg(["count", "sum"]).sort_values("sum", ascending=False).head(n)
    # display names (mmprof.names): a name cut by the profiler shows its readable prefix, never raw mangling
    return [f"{display_name(str(name), 100)} x{int(r['count'])} ({fmt_ns(r['sum'])})" for name, r in g.iterrows()]


def ran_instead(df: Any, n: int = 3) -> str:
    """What ran, by op, family and kernel: `aten::bmm -> gemm/gemv (cuBLAS) x28: internal::gemvx::kernel<...`."""
    if not len(df):
        return "nothing"
    d = df.assign(op_name=df["op_name"] if "op_name" in df else None)
    d = d.fillna({"op_name": "-", "variant": "-", "library": "-"})
    g = (d.groupby(["op_name", "family", "variant", "library"], dropna=False, observed=True)
         .agg(count=("dur_ns", "size"), time=("dur_ns", "sum"), name=("name", "first"))
         .sort_values("time", ascending=False).head(n))
    return "; ".join(f"{'' if op == '-' else op + ' -> '}{fam}/{var} ({lib}) x{int(r['count'])}: {display_name(str(r['name']), 60)}"
                     for (op, fam, var, lib), r in g.iterrows())


def region_mask(events: Any, globs: tuple[str, ...]) -> Any:
    if not globs or "*" in globs:  # "*" is every event, attributed to a region or not
        return np.ones(len(events), dtype=bool)
    return glob_mask(events["region"], globs)


def scoped(a: Assertion, events: Any) -> Any:
    m = region_mask(events, a.region)
    if a.phase:
        m = m & (events["phase"] == a.phase).to_numpy(dtype=bool)
    if a.layers is not None:
        m = m & events["layer"].isin(list(a.layers)).to_numpy(dtype=bool)
    return events[m]


def seen_regions(events: Any) -> str:
    roles = events["region"].dropna()
    if not len(roles):
        return "no event is attributed to any region (no scope annotations in this profile)"
    pats = sorted({region_pattern(r) for r in roles})
    return "regions present: " + ", ".join(pats[:10]) + (" ..." if len(pats) > 10 else "")


# ------------------------------------------------------------------------------------------------ phases
def phases_present(events: Any) -> list[str]:
    """The phases of the run in order (prefill, decode, then any other value the Profile holds)."""
    if not len(events):
        return []
    vals = {str(p) for p in events["phase"].dropna().unique()}
    order = {"prefill": 0, "decode": 1}
    return sorted(vals, key=lambda p: (order.get(p, 2), p))


# ------------------------------------------------------------------------------------------------ applicability
def _meta_model(ctx: Context) -> dict[str, Any]:
    m = ctx.meta.get("model") or (ctx.meta.get("run") or {}).get("model") or {}
    return m if isinstance(m, dict) else {}


def _first_int(d: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for k in keys:
        v = d.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def _spec_of_meta(m: dict[str, Any]) -> Any:
    """The profile meta's model as a ModelSpec when it is a Hugging Face config (an engine's), else None."""
    if "hidden_size" not in m or "n_layers" in m:
        return None
    try:
        return ModelSpec.from_hf(m, "the profile's model config")
    except BadInput:
        return None


def _spec_has(ms: Any, part: str) -> bool:
    if part == "experts":
        return ms.n_experts > 0
    if part == "shared_expert":
        return ms.n_experts > 0 and ms.n_shared_experts > 0 and ms.shared_intermediate > 0
    return ms.indexer != "none"


# region labels that come from the model's own structure (not from a guess by shape or kernel family)
STRUCTURE_SOURCES = ("annotation", "module", "op", "replay-name", "replay-family", "replay-between")
MOE_FAMILIES = ("grouped_gemm", "moe")  # kernels only an MoE layer runs (grouped expert GEMMs, routing / align)


def model_has(ctx: Context, part: str) -> tuple[bool | None, str]:
    """Whether the model has `part` (experts | shared_expert | indexer), and from what: the --model config, the
    Profile's model metadata (the reference runtime's ModelArgs, an engine's HF config), or the module tree
    (regions from annotations, module events or engine ops that show the layers' parts). (None, "") when nothing
    says: absence of a part in a trace is not, by itself, evidence that the model lacks it."""
    ms = ctx.model
    if ms is not None:
        return _spec_has(ms, part), f"--model ({ms.model_type or ms.family})"
    m = _meta_model(ctx)
    meta_spec = _spec_of_meta(m) if m else None
    if meta_spec is not None:
        return _spec_has(meta_spec, part), "the profile's model config"
    if m:
        experts = _first_int(m, ("n_experts", "num_experts", "num_local_experts", "n_routed_experts"))
        shared = _first_int(m, ("n_shared_experts", "num_shared_experts"))
        shared_i = _first_int(m, ("shared_intermediate", "shared_intermediate_size", "shared_expert_intermediate_size"))
        if part == "experts" and experts is not None:
            return experts > 0, "the profile's model config"
        if part == "shared_expert" and (experts == 0 or shared is not None or shared_i is not None):
            has = bool(experts) and (shared if shared is not None else 1) > 0 and (shared_i if shared_i is not None else 1) > 0
            return has, "the profile's model config"
        if part == "indexer":
            sparse = m.get("attn_types")
            if isinstance(sparse, list) and sparse:
                return "sparse" in sparse, "the profile's model config"
            if any(k in m for k in ("sparse_attention_config", "index_topk", "index_topk_blocks", "index_n_heads")):
                return True, "the profile's model config"
    if part == "shared_expert":
        has, src = _shared_expert_from_ops(ctx)
        if has is not None:
            return has, src
    ev = ctx.events
    if len(ev) and "label_source" in ev:
        layered = (ev["layer"] >= 0).to_numpy(dtype=bool)
        tree = ev[ev["label_source"].isin(list(STRUCTURE_SOURCES)).to_numpy(dtype=bool) & layered]
        roles = {str(r) for r in tree["role"].dropna().unique()}
        all_roles = {str(r) for r in ev.loc[layered, "role"].dropna().unique()}
        src = "the module tree" if (tree["label_source"] == "module").any() else "the scope labels"
        no_moe = not any(r.startswith("moe") for r in all_roles) and not _moe_anywhere(ctx)
        if part in ("experts", "shared_expert") and "mlp" in roles and not any(r.startswith("moe") for r in roles):
            return False, src
        if part in ("experts", "shared_expert") and roles and no_moe:
            return False, (f"{src} (layers {', '.join(sorted(roles))}, no MoE part) and the kernels (none of family "
                           f"{' or '.join(MOE_FAMILIES)})")
        if part == "indexer" and any(r.startswith("attn.") for r in roles) and "attn.indexer" not in roles:
            return (None, "") if _indexer_kernels(ev) else (False, src)
    return None, ""


# vLLM 0.26 runs a FusedMoE layer through one of two custom ops, chosen when the layer is built
# (model_executor/layers/fused_moe/runner/moe_runner.py `_select_forward`): `vllm::moe_forward` when the layer has
# no shared experts (`self._shared_experts is None`), `vllm::moe_forward_shared` when it has. On ROCm with AITER's
# fused shared experts the model passes shared_experts=None and appends them as expert slots
# (models/deepseek_v2.py `is_fusion_moe_shared_experts_enabled`), so `moe_forward` alone says "no shared expert"
# only on CUDA.
_MOE_OP_PLAIN = "vllm::moe_forward"
_MOE_OP_SHARED = "vllm::moe_forward_shared"


def _shared_expert_from_ops(ctx: Context) -> tuple[bool | None, str]:
    """Whether the model has a shared expert, from vLLM's MoE custom ops; (None, "") when they do not say."""
    ops = ctx.op_names
    if _MOE_OP_SHARED in ops:
        return True, f"vLLM's MoE custom op ({_MOE_OP_SHARED})"
    platform = getattr(ctx.engine, "platform", None)
    if _MOE_OP_PLAIN in ops and platform == "cuda":
        return False, (f"vLLM's MoE custom op: {_MOE_OP_PLAIN}, never {_MOE_OP_SHARED} (vLLM picks the shared op "
                       "whenever a MoE layer has shared experts)")
    return None, ""


def _moe_anywhere(ctx: Context) -> bool:
    """Any trace of an MoE layer: dispatch rows of moe ops, moe.* regions, or kernels only MoE layers run."""
    d, ev = ctx.dispatch, ctx.events
    if len(d) and d["op"].astype(str).str.startswith("moe.").any():
        return True
    return bool(len(ev)) and bool(ev["family"].isin(list(MOE_FAMILIES)).any())


def _indexer_kernels(ev: Any) -> bool:
    fam = ev["family"].astype(str)
    return bool(((fam == "indexer_score") | (fam == "sparse_attention") |
                 ((fam == "topk") & (ev["variant"].astype(str) == "index_topk"))).any())


def dense_attention_only(ctx: Context) -> bool:
    """The dispatch log shows the run chose dense attention in every call and never ran the indexer."""
    d = ctx.dispatch
    if not len(d):
        return False
    core = d[d["op"] == "attn.core"]
    return bool(len(core)) and bool((core["impl"] == "dense").all()) and not (d["op"] == "attn.indexer").any()


def no_indexer_anywhere(ctx: Context) -> bool:
    """No trace of a block / token selection at all: no dispatch rows for it, no indexer regions, and none of the
    kernels the rules give family indexer_score, sparse_attention or topk/index_topk."""
    ev, d = ctx.events, ctx.dispatch
    if len(d) and (d["op"] == "attn.indexer").any():
        return False
    if len(ev) and ((ev["role"] == "attn.indexer").any() or _indexer_kernels(ev)):
        return False
    return bool(len(ev))
