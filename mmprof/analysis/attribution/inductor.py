"""Inductor-generated kernels (`triton_poi_fused_*`, `triton_red_fused_*`, `triton_per_fused_*`,
`triton_tem_fused_*`, `cpp_fused_*`) attributed to the regions whose ops they fuse.

What a kernel fuses, best evidence first (each placed kernel says which, as its label source):

1. **inductor-provenance** - Inductor's own kernel provenance (`--inductor-provenance`, read by
   mmprof/importers/inductor_provenance.py onto `profile.meta["inductor_provenance"]`): per kernel call (its
   `name:handle`) the post-grad nodes it fused and their model source stack traces. The stack's module calls
   (`self.mlp`, `self.shared_expert`) give the module path, whose role rules/roles.toml names
   (`mlp.shared_expert` -> moe.shared): they say *which* norm / MLP / router an op belongs to.
2. **inductor-name** - the op names Inductor writes into the kernel name (`descriptive_names = "original_aten"`,
   the default), split into the op tokens of rules/inductor.toml (`triton_per_fused_add_fused_add_rms_norm_1`
   -> add, fused_add_rms_norm -> norm).

The *layer* comes from the kernel's place in its engine step (same rank, CPU thread and step, in launch order):
kernels already placed (annotations, modules, vLLM's custom ops as anchors: `StructureIndex.order_layer`) are
anchors, and a kernel between two anchors takes the layer its role allows given the order of the parts of a
pre-norm decoder layer (input norm, qkv, rope, attention, o_proj, post-attention norm, router, experts / MLP):
between layer k's MoE and layer k+1's attention a norm is layer k+1's input norm; after the last layer's MLP it is
the final norm. A kernel with an anchor on one side only (before the first, after the last) waits until every
Inductor kernel between it and that anchor is placed; no anchor counts across a placed model-level kernel
(embedding, final norm, LM head: the next forward starts there). A trace with no anchor at all takes its clock from the
Inductor kernels that fuse an attention op (the k-th opens layer k). Placed kernels become anchors for the next
pass. An activation known by name only (`silu`) is the dense MLP's only where other evidence names the layer's MLP
dense; else it stays unplaced (a shared or a routed expert's activation looks the same).

A kernel whose ops name two regions says so: role `embed+norm`, region `embed+layers.0.norm` (the embedding
gather Inductor recomputes inside the first norm), `layers.3.attn.norm_rope+attn.core`. A kernel it cannot place
(no op token with a role, a role the order does not fix, an activation in a MoE layer by name alone) stays
unattributed and is counted in the stats with the reason (never guessed); so is a kernel launched outside
every `## Call CompiledFxGraph` range where the trace has them (Inductor's compile-time benchmarking runs). Graph-replayed kernels are not placed
here: analysis/attribution/graph_align.py gives them their eager twin's region afterwards.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mmprof.errors import BadInput
from mmprof.fileio import read_toml
from mmprof.analysis.attribution.layer_order import ORDER
from mmprof.analysis.attribution.layer_order import anchor_ord, place
from mmprof.labels import region_name, roles

RULES_FILE = Path(__file__).resolve().parents[2] / "rules" / "inductor.toml"
SOURCES = ("inductor-provenance", "inductor-name")
_NAME = re.compile(r"^(?:graph_\d+_)?(?:triton_(?:poi|red|per|tem)|cpp)_fused(?:_(.*?))?_(\d+)$")
_MODEL = ("embed", "final_norm", "lm_head", "sampler", "rope")
# a name token's role -> the module-path roles of the stack traces that say which one it is
_MATCH = {"norm": ("norm", "final_norm"), "mlp.act": ("mlp", "moe.shared", "moe.routed"),
          "moe.router": ("moe.router",), "attn.core": ("attn.core",), "attn.norm_rope": ("attn.norm_rope",),
          "embed": ("embed",)}
_PASSES = 16


@lru_cache(maxsize=1)
def tokens() -> dict[str, str]:
    """rules/inductor.toml: op token -> role ('' for an op that names no region)."""
    doc = read_toml(RULES_FILE, "Inductor token rules")
    out: dict[str, str] = {}
    for i, r in enumerate(doc.get("token", [])):
        if not isinstance(r, dict) or not isinstance(r.get("token"), str) or not isinstance(r.get("role"), str):
            raise BadInput(f"{RULES_FILE.name}: [[token]] #{i + 1} needs a string token and role")
        if r["role"] and r["role"] not in ORDER and r["role"] not in _MODEL:
            raise BadInput(f"{RULES_FILE.name}: [[token]] {r['token']!r}: unknown role {r['role']!r}")
        out[r["token"]] = r["role"]
    return out


def is_inductor(name: str) -> bool:
    return bool(_NAME.match(name or ""))


def split_ops(ops: str) -> list[str]:
    """`_to_copy_embedding_rms_norm` -> [_to_copy, embedding, rms_norm]: the longest known token at each place
    (op names hold underscores themselves); an unknown word is kept with a leading '?'."""
    table = tokens()
    by_len = sorted(table, key=len, reverse=True)
    out, i, n = [], 0, len(ops)
    while i < n:
        hit = next((t for t in by_len if ops.startswith(t, i) and (i + len(t) == n or ops[i + len(t)] == "_")), None)
        if hit is None:
            j = ops.find("_", i + 1)
            j = n if j < 0 else j
            hit = ops[i:j]
            out.append("?" + hit)
        else:
            out.append(hit)
        i += len(hit) + 1
    return out


def name_roles(name: str) -> set[str]:
    """The roles a kernel name's op tokens give (empty: the name tells nothing)."""
    m = _NAME.match(name or "")
    if not m or not m.group(1):
        return set()
    table = tokens()
    return {table[t] for t in split_ops(m.group(1)) if table.get(t)}


