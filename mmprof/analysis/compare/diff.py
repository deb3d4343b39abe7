"""Diff two profiles: which is faster and why, after saying what is compared.

    what is compared           each side's model, engine, mode, TP / EP, batch, tokens per step, prompt, steps,
                               profiler settings and device (`runfacts`, `comparability`): differences that change
                               the meaning flagged, the same trace twice or two models refused unless forced
    the answer                 per phase the faster side and the reason (`verdict`): median step time with its noise
                               band (`bands`), the plain timing beside it (`plain`), GPU work per step (busy =
                               kernel time - overlap), host time, overlap across streams, the regions that moved,
                               missing data on its own line, then the bottleneck statement
    category shares            the timeline breakdown of the chosen phase, before/after
    path changes               per region (scope role such as `moe.routed`), the kernel variants that vanished
                               and appeared (e.g. a loop of GEMMs replaced by one grouped GEMM)
    matched work               time per (region role, op family), so a changed kernel for the same op lines up
                               even when its name changed; then top deltas by scope, by layer and by rank

Times of events are per step of the phase (totals divided by the number of steps, and by the number of ranks on a
multi-rank profile) so runs with different step counts compare; with no step markers they are totals. Vectorised:
the events are grouped once over integer codes (`_work`), every table after that is a groupby over the groups
(thousands of rows, not millions of events).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.compare.bands import runs_band, steps_band
from mmprof.analysis.compare.comparability import compare_facts
from mmprof.analysis.compare.plain import from_run_meta, plain_change
from mmprof.analysis.compare.result import CategoryChange, Delta, DiffResult, PathChange, StepChange, VariantTime
from mmprof.analysis.compare.runfacts import fingerprint, run_facts
from mmprof.analysis.compare.verdict import (StepMeans, answer, merged_compute, phase_line, roofline_lost,
                                             step_moves, verdict_line)
from mmprof.analysis.ranks.imbalance import rank_analysis
from mmprof.analysis.timeline.breakdown import CATEGORIES, LABELS, StepStats, TimelineResult, timeline
from mmprof.analysis.timeline.concurrency import overlapped_ns
from mmprof.analysis.timeline.engine_steps import describe, engine_steps
from mmprof.analysis.timeline.columns import CAT_UNATTR, group_codes
from mmprof.analysis.timeline.events import EventFrame, events_of
from mmprof.analysis.timeline.phases import NO_PHASE, event_phases, phase_mask
from mmprof.errors import NoEvidence, NotComparable
from mmprof.labels import is_marker, module_event
from mmprof.names import display_name
from mmprof.units import fmt_ns

UNSCOPED = "(unscoped)"
MINOR_SHARE = 0.001  # variants below this share of a side's event time and count are not reported as path changes
REGION_GAP = 0.10    # one side has this much more of its kernel time in no region: said on its own line


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


def _work(side: _Side, phase: str | None, rank: int | None, overlap: bool = False) -> tuple[pd.DataFrame, int, int,
                                                                                         dict[str, float]]:
    """Event time per (region, family, variant, library, name, layer) - one row per group, columns `sum` (ns) and
    `count` -, the number of steps and of ranks it covers and (with `overlap`) per region the event time that ran
    beside other device work. Grouped over integer codes (factorize, bincount): the per-event work is a few array
    passes, the DataFrame holds groups only (thousands), whatever the number of events."""
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
    ov: dict[str, float] = {}
    if overlap and len(idx):
        o = overlapped_ns(ev, idx)
        cats = side.role.categories
        per = np.bincount(role[role >= 0], weights=o[role >= 0].astype(np.float64), minlength=len(cats))
        ov = {str(cats[i]): float(v) for i, v in enumerate(per.tolist()) if v > 0}
    return df, int(steps), int(len(np.unique(ev.rank[idx]))) if len(idx) else 0, ov


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
                  labels: tuple[str, str] = ("before", "after"), plain=(None, None), repeats=((), ()),
                  force: bool = False) -> DiffResult:
    """Compare two Profiles (see the module docstring). `plain`: a PlainTiming per side (else the profile's own
    `mmprof run` timing, if any); `repeats`: more runs of each side (Profiles), for the noise band; `force`: compare
    even what is refused (the same trace twice, two models). Raises NotComparable, NoEvidence."""
    with _short_lived_arrays():
        return _diff_profiles(before, after, phase, rank, shape_regions, labels, plain, repeats, force)


def _run_medians(profiles, phase: str, rank: int | None) -> list[float]:
    out = []
    for p in profiles:
        tl = timeline(p, events_of(p))
        st = tl.step_stats(phase, rank) if phase in tl.phases else None
        if st is not None and st.median_ns:
            out.append(st.median_ns)
    return out


def _band(sb: StepStats, sa: StepStats, runs: tuple[list[float], list[float]]):
    if len(runs[0]) + len(runs[1]):
        band = runs_band([sb.median_ns] + runs[0], [sa.median_ns] + runs[1])
        if band is not None:
            return band
    return steps_band(sb.values, sa.values)


def _refuse(comp, repeats, force: bool) -> list[str]:
    fps = (comp.facts[0].fingerprint, comp.facts[1].fingerprint)
    reasons = [comp.refusal] if comp.refusal else []
    for side, runs in zip(("before", "after"), repeats):
        seen = {fps[0] if side == "before" else fps[1]}
        for p in runs:
            f = fingerprint(p)
            if f in seen:
                reasons.append(f"the {side} runs include the same trace twice (same content hash)")
            seen.add(f)
    if reasons and not force:
        raise NotComparable("; ".join(reasons) + "; pass --force to compare them anyway")
    return [f"compared although {r} (--force)" for r in reasons]


def _roof(side: _Side, ph, rank) -> pd.DataFrame:
    """Per (role, family) of the phase's compute kernels: their time (`comp`) and the part with no roofline."""
    ev = side.events
    m = phase_mask(side.profile, ev, ph) if ph is not None else np.ones(len(ev), bool)
    if rank is not None:
        m &= ev.rank == rank
    m &= ev.cat <= CAT_UNATTR
    idx = np.flatnonzero(m)
    role, fam = np.asarray(side.role.codes)[idx], np.asarray(ev.family.codes)[idx]
    key, first = group_codes(role, fam)
    dur = ev.dur[idx].astype(np.float64)
    un = ev.cat[idx] == CAT_UNATTR
    return pd.DataFrame({"comp": np.bincount(key, weights=dur, minlength=len(first)),
                         "unattr": np.bincount(key, weights=np.where(un, dur, 0.0), minlength=len(first)),
                         "noshape": np.bincount(key, weights=np.where(un & (ev.op[idx] < 0), dur, 0.0),
                                                minlength=len(first))},
                        index=pd.MultiIndex.from_arrays([_labels(side.role.categories, role[first]),
                                                         _labels(ev.family.categories, fam[first])]))


