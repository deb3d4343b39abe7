"""`mmprof ranks`: imbalance across ranks. Per rank and phase the step time, busy time and time in collectives
split into transfer and waiting for the slowest peer; the straggler of each step and what it did instead (its
extra time by region); per collective and message size the bus bandwidth against the link peak; and a verdict
per phase, e.g. "decode: rank 3 is the straggler: +41 ms per step in layers.17 (moe.routed); the other ranks wait
39 ms per step in allreduce".

Every number is measured on each rank's own timeline (rank clocks are not aligned). Collectives are aligned by
call order and waits come from their durations (`mmprof.analysis.ranks.collectives`). A rank's wall time in a window
(one rank, phase and step) is split by a sweep over its events and collective calls in start order: each item
gets the time the timeline advances while it runs, and an idle gap goes to the item that ends it (the work that
was waited for: on a GPU the kernel whose launch came late, on a CPU the op that Python reached late), so the
region times of a window add up to its wall span minus the time in collectives. The straggler's extra time in a
region is its time there minus the median of the other ranks'. Regions come from `mmprof.analysis.attribution.structure`
(annotations, nn.Module events, `--model` shape matching), so traces of other runtimes work too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.ranks.collectives import CollectiveStat, align_calls, collective_stats
from mmprof.analysis.timeline.breakdown import timeline
from mmprof.analysis.timeline.engine_steps import describe, engine_steps
from mmprof.analysis.timeline.columns import CAT_COMM, group_codes
from mmprof.analysis.timeline.events import events_of
from mmprof.analysis.timeline.phases import event_phases, phase_labels
from mmprof.errors import NoEvidence
from mmprof.units import fmt_ns

THRESHOLD = 0.05      # imbalance (the ranks' spread in waiting, as a share of the step) that makes a finding
TOP_REGIONS = 5
UNSCOPED = "(unscoped)"
_ORDER = {"prefill": 0, "mixed": 1, "decode": 2}


@dataclass
class RankPhase:
    """One rank in one phase; times are medians over its steps (totals when the phase has no step markers): the step
    is its timeline window (docs/glossary.md "step time"), busy <= step, transfer + waiting = in collectives."""

    rank: int
    phase: str
    steps: int
    step_ns: float       # the rank's own wall span of a step
    busy_ns: float       # time with any event or collective running
    comm_ns: float       # time in collectives
    transfer_ns: float   # of which moving data (the instance's shortest duration over ranks)
    wait_ns: float       # of which waiting for the slowest peer
    straggler_steps: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class RegionExtra:
    """The straggler's extra time in one region: its time there minus the median of the other ranks'."""

    region: str
    layer: int
    role: str | None
    extra_ns: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class StepStraggler:
    phase: str
    step: int
    rank: int                # waited least: the others waited for it
    others_wait_ns: float    # mean wait of the other ranks in this step
    spread_ns: float         # most - least waiting rank
    share: float             # spread / the step's median span
    regions: list[RegionExtra]    # its extra time by layer (the first: this step's straggler layer), largest first
    step_ns: float | None = None  # the step's median span over ranks (what the shares are of)

    @property
    def wait_share(self) -> float:
        """The others' mean wait as a share of the step's median span."""
        return self.others_wait_ns / self.step_ns if self.step_ns else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in self.__dict__.items() if k != "regions"}, "wait_share": self.wait_share,
                "regions": [r.to_dict() for r in self.regions]}


@dataclass
class PhaseVerdict:
    phase: str
    ranks: int
    steps: int                       # steps with collectives aligned across ranks
    per_step: bool                   # False: no step markers, times are totals
    straggler: int | None
    imbalance: float | None          # mean spread in waiting / median step time
    others_wait_ns: float | None     # per step, mean over the other ranks
    collective: str | None           # where the others waited most
    layer: str | None                # where the straggler's extra time is largest (layers.N or a model region)
    role: str | None
    extra_ns: float | None           # the straggler's extra time per step in `layer`
    finding: bool
    verdict: str
    regions: list[RegionExtra] = field(default_factory=list)
    layers: list[RegionExtra] = field(default_factory=list)
    consistent: bool = True          # the straggler is the least waiting rank in most of the steps
    step_ns: float | None = None     # the median step span: what every share in the verdict is of

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("regions", "layers")}
        return {**d, "regions": [r.to_dict() for r in self.regions], "layers": [r.to_dict() for r in self.layers]}


@dataclass
class RanksResult:
    source: str
    ranks: list[int]
    threshold: float
    phases: list[PhaseVerdict]
    per_rank: list[RankPhase]
    steps: list[StepStraggler]
    collectives: list[CollectiveStat]
    links: dict[int, Any]
    findings: list[str]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "ranks": self.ranks, "threshold": self.threshold,
                "phases": [p.to_dict() for p in self.phases], "per_rank": [r.to_dict() for r in self.per_rank],
                "steps": [s.to_dict() for s in self.steps], "collectives": [c.to_dict() for c in self.collectives],
                "links": self.links, "findings": self.findings, "notes": self.notes, "warnings": self.warnings}

    def summary(self) -> dict[str, Any]:
        """The verdicts and per-rank rows only (the section `report` and `diff` carry)."""
        return {"ranks": self.ranks, "threshold": self.threshold, "phases": [p.to_dict() for p in self.phases],
                "per_rank": [r.to_dict() for r in self.per_rank], "findings": self.findings}


def _sorted(w: np.ndarray, s: np.ndarray, e: np.ndarray) -> bool:
    """Whether rows are already ordered by (w, s, e): one pass, against a sort of a million rows."""
    if len(w) < 2:
        return True
    dw, ds = w[1:] - w[:-1], s[1:] - s[:-1]
    return bool(np.all((dw > 0) | ((dw == 0) & ((ds > 0) | ((ds == 0) & (e[1:] >= e[:-1]))))))


def _group_cummax(w: np.ndarray, first: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The running maximum of `v` within each run of equal `w` (rows grouped by window): one running maximum over
    the whole array, each run lifted above every earlier run's values; a groupby where the lift could overflow."""
    if not len(v):
        return v.copy()
    lo, hi = int(v.min()), int(v.max())
    runs = int(first.sum())
    if (hi - lo + 1) * runs >= 1 << 62:
        return pd.Series(v).groupby(w, sort=False).cummax().to_numpy()
    lift = (np.cumsum(first) - 1) * (hi - lo + 1)
    return np.maximum.accumulate((v - lo) + lift) - lift + lo