def _ops_roles(ops: list[str]) -> set[str]:
    table = tokens()
    return {table[o] for o in ops if table.get(o)}


def stack_region(calls: list[str]) -> tuple[int, str | None, int]:
    """(layer or -1, role or None, depth) of one stack trace's calls (outermost first): `self.x` calls make the
    module path; a call through a local (`layer(...)`, the decoder-layer loop) or `self.layers[3]` starts the
    path inside a layer; the last frame's own call (`F.silu`) is the op, not a module."""
    path: list[str] = []
    inside, layer = False, -1
    for k, c in enumerate(calls):
        last = k == len(calls) - 1
        m = re.fullmatch(r"self\.([\w.]+?)(?:\[(\d+)\])?", c)
        if m and m.group(2) is not None:
            path, inside, layer = [], True, int(m.group(2))
        elif m:
            path.append(m.group(1))
        elif c and not last:
            path, inside = [], True
    if not path:
        return layer, None, 0
    suffix = ".".join(path)
    rr = roles()
    role = rr.path_role(suffix) if inside else (rr.model_role(suffix) or None)
    return layer, role, len(path)


def provenance_roles(handles: list[dict[str, Any]]) -> tuple[set[str], int] | None:
    """Roles (and a layer index when a stack names it, else -1) of one kernel call from its provenance handles
    (one handle, or several that agree); None when the provenance says nothing or the handles disagree."""
    got = []
    for h in handles:
        regs = [stack_region(c) for c in h.get("calls", [])]
        t = _ops_roles(h.get("ops", []))
        s = {r for _, r, _ in regs if r}
        deep = max((d for _, r, d in regs if r), default=0)
        deepest = {r for _, r, d in regs if r and d == deep}
        if t:
            out = set()
            for role in t:
                m = {r for r in s if r in _MATCH.get(role, ())}
                out |= m if m else {role}
        else:
            out = deepest
        layers = {lay for lay, r, _ in regs if lay >= 0}
        got.append((frozenset(out), layers.pop() if len(layers) == 1 else -1))
    if not got or not got[0][0] or any(g != got[0] for g in got):
        return None
    return set(got[0][0]), got[0][1]