def _labels(cats, codes: np.ndarray) -> np.ndarray:
    """Category labels of codes (-1: '(none)'), as strings both sides share."""
    lab = np.asarray([str(c) for c in cats] + ["(none)"], dtype=object)
    return lab[np.where(codes >= 0, codes, len(cats))]


def _missing(b: _Side, a: _Side, gap, roofs, ph, rank) -> list[str]:
    """Data one side lacks, each its own line: op shapes or a FLOP model (no roofline), regions."""
    out = []
    if gap is not None:
        ub, ua = gap
        less, side, roof = ("after", a, roofs[1]) if ua > ub else ("before", b, roofs[0])
        unattr = float(roof["unattr"].sum())
        if unattr and float(roof["noshape"].sum()) >= 0.5 * unattr:
            why = ("its kernels have no op shapes (graph replays with no captured or eager twin in the trace)"
                   if len(side.events) and (side.events.graph >= 0).any()
                   else "its kernels have no op shapes (traced without record_shapes)")
        else:
            why = "its kernels' ops have no FLOP model (Inductor / Triton kernels)"
        out.append(f"no roofline for part of the GPU time: {ub:.0%} of the before side's compute-kernel time and "
                   f"{ua:.0%} of the after side's have none, on the {less} side mostly because {why}; so compute- "
                   "vs memory-bound is not compared, and the bottleneck statement sums them as GPU compute")
    shares = []
    for side in (b, a):
        ev = side.events
        m = phase_mask(side.profile, ev, ph) if ph is not None else np.ones(len(ev), bool)
        if rank is not None:
            m &= ev.rank == rank
        tot = float(ev.dur[m].sum())
        none = float(ev.dur[m & pd.isna(ev.role)].sum())
        shares.append(none / tot if tot else None)
    if None not in shares and abs(shares[1] - shares[0]) > REGION_GAP:
        out.append(f"no region for part of the kernel time: {shares[0]:.0%} before, {shares[1]:.0%} after: the "
                   "per-region rows compare the rest, and a region that looks smaller on one side may only have "
                   "lost its label")
    return out


