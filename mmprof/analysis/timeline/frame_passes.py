"""The order in which an event frame is enriched: one list of passes per kind of profile, in one place.

A pass is a function of a `FrameBuild` that declares the frame columns it reads, the columns it adds and the
columns it refines (writes again after an earlier pass added them). The build lets a pass read only what it
declared and what an earlier pass made, and write only what it declared; `check_order` verifies a list
statically (`tests/test_frame_passes.py` runs it on both lists, and both lists run on real profiles with the
access checks on). A new evidence source is one more entry in a list.

The passes of a GPU profile (kernels and memcpy rows), in order:

| pass | reads | adds / refines | from |
|---|---|---|---|
| device_events | the kernels and memcpy tables | rows, rank, stream, times, name, scope, phase, step, launch, op, graph | importers |
| classify | name, table | family, variant, library, path, rule (+ per-name classes) | attribution/classify |
| evidence | name, op, dur, table | family, rule (refined); evidence, evidence_stats | attribution/evidence: the launching op ranked with the name, disagreements counted |
| collectives | table, row | in_collective | the collectives table |
| roofline | op, dur, rank, graph, classes, in_collective | roof | attribution/roofline |
| category | family, roof, in_collective | cat | compute / memory / comm / memcpy / unattributed |
| regions | table, row | layer, role, region, label_source | attribution/structure (annotations, modules, op anchors, shapes) |
| inductor | graph, region | region (Inductor-fused kernels) | attribution/inductor |
| graph_align | classes, region | region (graph replays with no capture twin), graph_align | attribution/graph_align |
| sampler | classes, region | region (sampling kernels nothing placed) | the `sampling` family |
| inductor_summary | region | inductor | attribution/inductor |
| outside_model | region, graph | region (eager work outside every nn.Module: `engine`) | the module tree |

A CPU run (no kernels, no copies) has its own list: its events are the outermost compute ops (`compute_ops`,
classified there since the selection depends on the family), then roofline, regions, Inductor's cpp_fused ops
and the category.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from mmprof.analysis.attribution import evidence, inductor
from mmprof.analysis.attribution.classify import COMM_FAMILIES, DATA_MOVEMENT_FAMILIES, RuleSet, classify_names
from mmprof.analysis.attribution.graph_align import align_replays
from mmprof.analysis.attribution.roofline import BOUND_COMPUTE, BOUND_MEMORY, Roofline, event_roofline
from mmprof.analysis.attribution.structure import Regions, StructureIndex, regions
from mmprof.analysis.timeline.columns import (CAT_COMM, CAT_COMPUTE, CAT_MEMCPY, CAT_MEMORY, CAT_UNATTR, TABLE_KERNELS,
                                              TABLE_MEMCPY, TABLE_OPS, call_ids, codes, concat, expand)
from mmprof.analysis.timeline.op_tree import ancestors_scan, infer_parents
from mmprof.labels import is_marker, parse_label

CLASS_COLS = ("family", "variant", "library", "path", "rule")
REGION_COLS = ("layer", "role", "region", "label_source")
EVENT_COLS = ("table", "row", "rank", "stream", "start", "end", "dur", "name", "scope", "phase", "step",
              "launch_start", "launch_end", "op", "graph")


@dataclass(frozen=True)
class Pass:
    """One step of the frame's build: `run(build)` reads `reads`, adds `adds`, writes `refines` again."""

    name: str
    run: Callable[["FrameBuild"], None]
    reads: tuple[str, ...] = ()
    adds: tuple[str, ...] = ()
    refines: tuple[str, ...] = ()


class PassOrderError(AssertionError):
    """A pass read or wrote a column it did not declare, or read one no earlier pass made (a bug in mmprof)."""


