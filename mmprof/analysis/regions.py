"""Scope attribution: which op region (e.g. `layers.12.moe.routed`) each device event belongs to.

Sources, best first: the kernel's own `scope_path` / `scope` (annotations around its launch), then the
scope of the CPU op that launched it. Labels are read innermost first, so `layers.3.moe.routed > loop` is
still layer 3's routed experts. Two spellings are understood:

- mmprof's labels (DEVELOPERS.md): `layers.{i}.{role}`, e.g. `layers.12.attn.indexer`, plus `embed`,
  `final_norm`, `lm_head`;
- module paths as vLLM / SGLang / HF name them: `model.layers.12.mlp.experts` -> `layers.12.moe.routed`,
  `...self_attn.o_proj` -> `layers.12.attn.o_proj`, `...mlp.shared_experts` -> `layers.12.moe.shared`.

`device_events()` is the one table the fast-path checks read: the kernels of a GPU profile, or, when a
profile has no kernels (a CPU run of the reference runtime), its outermost *compute* CPU ops (see
`cpu_compute_ops`) - so the same spec works on a CPU run and on a GPU run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

_LAYER = re.compile(r"(?:^|[.\s/:_-])(?:layers?|h|blocks?|decoder_layers?)[._](\d+)(?:[._]([A-Za-z_][\w.]*))?$")
_MODEL_LEVEL = [
    (re.compile(r"(?:^|\.)(?:embed|embed_tokens|wte|tok_embeddings|embedding)$"), "embed"),
    (re.compile(r"(?:^|\.)(?:final_norm|norm|ln_f|final_layernorm)$"), "final_norm"),
    (re.compile(r"(?:^|\.)(?:lm_head|output|logits)$"), "lm_head"),
]
# module-path suffix (after `layers.N.`) -> mmprof role; first match wins.
_ROLE_MAP = [
    (re.compile(r"^(?:self_attn|attention|attn)\.(?:indexer|index_\w+|idx\w*)"), "attn.indexer"),
    (re.compile(r"^(?:self_attn|attention)\.(?:qkv_proj|q_proj|k_proj|v_proj|qkv|q_a_proj|q_b_proj|kv_a_proj\w*|kv_b_proj|query_key_value|wqkv)"), "attn.qkv"),
    (re.compile(r"^(?:self_attn|attention)\.(?:o_proj|dense|out_proj|wo)"), "attn.o_proj"),
    (re.compile(r"^(?:self_attn|attention)\.(?:q_norm|k_norm|rotary_emb|q_layernorm|k_layernorm)"), "attn.norm_rope"),
    (re.compile(r"^(?:self_attn|attention)(?:\.|$)"), "attn.core"),
    (re.compile(r"^(?:mlp|block_sparse_moe|moe|feed_forward)\.(?:shared_experts?|shared_mlp|shared_expert_gate)"), "moe.shared"),
    (re.compile(r"^(?:mlp|block_sparse_moe|moe|feed_forward)\.(?:experts?|fused_moe|routed_experts)"), "moe.routed"),
    (re.compile(r"^(?:mlp|block_sparse_moe|moe|feed_forward)\.(?:gate|router|topk|gate_proj_router)$"), "moe.router"),
    # already an mmprof role (a deeper suffix such as `moe.routed.expert_3` folds into it)
    (re.compile(r"^(attn\.(?:qkv|norm_rope|indexer|core|o_proj)|mlp|moe\.(?:router|routed|shared)|norm)(?:\.|$)"), None),
    (re.compile(r"^(?:mlp|feed_forward|ffn)(?:\.|$)"), "mlp"),
    (re.compile(r"^(?:input_layernorm|post_attention_layernorm|pre_feedforward_layernorm|post_feedforward_layernorm|ln_\d|ln_attn|ln_mlp)"), "norm"),
]


@dataclass(frozen=True)
class Region:
    layer: int  # -1 for model-level regions
    role: str  # e.g. moe.routed, attn.indexer, embed
    name: str  # layers.12.moe.routed, or the role for model-level regions


def _role(suffix: str) -> str | None:
    for rx, role in _ROLE_MAP:
        m = rx.search(suffix)
        if m:
            return m.group(1) if role is None else role
    return None


@lru_cache(maxsize=65536)
def parse_label(label: str) -> Region | None:
    """One annotation or module path -> Region, or None when it names no region."""
    s = label.strip()
    if not s:
        return None
    m = _LAYER.search(s)
    if m:
        layer = int(m.group(1))
        suffix = m.group(2) or ""
        role = _role(suffix) if suffix else "layer"
        if role is None:
            role = suffix  # unknown sub-module: keep its own path, still attributable to the layer
        return Region(layer, role, f"layers.{layer}.{role}")
    for rx, role in _MODEL_LEVEL:
        if rx.search(s):
            return Region(-1, role, role)
    return None


@lru_cache(maxsize=65536)
def parse_scope_path(path: str) -> Region | None:
    """The innermost region named in a ' > '-joined scope path."""
    parts = [p for p in path.split(" > ")]
    model_level = None
    for label in reversed(parts):
        r = parse_label(label)
        if r is not None:
            if r.layer >= 0:
                return r
            model_level = model_level or r
    return model_level


def _regions_for_codes(profile: Any, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(layer, role, region) arrays for an array of string ids (scope paths)."""
    n = len(codes)
    layer = np.full(n, -1, dtype=np.int64)
    role = np.full(n, None, dtype=object)
    region = np.full(n, None, dtype=object)
    if n == 0:
        return layer, role, region
    uniq, inv = np.unique(codes, return_inverse=True)
    lut_layer = np.full(len(uniq), -1, dtype=np.int64)
    lut_role = np.full(len(uniq), None, dtype=object)
    lut_region = np.full(len(uniq), None, dtype=object)
    for i, c in enumerate(uniq):
        s = profile.string(int(c))
        r = parse_scope_path(s) if s else None
        if r is not None:
            lut_layer[i], lut_role[i], lut_region[i] = r.layer, r.role, r.name
    inv = inv.reshape(-1)
    return lut_layer[inv], lut_role[inv], lut_region[inv]


