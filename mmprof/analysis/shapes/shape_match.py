"""Model structure from op shapes alone: label a trace's GEMM-like ops by matching their (N, K, groups) with the
per-rank GEMM problems of a model config (`mmprof.analysis.shapes.problems`), and the layer by the order of the
repeating per-layer pattern.

For traces with shapes (`record_shapes`) but no annotations and no nn.Module events. Per rank and per forward
(a step, or the ops up to each LM-head GEMM):

1. every outermost GEMM-like op with input shapes gets the candidate roles whose weight shape it has; 4-D
   attention products and SDPA calls are attention (`attn.core`, or `attn.indexer` on the indexer's head
   count and dim), their head counts kept;
2. walking the ops in time order, an attention projection that follows anything but attention starts the next
   layer; within a layer the candidates narrow to what that layer's kind (dense / MoE, full / sparse) has, and a
   q-or-o shape (N = K = hidden on Llama-like models) is q when it opens the layer and o_proj once the layer's
   attention projections ran;
3. per layer: with a grouped routed-experts GEMM present, the per-expert loop form is out; a GEMM whose shape
   fits both a routed expert and the shared expert is the shared expert when it sees all the forward's tokens
   (M = tokens) and ambiguous otherwise - reported as such, never forced;
4. ops between matched GEMMs take the region of the GEMM before them (their layer is exact, their role the
   nearest GEMM's), and ops inside a matched op (its kernels' ops) take its region.

A forward whose layer count differs from the config's keeps its roles but no layer index (said in the report).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mmprof.analysis.timeline.op_tree import infer_parents
from mmprof.analysis.shapes.gemm_calls import ATTN_OPS, GEMM_OPS, canonical
from mmprof.analysis.shapes.problems import LayerProblems, Problem, head_problems, rank_problems
from mmprof.analysis.attribution.structure import Regions
from mmprof.labels import region_name
from mmprof.modelspec import ModelSpec

_EMBED = ("aten::embedding", "aten::embedding_bag")
MIN_TOKENS_SHARED = 8  # a GEMM over all of >= this many tokens, shaped like both kinds of expert, is the shared one


@dataclass
class OpMatch:
    row: int
    rank: int
    step: int
    start: int
    op: str
    mnkg: tuple[int, int, int, int] | None
    heads: int | None = None        # attention: heads seen in the call
    head_dim: int | None = None
    roles: set[str] = field(default_factory=set)
    problems: list[Problem] = field(default_factory=list)
    role: str | None = None
    layer: int = -1
    ambiguous: bool = False


@dataclass
class MatchReport:
    """What the shape matching found: counts per role, and the evidence for findings (SH008, SH009)."""

    spec: ModelSpec
    tp: int
    ep: int
    gemms: int = 0
    matched: int = 0
    ambiguous: list[dict[str, Any]] = field(default_factory=list)
    unexplained: list[dict[str, Any]] = field(default_factory=list)      # GEMMs no part of the config explains
    replicated: list[dict[str, Any]] = field(default_factory=list)       # full-size GEMMs under TP
    attention: list[dict[str, Any]] = field(default_factory=list)        # heads seen per attention call group
    roles: dict[str, int] = field(default_factory=dict)
    forwards: int = 0
    forwards_layered: int = 0
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.spec.model_type or self.spec.family, "tp": self.tp, "ep": self.ep, "gemms": self.gemms,
                "matched": self.matched, "ambiguous": self.ambiguous[:50], "unexplained": self.unexplained[:50],
                "replicated": self.replicated[:50], "attention": self.attention[:50], "roles": self.roles,
                "forwards": self.forwards, "forwards_layered": self.forwards_layered, "warnings": self.warnings}


@dataclass
class ShapeStructure:
    regions: Regions        # aligned with the ops table; source "shape"
    report: MatchReport
    direct: np.ndarray      # bool per op: labelled by its own shape (not from a neighbour or an enclosing op)


def _shapes(text: str | None) -> list | None:
    if not text:
        return None
    try:
        v = json.loads(text)
    except ValueError:
        return None
    return v if isinstance(v, list) else None


WEIGHT_OPS = ("linear", "addmm", "mm", "grouped_mm", "scaled_grouped_mm", "scaled_mm", "_grouped_mm", "_scaled_mm")


def _attention_call(name: str, dims: list, spec: ModelSpec, tp: int) -> tuple[int, int] | None:
    """(heads, head dim) of an attention call: an SDPA-style op, or a 4-D product of activations whose head axis
    ([B, H, T, D] or [B, T, H, D]) holds a head count of the model and whose last axis a head dim."""
    s = [d for d in dims if isinstance(d, list)]
    if len(s) >= 2 and len(s[0]) == len(s[1]) == 3 and ATTN_OPS.search(name):
        return s[0][1], s[0][2]  # varlen [T, H, D] (vLLM's unified_attention, flash-attention varlen)
    if len(s) < 2 or len(s[0]) != 4 or len(s[1]) != 4:
        return None
    q, k = s[0], s[1]
    if ATTN_OPS.search(name):
        return q[1], q[3]
    counts = {spec.n_heads, spec.n_kv_heads, max(1, spec.n_heads // tp), max(1, spec.n_kv_heads // tp)}
    if spec.index_n_heads:
        counts |= {spec.index_n_heads, max(1, spec.index_n_heads // tp)}
    head_dims = {spec.head_dim, spec.v_head_dim or spec.head_dim, spec.index_head_dim or -1}
    d = q[3] if q[3] in head_dims else (k[3] if k[3] in head_dims else None)
    if d is None:
        return None
    for axis in (1, 2):
        if q[axis] in counts and (k[axis] in (q[axis], 1) or k[1] == 1):
            return q[axis], d
    return None


def _is_weight_gemm(name: str, dims: list) -> bool:
    """A GEMM against a weight (linear, mm, addmm, grouped mm; matmul with a 2-D second operand), as opposed
    to a product of two activations (attention scores, RoPE tables)."""
    base = name.split("::")[-1].split(".")[0]
    if base in WEIGHT_OPS:
        return True
    s = [d for d in dims if isinstance(d, list)]
    return base == "matmul" and len(s) >= 2 and len(s[1]) == 2


def _candidates(profile, spec: ModelSpec, tp: int) -> dict[int, list[OpMatch]]:
    """Outermost GEMM-like / attention / embedding ops with shapes, per rank, in time order."""
    O = profile.tables["ops"]
    n = profile.n("ops")
    names = profile.col("ops", "name", decode=True)
    gemm_like = np.array([bool(nm) and (bool(GEMM_OPS.search(nm)) or bool(ATTN_OPS.search(nm)) or nm in _EMBED)
                          for nm in names], dtype=bool) if n else np.zeros(0, bool)
    parent = O["parent"] if (O["parent"] >= 0).any() or n < 2 else infer_parents(profile)
    inside = np.zeros(n, dtype=bool)
    cur = parent.copy()
    for _ in range(64):
        live = cur >= 0
        if not live.any():
            break
        inside[live] |= gemm_like[cur[live]]
        nxt = np.full(n, -1, np.int64)
        nxt[live] = parent[cur[live]]
        cur = nxt
    dims = O["input_dims"]
    out: dict[int, list[OpMatch]] = defaultdict(list)
    for i in np.flatnonzero(gemm_like & ~inside).tolist():
        shp = _shapes(profile.string(int(dims[i])))
        if not shp:
            continue
        nm = names[i]
        m = OpMatch(i, int(O["rank"][i]), int(O["step"][i]), int(O["start_ns"][i]), nm, None)
        if nm in _EMBED:
            m.roles = {"embed"}
        else:
            att = _attention_call(nm, shp, spec, tp)
            if att is not None:
                m.heads, m.head_dim = att
            elif _is_weight_gemm(nm, shp):
                m.mnkg = canonical(nm, shp)
                if m.mnkg is None:
                    continue
            else:
                continue  # a product of activations that is not attention (e.g. a RoPE table): not labelled
        out[m.rank].append(m)
    for lst in out.values():
        lst.sort(key=lambda x: x.start)
    return out


def _forwards(ops: list[OpMatch], heads: list[Problem]) -> list[list[OpMatch]]:
    """Split one rank's ops into forwards: by step when steps are known, else after each LM-head GEMM."""
    if ops and all(o.step >= 0 for o in ops):
        by: dict[int, list[OpMatch]] = defaultdict(list)
        for o in ops:
            by[o.step].append(o)
        return [by[s] for s in sorted(by)]
    head_nk = {(p.n, p.k) for p in heads}
    out, cur = [], []
    for o in ops:
        cur.append(o)
        if o.mnkg is not None and (o.mnkg[1], o.mnkg[2]) in head_nk:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def _fits(p: Problem, mnkg: tuple[int, int, int, int]) -> bool:
    _, n, k, g = mnkg
    if p.groups > 1:
        return g == p.groups and n == p.n and k == p.k
    return g == 1 and n == p.n and k == p.k