@dataclass
class FrameBuild:
    """The state a list of passes works on: the profile, the rules and shape regions the frame is built for, the
    columns made so far, and the notes and warnings the passes leave for the frame."""

    profile: Any
    rules: RuleSet
    shape_regions: Regions | None
    cols: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    current: Pass | None = None

    def read(self, col: str) -> Any:
        p = self.current
        if p is not None and col not in p.reads and col not in p.refines and col not in p.adds:
            raise PassOrderError(f"pass {p.name} reads {col!r}, which it does not declare")
        if col not in self.cols:
            raise PassOrderError(f"pass {p.name if p else '?'} reads {col!r}, which no earlier pass made")
        return self.cols[col]

    def write(self, col: str, value: Any) -> None:
        p = self.current
        if p is not None and col not in p.adds and col not in p.refines:
            raise PassOrderError(f"pass {p.name} writes {col!r}, which it does not declare")
        self.cols[col] = value

    def regions_view(self, rows: slice) -> Regions:
        """The region columns of a row range as a `Regions` whose arrays are views (writes land in the frame)."""
        layer, role, region, source = (self.read(c) for c in REGION_COLS)
        return Regions(layer[rows], role[rows], region[rows], source[rows])

    @property
    def n_kernels(self) -> int:
        return self.profile.n("kernels")


def run_passes(passes: tuple[Pass, ...], build: FrameBuild) -> FrameBuild:
    """Run a list of passes in order, each with its declared access only."""
    for p in passes:
        build.current = p
        missing = [c for c in p.reads + p.refines if c not in build.cols]
        if missing:
            raise PassOrderError(f"pass {p.name} needs {missing}, which no earlier pass made")
        p.run(build)
        absent = [c for c in p.adds if c not in build.cols]
        if absent:
            raise PassOrderError(f"pass {p.name} declares {absent} but did not add them")
    build.current = None
    return build


def check_order(passes: tuple[Pass, ...]) -> list[str]:
    """Problems of a list read statically: a pass that reads or refines a column no earlier pass adds, or that
    adds a column an earlier pass added already (that is a refinement and must say so)."""
    made: set[str] = set()
    out = []
    for p in passes:
        for c in p.reads + p.refines:
            if c not in made:
                out.append(f"{p.name}: reads {c!r} before any pass adds it")
        for c in p.adds:
            if c in made:
                out.append(f"{p.name}: adds {c!r} again (declare it in refines)")
        made.update(p.adds)
    return out


# ---------------------------------------------------------------------------------------------- a GPU profile
def _device_events(b: FrameBuild) -> None:
    """Every kernel, then every memcpy/memset row; profile columns are read-only views where nothing is joined."""
    p = b.profile
    K, M = p.tables["kernels"], p.tables["memcpy"]
    nk, nm = p.n("kernels"), p.n("memcpy")
    b.write("table", np.concatenate([np.full(nk, TABLE_KERNELS, np.int8), np.full(nm, TABLE_MEMCPY, np.int8)]))
    b.write("row", concat(np.arange(nk), np.arange(nm), copy=False))
    for col, src in (("rank", "rank"), ("stream", "stream"), ("name", "name"), ("scope", "scope"),
                     ("phase", "phase"), ("step", "step")):
        b.write(col, concat(K[src], M[src]))
    start, dur = concat(K["start_ns"], M["start_ns"]), concat(K["dur_ns"], M["dur_ns"])
    b.write("start", start)
    b.write("dur", dur)
    b.write("end", start + dur)
    b.write("op", concat(K["op"], M["op"]).astype(np.int64, copy=False))
    b.write("graph", concat(K["graph"], M["graph"]).astype(np.int64, copy=False))
    kls, kle = _launch_times(p, K["launch"])
    mls, mle = _launch_times(p, M["launch"])
    b.write("launch_start", concat(kls, mls, copy=False))
    b.write("launch_end", concat(kle, mle, copy=False))


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


def name_classes(profile, table: str, rows: np.ndarray, rules: RuleSet) -> tuple[pd.DataFrame, np.ndarray]:
    """(classification per distinct name, inverse event -> distinct name); a name no rule knows keeps its name
    as its variant."""
    uniq, inv = codes(profile.tables[table]["name"][rows])
    names = [profile.string(int(u)) for u in uniq]
    df = classify_names(names, rules).reset_index(drop=True).astype(object)
    var = df["variant"].to_numpy().copy()
    missing = pd.isna(var)
    var[missing] = np.array([n or "?" for n in names], dtype=object)[missing]
    df["variant"] = var
    return df, inv