def attribute(profile: Any, table: str = "kernels") -> "Any":
    """A DataFrame (layer, role, region) with one row per row of `table` (kernels, ops or memcpy)."""
    import pandas as pd

    t = profile.tables[table]
    n = profile.n(table)
    if n == 0:
        return pd.DataFrame({"layer": np.array([], dtype=np.int64), "role": [], "region": []})
    codes = t["scope_path"].copy() if "scope_path" in t else np.full(n, -1, dtype=np.int32)
    if "scope" in t:
        codes = np.where(codes >= 0, codes, t["scope"])
    layer, role, region = _regions_for_codes(profile, codes)
    # Fall back to the launching op's scope for events whose own annotations name no region.
    if "op" in t and table != "ops":
        ops = profile.tables["ops"]
        op_ref = t["op"]
        if "launch" in t:
            lops = profile.tables["launches"]["op"]
            via_launch = np.where(t["launch"] >= 0, lops[np.clip(t["launch"], 0, max(len(lops) - 1, 0))] if len(lops) else -1, -1)
            op_ref = np.where(op_ref >= 0, op_ref, via_launch)
        missing = (region == None) & (op_ref >= 0)  # noqa: E711
        if missing.any() and profile.n("ops"):
            op_codes = ops["scope_path"][op_ref[missing]]
            op_codes = np.where(op_codes >= 0, op_codes, ops["scope"][op_ref[missing]])
            l2, r2, g2 = _regions_for_codes(profile, op_codes)
            layer[missing], role[missing], region[missing] = l2, r2, g2
    return pd.DataFrame({"layer": layer, "role": role, "region": region})


_NOT_OPS = re.compile(r"^(?:ProfilerStep#|mmprof\.|## |\[memory\]|<built-in|PyTorch Profiler|Iteration)")