def _label_forward(fw: list[OpMatch], layers: list[LayerProblems], heads: list[Problem], spec: ModelSpec,
                   rep: MatchReport) -> None:
    """Layer windows from the attention calls (one per layer), then roles within each window."""
    all_probs = [p for lp in layers for p in lp.problems] + heads
    fits: dict[int, list[Problem]] = {}
    for i, o in enumerate(fw):
        if o.mnkg is not None:
            fits[i] = [p for p in all_probs if _fits(p, o.mnkg)]
            if not fits[i]:
                rep.unexplained.append({"rank": o.rank, "step": o.step, "op": o.op, "mnk": list(o.mnkg)})
        elif o.roles == {"embed"}:
            o.role = "embed"
        elif o.heads is not None:
            idx = bool(spec.index_n_heads) and o.head_dim == spec.index_head_dim and o.heads in (
                spec.index_n_heads, max(1, spec.index_n_heads // rep.tp))
            o.role = "attn.indexer" if idx else "attn.core"
    # one cluster of attention calls per layer: consecutive attn.core calls with no weight GEMM between them
    clusters: list[list[int]] = []
    for i, o in enumerate(fw):
        if o.role == "attn.core":
            prev = clusters[-1][-1] if clusters else None
            if prev is not None and not any(j in fits for j in range(prev + 1, i)):
                clusters[-1].append(i)
            else:
                clusters.append([i])
    rep.forwards += 1
    has = lambda j, roles: any(p.role in roles for p in fits.get(j, ()))  # noqa: E731
    layered = len(clusters) == spec.n_layers
    if not layered:
        msg = (f"a forward on rank {fw[0].rank} shows {len(clusters)} attention calls, the config has "
               f"{spec.n_layers} layers: its ops keep their roles but no layer index")
        if msg not in rep.warnings:
            rep.warnings.append(msg)
    else:
        rep.forwards_layered += 1
    # the window of each layer: from its first attention projection to the next layer's
    starts, oproj = [], []
    for li, c in enumerate(clusters):
        j = c[0] - 1
        lo = oproj[-1] if oproj else -1
        start = c[0]
        while j > lo:
            if j in fits:
                if not has(j, ("attn.qkv", "attn.indexer")):
                    break
                start = j
            elif fw[j].role == "attn.indexer":
                start = j
            j -= 1
        starts.append(start)
        nxt = clusters[li + 1][0] if li + 1 < len(clusters) else len(fw)
        oproj.append(next((j for j in range(c[-1] + 1, nxt) if j in fits and has(j, ("attn.o_proj",))), c[-1]))
    last_gemm = max(fits) if fits else -1
    head_at = last_gemm if last_gemm > (oproj[-1] if oproj else -1) and has(last_gemm, ("lm_head",)) else None
    for li in range(len(clusters)):
        lo, hi = starts[li], (starts[li + 1] if li + 1 < len(clusters) else (head_at if head_at is not None
                                                                                    else len(fw)))
        kind = layers[li] if layered else None
        for j in range(lo, hi):
            o = fw[j]
            o.layer = li if layered else -1
            if j not in fits:
                continue
            in_attn = j <= oproj[li]
            want = ({"attn.o_proj"} if j == oproj[li] else {"attn.qkv", "attn.indexer"}) if in_attn else \
                {"mlp", "moe.router", "moe.routed", "moe.shared"}
            cand = [p for p in fits[j] if p.role in want and (kind is None or p in kind.problems)]
            o.problems = cand
            o.roles = {p.role for p in cand}
    if head_at is not None:
        fw[head_at].problems = [p for p in fits[head_at] if p.role == "lm_head"]
        fw[head_at].roles = {"lm_head"}
    for j in fits:  # GEMMs outside every window (before the first layer, or no attention at all)
        o = fw[j]
        if not o.roles and fits[j] and not clusters:
            o.problems, o.roles = fits[j], {p.role for p in fits[j]}


def _resolve_layer(ops: list[OpMatch], rep: MatchReport) -> None:
    """Within one layer of one forward: routed loop form vs shared expert (see the module docstring, step 3)."""
    tokens = next((o.mnkg[0] for o in ops if o.mnkg is not None and o.roles & {"attn.qkv", "moe.router", "mlp"}),
                  None)
    grouped = any(any(p.groups > 1 for p in o.problems) for o in ops)
    for o in ops:
        if len(o.roles) <= 1:
            o.role = next(iter(o.roles), None)
            continue
        probs = [p for p in o.problems if not (grouped and p.loop)]
        roles = {p.role for p in probs}
        if roles == {"moe.routed", "moe.shared"} and tokens is not None:
            # the shared expert sees every token; a routed expert usually a share of them. With few tokens (decode)
            # a routed expert can see them all too: then it stays ambiguous
            if o.mnkg[0] < tokens:
                roles = {"moe.routed"}
            elif tokens >= MIN_TOKENS_SHARED:
                roles = {"moe.shared"}
        if len(roles) == 1:
            o.role = roles.pop()
        else:
            o.ambiguous = True
            parts = {r.split(".")[0] for r in roles}
            if len(parts) == 1:  # e.g. moe.routed | moe.shared: the block is known, the part is not
                o.role = parts.pop()
            rep.ambiguous.append({"rank": o.rank, "step": o.step, "layer": o.layer, "op": o.op,
                                  "mnk": list(o.mnkg), "roles": sorted(roles)})


def profile_tp(profile) -> int:
    """The TP size a profile says it ran with (meta.parallel.tp, else its world size), 1 when it says nothing."""
    par = profile.meta.get("parallel") or {}
    for key in ("tp", "world_size"):
        v = par.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 65536:
            return v
    return max(1, len(profile.ranks))


def match_profile(profile, spec: ModelSpec, tp: int | None = None, ep: int = 1) -> ShapeStructure:
    """Regions for the ops of `profile` from their shapes (see the module docstring); `tp` defaults to what the
    profile says (`profile_tp`)."""
    tp = tp or profile_tp(profile)
    layers = rank_problems(spec, tp, ep)
    heads = head_problems(spec, tp)
    rep = MatchReport(spec, tp, ep)
    n = profile.n("ops")
    reg = Regions.empty(n)
    direct = np.zeros(n, dtype=bool)
    for rank, ops in _candidates(profile, spec, tp).items():
        for fw in _forwards(ops, heads):
            _label_forward(fw, layers, heads, spec, rep)
            by_layer: dict[int, list[OpMatch]] = defaultdict(list)
            for o in fw:
                if o.role is None:
                    by_layer[o.layer].append(o)
            for lst in by_layer.values():
                _resolve_layer(lst, rep)
            for o in fw:
                if o.mnkg is not None:
                    rep.gemms += 1
                if o.role is None:
                    continue
                if o.mnkg is not None and not o.ambiguous:
                    rep.matched += 1
                    if tp > 1 and o.problems and not any(p.sharded for p in o.problems if p.role == o.role):
                        rep.replicated.append({"rank": o.rank, "step": o.step, "layer": o.layer, "role": o.role,
                                               "op": o.op, "mnk": list(o.mnkg)})
                if o.heads is not None:
                    rep.attention.append({"rank": o.rank, "step": o.step, "layer": o.layer, "role": o.role,
                                          "op": o.op, "heads": o.heads, "head_dim": o.head_dim})
                rep.roles[o.role] = rep.roles.get(o.role, 0) + 1
                reg.layer[o.row] = o.layer
                reg.role[o.row] = o.role
                reg.region[o.row] = region_name(o.layer, o.role) if (o.layer >= 0 or o.role in ("embed", "lm_head")) \
                    else None
                reg.source[o.row] = "shape"
                direct[o.row] = True
    _spread(profile, reg)
    return ShapeStructure(reg, rep, direct)


def _spread(profile, reg: Regions) -> None:
    """Ops between matched ops take the region of the matched op before them (same rank and thread, same step);
    ops inside a matched op take its region."""
    O = profile.tables["ops"]
    n = profile.n("ops")
    if not n:
        return
    parent = O["parent"] if (O["parent"] >= 0).any() or n < 2 else infer_parents(profile)
    # descendants first: each takes the region of its nearest labelled ancestor
    _from_ancestors(reg, parent)
    # top-level ops in between: the previous labelled top-level op of the same rank, thread and step
    top = np.flatnonzero(parent < 0)
    order = top[np.lexsort((O["start_ns"][top], O["step"][top], O["tid"][top], O["rank"][top]))]
    last = -1
    key_prev = None
    has = reg.region != None  # noqa: E711
    for i in order.tolist():
        key = (O["rank"][i], O["tid"][i], O["step"][i])
        if key != key_prev:
            last, key_prev = -1, key
        if has[i]:
            last = i
        elif last >= 0:
            for a in ("layer", "role", "region", "source"):
                getattr(reg, a)[i] = getattr(reg, a)[last]
    # and the descendants of the top-level ops that just took a region
    _from_ancestors(reg, parent)


def _from_ancestors(reg: Regions, parent: np.ndarray, max_depth: int = 64) -> None:
    """Unlabelled ops take the labels of their nearest labelled ancestor (op nesting `parent`)."""
    n = len(parent)
    has = reg.region != None  # noqa: E711
    cur = parent.copy()
    owner = np.full(n, -1, np.int64)
    for _ in range(max_depth):
        live = (cur >= 0) & (owner < 0)
        if not live.any():
            break
        hit = np.zeros(n, dtype=bool)
        hit[live] = has[cur[live]]
        owner[hit] = cur[hit]
        nxt = np.full(n, -1, np.int64)
        nxt[live] = parent[cur[live]]
        cur = np.where(hit, -1, nxt)
    take = (~has) & (owner >= 0)
    for a in ("layer", "role", "region", "source"):
        getattr(reg, a)[take] = getattr(reg, a)[owner[take]]


def role_counts(ss: ShapeStructure) -> Counter:
    return Counter(r for r in ss.regions.role if r is not None)


def weight_gemm_shapes(profile, spec: ModelSpec) -> Counter:
    """(N, K, groups) -> count of the profile's outermost weight GEMMs with input shapes (for telling its TP)."""
    out: Counter = Counter()
    for ops in _candidates(profile, spec, 1).values():
        for o in ops:
            if o.mnkg is not None:
                out[o.mnkg[1:]] += 1
    return out
