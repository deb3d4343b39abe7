"""The one event frame of a profile: its device events, classified once, with region, category and roofline.

Every analysis that looks at "what ran" (timeline, launch, report, verify-fastpath, diff, classify) reads this
frame; nothing classifies twice, and there is one vocabulary (the TOML rules of `mmprof.analysis.attribution.classify`).

Device events are
- on a GPU profile: every kernel and every memcpy/memset row;
- on a CPU run (no kernels, no copies): the *outermost compute ops* - CPU ops whose rule gives a family other
  than `other`, with no such op above them. `aten::_grouped_mm` on CPU loops over `aten::mm` and
  `aten::linear` calls `aten::addmm`: counting outermost ops sees what the model asked for, and outermost ops
  never overlap on a thread, so their time adds up like kernels on a stream. Views and allocations (family
  `other`) and unknown frames are transparent; time between compute ops is host overhead. An outermost op takes
  path=fallback from any fallback op below it (the math SDPA under `aten::scaled_dot_product_attention`).

Per event: rank, stream (thread for CPU ops), start/end/dur (ns), name/scope/phase (string ids), step, the
launch call's start/end (-1 unknown), the CPU op carrying its shapes (`op`), family/variant/library/path/rule,
the timeline category (`cat`), layer/role/region/label source (`mmprof.analysis.attribution.structure`) and the roofline.
`events_of(profile)` builds it once per profile, rules set and regions, and keeps it in the profile's explicit
cache (`Profile.derived`, a `mmprof.profiles.profile.DerivedCache`); the entry holds a stamp of the profile's
contents, so a mutated profile (or a copy) never gets a stale frame.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.attribution import inductor, layer_order
from mmprof.analysis.attribution.classify import COMM_FAMILIES, DATA_MOVEMENT_FAMILIES, RuleSet, classify_names, default_rules
from mmprof.analysis.attribution.roofline import BOUND_COMPUTE, BOUND_MEMORY, Roofline, event_roofline
from mmprof.analysis.attribution.graph_align import align_replays
from mmprof.analysis.attribution.structure import Regions, StructureIndex, anchor_roles, regions
from mmprof.analysis.timeline.replay_shapes import twin_shapes
from mmprof.analysis.timeline.window import STARTUP, window_parts
from mmprof.labels import is_marker, parse_label

CAT_COMPUTE, CAT_MEMORY, CAT_UNATTR, CAT_COMM, CAT_MEMCPY = range(5)
TABLE_KERNELS, TABLE_MEMCPY, TABLE_OPS = 0, 1, 2
_CLASS_COLS = ("family", "variant", "library", "path", "rule")


def codes(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unique values, inverse) of an integer array, hash-based (order of first appearance)."""
    inv, uniq = pd.factorize(arr)
    return np.asarray(uniq), inv.astype(np.int64)