@dataclass
class InductorStats:
    """What the attribution did with the Inductor kernels of one table (time in ns)."""

    kernels: int = 0
    time_ns: int = 0
    by_source: dict[str, int] = field(default_factory=dict)      # source -> ns
    spans_ns: int = 0                                             # placed with a region spanning two parts
    unplaced: dict[str, list[int]] = field(default_factory=dict)  # reason -> [count, ns]
    why: dict[int, str] = field(default_factory=dict, repr=False)  # row -> why attribute() left it unplaced

    def to_dict(self) -> dict[str, Any]:
        return {"kernels": self.kernels, "time_ns": self.time_ns, "by_source": self.by_source,
                "spans_ns": self.spans_ns, "unplaced": {k: {"count": v[0], "time_ns": v[1]}
                                                        for k, v in self.unplaced.items()}}

    def note(self) -> str | None:
        if not self.kernels:
            return None
        tot = self.time_ns or 1
        parts = [f"{s} {self.by_source[s] / tot:.0%}" for s in sorted(self.by_source)]
        un = sum(v[1] for v in self.unplaced.values())
        why = "; ".join(f"{k}: {v[0]}" for k, v in sorted(self.unplaced.items(), key=lambda kv: -kv[1][1]))
        return (f"Inductor kernels: {self.kernels} ({self.time_ns / 1e6:.3f} ms); placed by "
                f"{', '.join(parts) or 'nothing'}; {self.spans_ns / tot:.0%} span two regions; "
                f"{un / tot:.0%} unplaced" + (f" ({why})" if why else ""))


def _order(profile: Any, table: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rank, tid, step, t) of each row of `table` in CPU launch order: a kernel's launch call (else its op)."""
    t = profile.tables[table]
    n = profile.n(table)
    if table == "ops":
        return t["rank"], t["tid"], t["step"], t["start_ns"]
    tid = np.full(n, -1, np.int64)
    start = np.full(n, -1, np.int64)
    if profile.n("ops") and "op" in t:
        o = t["op"].astype(np.int64)
        ok = o >= 0
        tid[ok], start[ok] = profile.tables["ops"]["tid"][o[ok]], profile.tables["ops"]["start_ns"][o[ok]]
    if profile.n("launches") and "launch" in t:
        la = t["launch"].astype(np.int64)
        ok = la >= 0
        L = profile.tables["launches"]
        tid[ok], start[ok] = L["tid"][la[ok]], L["start_ns"][la[ok]]
    return t["rank"], tid, t["step"], start


def _region(model: list[str], layered: dict[str, int]) -> tuple[int, str, str]:
    rs = sorted(layered, key=lambda r: ORDER[r][0] if r != "norm" else 0)
    lays = sorted(set(layered.values()))
    role = "+".join(model + rs)
    if len(lays) == 1:
        name = "+".join(model + ([region_name(lays[0], "+".join(rs))] if rs else []))
    else:
        name = "+".join(model + [region_name(layered[r], r) for r in rs])
    return (lays[0] if len(lays) == 1 else (max(lays) if lays else -1)), role, name


def attribute(profile: Any, table: str, reg: Any, eligible: np.ndarray | None = None) -> InductorStats:
    """Place the Inductor kernels of `table` (kernels, or ops on a CPU run) that `reg` (structure.Regions over
    every row) leaves unplaced; writes into `reg`; returns the stats to fill with `summarize` once every other
    source (graph replays) has run."""
    n = profile.n(table)
    stats = InductorStats()
    if not n:
        return stats
    T = profile.tables[table]
    names_u, inv = np.unique(T["name"], return_inverse=True)
    ind_u = np.array([is_inductor(profile.string(int(c)) or "") for c in names_u.tolist()], dtype=bool)
    is_ind = ind_u[inv.reshape(-1)]
    if eligible is not None:
        is_ind &= eligible
    rows = np.flatnonzero(is_ind)
    if not len(rows):
        return stats
    cand = rows[np.array([reg.region[i] is None for i in rows.tolist()], dtype=bool)]
    cand = _in_compiled_calls(profile, T, cand, stats)
    if not len(cand):  # every Inductor kernel already has its region (the runtime's scopes, module events)
        return stats
    prov = (profile.meta.get("inductor_provenance") or {}).get("kernels", {})
    rank, tid, step, start = _order(profile, table)
    roles_of, src_of, layer_hint = _roles(profile, T, cand, prov, rank, step, start)
    _position(profile, table, reg, cand, roles_of, src_of, layer_hint, (rank, tid, step, start), stats)
    return stats


