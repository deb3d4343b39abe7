"""Timeline per rank by interval union: where the wall time of each phase / step went.

Every instant of a window (one rank, one phase, one step; the window spans its first event start to its last
event end) falls in exactly one category, so the shares add up to 100% of the wall span:

    compute_bound, memory_bound, unattributed  busy with compute kernels (by the roofline of the op's shapes;
                                               "unattributed" when there is no shape or no device peak)
    communication                              busy with communication only (exposed communication)
    memcpy                                     busy with copies only (memcpy/memset table + copy kernels)
    idle_host                                  nothing runs and the launch call of the next kernel had not
                                               returned when the GPU went idle: the GPU waits for the host
                                               (launch / queueing overhead)
    idle_other                                 nothing runs although the next kernel was already launched
                                               (synchronisation, dependencies) or with no launch evidence
    idle_between                               (engine steps only) nothing runs between two engine steps while
                                               the host is outside the step ranges: the engine's scheduler,
                                               sampler, output processing, Python
    idle_prep                                  (engine steps only) nothing runs while the host works inside the
                                               step before launching the next work: from the step's CPU start to
                                               its first event, and inside the step the part of a host-bound gap
                                               before the next event's launch call began (input preparation,
                                               attention metadata, Python); the rest of the gap, from the launch
                                               call on, stays idle_host (launch / queue)

Engine steps (`mmprof.analysis.timeline.engine_steps`: vLLM's `execute_context_N(T)_generation_M(G)`, SGLang's
`step[...]`, TensorRT-LLM's `_forward_step`) are the steps of a serving engine, and the time between them is
theirs: an engine step's window runs from its first event's start (after the GPU idle of its own preparation,
from its CPU range's start: idle_prep) to the next step's, so a rank's engine-step windows tile its timeline from
the first step to the last and the step time is the step-to-step period. Work launched between two steps (vLLM's
sampler runs after `execute_model`) is busy time of the step before; the idle time there is idle_between.

Overlapping streams are counted once: at each instant the highest category in the order above wins, so
communication overlapped with compute counts as compute (reported separately as `comm_overlapped_ns`). Each window
also keeps `overlap_ns`: device time that ran while other device work ran (on another stream, e.g. a shared
expert on a side stream beside the routed experts), so that the summed event time of a window is its busy time
plus its overlap (docs/glossary.md "overlap").

A window spans its first event start to its last event end; where the windows of one rank overlap (a step's
last kernel still runs when the next step's first kernel starts), each instant goes to the latest-started window
that contains it, so the windows of a rank never add up to more than the rank's event span. Events outside every
phase ("other") and events of a phase outside all of its steps are scattered across the run (set-up, sampling
between steps): their windows count busy time outside the other windows only, no idle.

The events are `mmprof.analysis.timeline.events` (kernels and copies; on a CPU run, the outermost compute ops). On a CPU
run every gap between compute ops is host time (Python / framework overhead): idle_host.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.timeline.engine_steps import engine_steps
from mmprof.analysis.timeline.columns import CAT_COMM, codes
from mmprof.analysis.timeline.events import EventFrame, events_of
from mmprof.analysis.timeline.phases import event_phase_codes, sorted_codes, time_order
from mmprof.errors import NoEvidence

CATEGORIES = ("compute_bound", "memory_bound", "unattributed", "communication", "memcpy", "idle_host", "idle_other",
              "idle_between", "idle_prep")
LABELS = {"compute_bound": "compute-bound", "memory_bound": "memory-bound", "unattributed": "unattributed compute",
          "communication": "communication", "memcpy": "memcpy", "idle_host": "idle: host-bound (launch/queue)",
          "idle_other": "idle: other", "idle_between": "idle: host between engine steps",
          "idle_prep": "idle: host work inside the step"}
ENGINE_CATEGORIES = ("idle_between", "idle_prep")  # only engine-step windows have these
BUSY_CATEGORIES = CATEGORIES[:5]                   # a device event runs (GPU busy); the rest are idle
KIND_WINDOW, KIND_BETWEEN, KIND_PREP, KIND_ENGINE = 0, 1, 2, 3  # window piece kinds (KIND_ENGINE: an engine step's)
_BUSY = 5


@dataclass
class Breakdown:
    """Wall time of a set of windows split into CATEGORIES (ns); the categories sum to `span_ns`."""

    span_ns: int
    time_ns: dict[str, int]
    comm_total_ns: int
    comm_overlapped_ns: int
    windows: int

    def share(self, cat: str) -> float:
        return self.time_ns.get(cat, 0) / self.span_ns if self.span_ns else 0.0

    @property
    def shares(self) -> dict[str, float]:
        return {c: self.share(c) for c in CATEGORIES}

    @property
    def dominant(self) -> str | None:
        if not self.span_ns:
            return None
        return max(CATEGORIES, key=lambda c: self.time_ns.get(c, 0))

    def to_dict(self) -> dict[str, Any]:
        return {"span_ns": self.span_ns, "time_ns": self.time_ns, "shares": self.shares,
                "comm_total_ns": self.comm_total_ns, "comm_overlapped_ns": self.comm_overlapped_ns,
                "comm_exposed_ns": self.time_ns.get("communication", 0), "windows": self.windows,
                "dominant": self.dominant}


@dataclass
class StepStats:
    """The step time of a phase (docs/glossary.md "step time"): per step the slowest rank's window (`step_rows`),
    the median over the steps and the distribution (p10, p90, min, max) of those values."""

    phase: str
    steps: int
    median_ns: float | None
    mean_ns: float | None
    total_ns: int
    method: str  # how the step time was measured
    p10_ns: float | None = None
    p90_ns: float | None = None
    min_ns: float | None = None
    max_ns: float | None = None
    values: list[float] = field(default_factory=list)   # every step's time, in step order

    @classmethod
    def of(cls, phase: str, values, method: str) -> "StepStats":
        v = np.asarray(values, dtype=np.float64)
        if not len(v):
            return cls(phase, 0, None, None, 0, "no events")
        return cls(phase, len(v), float(np.median(v)), float(v.mean()), int(v.sum()), method,
                   float(np.percentile(v, 10)), float(np.percentile(v, 90)), float(v.min()), float(v.max()),
                   [float(x) for x in v])

    @property
    def spread(self) -> float | None:
        """(p90 - p10) / median over the steps; None with fewer than 3 steps (no spread to speak of)."""
        if self.steps < 3 or not self.median_ns:
            return None
        return ((self.p90_ns or 0.0) - (self.p10_ns or 0.0)) / self.median_ns

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


STEP_METHOD_ENGINE = "median over engine steps of the slowest rank's step-to-step period"
STEP_METHOD_MARKED = "median over steps of the slowest rank's span from its first to its last device event"


@dataclass
class TimelineResult:
    """Per window (rank, phase, step): span and time per category. `windows` is a DataFrame."""

    source: str
    windows: pd.DataFrame
    notes: list[str]
    warnings: list[str]
    engine: bool = False        # some rank's steps are a serving engine's steps (idle_between / idle_prep apply)
    pieces: dict = field(default_factory=dict)  # rank -> (start, end, window, kind) of its engine-step pieces
    _memo: dict = field(default_factory=dict, repr=False)   # step_rows per (phase, rank): the windows never change

    @property
    def phases(self) -> list[str]:
        """The phases with wall time, prefill, mixed, decode first; `other` (events outside every phase) only when
        it holds busy time outside the other windows."""
        order = {"prefill": 0, "mixed": 1, "decode": 2}
        w = self.windows
        span = w.groupby("phase")["span_ns"].sum()
        ps = [p for p in w["phase"].unique().tolist() if p != "other" or span.get(p, 0) > 0]
        return sorted(ps, key=lambda p: (order.get(p, 3), p))

    @property
    def ranks(self) -> list[int]:
        return sorted(int(r) for r in self.windows["rank"].unique())

    def _select(self, phase: str | None, rank: int | None) -> pd.DataFrame:
        w = self.windows
        if phase is not None:
            w = w[w["phase"] == phase]
        if rank is not None:
            w = w[w["rank"] == rank]
        return w

    def breakdown(self, phase: str | None = None, rank: int | None = None) -> Breakdown:
        w = self._select(phase, rank)
        return Breakdown(int(w["span_ns"].sum()), {c: int(w[c].sum()) for c in CATEGORIES},
                         int(w["comm_total_ns"].sum()), int(w["comm_overlapped_ns"].sum()), len(w))

    def step_rows(self, phase: str, rank: int | None = None) -> pd.DataFrame:
        """One row per step of a phase (steps >= 0, in step order): the window of the slowest rank in that step (of
        `rank` when given): rank, step, span_ns and every category. The one definition of a step's time and of
        its parts that every command uses (docs/glossary.md): the parts of a row add up to its span_ns."""
        key = ("step_rows", phase, rank)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        w = self._select(phase, rank)
        w = w[w["step"] >= 0]
        if len(w):
            w = w.sort_values(["step", "span_ns", "rank"], ascending=[True, False, True], kind="stable")
            w = w.drop_duplicates("step", keep="first").reset_index(drop=True)
        self._memo[key] = w
        return w

    def step_stats(self, phase: str, rank: int | None = None) -> StepStats:
        """Step time of a phase: per step the slowest rank's window span (`step_rows`); median over steps, with
        the steps' distribution. A phase with no step markers has one "step": its slowest rank's event span."""
        w = self._select(phase, rank)
        if w.empty:
            return StepStats(phase, 0, None, None, 0, "no events")
        rows = self.step_rows(phase, rank)
        if len(rows):
            return StepStats.of(phase, rows["span_ns"].to_numpy(), STEP_METHOD_ENGINE if self.engine_phase(phase)
                                else STEP_METHOD_MARKED)
        per_step = w.groupby("step")["span_ns"].max()
        return StepStats.of(phase, [float(per_step.max())], "event span of the phase (no step markers)")

    def engine_phase(self, phase: str | None) -> bool:
        """Whether a phase's steps are a serving engine's steps (their windows tile the timeline: step-to-step)."""
        if not self.engine:
            return False
        w = self._select(phase, None)
        return bool(len(w) and (w["rank"].isin(list(self.pieces))).any())

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "notes": self.notes, "warnings": self.warnings,
                "phases": {p: {"breakdown": self.breakdown(p).to_dict(), "step": self.step_stats(p).to_dict(),
                               "ranks": {r: self.breakdown(p, r).to_dict() for r in self.ranks}}
                           for p in self.phases}}


def timeline(profile, events: EventFrame | None = None) -> TimelineResult:
    """The per-window category breakdown of a profile (see the module docstring)."""
    ev = events if events is not None else events_of(profile)
    if not len(ev):
        raise NoEvidence("profile has no kernels, copies or CPU ops: nothing to put on a timeline")
    ph_u, ph_inv = event_phase_codes(profile, ev)
    r_u, r_inv = ev.memo("rank_codes", lambda: sorted_codes(ev.rank))  # dense codes: the key never overflows,
    s_u, s_inv = ev.memo("step_codes", lambda: sorted_codes(ev.step))  # whatever the rank and step numbers
    key = (r_inv.astype(np.int64) * len(ph_u) + ph_inv) * len(s_u) + s_inv
    kuniq, gcode = codes(key)
    G = len(kuniq)
    g_step = s_u[kuniq % len(s_u)]
    g_phase = ph_u[(kuniq // len(s_u)) % len(ph_u)]
    g_rank = r_u[kuniq // len(s_u) // len(ph_u)]
    # events outside every phase ("other") or outside every step of a phase that has steps are scattered across
    # the run (set-up, sampling between steps): their first-to-last span overlaps the real windows, so they
    # count with their busy time outside the real windows only
    wk = pd.DataFrame({"r": g_rank, "p": g_phase, "s": g_step})
    stepped = wk[wk["s"] >= 0].groupby(["r", "p"]).size()
    has_steps = pd.MultiIndex.from_frame(wk[["r", "p"]]).isin(stepped.index)
    scattered = (g_phase == "other") | ((g_step < 0) & has_steps)
    # each window's first event start and last event end (every code 0..G-1 has events)
    ext_s = np.full(G, np.iinfo(np.int64).max, dtype=np.int64)
    ext_e = np.full(G, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(ext_s, gcode, ev.start)
    np.maximum.at(ext_e, gcode, np.maximum(ev.end, ev.start))
    acc = _Acc(G)
    es = engine_steps(profile) if ev.source == "kernels" else None
    engine = False
    pieces: dict = {}
    by_rank = np.argsort(r_inv, kind="stable")          # each rank's events, in frame order
    cuts = np.cumsum(np.bincount(r_inv, minlength=len(r_u)))
    for r in np.unique(g_rank).tolist():
        ri = int(np.searchsorted(r_u, r))
        rows = by_rank[(cuts[ri - 1] if ri else 0):cuts[ri]]    # == np.flatnonzero(ev.rank == r)
        full = np.flatnonzero((g_rank == r) & ~scattered)
        segs = _partition(full, ext_s[full], ext_e[full])
        rank_steps = es[es["rank"] == r] if es is not None and len(es) else None
        if rank_steps is not None and len(rank_steps) and len(segs[0]):
            engine = True
            segs = _engine_pieces(segs, g_step, rank_steps, ev, rows)
            pieces[r] = segs
        else:
            segs = segs + (np.zeros(len(segs[0]), np.int8),)
        _sweep_rank(rows, gcode, ev, segs, np.flatnonzero((g_rank == r) & scattered), acc)
    cols = acc.cols
    busy = sum(cols[c] for c in CATEGORIES[:_BUSY])
    idle = acc.idle
    if ev.source == "cpu_ops":
        cols["idle_host"] = idle.copy()
    else:
        cols["idle_host"] = np.minimum(acc.host, idle)
    cols["idle_other"] = idle - cols["idle_host"]
    cols["idle_between"] = acc.between
    cols["idle_prep"] = acc.prep
    span = busy + idle + acc.between + acc.prep
    wstart = np.where(acc.own_s <= acc.own_e, acc.own_s, ext_s)
    wend = np.where(acc.own_s <= acc.own_e, acc.own_e, ext_e)
    w = pd.DataFrame({"rank": g_rank, "phase": g_phase, "step": g_step,
                      "start_ns": wstart, "end_ns": wend, "span_ns": span, **cols,
                      "comm_total_ns": acc.comm_total, "comm_overlapped_ns": acc.comm_over, "overlap_ns": acc.overlap})
    return TimelineResult(ev.source, w, list(ev.notes), list(ev.warnings), engine, pieces)


def _engine_pieces(segs, g_step: np.ndarray, steps: pd.DataFrame, ev: EventFrame, idx: np.ndarray):
    """The window pieces of a rank with engine steps, plus the time between them: after an engine-step window,
    up to the next step's CPU start, a `between` piece of that window; from there to the next window, a `prep`
    piece of the next one (its first piece also gets one from its own CPU start). After the last window, a
    `between` piece up to the last event that starts before the next engine step's CPU start (the sampler of the
    last step). Returns (start, end, group, kind) sorted and disjoint."""
    a, b, g = segs
    cpu = dict(zip(steps["step"].tolist(), steps["cpu_start_ns"].tolist()))
    is_eng = np.array([int(g_step[x]) in cpu for x in g.tolist()], dtype=bool)
    A, B, Gs, K = [a], [b], [g], [np.where(is_eng, KIND_ENGINE, KIND_WINDOW).astype(np.int8)]

    def add(x: int, y: int, grp: int, kind: int) -> None:
        if y > x:
            A.append(np.array([x], np.int64))
            B.append(np.array([y], np.int64))
            Gs.append(np.array([grp], np.int64))
            K.append(np.array([kind], np.int8))

    first_seen: set[int] = set()
    for k in range(len(a)):
        grp = int(g[k])
        if is_eng[k] and grp not in first_seen:   # the step's own preparation before its first piece
            first_seen.add(grp)
            lo = int(b[k - 1]) if k else None
            cs = cpu[int(g_step[grp])]
            start = max(cs, lo) if lo is not None else cs
            if k == 0 or not is_eng[k - 1]:
                add(start, int(a[k]), grp, KIND_PREP)
        if k + 1 < len(a):
            x, y = int(b[k]), int(a[k + 1])
            if y <= x or not is_eng[k]:
                continue
            nxt = int(g[k + 1])
            cs = cpu.get(int(g_step[nxt])) if is_eng[k + 1] else None
            cut = y if cs is None else min(max(cs, x), y)
            add(x, cut, grp, KIND_BETWEEN)
            if is_eng[k + 1] and nxt not in first_seen:
                first_seen.add(nxt)
                add(cut, y, nxt, KIND_PREP)
    if len(a) and is_eng[-1]:
        x = int(b[-1])
        last_step = int(g_step[int(g[-1])])
        later = steps.loc[steps["step"] > last_step, "cpu_start_ns"]
        cutoff = int(later.min()) if len(later) else np.iinfo(np.int64).max
        st, en = ev.start[idx], ev.end[idx]
        tail = (st >= x) & (st < cutoff)
        if tail.any():
            add(x, int(en[tail].max()), int(g[-1]), KIND_BETWEEN)
    A_, B_, G_, K_ = (np.concatenate(v) for v in (A, B, Gs, K))
    o = np.argsort(A_, kind="stable")
    return A_[o], B_[o], G_[o], K_[o]


class _Acc:
    """Per-window accumulators of the sweep."""

    def __init__(self, G: int) -> None:
        self.cols = {c: np.zeros(G, dtype=np.int64) for c in CATEGORIES}
        self.idle = np.zeros(G, dtype=np.int64)
        self.host = np.zeros(G, dtype=np.int64)
        self.between = np.zeros(G, dtype=np.int64)
        self.prep = np.zeros(G, dtype=np.int64)
        self.comm_total = np.zeros(G, dtype=np.int64)
        self.comm_over = np.zeros(G, dtype=np.int64)
        self.overlap = np.zeros(G, dtype=np.int64)    # event time beyond the busy union (two or more running)
        self.own_s = np.full(G, np.iinfo(np.int64).max, dtype=np.int64)
        self.own_e = np.full(G, np.iinfo(np.int64).min, dtype=np.int64)


def _partition(groups: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The windows of one rank made disjoint: each instant of their union belongs to the latest-started window
    that contains it (a step that runs on into the next step's first event hands that time over). Returns the
    pieces (start, end, group), sorted and disjoint, so the windows' spans never add up to more than the rank's."""
    order = np.lexsort((groups, s))
    bounds = np.unique(np.concatenate([s, e]))
    a_out: list[int] = []
    b_out: list[int] = []
    g_out: list[int] = []
    heap: list[tuple[int, int, int]] = []   # (-start, -group, end): the latest-started open window on top
    k = 0
    n = len(order)
    bl = bounds.tolist()
    for i in range(len(bl) - 1):
        t0, t1 = bl[i], bl[i + 1]
        while k < n and s[order[k]] <= t0:
            j = order[k]
            heapq.heappush(heap, (-int(s[j]), -int(groups[j]), int(e[j])))
            k += 1
        while heap and heap[0][2] <= t0:
            heapq.heappop(heap)
        if not heap:
            continue
        g = -heap[0][1]
        if g_out and g_out[-1] == g and b_out[-1] == t0:
            b_out[-1] = t1
        else:
            a_out.append(t0)
            b_out.append(t1)
            g_out.append(g)
    return (np.asarray(a_out, np.int64), np.asarray(b_out, np.int64), np.asarray(g_out, np.int64))