def _classify(b: FrameBuild) -> None:
    """Kernels by the rules (once per distinct name); memcpy rows are family memcpy, variant memcpy / memset."""
    p = b.profile
    nk = b.n_kernels
    b.read("name")
    table = b.read("table")
    cls, inv = name_classes(p, "kernels", np.arange(nk), b.rules)
    mk_u, mk_inv = codes(p.tables["memcpy"]["kind"])
    mk_names = [p.string(int(u)) or "memcpy" for u in mk_u]
    inv_all = np.concatenate([inv, len(cls) + mk_inv])
    per_u = {c: list(cls[c]) for c in CLASS_COLS}
    per_u["family"] += ["memcpy"] * len(mk_u)
    per_u["variant"] += mk_names
    per_u["library"] += [None] * len(mk_u)
    per_u["path"] += ["neutral"] * len(mk_u)
    per_u["rule"] += ["memcpy"] * len(mk_u)
    assert len(inv_all) == len(table)
    for c in CLASS_COLS:
        b.write(c, expand(per_u[c], inv_all))
    b.write("kernel_classes", (cls["family"].astype(str).to_numpy(), inv))


def _evidence(b: FrameBuild) -> None:
    """The launching CPU op as evidence of a kernel's family, ranked with its name's (attribution/evidence): the
    op decides where the name says nothing; where both speak and differ, the name decides and the pair is counted
    as a disagreement (`evidence_stats`). Memcpy rows have no evidence column value (their kind is their family)."""
    p = b.profile
    nk = b.n_kernels
    table = b.read("table")
    names, op, dur = b.read("name"), b.read("op"), b.read("dur")
    fam_all = np.asarray(b.read("family").astype(object))
    rule_all = np.asarray(b.read("rule").astype(object))
    fam_k, rule_k, ev_k, stats = evidence.rank_kernels(p, b.rules, names[:nk], op[:nk], dur[:nk], fam_all[:nk])
    fam_all[:nk] = fam_k
    rule_all[:nk] = rule_k
    ev_all = np.full(len(table), None, dtype=object)
    ev_all[:nk] = ev_k
    b.write("family", pd.Categorical(fam_all))
    b.write("rule", pd.Categorical(rule_all))
    b.write("evidence", pd.Categorical(ev_all))
    b.write("evidence_stats", stats)
    if stats.disagreements:
        b.notes.append(f"kernel identity: {stats.disagreeing_events:,} kernels ({len(stats.disagreements)} name / op "
                       "pairs) whose name and launching op disagree on the family; the name decided "
                       "(mmprof classify lists them)")


def _collectives(b: FrameBuild) -> None:
    """Kernels the collectives table names (NCCL / RCCL / a runtime's all-reduce), whatever their family."""
    p = b.profile
    table = b.read("table")
    b.read("row")
    nk = b.n_kernels
    comm = np.zeros(len(table), dtype=bool)
    ck = p.tables["collectives"]["kernel"]
    comm[ck[(ck >= 0) & (ck < nk)]] = True
    b.write("in_collective", comm)


def _roofline(b: FrameBuild) -> None:
    """Kernels that are neither communication nor data movement get a bound from their op's shapes, the op's
    work shared among its kernels (per replay for graph replays)."""
    p = b.profile
    fam_u, inv = b.read("kernel_classes")
    comm = b.read("in_collective")
    op, dur, rank, graph = b.read("op"), b.read("dur"), b.read("rank"), b.read("graph")
    nk = b.n_kernels
    not_roof_u = np.isin(fam_u, COMM_FAMILIES) | np.isin(fam_u, DATA_MOVEMENT_FAMILIES)  # per distinct name
    eligible = np.zeros(len(op), dtype=bool)
    if nk:
        eligible[:nk] = ~(not_roof_u[inv] | comm[:nk])
    call = call_ids(op, graph, p.n("launches")) if (graph >= 0).any() else None
    roof = event_roofline(p, op, dur, rank, eligible, call)
    b.write("roof", roof)
    b.notes.extend(roof.notes)
    b.warnings.extend(roof.warnings)


def category(family: np.ndarray | pd.Categorical, roof: Roofline, extra_comm: np.ndarray | None = None) -> np.ndarray:
    """The timeline category of each event: communication, data movement, else the roofline's bound (compute,
    memory) or unattributed."""
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