_CALL_MARK = "## Call CompiledFxGraph"


def _in_compiled_calls(profile: Any, T: dict, cand: np.ndarray, stats: InductorStats) -> np.ndarray:
    """Where the trace marks compiled-graph calls (torch's `## Call CompiledFxGraph <key> ##` range around each
    call), only the kernels inside one are the model's: the others ran while Inductor compiled (its benchmarking
    and autotuning runs, inside the model's first forward) and are left unplaced with that reason."""
    if not len(cand) or "scope_path" not in T:
        return cand
    codes = T["scope_path"][cand].astype(np.int64)
    uniq, inv = np.unique(codes, return_inverse=True)
    inside_u = np.array([c >= 0 and _CALL_MARK in (profile.string(int(c)) or "") for c in uniq.tolist()], dtype=bool)
    inside = inside_u[inv.reshape(-1)]
    if not inside.any():
        return cand  # no markers (another profiler, older torch): nothing tells compile-time runs apart
    for i in cand[~inside].tolist():
        stats.why[i] = "ran outside a compiled graph's call (compile-time benchmarking)"
    return cand[inside]


def _roles(profile: Any, T: dict, cand: np.ndarray, prov: dict, rank, step, start):
    """Per candidate row: its roles, their source and a layer index named by provenance (-1)."""
    roles_of: dict[int, set[str]] = {}
    src_of: dict[int, str] = {}
    hint: dict[int, int] = {}
    occ: dict[tuple, list[int]] = {}
    for i in cand.tolist():
        nm = profile.string(int(T["name"][i])) or ""
        base = re.sub(r"^graph_\d+_", "", nm)
        if base in prov:
            occ.setdefault((base, int(rank[i]), int(step[i])), []).append(i)
        roles_of[i] = name_roles(nm)
        src_of[i] = "inductor-name"
    for (base, _, _), rs in occ.items():
        handles = prov[base]
        rs.sort(key=lambda i: (int(start[i]), i))
        # one compiled graph holding the name, called whole in the step: its occurrences cycle through its handles
        per_call = len({h.get("graph") for h in handles}) == 1 and len(rs) % len(handles) == 0
        for j, i in enumerate(rs):
            got = provenance_roles([handles[j % len(handles)]] if per_call else handles)
            if got is not None:
                roles_of[i], src_of[i], hint[i] = got[0], "inductor-provenance", got[1]
    return roles_of, src_of, hint