def _sweep_rank(idx: np.ndarray, gcode: np.ndarray, ev: EventFrame, segs, scattered: np.ndarray, acc: _Acc) -> None:
    """Interval sweep over one rank's events, with the window pieces `segs` as extra boundaries: every instant
    is counted once, in the window piece that holds it (busy in the highest category active, else idle), or
    outside every piece, when busy, in the scattered window of an event active then."""
    seg_a, seg_b, seg_g, seg_k = segs
    keep = idx[ev.end[idx] > ev.start[idx]]
    n, m = len(keep), len(seg_a)
    if n + m == 0:
        return
    t = np.concatenate([ev.start[keep], ev.end[keep], seg_a, seg_b])
    d = np.concatenate([np.ones(n, np.int8), np.full(n, -1, np.int8), np.zeros(2 * m, np.int8)])
    c = np.concatenate([ev.cat[keep], ev.cat[keep], np.full(2 * m, -1, np.int8)]).astype(np.int8)
    e = np.concatenate([keep, keep, np.full(2 * m, -1, np.int64)])
    order = time_order(t, d)           # ends (and piece bounds) before starts at the same instant
    t, d, c, e = t[order], d[order], c[order], e[order]
    seg = np.zeros(len(t), dtype=np.int64)
    seg[:-1] = t[1:] - t[:-1]
    act = np.full(len(t), -1, dtype=np.int8)
    comm_active = np.zeros(len(t), bool)
    present = np.bincount(ev.cat[keep].astype(np.int64), minlength=_BUSY) > 0 if n else np.zeros(_BUSY, bool)
    for k in range(_BUSY - 1, -1, -1):
        if not present[k]:              # no event of this category: it is never active
            continue
        on = np.cumsum(np.where(c == k, d, 0), dtype=np.int64 if len(t) >= 1 << 31 else np.int32) > 0
        act[on] = k
        if k == CAT_COMM:
            comm_active = on
    # the window piece holding each elementary segment [t_i, t_i+1): the number of piece starts at or before t_i
    # (t is sorted: the same as searching every t_i among the piece starts)
    if m:
        pos = np.cumsum(np.bincount(np.searchsorted(t, seg_a, side="left"), minlength=len(t) + 1)[:len(t)]) - 1
        p0 = np.maximum(pos, 0)
        inside = (pos >= 0) & (t < seg_b[p0])
        owner = np.where(inside, seg_g[p0], -1)
        kind = np.where(inside, seg_k[p0], 0)
    else:
        inside = np.zeros(len(t), bool)
        owner = np.full(len(t), -1, dtype=np.int64)
        kind = np.zeros(len(t), dtype=np.int64)
    # outside every piece: the first scattered window with an event active (only scattered events lie there)
    if len(scattered):
        gi = gcode[np.maximum(e, 0)]
        for sg in scattered.tolist():
            on = np.cumsum(np.where((e >= 0) & (gi == sg), d, 0).astype(np.int64)) > 0
            owner = np.where((owner < 0) & ~inside & on, sg, owner)
    G = len(acc.idle)
    ok = owner >= 0
    sel = ok & (act >= 0)               # busy: one pass over (window, category)
    tot = np.bincount(owner[sel] * _BUSY + act[sel], weights=seg[sel], minlength=G * _BUSY).reshape(G, _BUSY)
    for k, name in enumerate(CATEGORIES[:_BUSY]):
        acc.cols[name] += tot[:, k].astype(np.int64)
    sel = ok & comm_active
    acc.comm_total += np.bincount(owner[sel], weights=seg[sel], minlength=G).astype(np.int64)
    sel = sel & (act >= 0) & (act < CAT_COMM)
    acc.comm_over += np.bincount(owner[sel], weights=seg[sel], minlength=G).astype(np.int64)
    # overlap: where k >= 2 events run at once, k - 1 of them run beside the others (summed event time = busy + this)
    nact = np.cumsum(d, dtype=np.int64 if len(t) >= 1 << 31 else np.int32)
    sel = ok & (nact >= 2)
    if sel.any():
        acc.overlap += np.bincount(owner[sel], weights=seg[sel] * (nact[sel] - 1.0), minlength=G).astype(np.int64)
    # idle inside a window piece; the gap is host-bound when the launch call of the event that ends it had not
    # returned when the gap began (the GPU waits for the host)
    for k, arr in ((KIND_BETWEEN, acc.between), (KIND_PREP, acc.prep)):  # idle between engine steps: the host's
        sel = inside & (act == -1) & (seg > 0) & (kind == k)
        if sel.any():
            arr += np.bincount(owner[sel], weights=seg[sel], minlength=G).astype(np.int64)
    gap = np.flatnonzero(inside & (act == -1) & (seg > 0) & ((kind == KIND_WINDOW) | (kind == KIND_ENGINE)))
    if len(gap):
        og = owner[gap]
        acc.idle += np.bincount(og, weights=seg[gap], minlength=G).astype(np.int64)
        pts = np.arange(len(t))
        nxt = np.where(d > 0, pts, len(t))
        nxt = np.minimum.accumulate(nxt[::-1])[::-1]          # the next event start at or after each point
        last_busy = np.maximum.accumulate(np.where((act >= 0) & (seg > 0), pts, -1))
        began = t[np.minimum(last_busy[gap] + 1, len(t) - 1)]
        began = np.where(last_busy[gap] >= 0, began, t[0])
        has_next = nxt[gap + 1] < len(t)
        nxt_e = e[np.minimum(nxt[gap + 1], len(t) - 1)]
        le = np.where(has_next, ev.launch_end[nxt_e], -1)
        host = np.where(has_next & (le > began), seg[gap], 0)
        eng = kind[gap] == KIND_ENGINE
        if not eng.any():               # no engine-step piece: no host work inside a step to split off
            acc.host += np.bincount(og, weights=host, minlength=G).astype(np.int64)
        else:
            # inside an engine step: the part before the next event's launch call began is the host's own work
            ls = np.where(has_next, ev.launch_start[nxt_e], -1)
            t_end = t[np.minimum(gap + 1, len(t) - 1)]
            prep = np.where(eng & (host > 0) & (ls >= 0), np.clip(np.minimum(t_end, ls) - t[gap], 0, seg[gap]), 0)
            acc.host += np.bincount(og, weights=host - prep, minlength=G).astype(np.int64)
            acc.prep += np.bincount(og, weights=prep, minlength=G).astype(np.int64)
            acc.idle -= np.bincount(og, weights=prep, minlength=G).astype(np.int64)
    # each window's extent on the timeline: its pieces
    if m:
        np.minimum.at(acc.own_s, seg_g, seg_a)
        np.maximum.at(acc.own_e, seg_g, seg_b)