def _category(b: FrameBuild) -> None:
    cat = category(b.read("family"), b.read("roof"), b.read("in_collective"))
    cat[b.read("table") == TABLE_MEMCPY] = CAT_MEMCPY
    b.write("cat", cat)


def _regions(b: FrameBuild) -> None:
    """Regions of kernels and of copies, best evidence first (mmprof.analysis.attribution.structure)."""
    p = b.profile
    b.read("table")
    b.read("row")
    index = StructureIndex(p)
    reg_k = regions(p, "kernels", np.arange(p.n("kernels")), index, b.shape_regions)
    reg_m = regions(p, "memcpy", np.arange(p.n("memcpy")), index, b.shape_regions)
    for col, attr in zip(REGION_COLS, ("layer", "role", "region", "source")):
        b.write(col, concat(getattr(reg_k, attr), getattr(reg_m, attr), copy=False))
    b.write("module_trees", bool(index.trees))


def _inductor(b: FrameBuild) -> None:
    """Inductor-generated kernels placed by provenance, fused-op names and position, before graph replays take
    their eager twins' regions (mmprof.analysis.attribution.inductor)."""
    nk = b.n_kernels
    graph = b.read("graph")
    reg_k = b.regions_view(slice(0, nk))
    b.write("inductor", inductor.attribute(b.profile, "kernels", reg_k, graph[:nk] < 0))


def _graph_align(b: FrameBuild) -> None:
    """Graph-replayed kernels no capture twin explains take the region of the eager kernel they align with."""
    p = b.profile
    nk = b.n_kernels
    fam_u, inv = b.read("kernel_classes")
    reg_k = b.regions_view(slice(0, nk))
    kfam = fam_u[inv] if nk and (p.tables["kernels"]["graph"] >= 0).any() else np.full(nk, "", dtype=object)
    b.write("graph_align", align_replays(p, reg_k, kfam))


def _sampler(b: FrameBuild) -> None:
    """A kernel whose rule names it a sampling kernel (top-k / top-p / Gumbel / argmax sampling: the `sampling`
    family) and that no annotation, module or op placed is the model-level `sampler` region (label source
    `family`): serving engines sample outside any nn.Module (vLLM v1's Triton sampler in the model runner), and
    the family already says what the kernel is. Nothing else is placed by its family."""
    fam_u, inv = b.read("kernel_classes")
    reg = b.regions_view(slice(0, b.n_kernels))
    if not len(inv):
        return
    samp = np.flatnonzero(fam_u == "sampling")
    if not len(samp):
        return
    sel = np.isin(inv, samp) & (reg.region == None)  # noqa: E711
    reg.layer[sel], reg.role[sel], reg.region[sel], reg.source[sel] = -1, "sampler", "sampler", "family"


def _inductor_summary(b: FrameBuild) -> None:
    ind = b.read("inductor")
    inductor.summarize(b.profile, "kernels", b.regions_view(slice(0, b.n_kernels)), ind)
    if ind.note():
        b.notes.append(ind.note())


def _outside_model(b: FrameBuild) -> None:
    """On a trace with nn.Module events: an eager (not graph-replayed) kernel or copy that nothing placed and whose
    launch context holds no nn.Module frame at all ran outside the model's forward - the serving engine's input
    preparation, sampling and output handling (vLLM's model runner: block tables, slot mappings, the host-to-device
    copies of the inputs). It is the model-level `engine` region, label source `outside-model`. Only used where
    the module tree exists, so that a trace without module events is never read as all-engine."""
    b.read("graph")
    if not b.read("module_trees"):
        return
    nk = b.n_kernels
    _outside(b.profile, "kernels", b.regions_view(slice(0, nk)))
    _outside(b.profile, "memcpy", b.regions_view(slice(nk, None)))