def _position(profile, table, reg, cand, roles_of, src_of, hint, order, stats) -> None:
    rank, tid, step, start = order
    n = profile.n(table)
    graph = profile.tables[table]["graph"] if "graph" in profile.tables[table] else np.full(n, -1)
    srt = np.lexsort((np.arange(n), start, step, tid, rank))
    pos = np.empty(n, np.int64)
    pos[srt] = np.arange(n)
    gkey = np.stack([rank, tid, step], 1)[srt]
    gid = np.zeros(n, np.int64)
    if n > 1:
        gid[1:] = np.cumsum(np.any(gkey[1:] != gkey[:-1], axis=1))
    grp = np.empty(n, np.int64)
    grp[srt] = gid
    # anchors: placed eager rows with a layer, as (sorted position -> (layer, roles))
    in_groups = np.isin(grp, np.unique(grp[cand]))  # only the groups (steps) holding a kernel to place
    placed = np.flatnonzero((reg.layer >= 0) & (graph < 0) & in_groups)
    placed = placed[np.asarray(reg.region, dtype=object)[placed] != None]  # noqa: E711
    anchors: dict[int, tuple[int, list[str]]] = {int(pos[i]): (int(reg.layer[i]), str(reg.role[i]).split("+"))
                                                 for i in placed.tolist()}
    # placed model-level rows (embedding, final norm, LM head) end one forward and start the next: no layer
    # context crosses them (a capture run after an annotated step starts over)
    model_rows = np.flatnonzero((reg.layer < 0) & (graph < 0) & in_groups)
    model_rows = model_rows[np.isin(np.asarray(reg.role, dtype=object)[model_rows].astype(str), _MODEL)]
    bpos = np.sort(pos[model_rows]).astype(np.int64)
    todo = [i for i in cand.tolist() if roles_of.get(i) and start[i] >= 0]
    groups_with = {int(grp[i]) for i in placed.tolist()}
    clock: dict[int, int] = {}
    for i in sorted(todo, key=lambda i: pos[i]):  # no anchor in the group: attention-fusing kernels are the clock
        g = int(grp[i])
        if g not in groups_with and "attn.core" in roles_of[i]:
            clock[g] = clock.get(g, -1) + 1
            if hint.get(i, -1) < 0:
                hint[i] = clock[g]
    layered_in: dict[tuple[int, int], set[str]] = {}
    for p, (lay, rs) in anchors.items():
        layered_in.setdefault((int(gid[p]), lay), set()).update(rs)
    done: dict[int, tuple[int, str, str]] = {}
    for _ in range(_PASSES):
        apos = np.array(sorted(anchors), dtype=np.int64)
        open_ = np.array(sorted(int(pos[i]) for i in todo if i not in done), dtype=np.int64)
        new = 0
        for i in todo:
            if i in done:
                continue
            got = _decide(roles_of[i], hint.get(i, -1), int(pos[i]), gid, apos, anchors, layered_in, open_, bpos)
            if got is None:
                continue
            done[i] = got
            if got[0] >= 0:
                anchors[int(pos[i])] = (got[0], [r for r in got[1].split("+") if r not in _MODEL])
                layered_in.setdefault((int(gid[pos[i]]), got[0]), set()).update(got[1].split("+"))
            new += 1
        if not new:
            break
    for i in cand.tolist():
        if i in done:
            lay, role, name = done[i]
            reg.layer[i], reg.role[i], reg.region[i], reg.source[i] = lay, role, name, src_of[i]
            continue
        stats.why[i] = ("no op with a role in its name or provenance" if not roles_of.get(i) else
                        "no launch order" if start[i] < 0 else "its place does not fix the layer or the part")


def summarize(profile: Any, table: str, reg: Any, stats: InductorStats, rows: np.ndarray | None = None) -> None:
    """Fill `stats` from the final regions of every Inductor row of `table` (`reg` aligned with `rows`, default
    all rows): time by label source, spanning regions, and the unplaced ones by reason (a graph replay that
    nothing placed: no eager twin of it was placed)."""
    T = profile.tables[table]
    rows = np.arange(profile.n(table)) if rows is None else rows
    names_u, inv = np.unique(T["name"][rows], return_inverse=True)
    ind_u = np.array([is_inductor(profile.string(int(c)) or "") for c in names_u.tolist()], dtype=bool)
    sel = np.flatnonzero(ind_u[inv.reshape(-1)]) if len(rows) else np.zeros(0, np.int64)
    dur = T["dur_ns"].astype(np.int64)
    graph = T["graph"] if "graph" in T else np.full(profile.n(table), -1)
    stats.kernels, stats.time_ns = int(len(sel)), int(dur[rows[sel]].sum())
    if not len(sel):
        return
    # vectorised over the Inductor rows (a production trace holds hundreds of thousands of them)
    region = np.asarray(reg.region, dtype=object)[sel]
    placed = region != None  # noqa: E711 - elementwise on the object array
    d_all = dur[rows[sel]]
    if placed.any():
        d = d_all[placed]
        codes, keys = pd.factorize(np.asarray(reg.source, dtype=object)[sel][placed])  # None: code -1
        ok = codes >= 0
        for k, t in zip(keys.tolist(), np.bincount(codes[ok], weights=d[ok], minlength=len(keys)).tolist()):
            stats.by_source[str(k)] = stats.by_source.get(str(k), 0) + int(t)
        rcodes, rkeys = pd.factorize(np.asarray(reg.role, dtype=object)[sel][placed])
        spans = np.array(["+" in str(k) for k in rkeys.tolist()], dtype=bool)
        stats.spans_ns += int(d[(rcodes >= 0) & spans[np.maximum(rcodes, 0)]].sum()) if len(rkeys) else 0
    for j in sel[~placed].tolist():
        i, dd = int(rows[j]), int(dur[rows[j]])
        why = stats.why.get(i) or ("a graph replay with no placed eager twin" if graph[i] >= 0 else "not placed")
        c = stats.unplaced.setdefault(why, [0, 0])
        c[0], c[1] = c[0] + 1, c[1] + dd