def _ancestors_scan(parent: np.ndarray, flag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(has_flagged_ancestor, topmost_flagged_ancestor_index or -1) by pointer jumping up `parent`."""
    n = len(parent)
    has = np.zeros(n, dtype=bool)
    top = np.full(n, -1, dtype=np.int64)
    cur = parent.astype(np.int64).copy()
    for _ in range(256):  # call stacks are far shallower; the bound guards against a cyclic parent column
        live = cur >= 0
        if not live.any():
            break
        hit = np.zeros(n, dtype=bool)
        hit[live] = flag[cur[live]]
        has |= hit
        top = np.where(hit, cur, top)
        nxt = np.full(n, -1, dtype=np.int64)
        nxt[live] = parent[cur[live]]
        cur = nxt
    return has, top


def infer_parents(profile: Any) -> np.ndarray:
    """Op nesting from time containment per (rank, thread), for importers that could not record `parent`."""
    ops = profile.tables["ops"]
    n = profile.n("ops")
    parent = np.full(n, -1, dtype=np.int64)
    start, end = ops["start_ns"], ops["start_ns"] + np.maximum(ops["dur_ns"], 0)
    order = np.lexsort((-end, start, ops["tid"], ops["rank"]))
    stack: list[int] = []
    key = None
    for i in order:
        k = (ops["rank"][i], ops["tid"][i])
        if k != key:
            stack, key = [], k
        while stack and start[i] >= end[stack[-1]]:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


def cpu_compute_ops(profile: Any, cls: Any) -> tuple[np.ndarray, Any]:
    """The device events of a CPU run: the *outermost* ops whose rule gives a compute family.

    `aten::_grouped_mm` on CPU loops over `aten::mm` internally and `aten::linear` calls `aten::addmm`, so
    counting leaves would see plain GEMMs where the runtime called one grouped op; counting outermost
    compute ops sees what the model code asked for. Views and allocations (family `other`) and unclassified
    frames are transparent. An outermost op inherits path=fallback from any fallback op below it (e.g. the
    math SDPA under `aten::scaled_dot_product_attention`). Returns (mask over ops, adjusted classes).
    """
    n = profile.n("ops")
    if n == 0:
        return np.zeros(0, dtype=bool), cls
    names = profile.col("ops", "name", decode=True)
    annotation = np.array([(not s) or bool(_NOT_OPS.match(s)) or parse_label(s) is not None for s in names])
    compute = (cls["family"].astype(object).to_numpy() != "other") & cls["rule"].notna().to_numpy() & ~annotation
    parent = profile.tables["ops"]["parent"]
    if n > 1 and not (parent >= 0).any():
        parent = infer_parents(profile)
    has_anc, top = _ancestors_scan(parent, compute)
    mask = compute & ~has_anc
    fb = np.flatnonzero((cls["path"].astype(object).to_numpy() == "fallback") & has_anc)
    if len(fb):
        cls = cls.copy()
        for c in ("family", "variant", "library", "path", "rule"):
            cls[c] = cls[c].astype(object)
        for i in fb:
            owner = top[i]
            if owner >= 0 and cls.at[owner, "path"] != "fallback":
                for c in ("variant", "path", "rule"):
                    cls.at[owner, c] = cls.at[i, c]
    return mask, cls


def device_events(profile: Any, rules: Any = None) -> tuple["Any", str]:
    """(events, source): kernels when the profile has any, else the outermost compute CPU ops.

    Columns: name, rank, stream, start_ns, dur_ns, step, phase, layer, role, region, family, variant,
    library, path, rule. `source` is "kernels" or "cpu_ops".
    """
    import pandas as pd

    from mmprof.analysis.classify import classify_codes

    if profile.n("kernels"):
        table, source = "kernels", "kernels"
        cls = classify_codes(profile, profile.tables[table]["name"], rules).reset_index(drop=True)
        mask = np.ones(profile.n(table), dtype=bool)
    else:
        table, source = "ops", "cpu_ops"
        cls = classify_codes(profile, profile.tables[table]["name"], rules).reset_index(drop=True)
        mask, cls = cpu_compute_ops(profile, cls)
    t = profile.tables[table]
    regions = attribute(profile, table)[mask].reset_index(drop=True)
    df = pd.DataFrame({
        "name": profile.col(table, "name", decode=True)[mask],
        "rank": t["rank"][mask],
        "stream": (t["stream"] if "stream" in t else t["tid"])[mask],
        "start_ns": t["start_ns"][mask],
        "dur_ns": t["dur_ns"][mask],
        "step": t["step"][mask],
        "phase": profile.col(table, "phase", decode=True)[mask],
    })
    df = pd.concat([df, regions], axis=1)
    cls = cls[mask].reset_index(drop=True) if len(cls) else cls
    for c in ("family", "variant", "library", "path", "rule"):
        df[c] = cls[c].astype(object).to_numpy() if len(cls) else np.array([], dtype=object)
    return df, source