def _outside(profile, table: str, reg: Regions) -> None:
    t = profile.tables[table]
    n = profile.n(table)
    if not n or "scope_path" not in t:
        return
    cand = (reg.region == None) & (t["graph"] < 0)  # noqa: E711
    if not cand.any():
        return
    path = t["scope_path"].astype(np.int64)
    uniq, inv = np.unique(path[cand], return_inverse=True)
    outside = np.array([c < 0 or "nn.Module: " not in (profile.string(int(c)) or "") for c in uniq.tolist()],
                       dtype=bool)
    sel = np.flatnonzero(cand)[outside[inv.reshape(-1)]]
    reg.layer[sel], reg.role[sel], reg.region[sel], reg.source[sel] = -1, "engine", "engine", "outside-model"


_REGIONS_ALL = REGION_COLS
GPU_PASSES: tuple[Pass, ...] = (
    Pass("device_events", _device_events, adds=EVENT_COLS),
    Pass("classify", _classify, reads=("name", "table"), adds=CLASS_COLS + ("kernel_classes",)),
    Pass("evidence", _evidence, reads=("name", "op", "dur", "table"), adds=("evidence", "evidence_stats"),
         refines=("family", "rule")),
    Pass("collectives", _collectives, reads=("table", "row"), adds=("in_collective",)),
    Pass("roofline", _roofline, reads=("op", "dur", "rank", "graph", "kernel_classes", "in_collective"),
         adds=("roof",)),
    Pass("category", _category, reads=("family", "roof", "in_collective", "table"), adds=("cat",)),
    Pass("regions", _regions, reads=("table", "row"), adds=REGION_COLS + ("module_trees",)),
    Pass("inductor", _inductor, reads=("graph",), adds=("inductor",), refines=_REGIONS_ALL),
    Pass("graph_align", _graph_align, reads=("kernel_classes",), adds=("graph_align",), refines=_REGIONS_ALL),
    Pass("sampler", _sampler, reads=("kernel_classes",), refines=_REGIONS_ALL),
    Pass("inductor_summary", _inductor_summary, reads=("inductor",) + _REGIONS_ALL),
    Pass("outside_model", _outside_model, reads=("graph", "module_trees"), refines=_REGIONS_ALL),
)


# ---------------------------------------------------------------------------------------------- a CPU run
def _compute_ops(b: FrameBuild) -> None:
    """The outermost compute ops of a CPU run: CPU ops whose rule gives a family other than `other`, with no such
    op above them. `aten::_grouped_mm` on CPU loops over `aten::mm` and `aten::linear` calls `aten::addmm`:
    counting outermost ops sees what the model asked for, and outermost ops never overlap on a thread, so their
    time adds up like kernels on a stream. Views and allocations (family `other`) and unknown frames are
    transparent; time between compute ops is host overhead. An outermost op takes path=fallback from any
    fallback op below it (the math SDPA under `aten::scaled_dot_product_attention`)."""
    p = b.profile
    O = p.tables["ops"]
    n = p.n("ops")
    cls, inv = name_classes(p, "ops", np.arange(n), b.rules)
    names_u = [p.string(int(u)) for u in codes(O["name"])[0]]
    not_op = np.array([(not s) or is_marker(s) or s.startswith(("## ", "<built-in", "nn.Module: "))
                       or parse_label(s) is not None for s in names_u], dtype=bool)
    compute_u = (cls["family"].to_numpy() != "other") & cls["rule"].notna().to_numpy() & ~not_op
    compute = compute_u[inv]
    parent = O["parent"]
    if n > 1 and not (parent >= 0).any():
        parent = infer_parents(p)
    has_anc, top = ancestors_scan(parent, compute)
    keep = np.flatnonzero(compute & ~has_anc)
    per_u = {c: cls[c].to_numpy() for c in CLASS_COLS}
    ev_cls = {c: per_u[c][inv].copy() for c in CLASS_COLS}
    fb = np.flatnonzero((ev_cls["path"] == "fallback") & has_anc)  # a fallback below marks its outermost op
    for i in fb.tolist():
        owner = top[i]
        if owner >= 0 and ev_cls["path"][owner] != "fallback":
            for c in ("variant", "path", "rule"):
                ev_cls[c][owner] = ev_cls[c][i]
    m = len(keep)
    start, dur = O["start_ns"][keep], O["dur_ns"][keep]
    cols = {"table": np.full(m, TABLE_OPS, np.int8), "row": keep, "rank": O["rank"][keep], "stream": O["tid"][keep],
            "start": start, "end": start + dur, "dur": dur, "name": O["name"][keep], "scope": O["scope"][keep],
            "phase": O["phase"][keep], "step": O["step"][keep], "launch_start": np.full(m, -1, np.int64),
            "launch_end": np.full(m, -1, np.int64), "op": keep.astype(np.int64), "graph": np.full(m, -1, np.int64)}
    for c, v in cols.items():
        b.write(c, v)
    for c in CLASS_COLS:
        b.write(c, pd.Categorical(ev_cls[c][keep]))