def _between(open_: np.ndarray, lo: int, hi: int) -> bool:
    """Whether an undecided Inductor kernel lies strictly between sorted positions lo and hi."""
    return int(np.searchsorted(open_, hi, side="left")) - int(np.searchsorted(open_, lo, side="right")) > 0


def _neighbours(p: int, gid: np.ndarray, apos: np.ndarray, anchors: dict, open_: np.ndarray, bpos: np.ndarray):
    """The anchors before / after sorted position p in its group as (layer, ord), None where there is none; a
    one-sided place waits while an undecided kernel lies between it and its anchor (decided in a later pass:
    a kernel after the last anchor is placed only once everything between is)."""
    k = int(np.searchsorted(apos, p))
    prev = nxt = None
    pp = np_ = -1
    if k > 0 and gid[apos[k - 1]] == gid[p] and not _between(bpos, int(apos[k - 1]), p):
        pp = int(apos[k - 1])
        lay, ar = anchors[pp]
        prev = (lay, anchor_ord(ar, True))
    j = k + 1 if k < len(apos) and apos[k] == p else k
    if j < len(apos) and gid[apos[j]] == gid[p] and not _between(bpos, p, int(apos[j])):
        np_ = int(apos[j])
        lay, ar = anchors[np_]
        nxt = (lay, anchor_ord(ar, False))
    wait = (prev is None) != (nxt is None) and (_between(open_, pp, p) if prev is not None else _between(open_, p, np_))
    return prev, nxt, wait


def _decide(rs, hint, p, gid, apos, anchors, layered_in, open_, bpos):
    model = sorted(r for r in rs if r in _MODEL)
    layer_roles = [r for r in rs if r not in _MODEL]
    if not layer_roles:
        return -1, "+".join(model), "+".join(model)
    prev, nxt, wait = _neighbours(p, gid, apos, anchors, open_, bpos)
    if wait and hint < 0:
        return None
    layered: dict[str, int] = {}
    for r in layer_roles:
        if r == "norm" and hint < 0 and prev is not None and nxt is not None and prev[0] == nxt[0] \
                and prev[1] <= 3 and 1 <= nxt[1] <= 5 and nxt[1] > prev[1]:
            # after the layer's input norm and before its attention: a norm inside the attention (Qwen3's q/k
            # norm, MLA's kv_a_layernorm: RMSNorms vLLM calls in the attention module), not a decoder norm
            layered["attn.norm_rope"] = prev[0]
            continue
        lay = hint if hint >= 0 else place(r, prev, nxt)
        if lay is None:
            return None
        if lay == -2:  # a norm after the last layer's MLP / MoE
            model = sorted(set(model) | {"final_norm"})
            continue
        if r == "mlp.act":  # by name alone: the dense MLP's only where the layer's MLP is known to be dense
            seen = layered_in.get((int(gid[p]), lay), set())
            if "mlp" not in seen or any(x.startswith("moe") for x in seen):
                return None
            r = "mlp"
        layered[r] = lay
    if not layered:
        return -1, "+".join(model), "+".join(model)
    return _region(model, layered)