def group_codes(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(code per row, first row of each code) of the combinations of several columns, codes numbered in order of
    first appearance (the rows `drop_duplicates` keeps, in its order). Mixed radix over factorized columns (a
    missing value is a value of its own), re-densified only where the key could overflow; one hash pass per
    column plus one for the key."""
    n = len(cols[0]) if cols else 0
    key = np.zeros(n, dtype=np.int64)
    radix = 1                                        # distinct values key can take so far
    for col in cols:
        cinv, ncu = _column_codes(col)
        if radix * max(ncu, 1) >= 1 << 62:           # re-densify only when the key could overflow
            key = pd.factorize(key)[0].astype(np.int64)
            radix = int(key.max()) + 1 if n else 1
        key = key * ncu + cinv
        radix *= max(ncu, 1)
    key = pd.factorize(key)[0].astype(np.int64)
    first = np.empty(int(key.max()) + 1 if n else 0, dtype=np.int64)
    first[key[::-1]] = np.arange(n - 1, -1, -1)     # repeated indices: the last write (the first row) wins
    return key, first


def _column_codes(col: np.ndarray) -> tuple[np.ndarray, int]:
    """(code per row, number of codes) of one column, a bijection of its values: an integer column of a narrow
    range (string ids, Categorical codes, layers, ranks, steps) as its offset from the minimum - no hashing -,
    anything else factorized. `group_codes` numbers the combinations afterwards, so the codes' order is free."""
    n = len(col)
    if n and col.dtype.kind in "iu":
        lo, hi = int(col.min()), int(col.max())
        if hi - lo < max(4 * n, 1 << 16):
            return np.subtract(col, lo, dtype=np.int64), hi - lo + 1   # one pass, widened as it goes
    cinv, cu = pd.factorize(col, use_na_sentinel=False)
    return cinv, len(cu)


def expand(values_per_unique, inv: np.ndarray) -> pd.Categorical:
    """A Categorical with one entry per event from values given per unique key (`inv` maps event -> key)."""
    vals = pd.Series(list(values_per_unique), dtype=object)
    c, cats = pd.factorize(vals, use_na_sentinel=True)
    c = c.astype(np.int8 if len(cats) < 127 else np.int16 if len(cats) < 32767 else np.int64)  # the codes' dtype
    return pd.Categorical.from_codes(c[inv] if len(inv) else np.zeros(0, np.int64), categories=cats)


def _cat(a: np.ndarray, b: np.ndarray, copy: bool = True) -> np.ndarray:
    """`np.concatenate([a, b])`, without the copy when `b` is empty (a profile with no memcpy rows): then `a`
    itself, or, for a profile column (`copy`), a read-only view of it - the frame never writes into the profile
    and nothing writes into the frame through it."""
    if len(b) or np.result_type(a, b) != a.dtype:
        return np.concatenate([a, b])
    if not copy:
        return a
    v = a.view()
    v.flags.writeable = False
    return v


@dataclass
class EventFrame:
    """Device events of one profile (see the module docstring). Arrays are aligned, one entry per event."""

    source: str                  # "kernels" or "cpu_ops"
    table: np.ndarray            # int8 TABLE_*: which Profile table the event is a row of
    row: np.ndarray              # its row there
    rank: np.ndarray
    stream: np.ndarray           # GPU stream; the thread id for CPU ops
    start: np.ndarray
    end: np.ndarray
    dur: np.ndarray
    name: np.ndarray             # string ids
    scope: np.ndarray            # string ids
    phase: np.ndarray            # string ids
    step: np.ndarray
    launch_start: np.ndarray     # the launch call, -1 unknown
    launch_end: np.ndarray
    op: np.ndarray               # CPU op row carrying the shapes, -1 none
    graph: np.ndarray            # the graph launch (launches row) that replayed it, -1 for one-by-one launches
    family: pd.Categorical
    variant: pd.Categorical      # the rule's variant, or the event's name when the rule gives none
    library: pd.Categorical
    path: pd.Categorical         # fast | fallback | neutral
    rule: pd.Categorical         # rule id; NaN = unclassified
    cat: np.ndarray              # int8 CAT_*
    layer: np.ndarray
    role: np.ndarray             # object: str or None
    region: np.ndarray           # object: str or None
    label_source: np.ndarray     # object: annotation | module | shape | None
    roof: Roofline
    profile: Any = field(repr=False, default=None)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    graph_align: Any = None   # mmprof.analysis.attribution.graph_align.AlignStats of the replays aligned with eager kernels
    inductor: Any = None      # mmprof.analysis.attribution.inductor.InductorStats: the Inductor kernels placed and not
    # the op whose shapes stand for the event (its own `op`; a replayed kernel with none: its twin's,
    # mmprof.analysis.timeline.replay_shapes) and, where they differ from that op's, its input dims (JSON text)
    shape_op: Any = None
    shape_dims: Any = None
    _frame: Any = field(default=None, repr=False)
    _memo: dict = field(default_factory=dict, repr=False)  # derived per-event arrays the analyses share (`memo`)

    def __len__(self) -> int:
        return len(self.rank)

    def memo(self, key: str, build):
        """A value derived from this frame's arrays (phase labels, codes), built once by `build()` and shared by
        the analyses that read it (timeline, ranks and diff each need the same phase labels). Callers must treat
        it as read-only."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    @property
    def classified(self) -> np.ndarray:
        return np.asarray(pd.notna(self.rule))

    def rows_of(self, table: int) -> np.ndarray:
        return self.row[self.table == table]

    def frame(self) -> pd.DataFrame:
        """A decoded DataFrame view (strings, not ids), for selection by globs and groupby; built once.

        Columns: name, rank, stream, start_ns, dur_ns, step, phase, layer, role, region, label_source, family,
        variant, library, path, rule, kind (kernel | memcpy | op)."""
        if self._frame is None:
            p = self.profile
            lut = np.array(p.strings + [None], dtype=object)

            def dec(a: np.ndarray) -> np.ndarray:
                return lut[np.where(a < 0, len(p.strings), a)] if len(a) else np.array([], dtype=object)

            rule_var = np.asarray(self.variant.astype(object))
            df = pd.DataFrame({
                "name": dec(self.name), "rank": self.rank, "stream": self.stream, "start_ns": self.start,
                "dur_ns": self.dur, "step": self.step, "phase": dec(self.phase), "layer": self.layer,
                "role": self.role, "region": self.region, "label_source": self.label_source,
                "family": np.asarray(self.family.astype(object)), "variant": rule_var,
                "library": np.asarray(self.library.astype(object)), "path": np.asarray(self.path.astype(object)),
                "rule": np.asarray(self.rule.astype(object)),
                "kind": np.array(["kernel", "memcpy", "op"], dtype=object)[self.table] if len(self) else [],
            })
            self._frame = df
        return self._frame


def _classes(profile, table: str, rows: np.ndarray, rules: RuleSet) -> tuple[pd.DataFrame, np.ndarray]:
    """(classification per distinct name, inverse event -> distinct name)."""
    uniq, inv = codes(profile.tables[table]["name"][rows])
    names = [profile.string(int(u)) for u in uniq]
    df = classify_names(names, rules).reset_index(drop=True).astype(object)
    var = df["variant"].to_numpy().copy()
    missing = pd.isna(var)
    var[missing] = np.array([n or "?" for n in names], dtype=object)[missing]
    df["variant"] = var
    return df, inv


def _category(family: np.ndarray | pd.Categorical, roof: Roofline, extra_comm: np.ndarray | None = None) -> np.ndarray:
    if isinstance(family, pd.Categorical):  # compared per category, not per event
        cats = np.asarray(family.categories, dtype=object)
        fc = np.asarray(family.codes)
        comm = np.isin(cats, COMM_FAMILIES)[fc] & (fc >= 0)
        copy = np.isin(cats, DATA_MOVEMENT_FAMILIES)[fc] & (fc >= 0)
    else:
        comm = np.isin(family, COMM_FAMILIES)
        copy = np.isin(family, DATA_MOVEMENT_FAMILIES)
    if extra_comm is not None:
        comm = comm | extra_comm
    cat = np.full(len(family), CAT_UNATTR, dtype=np.int8)
    cat[roof.bound == BOUND_COMPUTE] = CAT_COMPUTE
    cat[roof.bound == BOUND_MEMORY] = CAT_MEMORY
    cat[copy] = CAT_MEMCPY
    cat[comm] = CAT_COMM
    return cat


def _launch_times(profile, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    L = profile.tables["launches"]
    nl = profile.n("launches")
    ok = (ref >= 0) & (ref < nl)
    ls = np.full(len(ref), -1, dtype=np.int64)
    le = np.full(len(ref), -1, dtype=np.int64)
    r = ref[ok]
    ls[ok] = L["start_ns"][r]
    le[ok] = ls[ok] + L["dur_ns"][r]
    return ls, le


def _sampler_by_family(reg: Regions, fam_u: np.ndarray, inv: np.ndarray) -> None:
    """A kernel whose rule names it a sampling kernel (top-k / top-p / Gumbel / argmax sampling: the `sampling`
    family) and that no annotation, module or op placed is the model-level `sampler` region (label source
    `family`): serving engines sample outside any nn.Module (vLLM v1's Triton sampler in the model runner), and
    the family already says what the kernel is. Nothing else is placed by its family."""
    if not len(inv):
        return
    samp = np.flatnonzero(fam_u == "sampling")
    if not len(samp):
        return
    sel = np.isin(inv, samp) & (reg.region == None)  # noqa: E711
    reg.layer[sel], reg.role[sel], reg.region[sel], reg.source[sel] = -1, "sampler", "sampler", "family"


def _outside_model(profile, table: str, reg: Regions) -> None:
    """On a trace with nn.Module events: an eager (not graph-replayed) kernel or copy that nothing placed and whose
    launch context holds no nn.Module frame at all ran outside the model's forward - the serving engine's input
    preparation, sampling and output handling (vLLM's model runner: block tables, slot mappings, the host-to-device
    copies of the inputs). It is the model-level `engine` region, label source `outside-model`. Only used where
    the module tree exists, so that a trace without module events is never read as all-engine."""
    t = profile.tables[table]
    n = profile.n(table)
    if not n:
        return
    cand = (reg.region == None) & (t["graph"] < 0)  # noqa: E711
    if not cand.any():
        return
    if "scope_path" in t:
        codes = t["scope_path"].astype(np.int64)
    else:  # copies keep no scope path of their own: their launching op's (a copy with no op is left alone)
        op = t["op"].astype(np.int64) if "op" in t else np.full(n, -1, np.int64)
        O = profile.tables["ops"]
        if "scope_path" not in O or not profile.n("ops"):
            return
        cand &= op >= 0
        codes = np.where(op >= 0, O["scope_path"][np.clip(op, 0, None)], -1).astype(np.int64)
        if not cand.any():
            return
    uniq, inv = np.unique(codes[cand], return_inverse=True)
    outside = np.array([c < 0 or "nn.Module: " not in (profile.string(int(c)) or "") for c in uniq.tolist()],
                       dtype=bool)
    sel = np.flatnonzero(cand)[outside[inv.reshape(-1)]]
    reg.layer[sel], reg.role[sel], reg.region[sel], reg.source[sel] = -1, "engine", "engine", "outside-model"


def _gpu(profile, rules: RuleSet, shape_regions: Regions | None) -> EventFrame:
    K, M = profile.tables["kernels"], profile.tables["memcpy"]
    nk, nm = profile.n("kernels"), profile.n("memcpy")
    krows = np.arange(nk)
    cls, inv = _classes(profile, "kernels", krows, rules)
    fam_u = cls["family"].astype(str).to_numpy()
    comm_k = np.zeros(nk, dtype=bool)
    ck = profile.tables["collectives"]["kernel"]
    comm_k[ck[(ck >= 0) & (ck < nk)]] = True
    not_roof_u = np.isin(fam_u, COMM_FAMILIES) | np.isin(fam_u, DATA_MOVEMENT_FAMILIES)  # per distinct name
    eligible = ~(not_roof_u[inv] | comm_k) if nk else np.zeros(0, dtype=bool)
    # memcpy rows: family memcpy, variant memcpy / memset, no roofline
    mk_u, mk_inv = codes(M["kind"])
    mk_names = [profile.string(int(u)) or "memcpy" for u in mk_u]
    inv_all = np.concatenate([inv, len(cls) + mk_inv])
    per_u = {c: list(cls[c]) for c in _CLASS_COLS}
    per_u["family"] += ["memcpy"] * len(mk_u)
    per_u["variant"] += mk_names
    per_u["library"] += [None] * len(mk_u)
    per_u["path"] += ["neutral"] * len(mk_u)
    per_u["rule"] += ["memcpy"] * len(mk_u)
    op = _cat(K["op"], M["op"]).astype(np.int64, copy=False)
    rank = _cat(K["rank"], M["rank"])
    dur = _cat(K["dur_ns"], M["dur_ns"])
    graph = _cat(K["graph"], M["graph"]).astype(np.int64, copy=False)
    family = expand(per_u["family"], inv_all)
    index = StructureIndex(profile)
    reg_k = regions(profile, "kernels", krows, index, shape_regions)
    kfam = fam_u[inv] if nk else np.full(nk, "", dtype=object)
    ind = inductor.attribute(profile, "kernels", reg_k, K["graph"] < 0)  # before the replays take eager regions
    # eager kernels nothing named (compiled code runs no module: vLLM's projections under torch.compile) placed by
    # the order of the layer's parts, on each rank's main stream, before the replays learn from the eager kernels
    eager = K["graph"] < 0
    hints = anchor_roles(profile, index, "kernels", eager & (reg_k.region == None))  # noqa: E711
    layer_order.fill(profile, reg_k, kfam, eager, streams=layer_order.main_streams(profile, eager), hints=hints)
    # graph replays with no op: regions from the eager kernels (not the engine's start-up when the window holds
    # it: timeline/window.py), their side streams and the layer order
    parts = window_parts(profile)
    pattern = None
    if parts:
        kls0, _ = _launch_times(profile, K["launch"])
        pattern = parts.part_at(K["rank"], np.where(kls0 >= 0, kls0, K["start_ns"])) != STARTUP
    replay_align = align_replays(profile, reg_k, kfam, pattern)
    # the roofline, from each event's op; a replayed kernel with no op of its own from its twin's op at the
    # replay's token count (replay_shapes.py)
    twins = twin_shapes(profile, replay_align.twin)
    shape_op = op.copy()
    shape_dims = np.full(len(op), None, dtype=object)
    texts = {}
    if twins:
        O = profile.tables["ops"]
        for r, (o, dims) in twins.items():
            shape_op[r], shape_dims[r] = o, dims
            texts[r] = (profile.string(int(O["name"][o])), dims, profile.string(int(O["input_types"][o])))
    call = call_ids(shape_op, graph, profile.n("launches")) if (graph >= 0).any() else None
    roof = event_roofline(profile, op, dur, rank, np.concatenate([eligible, np.zeros(nm, dtype=bool)]), call,
                          texts=texts)
    cat = _category(family, roof, np.concatenate([comm_k, np.zeros(nm, dtype=bool)]))
    cat[nk:] = CAT_MEMCPY
    _sampler_by_family(reg_k, fam_u, inv)
    inductor.summarize(profile, "kernels", reg_k, ind)
    reg_m = regions(profile, "memcpy", np.arange(nm), index, shape_regions)
    if index.trees:  # with a module tree (with_stack): eager work launched outside every module is the engine's
        _outside_model(profile, "kernels", reg_k)
        _outside_model(profile, "memcpy", reg_m)
    kls, kle = _launch_times(profile, K["launch"])
    mls, mle = _launch_times(profile, M["launch"])
    start = _cat(K["start_ns"], M["start_ns"])
    return EventFrame(
        source="kernels", table=np.concatenate([np.full(nk, TABLE_KERNELS, np.int8), np.full(nm, TABLE_MEMCPY, np.int8)]),
        row=_cat(krows, np.arange(nm), copy=False), rank=rank,
        stream=_cat(K["stream"], M["stream"]), start=start, end=start + dur, dur=dur,
        name=_cat(K["name"], M["name"]), scope=_cat(K["scope"], M["scope"]),
        phase=_cat(K["phase"], M["phase"]), step=_cat(K["step"], M["step"]),
        launch_start=_cat(kls, mls, copy=False), launch_end=_cat(kle, mle, copy=False), op=op,
        graph=graph,
        family=family, variant=expand(per_u["variant"], inv_all), library=expand(per_u["library"], inv_all),
        path=expand(per_u["path"], inv_all), rule=expand(per_u["rule"], inv_all), cat=cat,
        layer=_cat(reg_k.layer, reg_m.layer, copy=False), role=_cat(reg_k.role, reg_m.role, copy=False),
        region=_cat(reg_k.region, reg_m.region, copy=False),
        label_source=_cat(reg_k.source, reg_m.source, copy=False), roof=roof, profile=profile,
        notes=list(roof.notes) + ([ind.note()] if ind.note() else []), warnings=list(roof.warnings),
        graph_align=replay_align, inductor=ind, shape_op=shape_op, shape_dims=shape_dims)


def call_ids(op: np.ndarray, graph: np.ndarray, n_launches: int) -> np.ndarray:
    """One id per call of an op: its row, or (op, replay) for work a graph replay ran (a captured op runs once per
    replay). Events with op -1 get ids of their own only per replay; callers mask them."""
    return op * (n_launches + 1) + (graph + 1)


def infer_parents(profile: Any) -> np.ndarray:
    """Op nesting from time containment per (rank, thread), for importers that could not record `parent`."""
    ops = profile.tables["ops"]
    n = profile.n("ops")
    parent = np.full(n, -1, dtype=np.int64)
    start, end = ops["start_ns"], ops["start_ns"] + np.maximum(ops["dur_ns"], 0)
    order = np.lexsort((-end, start, ops["tid"], ops["rank"]))
    stack: list[int] = []
    key = None
    for i in order.tolist():
        k = (ops["rank"][i], ops["tid"][i])
        if k != key:
            stack, key = [], k
        while stack and start[i] >= end[stack[-1]]:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


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


def _inductor_ops(profile, keep: np.ndarray, reg: Regions) -> "inductor.InductorStats":
    """Inductor's cpp_fused_* ops of a CPU run placed (mmprof.analysis.attribution.inductor), on the kept ops' regions."""
    full = Regions.empty(profile.n("ops"))
    cols = ("layer", "role", "region", "source")
    for a in cols:
        getattr(full, a)[keep] = getattr(reg, a)
    elig = np.zeros(profile.n("ops"), dtype=bool)
    elig[keep] = True
    ind = inductor.attribute(profile, "ops", full, elig)
    for a in cols:
        getattr(reg, a)[:] = getattr(full, a)[keep]
    inductor.summarize(profile, "ops", reg, ind, keep)
    return ind


def _cpu(profile, rules: RuleSet, shape_regions: Regions | None) -> EventFrame:
    O = profile.tables["ops"]
    n = profile.n("ops")
    all_rows = np.arange(n)
    cls, inv = _classes(profile, "ops", all_rows, rules)
    names_u = [profile.string(int(u)) for u in codes(O["name"])[0]]
    not_op = np.array([(not s) or is_marker(s) or s.startswith(("## ", "<built-in", "nn.Module: "))
                       or parse_label(s) is not None for s in names_u], dtype=bool)
    compute_u = (cls["family"].to_numpy() != "other") & cls["rule"].notna().to_numpy() & ~not_op
    compute = compute_u[inv]
    parent = O["parent"]
    if n > 1 and not (parent >= 0).any():
        parent = infer_parents(profile)
    has_anc, top = _ancestors_scan(parent, compute)
    keep = np.flatnonzero(compute & ~has_anc)
    per_u = {c: cls[c].to_numpy() for c in _CLASS_COLS}
    ev_cls = {c: per_u[c][inv].copy() for c in _CLASS_COLS}
    fb = np.flatnonzero((ev_cls["path"] == "fallback") & has_anc)  # a fallback below marks its outermost op
    for i in fb.tolist():
        owner = top[i]
        if owner >= 0 and ev_cls["path"][owner] != "fallback":
            for c in ("variant", "path", "rule"):
                ev_cls[c][owner] = ev_cls[c][i]
    fam = ev_cls["family"][keep]
    dur = O["dur_ns"][keep]
    roof = event_roofline(profile, keep, dur, O["rank"][keep], ~np.isin(fam, COMM_FAMILIES + DATA_MOVEMENT_FAMILIES))
    reg = regions(profile, "ops", keep, None, shape_regions)
    ind = _inductor_ops(profile, keep, reg)
    start = O["start_ns"][keep]
    m = len(keep)
    frame = EventFrame(
        source="cpu_ops", table=np.full(m, TABLE_OPS, np.int8), row=keep, rank=O["rank"][keep],
        stream=O["tid"][keep], start=start, end=start + dur, dur=dur, name=O["name"][keep], scope=O["scope"][keep],
        phase=O["phase"][keep], step=O["step"][keep], launch_start=np.full(m, -1, np.int64),
        launch_end=np.full(m, -1, np.int64), op=keep.astype(np.int64), graph=np.full(m, -1, np.int64),
        **{c: pd.Categorical(ev_cls[c][keep]) for c in _CLASS_COLS},
        cat=_category(fam.astype(object), roof), layer=reg.layer, role=reg.role, region=reg.region,
        label_source=reg.source, roof=roof, profile=profile, notes=list(roof.notes), warnings=list(roof.warnings),
        inductor=ind)
    if ind.note():
        frame.notes.append(ind.note())
    frame.notes.append("CPU-run profile (no GPU kernels): the outermost compute ops (GEMMs, attention, norms, "
                       "elementwise, communication, ...) are the device events; the time between them (Python and "
                       "framework overhead, views, allocations) counts as host-bound idle")
    return frame


_HASH_BLOCK = 1 << 16
_HASH_WEIGHTS: list[np.ndarray] = []  # one odd pseudo-random uint64 weight per word of a block (fixed seed)


def _weights() -> np.ndarray:
    if not _HASH_WEIGHTS:
        w = np.random.default_rng(0x6D6D70726F66).integers(0, 1 << 63, _HASH_BLOCK, dtype=np.uint64)
        _HASH_WEIGHTS.append((w << np.uint64(1)) | np.uint64(1))
    return _HASH_WEIGHTS[0]


def content_hash(a: np.ndarray) -> tuple:
    """A position-sensitive hash of an array's bytes, at memory speed: the bytes read as 64-bit words, per block
    of 65,536 words the sum of word x odd weight (mod 2^64; one matrix-vector product), and a CRC-32 of the
    block sums and of the tail bytes. Changing any one word changes its block's sum (an odd weight times a
    non-zero difference is never 0 mod 2^64); several changes in one block (a permutation, a sort) cancel only
    by a 2^-64-scale coincidence. About 4x faster than a CRC-32 of the bytes."""
    buf = memoryview(np.ascontiguousarray(a)).cast("B")
    nw = len(buf) // 8
    words = np.frombuffer(buf, dtype="<u8", count=nw)
    nb = nw // _HASH_BLOCK
    with np.errstate(over="ignore"):
        sums = words[:nb * _HASH_BLOCK].reshape(nb, _HASH_BLOCK) @ _weights() if nb else np.zeros(0, np.uint64)
        rest = words[nb * _HASH_BLOCK:]
        last = rest @ _weights()[:len(rest)] if len(rest) else np.uint64(0)
    return nb, zlib.crc32(sums.tobytes() + np.uint64(last).tobytes() + bytes(buf[nw * 8:]))


def _stamp(profile: Any) -> tuple:
    """What the frame is built from, cheaply: every table column's length, dtype and content hash
    (`content_hash`: an in-place write such as graph-replay attribution changes it), the string count and the
    metadata (device peaks feed the roofline). About 8 ms per 70 MB of columns: far below the cost of building
    a frame."""
    cols = tuple((t, c, a.dtype.str, len(a), content_hash(a))
                 for t, table in sorted(profile.tables.items()) for c, a in sorted(table.items()))
    meta = zlib.crc32(json.dumps(profile.meta, sort_keys=True, default=str).encode())
    return cols, len(profile.strings), meta


def events_of(profile: Any, rules: RuleSet | None = None, shape_regions: Regions | None = None) -> EventFrame:
    """The event frame of a profile (kept in `profile.derived` per rules set and regions; see the module docstring).
    A cached frame is returned only for the very profile it was built from (not a copy sharing its attributes)
    and only while that profile's tables, strings and metadata are unchanged; otherwise it is rebuilt. A profile
    with no kernels, copies or CPU ops gives an empty frame: the caller says what that means."""
    rs = rules or default_rules()
    stamp = _stamp(profile)
    hit = profile.derived.get("event_frame", (rs, shape_regions), stamp)
    if hit is not None:
        return hit
    if profile.n("kernels") == 0 and profile.n("memcpy") == 0 and profile.n("ops") > 0:
        frame = _cpu(profile, rs, shape_regions)
    else:
        frame = _gpu(profile, rs, shape_regions)
    profile.derived.put("event_frame", (rs, shape_regions), stamp, frame)
    return frame