def _cpu_roofline(b: FrameBuild) -> None:
    fam = np.asarray(b.read("family").astype(object))
    keep = b.read("row")
    roof = event_roofline(b.profile, keep, b.read("dur"), b.read("rank"),
                          ~np.isin(fam, COMM_FAMILIES + DATA_MOVEMENT_FAMILIES))
    b.write("roof", roof)
    b.notes.extend(roof.notes)
    b.warnings.extend(roof.warnings)


def _cpu_regions(b: FrameBuild) -> None:
    reg = regions(b.profile, "ops", b.read("row"), None, b.shape_regions)
    for col, attr in zip(REGION_COLS, ("layer", "role", "region", "source")):
        b.write(col, getattr(reg, attr))


def _cpu_inductor(b: FrameBuild) -> None:
    """Inductor's cpp_fused_* ops of a CPU run placed (mmprof.analysis.attribution.inductor), on the kept ops'
    regions."""
    p = b.profile
    keep = b.read("row")
    reg = b.regions_view(slice(None))
    full = Regions.empty(p.n("ops"))
    attrs = ("layer", "role", "region", "source")
    for a in attrs:
        getattr(full, a)[keep] = getattr(reg, a)
    elig = np.zeros(p.n("ops"), dtype=bool)
    elig[keep] = True
    ind = inductor.attribute(p, "ops", full, elig)
    for a in attrs:
        getattr(reg, a)[:] = getattr(full, a)[keep]
    inductor.summarize(p, "ops", reg, ind, keep)
    b.write("inductor", ind)
    if ind.note():
        b.notes.append(ind.note())


def _cpu_category(b: FrameBuild) -> None:
    b.write("cat", category(np.asarray(b.read("family").astype(object)), b.read("roof")))
    b.notes.append("CPU-run profile (no GPU kernels): the outermost compute ops (GEMMs, attention, norms, "
                   "elementwise, communication, ...) are the device events; the time between them (Python and "
                   "framework overhead, views, allocations) counts as host-bound idle")


def _cpu_evidence(b: FrameBuild) -> None:
    """A CPU run's events are the ops themselves: what decided each op's family is its name (rule or tokens)."""
    p = b.profile
    names, dur = b.read("name"), b.read("dur")
    uniq, inv = codes(names)
    ev_u = np.array([b.rules.classify(p.string(int(u)) if u >= 0 else None).evidence for u in uniq.tolist()],
                    dtype=object)
    ev = ev_u[inv] if len(inv) else np.zeros(0, dtype=object)
    stats = evidence.EvidenceStats()
    d = np.maximum(np.asarray(dur, dtype=np.int64), 0)
    for e in evidence.EVIDENCE_KINDS + (None,):
        sel = np.array([x == e for x in ev], dtype=bool)
        stats.by_evidence[e or "none"] = {"events": int(sel.sum()), "time_ns": int(d[sel].sum())}
    b.write("evidence", pd.Categorical(ev))
    b.write("evidence_stats", stats)


CPU_PASSES: tuple[Pass, ...] = (
    Pass("compute_ops", _compute_ops, adds=EVENT_COLS + CLASS_COLS),
    Pass("evidence", _cpu_evidence, reads=("name", "dur"), adds=("evidence", "evidence_stats")),
    Pass("roofline", _cpu_roofline, reads=("family", "row", "dur", "rank"), adds=("roof",)),
    Pass("regions", _cpu_regions, reads=("row",), adds=REGION_COLS),
    Pass("inductor", _cpu_inductor, reads=("row",), adds=("inductor",), refines=_REGIONS_ALL),
    Pass("category", _cpu_category, reads=("family", "roof"), adds=("cat",)),
)