def category_segments(ev: EventFrame, pieces: dict | None = None) -> pd.DataFrame:
    """The timeline as consecutive segments per rank: rank, start_ns, end_ns, category (a CATEGORIES name), from each
    rank's first event to its last. The same rule as the breakdown (the highest busy category active wins; an idle
    gap is host-bound when the next event's launch call had not returned, always on a CPU run), without the
    windows: what a trace viewer draws as counter tracks (`mmprof export`). `pieces` (TimelineResult.pieces):
    on a rank with engine steps, idle time between and inside the steps is idle_between / idle_prep as in the
    breakdown."""
    cols = {"rank": [], "start_ns": [], "end_ns": [], "category": []}
    keep = np.flatnonzero(ev.end > ev.start)
    names = np.array(CATEGORIES + ("",), dtype=object)
    for r in np.unique(ev.rank[keep]).tolist():
        k = keep[ev.rank[keep] == r]
        n = len(k)
        pa, pb, _, pk = (pieces or {}).get(r, (np.zeros(0, np.int64),) * 3 + (np.zeros(0, np.int8),))
        m = len(pa)
        # extra boundaries on an engine rank: the pieces and every launch call's start (a gap splits there)
        lsx = ev.launch_start[k][ev.launch_start[k] >= 0] if m else np.zeros(0, np.int64)
        x = np.concatenate([pa, pb, lsx])
        t = np.concatenate([ev.start[k], ev.end[k], x])
        d = np.concatenate([np.ones(n, np.int8), np.full(n, -1, np.int8), np.zeros(len(x), np.int8)])
        c = np.concatenate([ev.cat[k], ev.cat[k], np.full(len(x), -1, np.int8)]).astype(np.int8)
        e = np.concatenate([k, k, np.full(len(x), -1, np.int64)])
        order = np.lexsort((d, t))  # ends (and piece bounds) before starts at the same instant
        t, d, c, e = t[order], d[order], c[order], e[order]
        act = np.full(len(t), -1, dtype=np.int64)
        for cat in range(_BUSY - 1, -1, -1):
            act[np.cumsum(np.where(c == cat, d, 0).astype(np.int64)) > 0] = cat
        lo, hi = (np.flatnonzero(e >= 0)[[0, -1]] if (e >= 0).any() else (0, 0))
        gap = np.flatnonzero(act[:-1] == -1)
        if ev.source == "cpu_ops":
            act[gap] = CATEGORIES.index("idle_host")
        else:
            pts = np.arange(len(t))
            nxt = np.minimum.accumulate(np.where(d > 0, pts, len(t))[::-1])[::-1]  # next event start
            ne = e[np.minimum(nxt[np.minimum(gap + 1, len(t) - 1)], len(t) - 1)]
            has = ne >= 0
            host = has & (ev.launch_end[np.maximum(ne, 0)] > t[gap])
            act[gap] = np.where(host, CATEGORIES.index("idle_host"), CATEGORIES.index("idle_other"))
            if m:
                pos = np.searchsorted(pa, t[gap], side="right") - 1
                inp = (pos >= 0) & (t[gap] < pb[np.maximum(pos, 0)])
                kind = np.where(inp, pk[np.maximum(pos, 0)], 0)
                act[gap[kind == KIND_BETWEEN]] = CATEGORIES.index("idle_between")
                act[gap[kind == KIND_PREP]] = CATEGORIES.index("idle_prep")
                # inside an engine step: a host-bound gap before the next launch call began is host work
                ls = ev.launch_start[np.maximum(ne, 0)]
                work = (kind == KIND_ENGINE) & host & (ls >= t[np.minimum(gap + 1, len(t) - 1)])
                act[gap[work]] = CATEGORIES.index("idle_prep")
        seg_s, seg_e, seg_c = t[:-1], t[1:], act[:-1]
        inside = (np.arange(len(seg_s)) >= lo) & (np.arange(len(seg_s)) < hi)  # first event to last
        seg_s, seg_e, seg_c = seg_s[inside], seg_e[inside], seg_c[inside]
        nz = seg_e > seg_s
        seg_s, seg_e, seg_c = seg_s[nz], seg_e[nz], seg_c[nz]
        if not len(seg_s):
            continue
        first = np.r_[True, seg_c[1:] != seg_c[:-1]]  # merge runs of one category
        idx = np.flatnonzero(first)
        ends = np.r_[seg_e[idx[1:] - 1], seg_e[-1]]
        cols["rank"].append(np.full(len(idx), r, dtype=np.int64))
        cols["start_ns"].append(seg_s[idx])
        cols["end_ns"].append(ends)
        cols["category"].append(names[seg_c[idx]])
    if not cols["rank"]:
        return pd.DataFrame({k: [] for k in cols})
    return pd.DataFrame({k: np.concatenate(v) for k, v in cols.items()})
