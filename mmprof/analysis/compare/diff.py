"""Diff two profiles: what changed, not just what improved.

    step time per phase        median step span before/after (slowest rank per step), with the change in %
    category shares            the timeline breakdown (compute-bound, memory-bound, communication, memcpy,
                               host-bound idle, other idle, unattributed) of the chosen phase, before/after
    verdict                    the dominant category before and after: "the bottleneck moved from X to Y",
                               or "still X" with the change in points
    path changes               per region (scope role such as `moe.routed`), the kernel variants that vanished
                               and appeared (e.g. a loop of GEMMs replaced by one grouped GEMM)
    matched work               time per (region role, op family), so a changed kernel for the same op lines up
                               even when its name changed; then top deltas by scope, by layer and by rank

Times of events are per step of the phase (totals divided by the number of steps) so runs with different step
counts compare; with no step markers they are totals. Vectorised: the events are grouped once over integer codes
(`_work`), every table after that is a groupby over the groups (thousands of rows, not millions of events).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.compare.comparability import plain_timing_change, setup_mismatch
from mmprof.analysis.compare.verdict import StepMove, step_moves, verdict_line
from mmprof.analysis.ranks.imbalance import rank_analysis
from mmprof.analysis.timeline.breakdown import CATEGORIES, LABELS, StepStats, TimelineResult, timeline
from mmprof.analysis.timeline.engine_steps import describe, engine_steps
from mmprof.analysis.timeline.columns import group_codes
from mmprof.analysis.timeline.events import EventFrame, events_of
from mmprof.analysis.timeline.phases import NO_PHASE, event_phases, phase_mask
from mmprof.errors import NoEvidence
from mmprof.labels import is_marker, module_event
from mmprof.names import display_name
from mmprof.units import fmt_ns

UNSCOPED = "(unscoped)"
MINOR_SHARE = 0.001  # variants below this share of a side's event time and count are not reported as path changes


def event_roles(profile, ev: EventFrame) -> tuple[np.ndarray, pd.Categorical]:
    """(layer, role) per event: the region from `mmprof.analysis.attribution.structure` where a source names one, else the
    event's innermost scope label (a range no rule knows), else `(unscoped)`. Built on integer codes: the role
    strings are looked at once per distinct (role, scope), never per event."""
    n = len(ev)
    if not n:
        return ev.layer.copy(), pd.Categorical(np.array([], dtype=object))
    sinv, su = pd.factorize(ev.scope)
    fb_u = [UNSCOPED if (s < 0 or is_marker(profile.string(int(s))) or module_event(profile.string(int(s))))
            else profile.string(int(s)) for s in su]
    rinv, ru = pd.factorize(ev.role)          # None -> -1
    # one integer per event: a known role's code, else len(ru) + its scope's code; then one label per key
    key = np.where(rinv >= 0, rinv, len(ru) + sinv)
    kinv, ku = pd.factorize(key)
    labels = np.array([ru[k] if k < len(ru) else fb_u[k - len(ru)] for k in ku.tolist()], dtype=object)
    cats = np.array(sorted(set(labels.tolist())), dtype=object)   # pd.Categorical(values)'s own category order
    lab_code = np.searchsorted(cats, labels)
    return ev.layer.copy(), pd.Categorical.from_codes(lab_code[kinv], categories=cats)


@dataclass
class StepChange:
    phase: str
    before_ns: float | None
    after_ns: float | None
    change: float | None      # relative, -0.2 = 20% faster
    before_steps: int
    after_steps: int
    method: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class CategoryChange:
    category: str
    label: str
    before_share: float
    after_share: float
    before_ns: int
    after_ns: int

    @property
    def delta_pp(self) -> float:
        return 100.0 * (self.after_share - self.before_share)

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "delta_pp": self.delta_pp}


@dataclass
class VariantTime:
    family: str
    variant: str
    library: str | None
    time_ns: float            # per step
    count: float              # per step
    example: str              # the kernel / op name with the most time
    minor: bool = False       # under MINOR_SHARE of its side's event time

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "example_display_name": display_name(self.example)}


@dataclass
class PathChange:
    region: str
    vanished: list[VariantTime]
    appeared: list[VariantTime]

    @property
    def summary(self) -> str:
        def fmt(vs: list[VariantTime], top_families: int = 3, top_names: int = 2) -> str:
            # families by time, the heaviest first: the path change is what dominates, not every view op
            by_fam: dict[str, list[VariantTime]] = {}
            for v in vs:
                by_fam.setdefault(v.family, []).append(v)
            fams = sorted(by_fam.items(), key=lambda kv: -sum(v.time_ns for v in kv[1]))
            parts = []
            for fam, items in fams[:top_families]:
                items = sorted(items, key=lambda v: -v.time_ns)
                names = ", ".join(_short(v.variant) + (f" x{v.count:.0f}" if v.count >= 1.5 else "")
                                  for v in items[:top_names])
                more = f" +{len(items) - top_names} more" if len(items) > top_names else ""
                libs = sorted({v.library for v in items if v.library})
                parts.append(f"{fam} ({names}{more}{'; ' + ', '.join(libs) if libs else ''})")
            if len(fams) > top_families:
                parts.append(f"{len(fams) - top_families} more families")
            return " + ".join(parts)

        if self.vanished and self.appeared:
            return f"{self.region}: {fmt(self.vanished)} -> {fmt(self.appeared)}"
        if self.appeared:
            return f"{self.region}: appeared {fmt(self.appeared)}"
        return f"{self.region}: vanished {fmt(self.vanished)}"

    @property
    def weight(self) -> float:
        return sum(v.time_ns for v in self.vanished) + sum(v.time_ns for v in self.appeared)

    def to_dict(self) -> dict[str, Any]:
        return {"region": self.region, "summary": self.summary, "vanished": [v.to_dict() for v in self.vanished],
                "appeared": [v.to_dict() for v in self.appeared]}


@dataclass
class Delta:
    key: str
    before_ns: float
    after_ns: float
    before_detail: str = ""
    after_detail: str = ""
    before_count: float = 0.0     # events (kernels / ops) per step
    after_count: float = 0.0

    @property
    def delta_ns(self) -> float:
        return self.after_ns - self.before_ns

    @property
    def change(self) -> float | None:
        return self.delta_ns / self.before_ns if self.before_ns else None

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "delta_ns": self.delta_ns, "change": self.change}


@dataclass
class DiffResult:
    before: str
    after: str
    phase: str
    rank: int | None
    source: tuple[str, str]
    steps: list[StepChange]
    categories: list[CategoryChange]
    dominant: tuple[str | None, str | None]
    verdict: str
    path_changes: list[PathChange]
    matched: list[Delta]       # (region, family)
    by_scope: list[Delta]
    by_layer: list[Delta]
    by_rank: list[Delta]       # median step span per rank
    per_step: bool
    layers: list[Delta] = field(default_factory=list)   # every layer, in order, for plots
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    plain: dict[str, Any] | None = None  # tokens/s measured without the profiler (mmprof run's meta.run), both sides
    ranks: dict[str, Any] | None = None  # imbalance across ranks (`mmprof ranks`), both sides, on multi-rank profiles
    moves: list[StepMove] = field(default_factory=list)  # per step of the phase: time per category, both sides
    engine: tuple[str, str] | None = None  # the engine steps compared ("30 engine steps of 8 decode requests", ...)
    preface: list[str] = field(default_factory=list)  # warnings about what is compared, shown before the verdict

    @property
    def moved(self) -> bool:
        return self.dominant[0] != self.dominant[1]

    def step(self, phase: str | None = None) -> StepChange | None:
        return next((s for s in self.steps if s.phase == (phase or self.phase)), None)

    def to_dict(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "phase": self.phase, "rank": self.rank,
                "source": list(self.source), "verdict": self.verdict, "moved": self.moved,
                "dominant": {"before": self.dominant[0], "after": self.dominant[1]},
                "steps": [s.to_dict() for s in self.steps], "categories": [c.to_dict() for c in self.categories],
                "path_changes": [p.to_dict() for p in self.path_changes],
                "matched": [d.to_dict() for d in self.matched], "by_scope": [d.to_dict() for d in self.by_scope],
                "by_layer": [d.to_dict() for d in self.by_layer], "by_rank": [d.to_dict() for d in self.by_rank],
                "layers": [d.to_dict() for d in self.layers],
                "per_step": self.per_step, "notes": self.notes, "warnings": self.warnings, "plain": self.plain,
                "ranks": self.ranks, "moves": [m.to_dict() for m in self.moves],
                "engine_steps": list(self.engine) if self.engine else None, "preface": self.preface}


def _short(s: str, n: int = 60) -> str:
    """A variant for a summary line: its display name (a raw kernel name when no rule names a variant)."""
    return display_name(s, n)


@dataclass
class _Side:
    profile: Any
    events: EventFrame
    tl: TimelineResult
    phase_lab: np.ndarray
    layer: np.ndarray
    role: pd.Categorical


def _side(profile, shape_regions=None) -> _Side:
    ev = events_of(profile, shape_regions=shape_regions)
    layer, role = event_roles(profile, ev)
    return _Side(profile, ev, timeline(profile, ev), event_phases(profile, ev), layer, role)


def _choose_phase(b: _Side, a: _Side, phase: str | None) -> tuple[str | None, list[str]]:
    pb, pa = b.tl.phases, a.tl.phases
    if phase is not None:
        for side, ps in (("before", pb), ("after", pa)):
            if phase not in ps:
                raise NoEvidence(f"the {side} profile has no {phase!r} phase (it has: {', '.join(ps) or 'none'})")
        return phase, []
    common = [p for p in pb if p in pa]
    if "decode" in common:
        return "decode", []
    if common:
        return common[0], []
    return None, [f"the two profiles share no phase ({', '.join(pb)} vs {', '.join(pa)}): comparing whole runs"]


def _work(side: _Side, phase: str | None, rank: int | None) -> tuple[pd.DataFrame, int]:
    """Event time per (region, family, variant, library, name, layer) - one row per group, columns `sum` (ns) and
    `count` - and the number of steps it covers. Grouped over integer codes (factorize, bincount): the per-event
    work is a few array passes, the DataFrame holds groups only (thousands), whatever the number of events."""
    ev = side.events
    m = np.ones(len(ev), dtype=bool)
    if phase is not None:
        m &= phase_mask(side.profile, ev, phase)   # == side.phase_lab == phase, per distinct phase id
    if rank is not None:
        m &= ev.rank == rank
    idx = np.flatnonzero(m)
    step = ev.step[idx]
    steps = len(pd.unique(step[step >= 0]))
    role = np.asarray(side.role.codes)[idx]
    fam_c = np.asarray(ev.family.codes)[idx]
    var_c = np.asarray(ev.variant.codes)[idx]
    lib_c = np.asarray(ev.library.codes)[idx]
    name, layer = ev.name[idx], side.layer[idx]
    key, first = group_codes(role, fam_c, var_c, lib_c, name, layer)
    G = len(first)
    fam_s = np.asarray(ev.family.categories.astype(str), dtype=object)
    fam = np.where(fam_c[first] >= 0, fam_s[np.maximum(fam_c[first], 0)] if len(fam_s) else "nan", "nan")
    df = pd.DataFrame({
        "layer": layer[first],
        "role": pd.Categorical.from_codes(role[first], dtype=side.role.dtype),
        "family": pd.Series(fam.astype(str), dtype=object).astype("category"),   # as `family.astype(str)` per event
        "variant": pd.Categorical.from_codes(var_c[first], dtype=ev.variant.dtype),
        "library": pd.Categorical.from_codes(lib_c[first], dtype=ev.library.dtype),
        "name": name[first],
        "sum": np.bincount(key, weights=ev.dur[idx].astype(np.float64), minlength=G),
        "count": np.bincount(key, minlength=G).astype(np.int64)})
    return df, int(steps)


def _agg(df: pd.DataFrame, keys: list[str], norm: float) -> pd.DataFrame:
    g = df.groupby(keys, observed=True, dropna=False)[["sum", "count"]].sum()
    g["sum"] /= norm
    g["count"] /= norm
    return g


def _deltas(b: pd.DataFrame, a: pd.DataFrame, fmt=str, detail: dict | None = None, top: int | None = 15) -> list[Delta]:
    j = b.add_suffix("_b").join(a.add_suffix("_a"), how="outer").fillna(0.0)
    j["d"] = (j["sum_a"] - j["sum_b"]).abs()
    if top is not None:
        j = j.sort_values("d", ascending=False).head(top)
    out = []
    for k, row in j.iterrows():
        db, da = (detail or {}).get(k, ("", ""))
        out.append(Delta(fmt(k), float(row["sum_b"]), float(row["sum_a"]), db, da, float(row["count_b"]),
                         float(row["count_a"])))
    return out


def _variants(df: pd.DataFrame, norm: float, total: float, prof) -> dict[str, dict[tuple, VariantTime]]:
    """region -> {(family, variant, library): VariantTime}; `minor` marks variants under MINOR_SHARE of the time."""
    g = df.groupby(["role", "family", "variant", "library", "name"], observed=True, dropna=False)[["sum", "count"]].sum()
    g = g.reset_index()
    if g.empty:
        return {}
    return variant_times(g, float(df["count"].sum()), norm, total, prof)


def variant_times(g: pd.DataFrame, n_events: float, norm: float, total: float, prof) -> dict:
    """region -> {(family, variant, library): VariantTime} from per-(role, family, variant, library, name) sums and
    counts (`g`, one row each); a variant's name is its most expensive kernel's."""
    out: dict[str, dict[tuple, VariantTime]] = {}
    g = g.sort_values("sum", ascending=False)
    agg = g.groupby(["role", "family", "variant", "library"], observed=True, dropna=False, sort=False).agg(
        sum=("sum", "sum"), count=("count", "sum"), name=("name", "first"))
    for (role, fam, var, lib), row in agg.iterrows():
        lib = None if pd.isna(lib) else str(lib)
        vt = VariantTime(str(fam), str(var), lib, float(row["sum"]) / norm, float(row["count"]) / norm,
                         prof.string(int(row["name"])) or "?")
        # minor by both time and count: one stalled op elsewhere must not hide a real path change
        vt.minor = bool(total and row["sum"] / total < MINOR_SHARE and row["count"] / n_events < MINOR_SHARE)
        out.setdefault(str(role), {})[(str(fam), str(var), lib)] = vt
    return out


def _path_changes(vb: dict, va: dict) -> list[PathChange]:
    out = []
    for region in sorted(set(vb) | set(va)):
        kb, ka = vb.get(region, {}), va.get(region, {})
        # a variant counts as vanished / appeared only when it is absent from the other side altogether;
        # the ones with a negligible share of the time (`minor`) are not reported
        vanished = sorted((v for k, v in kb.items() if k not in ka and not v.minor), key=lambda v: -v.time_ns)
        appeared = sorted((v for k, v in ka.items() if k not in kb and not v.minor), key=lambda v: -v.time_ns)
        if vanished or appeared:
            out.append(PathChange(region, vanished, appeared))
    return sorted(out, key=lambda p: -p.weight)


_SET_HUGEPAGE = getattr(getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None)


@contextmanager
def _short_lived_arrays():
    """Inside: numpy does not ask the kernel for huge pages (madvise MADV_HUGEPAGE) for new arrays. A diff allocates
    many short-lived arrays of a few MB per million events; where transparent huge pages are on `madvise` with
    defrag `madvise` (this project's VM), each first touch of such an array may compact memory synchronously,
    which cost up to 1 s of system time per diff of 2 x 1M kernels (docs/benchmarks.md "Diff speed"). Only a
    hint to the kernel: no result changes. The previous setting is restored on the way out."""
    if _SET_HUGEPAGE is None:
        yield
        return
    prev = _SET_HUGEPAGE(False)
    try:
        yield
    finally:
        _SET_HUGEPAGE(prev)


def diff_profiles(before, after, phase: str | None = None, rank: int | None = None, shape_regions=(None, None),
                  labels: tuple[str, str] = ("before", "after")) -> DiffResult:
    """Compare two Profiles (see the module docstring). Raises NoEvidence when there is nothing to compare."""
    with _short_lived_arrays():
        return _diff_profiles(before, after, phase, rank, shape_regions, labels)


def _diff_profiles(before, after, phase, rank, shape_regions, labels) -> DiffResult:
    b, a = _side(before, shape_regions[0]), _side(after, shape_regions[1])
    warnings = [w if w in a.events.warnings else f"before: {w}" for w in b.events.warnings]
    warnings += [f"after: {w}" for w in a.events.warnings if w not in b.events.warnings]
    warnings = list(dict.fromkeys(warnings))
    notes = list(dict.fromkeys(b.events.notes + a.events.notes))
    preface = []
    if b.events.source != a.events.source:
        what = {"kernels": "GPU (kernels)", "cpu_ops": "CPU (ops)"}
        preface.append(f"comparing a {what.get(b.events.source, b.events.source)} profile with a "
                       f"{what.get(a.events.source, a.events.source)} profile: the categories differ in meaning "
                       "(GPU idle vs time between CPU ops), so the verdict compares two set-ups, not a change")
    mismatch = setup_mismatch(before, after)
    if mismatch:
        preface.insert(0, mismatch)  # first: the whole comparison rests on it
    warnings = preface + warnings
    if rank is not None:
        for name, s in (("before", b), ("after", a)):
            if rank not in s.tl.ranks:
                raise NoEvidence(f"the {name} profile has no events on rank {rank} (ranks: {s.tl.ranks})")
    ph, w = _choose_phase(b, a, phase)
    warnings += w
    phase_name = ph or "whole run"
    # step time per shared phase
    steps = []
    # `other` (events outside every phase) has no steps: its "step time" would be a meaningless ratio
    shared = [p for p in b.tl.phases if p in a.tl.phases and p != "other"]
    if any(p == "other" for p in b.tl.phases + a.tl.phases) and ph != "other":
        ob, oa = b.tl.breakdown("other", rank), a.tl.breakdown("other", rank)
        notes.append(f"events outside every phase (set-up, work between the profiled steps): {fmt_ns(ob.span_ns)} "
                     f"busy before, {fmt_ns(oa.span_ns)} after; not a phase, not compared as steps")
    for p in shared or ([None] if ph is None else [ph]):
        sb = b.tl.step_stats(p, rank) if p else _whole(b.tl, rank)
        sa = a.tl.step_stats(p, rank) if p else _whole(a.tl, rank)
        ch = (sa.median_ns / sb.median_ns - 1.0) if sb.median_ns and sa.median_ns else None
        steps.append(StepChange(p or phase_name, sb.median_ns, sa.median_ns, ch, sb.steps, sa.steps, sb.method))
    bb, ba = b.tl.breakdown(ph, rank), a.tl.breakdown(ph, rank)
    if bb.span_ns == 0 or ba.span_ns == 0:
        raise NoEvidence(f"no wall time in the {phase_name} phase of the {'before' if bb.span_ns == 0 else 'after'} "
                         "profile: nothing to compare")
    cats = [CategoryChange(c, LABELS[c], bb.share(c), ba.share(c), bb.time_ns[c], ba.time_ns[c]) for c in CATEGORIES]
    dom = (bb.dominant, ba.dominant)
    step = next((s for s in steps if s.phase == phase_name), None)
    moves = step_moves(bb, ba, step.before_steps, step.after_steps) if step and ph is not None else []
    eng = b.tl.engine and a.tl.engine
    verdict = verdict_line(phase_name, cats, step, dom, moves, eng)
    engine = None
    if b.tl.engine or a.tl.engine:
        engine = tuple(describe(engine_steps(s.profile), ph) if s.tl.engine else "no engine steps" for s in (b, a))
        if not eng:
            preface.append(f"only the {'before' if b.tl.engine else 'after'} profile has engine steps: the other's "
                           "steps are not a serving engine's, so per-step host time is not comparable")
            warnings.insert(0, preface[-1])
    plain = plain_timing_change(before, after)
    if plain:
        notes.insert(0, plain["text"])
    # work matching
    wb, nb = _work(b, ph, rank)
    wa, na = _work(a, ph, rank)
    per_step = nb > 0 and na > 0
    nb, na = (nb, na) if per_step else (1, 1)
    if not per_step:
        notes.append("no step markers on both sides: event times are totals, not per step")
    matched_b, matched_a = _agg(wb, ["role", "family"], nb), _agg(wa, ["role", "family"], na)
    vb = _variants(wb, nb, float(wb["sum"].sum()), before)
    va = _variants(wa, na, float(wa["sum"].sum()), after)
    detail = {}
    for key in set(matched_b.index) | set(matched_a.index):
        role, fam = str(key[0]), str(key[1])
        detail[key] = tuple(", ".join(_short(v.variant, 40) for v in sorted(
            (v for (f, _, _), v in side.get(role, {}).items() if f == fam), key=lambda v: -v.time_ns)[:2])
            for side in (vb, va))
    matched = _deltas(matched_b, matched_a, lambda k: f"{k[0]} / {k[1]}", detail)
    by_scope = _deltas(_agg(wb, ["role"], nb), _agg(wa, ["role"], na), lambda k: str(k[0] if isinstance(k, tuple) else k),
                       top=None)
    lb, la = _agg(wb, ["layer"], nb), _agg(wa, ["layer"], na)
    lay_fmt = lambda k: (f"layer {k}" if int(k) >= 0 else "(no layer)")  # noqa: E731
    by_layer = _deltas(lb, la, lay_fmt)
    layers = sorted(_deltas(lb, la, lay_fmt, top=None), key=lambda d: (d.key == "(no layer)", int(d.key.split()[-1]) if d.key != "(no layer)" else 0))
    by_rank = []
    for r in sorted(set(b.tl.ranks) | set(a.tl.ranks)):
        if rank is not None and r != rank:
            continue
        sb = b.tl.step_stats(ph, r) if ph else _whole(b.tl, r)
        sa = a.tl.step_stats(ph, r) if ph else _whole(a.tl, r)
        by_rank.append(Delta(f"rank {r}", sb.median_ns or 0.0, sa.median_ns or 0.0))
    across = None
    if rank is None and max(len(b.tl.ranks), len(a.tl.ranks)) > 1:
        across = {lab: (rank_analysis(s.profile, s.events, phase=ph).summary() if len(s.tl.ranks) > 1 else None)
                  for lab, s in (("before", b), ("after", a))}
    return DiffResult(labels[0], labels[1], phase_name, rank, (b.events.source, a.events.source), steps, cats, dom,
                      verdict, _path_changes(vb, va), matched, by_scope, by_layer, by_rank, per_step, layers,
                      notes, warnings, plain=plain, ranks=across, moves=moves, engine=engine, preface=preface)


def _whole(tl: TimelineResult, rank: int | None):
    w = tl.windows if rank is None else tl.windows[tl.windows["rank"] == rank]
    if w.empty:
        return StepStats(NO_PHASE, 0, None, None, 0, "no events")
    per_rank = w.groupby("rank")["span_ns"].sum()
    return StepStats(NO_PHASE, 1, float(per_rank.max()), float(per_rank.max()), int(per_rank.max()),
                     "sum of window spans of the slowest rank (phases differ)")