def _run_sums(w: np.ndarray, heads: np.ndarray, v: np.ndarray, nw: int) -> np.ndarray:
    """Per window code 0..nw-1, the sum of `v` (int64) over its rows, rows grouped in runs of one window starting at
    `heads`: `np.bincount(w, weights=v, minlength=nw).astype(np.int64)` without the float pass (integer ns sums are
    exact either way below 2^53 ns, 104 days)."""
    out = np.zeros(nw, dtype=np.int64)
    if len(heads):
        out[w[heads]] = np.add.reduceat(v.astype(np.int64, copy=False), heads)
    return out


def _sorted_pairs(a: np.ndarray, b: np.ndarray) -> pd.MultiIndex:
    """`pd.MultiIndex.from_arrays([a, b], names=["w", "reg"])` for pairs already sorted: the levels are the sorted
    distinct values and the codes their positions, found by binary search instead of hashing."""
    la, lb = np.unique(a), np.unique(b)
    return pd.MultiIndex(levels=[la, lb], codes=[np.searchsorted(la, a), np.searchsorted(lb, b)], names=["w", "reg"],
                         verify_integrity=False)


def _sweep(items: dict[str, np.ndarray]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per window: span, busy and comm time; per (window, region): non-comm time (see the module docstring).

    `items` holds aligned arrays w (window code), start, end, reg (region code), comm (bool); read, never written."""
    w0, s0, e0 = (np.asarray(items[k]) for k in ("w", "start", "end"))
    if _sorted(w0, s0, e0):                           # events in time order, one window after another: the usual
        order = np.arange(len(w0))
        w, start, end = w0, s0, e0
    else:
        order = np.lexsort((e0, s0, w0))              # stable, by window, start, end
        w, start, end = w0[order], s0[order], e0[order]
    first = np.ones(len(w), dtype=bool)
    first[1:] = w[1:] != w[:-1]
    cm = _group_cummax(w, first, end)
    prev = np.empty_like(cm)
    prev[1:] = cm[:-1]
    prev[first] = start[first]
    gap = np.where(first, 0, np.maximum(start - prev, 0))
    busy = np.maximum(end - np.maximum(prev, start), 0)
    comm = np.asarray(items["comm"])[order]
    own = gap + np.where(comm, 0, busy)
    # per window (codes 0..n-1, every one present, rows sorted by window then start): sums, first start, last end
    nw = int(w[-1]) + 1
    heads = np.flatnonzero(first)
    win = pd.DataFrame({"busy": _run_sums(w, heads, busy, nw), "comm": _run_sums(w, heads, np.where(comm, busy, 0), nw),
                        "s": start[heads], "e": np.maximum.reduceat(end, heads)},
                       index=pd.Index(w[heads], name="w"))
    win["span"] = win["e"] - win["s"]
    # per (window, region): hashed, then the few distinct pairs sorted (the groupby's sorted MultiIndex)
    reg_c = np.asarray(items["reg"])[order].astype(np.int64)
    nreg = int(reg_c.max()) + 1
    key = w.astype(np.int64) * nreg + reg_c
    if nw * nreg <= max(4 * len(key), 1 << 20):   # few (window, region) pairs: one bincount over all of them
        cnt = np.bincount(key, minlength=nw * nreg)
        ks = np.flatnonzero(cnt)
        tot = np.bincount(key, weights=own, minlength=nw * nreg)[ks].astype(np.int64)
    else:
        kinv, ku = pd.factorize(key)
        ku = np.asarray(ku)
        srt = np.argsort(ku)
        ks = ku[srt]
        tot = np.bincount(kinv, weights=own, minlength=len(ku)).astype(np.int64)[srt]
    reg = pd.Series(tot, index=_sorted_pairs(ks // nreg, ks % nreg), name="own")
    return win, reg


def _phases(profile, ev, c_phase: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Phase labels of the events and of the collectives table's rows, as `phase_labels` of both together gives
    them; the events' from the frame's shared labels (`timeline.event_phases`) where that is the same thing (the
    events have phases, or nothing has)."""
    if len(ev) and ((ev.phase >= 0).any() or not (c_phase >= 0).any()):
        ev_ph = event_phases(profile, ev)
        if not (ev.phase >= 0).any():                 # nothing has a phase: all NO_PHASE
            return ev_ph, np.full(len(c_phase), ev_ph[0], dtype=object)
        uniq, inv = np.unique(c_phase, return_inverse=True)  # the collectives' own: a phase or "other"
        lab = np.array([profile.string(int(u)) if u >= 0 else "other" for u in uniq.tolist()], dtype=object)
        return ev_ph, lab[inv.reshape(-1)] if len(c_phase) else np.array([], dtype=object)
    lab = phase_labels(profile, np.concatenate([ev.phase, c_phase]))
    return lab[:len(ev)], lab[len(ev):]


def _phase_factorize(profile, ev, ev_ph: np.ndarray, c_ph: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`pd.factorize(np.concatenate([ev_ph, c_ph]))` (codes in order of first appearance, the labels) from the
    events' integer phase ids: the per-event labels are only looked up, never hashed."""
    n = len(ev)
    if not n or ev._memo.get("phase_labels") is not ev_ph:
        return pd.factorize(np.concatenate([ev_ph, c_ph]))
    inv, uniq = ev.memo("phase_ids", lambda: pd.factorize(ev.phase))  # ids -> labels: two ids may share one
    first = np.empty(len(uniq), dtype=np.int64)
    first[inv[::-1]] = np.arange(n - 1, -1, -1)
    lab_inv, lab_u = pd.factorize(np.concatenate([ev_ph[first], c_ph]))  # first-appearance order, events first
    return np.concatenate([lab_inv[:len(uniq)][inv], lab_inv[len(uniq):]]), lab_u


def _first_rows(codes: np.ndarray) -> np.ndarray:
    """The first row of each code, for codes numbered 0.. in order of first appearance (as `group_codes` of one
    such column gives them)."""
    first = np.empty(int(codes.max()) + 1 if len(codes) else 0, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)   # repeated indices: the last write (the first row) wins
    return first


def _label(region: str, layer: int) -> str:
    return f"layers.{layer}" if layer >= 0 else region


def _phase_order(p: str) -> tuple:
    return (_ORDER.get(p, 3), p)


def rank_analysis(profile, events=None, shape_regions=None, threshold: float = THRESHOLD,
                  phase: str | None = None, tl=None) -> RanksResult:
    """Imbalance across the ranks of one Profile (see the module docstring). `tl`: the profile's timeline when the
    caller has it (a step's time is its timeline window, docs/glossary.md "step time")."""
    ev = events if events is not None else events_of(profile, shape_regions=shape_regions)
    if tl is None and len(ev):
        tl = timeline(profile, ev)
    C = profile.tables["collectives"]
    nc = profile.n("collectives")
    if not len(ev) and not nc:
        raise NoEvidence("the profile has no kernels, copies, CPU ops or collectives: no ranks to compare")
    ev_ph, c_ph = _phases(profile, ev, C["phase"])
    calls = align_calls(profile, ev, c_ph)
    warnings = list(calls.warnings)
    notes: list[str] = list(calls.notes)
    es = engine_steps(profile)
    if len(es):  # the ranks' steps are the engine's: step N is the N-th engine step of every rank
        per = es.groupby("rank").size()
        notes.append(f"steps are the engine's own step annotations ({', '.join(sorted(set(es['engine'])))}): "
                     f"{describe(es[es['rank'] == per.index[0]])} on rank {int(per.index[0])}"
                     + ("" if per.nunique() == 1 else f"; the ranks hold {per.min()}-{per.max()} engine steps, so "
                        "step N may not be the same iteration on every rank"))
    # regions: codes over the frame's region strings; a collective takes its kernel's / op's region
    # (integer codes over the distinct region strings, numbered in order of first appearance, events first)
    einv, eu = pd.factorize(ev.region)                                   # None -> -1
    lcode, luniq = pd.factorize(np.array(list(eu) + [UNSCOPED], dtype=object))
    e_code = lcode[np.where(einv >= 0, einv, len(eu))]
    c_code = np.where(calls.event >= 0, e_code[np.maximum(calls.event, 0)] if len(ev) else lcode[-1], lcode[-1])
    rcodes, ruq = pd.factorize(np.concatenate([e_code, c_code]).astype(np.int64))
    runiq = np.asarray(luniq, dtype=object)[np.asarray(ruq)]
    efirst = _first_rows(rcodes[:len(ev)])
    info = pd.DataFrame({"region": runiq[rcodes[efirst]], "layer": ev.layer[efirst],
                         "role": ev.role[efirst]}).set_index("region")
    # windows (rank, phase, step) as integer codes in order of first appearance (what drop_duplicates gave)
    pinv, pu = _phase_factorize(profile, ev, ev_ph, c_ph)
    keep = None                       # every row (events, then collective calls), or a mask of the phase's
    if phase is not None:
        have = set(pu.tolist())
        if phase not in have:
            raise NoEvidence(f"the profile has no {phase!r} phase (it has: {', '.join(sorted(have))})")
        keep = pinv == pu.tolist().index(phase)

    def rows(ev_part: np.ndarray, call_part: np.ndarray) -> np.ndarray:
        both = np.concatenate([ev_part, call_part]) if len(call_part) else ev_part
        return both if keep is None else both[keep]

    rank_all, step_all, pk = rows(ev.rank, calls.rank), rows(ev.step, calls.step), rows(pinv, pinv[:0])
    w, first = group_codes(rank_all, pk, step_all)
    nw = len(first)
    wk = pd.DataFrame({"rank": rank_all[first], "phase": pu[pk[first]], "step": step_all[first],
                       "w": np.arange(nw)})
    items = {"w": w, "start": rows(ev.start, calls.start), "end": rows(ev.end, calls.start + calls.dur),
             "reg": rows(rcodes, rcodes[:0]), "comm": rows(ev.cat == CAT_COMM, np.ones(nc, dtype=bool))}
    win, reg = _sweep(items) if len(w) else (pd.DataFrame(), pd.Series(dtype=float))
    wk = wk.join(win, on="w")
    if tl is not None and len(wk):   # the step's time is its timeline window (the one definition of a step)
        tw = tl.windows.set_index(["rank", "phase", "step"])["span_ns"]
        keys = pd.MultiIndex.from_arrays([wk["rank"].to_numpy(), wk["phase"].to_numpy(), wk["step"].to_numpy()])
        own = tw.reindex(keys).to_numpy()
        wk["span"] = np.where(np.isnan(own), wk["span"].to_numpy(dtype=np.float64), own)
        wk["busy"] = np.minimum(wk["busy"].to_numpy(dtype=np.float64), wk["span"].to_numpy(dtype=np.float64))
    # windows outside every step of a phase that has steps are scattered work (set-up, sampling): left out
    stepped = wk[wk["step"] >= 0].groupby(["rank", "phase"]).size()
    has_steps = pd.MultiIndex.from_frame(wk[["rank", "phase"]]).isin(stepped.index)
    wk = wk[(wk["step"] >= 0) | ~has_steps].copy()
    cw = pd.DataFrame({"rank": calls.rank, "phase": c_ph, "step": calls.step, "wait": calls.wait,
                       "aligned": calls.peers > 1, "name": calls.name})
    waits = cw.groupby(["rank", "phase", "step"])["wait"].sum()
    wk["wait"] = wk.set_index(["rank", "phase", "step"]).index.map(waits).fillna(0).to_numpy()
    aligned_steps = set(cw[cw["aligned"]].groupby(["phase", "step"]).size().index)
    ranks = sorted(int(r) for r in wk["rank"].unique())
    phases_out, steps_out, per_rank, findings = [], [], [], []
    phases = sorted(wk["phase"].unique(), key=_phase_order)
    if len(phases) > 1 and "other" in phases:  # work outside every phase (set-up, sampling) is not a step
        phases.remove("other")
    for ph in phases:
        W = wk[wk["phase"] == ph]
        per_step = bool((W["step"] >= 0).any())
        step_rows: list[tuple[int, int, float, float, float]] = []   # (step, straggler, others, spread, share)
        step_med: dict[int, float] = {}                              # step -> its median span over ranks
        extras: dict[int, tuple[int, pd.DataFrame]] = {}              # step -> (straggler, ranks x region time)
        for st, S in W.groupby("step"):
            if len(S) < 2 or (ph, st) not in aligned_steps:
                continue
            S = S.set_index("rank")
            s = int(S["wait"].idxmin())
            spread = float(S["wait"].max() - S["wait"].min())
            med = float(S["span"].median())
            step_med[int(st)] = med
            step_rows.append((int(st), s, float(S.drop(index=s)["wait"].mean()), spread,
                              spread / med if med else 0.0))
            rt = reg.loc[S["w"].to_numpy()].unstack(fill_value=0)
            rt.index = S.index[pd.Index(S["w"]).get_indexer(rt.index)]
            extras[int(st)] = (s, rt)
        for r, R in W.groupby("rank"):
            # medians over the rank's steps (the step time every command shows); transfer + waiting = in collectives
            comm = float(np.median(np.minimum(R["comm"], R["busy"])))
            wait = float(np.median(np.minimum(R["wait"], R["comm"]))) if comm else float(np.median(R["wait"]))
            wait = min(wait, comm) if comm else wait
            per_rank.append(RankPhase(int(r), ph, len(R) if per_step else 1, float(np.median(R["span"])),
                                      float(np.median(R["busy"])), comm, max(comm - wait, 0.0), wait,
                                      sum(1 for x in step_rows if x[1] == r)))
        for st, s, ow, sp, sh in step_rows:
            steps_out.append(StepStraggler(ph, st, s, ow, sp, sh,
                                           [x for x in by_layer(_extra(extras[st][1], s, info, runiq)) if x.extra_ns > 0][:3],
                                           step_med.get(st)))
        phases_out.append(_verdict(ph, W, per_step, step_rows, extras, cw, info, runiq, threshold))
        if phases_out[-1].finding:
            v = phases_out[-1]
            # the straggler layer (docs/glossary.md): the one layer where its extra time is largest, as the verdict
            top = v.layers[0] if v.layers and v.layers[0].extra_ns > 0 else None
            rest = sum(x.extra_ns for x in v.layers[1:] if x.extra_ns > 0)
            where = (f"{top.region} (+{fmt_ns(top.extra_ns)} per step" + (f"; +{fmt_ns(rest)} more spread over "
                     f"{sum(1 for x in v.layers[1:] if x.extra_ns > 0)} other layers" if rest > 0 else "") + ")"
                     if top else "")
            med = f"the {fmt_ns(v.step_ns)} median step" if v.step_ns else "the median step"
            spread = (f"the ranks' waits for peers differ by {v.imbalance:.0%} of {med} (threshold {threshold:.0%})")
            if not v.consistent:  # no rank to name: the least waiting rank changes from step to step
                findings.append(f"{ph}: imbalanced, no consistent straggler: {spread}")
            else:
                findings.append(f"{ph}: rank {v.straggler} is the straggler: {spread}"
                                + (f"; it is slower in {where}" if where else ""))
    if len(ranks) < 2:
        notes.append("one rank in the profile: no imbalance to measure" + (
            "; collective times include any waiting, so their bandwidths are lower bounds" if nc else ""))
    if nc == 0 and len(ranks) > 1:
        notes.append("no collectives in the profile: ranks cannot be aligned, so waits are unknown")
    stats, links = collective_stats(profile, calls, None if phase is None else c_ph == phase)
    return RanksResult(ev.source, ranks, threshold, phases_out, per_rank, steps_out, stats, links, findings, notes,
                       warnings)


def _extra(rt: pd.DataFrame, s: int, info: pd.DataFrame, runiq) -> list[RegionExtra]:
    """The straggler's extra time per region in one step (rt: ranks x region codes), largest first."""
    if s not in rt.index or len(rt) < 2:
        return []
    ex = rt.loc[s] - rt.drop(index=s).median(axis=0)
    ex = ex[ex > 0].sort_values(ascending=False)
    return [_region_extra(runiq[int(c)], float(v), info) for c, v in ex.items()]


def _region_extra(region: str, v: float, info: pd.DataFrame) -> RegionExtra:
    layer = int(info.at[region, "layer"]) if region in info.index else -1
    role = info.at[region, "role"] if region in info.index else None
    return RegionExtra(region, layer, role if isinstance(role, str) else None, v)


def by_layer(regions: list[RegionExtra]) -> list[RegionExtra]:
    """Extra time per layer (model-level regions on their own), largest first: the first is the straggler layer
    (docs/glossary.md), for a phase or for one step."""
    acc: dict[str, list] = {}
    for x in regions:
        acc.setdefault(_label(x.region, x.layer), []).append(x)
    return sorted((RegionExtra(k, v[0].layer, None, sum(y.extra_ns for y in v)) for k, v in acc.items()),
                  key=lambda x: -x.extra_ns)


def _verdict(ph, W, per_step, step_rows, extras, cw, info, runiq, threshold) -> PhaseVerdict:
    """The phase's straggler: the rank that waited least for peers, averaged over the steps with aligned
    collectives; the others' mean wait; its extra time by region and layer; the verdict line."""
    steps_used = len(step_rows)
    nranks = int(W["rank"].nunique())
    name = "the run" if ph == "all" else ph
    unit = "per step" if per_step else "in total"
    if nranks < 2:
        return PhaseVerdict(ph, nranks, 0, per_step, None, None, None, None, None, None, None, False,
                            f"{name}: one rank, nothing to compare")
    if not steps_used:
        spans = W.groupby("rank")["span"].mean()
        slow, fast = int(spans.idxmax()), float(spans.min())
        gap = float(spans.max()) - fast
        who = (f"rank {slow} has the longest steps (+{fmt_ns(gap)} {unit} over the fastest)" if gap > 0
               else "every rank's steps take the same time")
        return PhaseVerdict(ph, nranks, 0, per_step, None, None, None, None, None, None, None, False,
                            f"{name}: no collective aligned across ranks, so waiting cannot be measured; {who}")
    A = W[W["step"].isin([r[0] for r in step_rows])]
    mean_wait = A.groupby("rank")["wait"].mean()
    strag = int(mean_wait.idxmin())
    spread = float(mean_wait.max() - mean_wait.min())
    others = float(mean_wait.drop(index=strag).mean())
    k = sum(1 for r in step_rows if r[1] == strag)
    # the straggler's extra time per region (its time minus the other ranks' median), averaged over those steps
    acc: dict[int, float] = {}
    for _, rt in extras.values():
        if strag not in rt.index:
            continue
        ex = rt.loc[strag] - rt.drop(index=strag).median(axis=0)
        for c, v in ex.items():
            acc[int(c)] = acc.get(int(c), 0.0) + float(v)
    regions = sorted((_region_extra(runiq[c], v / steps_used, info) for c, v in acc.items()), key=lambda x: -x.extra_ns)
    layers = by_layer(regions)
    grouped: dict[str, list] = {}
    for x in regions:
        grouped.setdefault(_label(x.region, x.layer), []).append(x)
    others_all = cw[(cw["phase"] == ph) & (cw["rank"] != strag) & cw["aligned"]]
    coll = others_all.groupby("name")["wait"].sum()
    coll_name = str(coll.idxmax()) if len(coll) and coll.max() > 0 else None
    med_span = float(W["span"].median())
    imb = spread / med_span if med_span else 0.0
    top = layers[0] if layers and layers[0].extra_ns > 0 else None
    role = None
    if top is not None:
        inner = [x for x in grouped[top.region] if x.extra_ns > 0]
        role = inner[0].role if inner else None
    finding = imb >= threshold
    in_coll = f" in {coll_name}" if coll_name else ""
    explained = sum(x.extra_ns for x in regions if x.extra_ns > 0)
    consistent = not (2 * k <= steps_used and steps_used > 1)
    # every percentage says what it is a percentage of: the waits, and their spread, of the median step
    step = f"the {fmt_ns(med_span)} median step" if per_step else f"the {fmt_ns(med_span)} run"
    wait_pct = f"{others / med_span:.0%} of {step}" if med_span else "step time unknown"
    spread_txt = f"the ranks' waits for peers differ by {fmt_ns(spread)} {unit} ({imb:.0%} of {step}"
    if not finding:
        verdict = f"{name}: balanced: {spread_txt}, threshold {threshold:.0%})"
    elif not consistent:
        counts = ", ".join(f"rank {r} in {n}" for r, n in sorted(
            {r[1]: sum(1 for x in step_rows if x[1] == r[1]) for r in step_rows}.items(), key=lambda x: -x[1]))
        verdict = (f"{name}: imbalanced but no consistent straggler (the least waiting rank: {counts} of "
                   f"{steps_used} steps); {spread_txt}){in_coll}")
    elif top is None or explained < 0.5 * spread:
        verdict = (f"{name}: the other ranks wait {fmt_ns(others)} {unit} for rank {strag}{in_coll} ({wait_pct}; "
                   f"{spread_txt}), but only {fmt_ns(explained)} of its "
                   "time inside the steps is extra: the rest is outside the step markers or a late start")
    else:
        where = f"+{fmt_ns(top.extra_ns)} {unit} in {top.region}" + (f" ({role})" if role and top.layer >= 0 else "")
        verdict = (f"{name}: rank {strag} is the straggler: {where}; the other ranks wait {fmt_ns(others)} {unit}"
                   f"{in_coll} ({wait_pct}" + (f"; the straggler in {k} of {steps_used} steps)"
                                               if k < steps_used else ")"))
    return PhaseVerdict(ph, nranks, steps_used, per_step, strag, imb, others, coll_name,
                        top.region if top else None, role, top.extra_ns if top else None, finding, verdict,
                        regions[:TOP_REGIONS], layers[:TOP_REGIONS], consistent, med_span or None)