def _diff_profiles(before, after, phase, rank, shape_regions, labels, plain, repeats, force) -> DiffResult:
    b, a = _side(before, shape_regions[0]), _side(after, shape_regions[1])
    plain = tuple(p if p is not None else from_run_meta(prof.meta) for p, prof in zip(plain, (before, after)))
    comp = compare_facts(run_facts(before, b.events, b.tl, plain[0]), run_facts(after, a.events, a.tl, plain[1]))
    forced = _refuse(comp, repeats, force)
    warnings = [w if w in a.events.warnings else f"before: {w}" for w in b.events.warnings]
    warnings += [f"after: {w}" for w in a.events.warnings if w not in b.events.warnings]
    warnings = list(dict.fromkeys(warnings))
    notes = list(dict.fromkeys(b.events.notes + a.events.notes))
    preface = forced + list(comp.flags)
    if b.events.source != a.events.source:
        what = {"kernels": "GPU (kernels)", "cpu_ops": "CPU (ops)"}
        preface.append(f"comparing a {what.get(b.events.source, b.events.source)} profile with a "
                       f"{what.get(a.events.source, a.events.source)} profile: the categories differ in meaning "
                       "(GPU idle vs time between CPU ops), so the verdict compares two set-ups, not a change")
    if rank is not None:
        for name, s in (("before", b), ("after", a)):
            if rank not in s.tl.ranks:
                raise NoEvidence(f"the {name} profile has no events on rank {rank} (ranks: {s.tl.ranks})")
    ph, w = _choose_phase(b, a, phase)
    warnings += w
    phase_name = ph or "whole run"
    engine = None
    eng = bool(b.tl.engine and a.tl.engine)
    if b.tl.engine or a.tl.engine:
        engine = tuple(describe(engine_steps(s.profile), ph) if s.tl.engine else "no engine steps" for s in (b, a))
    warnings = preface + warnings
    # step time per shared phase, with its noise band and its one-line verdict
    steps = []
    shared = [p for p in b.tl.phases if p in a.tl.phases and p != "other"]
    if any(p == "other" for p in b.tl.phases + a.tl.phases) and ph != "other":
        ob, oa = b.tl.breakdown("other", rank), a.tl.breakdown("other", rank)
        notes.append(f"events outside every phase (set-up, work between the profiled steps): {fmt_ns(ob.span_ns)} "
                     f"busy before, {fmt_ns(oa.span_ns)} after; not a phase, not compared as steps")
    stats: dict[str, tuple] = {}
    for p in shared or ([None] if ph is None else [ph]):
        sb = b.tl.step_stats(p, rank) if p else _whole(b.tl, rank)
        sa = a.tl.step_stats(p, rank) if p else _whole(a.tl, rank)
        runs = (_run_medians(repeats[0], p, rank), _run_medians(repeats[1], p, rank)) if p else ([], [])
        band = _band(sb, sa, runs) if sb.median_ns and sa.median_ns else None
        mb, ma = ((StepMeans.of(b.tl.step_rows(p, rank)), StepMeans.of(a.tl.step_rows(p, rank))) if p
                  else (None, None))
        stats[p or phase_name] = (sb, sa, band, mb, ma)
        ch = (sa.median_ns / sb.median_ns - 1.0) if sb.median_ns and sa.median_ns else None
        line = phase_line(p or phase_name, sb, sa, band, mb, ma, b.tl.engine_phase(p) and a.tl.engine_phase(p))
        steps.append(StepChange(p or phase_name, sb.median_ns, sa.median_ns, ch, sb.steps, sa.steps, sb.method,
                                sa.method, band.to_dict() if band is not None else None, sb.to_dict(), sa.to_dict(),
                                line))
    bb, ba = b.tl.breakdown(ph, rank), a.tl.breakdown(ph, rank)
    if bb.span_ns == 0 or ba.span_ns == 0:
        raise NoEvidence(f"no wall time in the {phase_name} phase of the {'before' if bb.span_ns == 0 else 'after'} "
                         "profile: nothing to compare")
    cats = [CategoryChange(c, LABELS[c], bb.share(c), ba.share(c), bb.time_ns[c], ba.time_ns[c]) for c in CATEGORIES]
    dom = (bb.dominant, ba.dominant)
    roofs = (_roof(b, ph, rank), _roof(a, ph, rank))
    gap = roofline_lost(*roofs)
    missing = _missing(b, a, gap, roofs, ph, rank)
    bn_cats = merged_compute(cats) if gap is not None else cats
    bn_dom = dom
    if bn_cats is not cats:
        by_b = {c.category: c.before_ns for c in bn_cats}
        by_a = {c.category: c.after_ns for c in bn_cats}
        bn_dom = (max(by_b, key=by_b.get), max(by_a, key=by_a.get))
    bottleneck = verdict_line(phase_name, bn_cats, None, bn_dom)
    # work matching
    has_overlap = any(x is not None and x.overlap_ns > 0 for x in stats.get(phase_name, (None,) * 5)[3:])
    wb, nb, rb, ob_ = _work(b, ph, rank, overlap=has_overlap)
    wa, na, ra, oa_ = _work(a, ph, rank, overlap=has_overlap)
    per_step = nb > 0 and na > 0
    per_rank = per_step and max(rb, ra) > 1
    nb, na = (nb * max(rb, 1), na * max(ra, 1)) if per_step else (1, 1)
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
        sb_ = b.tl.step_stats(ph, r) if ph else _whole(b.tl, r)
        sa_ = a.tl.step_stats(ph, r) if ph else _whole(a.tl, r)
        by_rank.append(Delta(f"rank {r}", sb_.median_ns or 0.0, sa_.median_ns or 0.0))
    across = None
    if rank is None and max(len(b.tl.ranks), len(a.tl.ranks)) > 1:
        across = {lab: (rank_analysis(s.profile, s.events, phase=ph, tl=s.tl).summary() if len(s.tl.ranks) > 1
                        else None) for lab, s in (("before", b), ("after", a))}
    overlap_roles = {r: (ob_.get(r, 0.0) / nb, oa_.get(r, 0.0) / na) for r in set(ob_) | set(oa_)}
    sb, sa, band, mb, ma = stats[phase_name]
    pc = plain_change(*plain)
    host_caveat = {s: ", ".join(x for x, on in (("synchronous launches", f.profiler.synchronous),
                                                ("Python stacks", f.profiler.stacks)) if on)
                   for s, f in zip(("before", "after"), comp.facts)}
    regions = sorted((d for d in by_scope), key=lambda d: -abs(d.delta_ns))
    ans = answer(phase_name, sb, sa, band, pc if (pc.before or pc.after) else None, mb, ma, regions, overlap_roles,
                 bottleneck, missing, {k: v for k, v in host_caveat.items() if v},
                 b.tl.engine_phase(ph) and a.tl.engine_phase(ph),
                 (float(wb["count"].sum()) / nb, float(wa["count"].sum()) / na) if per_step else None)
    step = next((s for s in steps if s.phase == phase_name), None)
    if step is not None:
        step.line = ans.headline
    return DiffResult(labels[0], labels[1], phase_name, rank, (b.events.source, a.events.source), steps, cats, dom,
                      ans.headline, _path_changes(vb, va), matched, by_scope, by_layer, by_rank, per_step, layers,
                      notes, warnings, plain=pc.to_dict(), ranks=across,
                      moves=step_moves(mb, ma), engine=engine, preface=preface, compared=comp, answer=ans,
                      per_rank=per_rank, overlap_roles=overlap_roles)


def _whole(tl: TimelineResult, rank: int | None):
    w = tl.windows if rank is None else tl.windows[tl.windows["rank"] == rank]
    if w.empty:
        return StepStats(NO_PHASE, 0, None, None, 0, "no events")
    per_rank = w.groupby("rank")["span_ns"].sum()
    return StepStats.of(NO_PHASE, [float(per_rank.max())], "sum of window spans of the slowest rank (phases differ)")
