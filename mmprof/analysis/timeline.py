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

Overlapping streams are counted once: at each instant the highest category in the order above wins, so
communication overlapped with compute counts as compute (reported separately as `comm_overlapped_ns`).

A window spans its first event start to its last event end; where the windows of one rank overlap (a step's
last kernel still runs when the next step's first kernel starts), each instant goes to the latest-started window
that contains it, so the windows of a rank never add up to more than the rank's event span. Events outside every
phase ("other") and events of a phase outside all of its steps are scattered across the run (set-up, sampling
between steps): their windows count busy time outside the other windows only, no idle.

The events are `mmprof.analysis.events` (kernels and copies; on a CPU run, the outermost compute ops). On a CPU
run every gap between compute ops is host time (Python / framework overhead): idle_host.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.events import CAT_COMM, EventFrame, codes, events_of
from mmprof.errors import NoEvidence

CATEGORIES = ("compute_bound", "memory_bound", "unattributed", "communication", "memcpy", "idle_host", "idle_other")
LABELS = {"compute_bound": "compute-bound", "memory_bound": "memory-bound", "unattributed": "unattributed compute",
          "communication": "communication", "memcpy": "memcpy", "idle_host": "idle: host-bound (launch/queue)",
          "idle_other": "idle: other"}
_BUSY = 5
NO_PHASE = "all"


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
    phase: str
    steps: int
    median_ns: float | None
    mean_ns: float | None
    total_ns: int
    method: str  # how the step time was measured

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class TimelineResult:
    """Per window (rank, phase, step): span and time per category. `windows` is a DataFrame."""

    source: str
    windows: pd.DataFrame
    notes: list[str]
    warnings: list[str]

    @property
    def phases(self) -> list[str]:
        order = {"prefill": 0, "decode": 1}
        return sorted(self.windows["phase"].unique().tolist(), key=lambda p: (order.get(p, 2), p))

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

    def step_stats(self, phase: str, rank: int | None = None) -> StepStats:
        """Step time of a phase: per step the slowest rank's span; median over steps."""
        w = self._select(phase, rank)
        if w.empty:
            return StepStats(phase, 0, None, None, 0, "no events")
        per_step = w.groupby("step")["span_ns"].max()
        known = per_step[per_step.index >= 0]
        if len(known):
            return StepStats(phase, len(known), float(known.median()), float(known.mean()), int(known.sum()),
                             "median over steps of the slowest rank's event span")
        return StepStats(phase, 1, float(per_step.max()), float(per_step.max()), int(per_step.max()),
                         "event span of the phase (no step markers)")

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "notes": self.notes, "warnings": self.warnings,
                "phases": {p: {"breakdown": self.breakdown(p).to_dict(), "step": self.step_stats(p).to_dict(),
                               "ranks": {r: self.breakdown(p, r).to_dict() for r in self.ranks}}
                           for p in self.phases}}


def phase_labels(profile, phase_ids: np.ndarray) -> np.ndarray:
    """Phase names per event: the phase string, 'all' when the profile has no phases, 'other' for the rest."""
    if len(phase_ids) == 0 or (phase_ids < 0).all():
        return np.full(len(phase_ids), NO_PHASE, dtype=object)
    uniq, inv = codes(phase_ids)
    lab = np.array([profile.string(int(u)) if u >= 0 else "other" for u in uniq], dtype=object)
    return lab[inv]


def _sorted_codes(a: np.ndarray, as_type=None) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(a, return_inverse=True)` by hashing (pd.factorize) and sorting the few distinct values only:
    the same answer without sorting a million events."""
    inv, u = pd.factorize(a)
    u = np.asarray(u) if as_type is None else np.asarray(u).astype(as_type)
    order = np.argsort(u, kind="stable")
    pos = np.empty(len(order), dtype=np.int64)
    pos[order] = np.arange(len(order))
    return u[order], pos[inv]


def timeline(profile, events: EventFrame | None = None) -> TimelineResult:
    """The per-window category breakdown of a profile (see the module docstring)."""
    ev = events if events is not None else events_of(profile)
    if not len(ev):
        raise NoEvidence("profile has no kernels, copies or CPU ops: nothing to put on a timeline")
    phase = phase_labels(profile, ev.phase)
    ph_u, ph_inv = _sorted_codes(phase, str)
    r_u, r_inv = _sorted_codes(ev.rank)     # dense codes: the key never overflows, whatever the
    s_u, s_inv = _sorted_codes(ev.step)     # rank and step numbers
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
    span_df = pd.DataFrame({"g": gcode, "s": ev.start, "e": np.maximum(ev.end, ev.start)}).groupby("g").agg(
        s=("s", "min"), e=("e", "max"))
    ext_s = np.zeros(G, dtype=np.int64)
    ext_e = np.zeros(G, dtype=np.int64)
    ext_s[span_df.index.to_numpy()] = span_df["s"].to_numpy()
    ext_e[span_df.index.to_numpy()] = span_df["e"].to_numpy()
    acc = _Acc(G)
    for r in np.unique(g_rank).tolist():
        full = np.flatnonzero((g_rank == r) & ~scattered)
        segs = _partition(full, ext_s[full], ext_e[full])
        _sweep_rank(np.flatnonzero(ev.rank == r), gcode, ev, segs, np.flatnonzero((g_rank == r) & scattered), acc)
    cols = acc.cols
    busy = sum(cols[c] for c in CATEGORIES[:_BUSY])
    idle = acc.idle
    if ev.source == "cpu_ops":
        cols["idle_host"] = idle.copy()
    else:
        cols["idle_host"] = np.minimum(acc.host, idle)
    cols["idle_other"] = idle - cols["idle_host"]
    span = busy + idle
    wstart = np.where(acc.own_s <= acc.own_e, acc.own_s, ext_s)
    wend = np.where(acc.own_s <= acc.own_e, acc.own_e, ext_e)
    w = pd.DataFrame({"rank": g_rank, "phase": g_phase, "step": g_step,
                      "start_ns": wstart, "end_ns": wend, "span_ns": span, **cols,
                      "comm_total_ns": acc.comm_total, "comm_overlapped_ns": acc.comm_over})
    return TimelineResult(ev.source, w, list(ev.notes), list(ev.warnings))


class _Acc:
    """Per-window accumulators of the sweep."""

    def __init__(self, G: int) -> None:
        self.cols = {c: np.zeros(G, dtype=np.int64) for c in CATEGORIES}
        self.idle = np.zeros(G, dtype=np.int64)
        self.host = np.zeros(G, dtype=np.int64)
        self.comm_total = np.zeros(G, dtype=np.int64)
        self.comm_over = np.zeros(G, dtype=np.int64)
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
    seg_a, seg_b, seg_g = segs
    keep = idx[ev.end[idx] > ev.start[idx]]
    n, m = len(keep), len(seg_a)
    if n + m == 0:
        return
    t = np.concatenate([ev.start[keep], ev.end[keep], seg_a, seg_b])
    d = np.concatenate([np.ones(n, np.int8), np.full(n, -1, np.int8), np.zeros(2 * m, np.int8)])
    c = np.concatenate([ev.cat[keep], ev.cat[keep], np.full(2 * m, -1, np.int8)]).astype(np.int8)
    e = np.concatenate([keep, keep, np.full(2 * m, -1, np.int64)])
    order = np.lexsort((d > 0, t))      # ends (and piece bounds) before starts at the same instant
    t, d, c, e = t[order], d[order], c[order], e[order]
    seg = np.zeros(len(t), dtype=np.int64)
    seg[:-1] = t[1:] - t[:-1]
    act = np.full(len(t), -1, dtype=np.int8)
    comm_active = np.zeros(len(t), bool)
    for k in range(_BUSY - 1, -1, -1):
        on = np.cumsum(np.where(c == k, d, 0).astype(np.int64)) > 0
        act[on] = k
        if k == CAT_COMM:
            comm_active = on
    # the window piece holding each elementary segment [t_i, t_i+1)
    pos = np.searchsorted(seg_a, t, side="right") - 1
    inside = (pos >= 0) & (t < seg_b[np.maximum(pos, 0)]) if m else np.zeros(len(t), bool)
    owner = np.where(inside, seg_g[np.maximum(pos, 0)] if m else -1, -1)
    # outside every piece: the first scattered window with an event active (only scattered events lie there)
    gi = gcode[np.maximum(e, 0)]
    for sg in scattered.tolist():
        on = np.cumsum(np.where((e >= 0) & (gi == sg), d, 0).astype(np.int64)) > 0
        owner = np.where((owner < 0) & ~inside & on, sg, owner)
    G = len(acc.idle)
    ok = owner >= 0
    for k, name in enumerate(CATEGORIES[:_BUSY]):
        sel = ok & (act == k)
        acc.cols[name] += np.bincount(owner[sel], weights=seg[sel], minlength=G).astype(np.int64)
    sel = ok & comm_active
    acc.comm_total += np.bincount(owner[sel], weights=seg[sel], minlength=G).astype(np.int64)
    sel = sel & (act >= 0) & (act < CAT_COMM)
    acc.comm_over += np.bincount(owner[sel], weights=seg[sel], minlength=G).astype(np.int64)
    # idle inside a window piece; the gap is host-bound when the launch call of the event that ends it had not
    # returned when the gap began (the GPU waits for the host)
    gap = np.flatnonzero(inside & (act == -1) & (seg > 0))
    if len(gap):
        acc.idle += np.bincount(owner[gap], weights=seg[gap], minlength=G).astype(np.int64)
        pts = np.arange(len(t))
        nxt = np.where(d > 0, pts, len(t))
        nxt = np.minimum.accumulate(nxt[::-1])[::-1]          # the next event start at or after each point
        last_busy = np.maximum.accumulate(np.where((act >= 0) & (seg > 0), pts, -1))
        began = t[np.minimum(last_busy[gap] + 1, len(t) - 1)]
        began = np.where(last_busy[gap] >= 0, began, t[0])
        has_next = nxt[gap + 1] < len(t)
        le = np.where(has_next, ev.launch_end[e[np.minimum(nxt[gap + 1], len(t) - 1)]], -1)
        host = np.where(has_next & (le > began), seg[gap], 0)
        acc.host += np.bincount(owner[gap], weights=host, minlength=G).astype(np.int64)
    # each window's extent on the timeline: its pieces
    if m:
        np.minimum.at(acc.own_s, seg_g, seg_a)
        np.maximum.at(acc.own_e, seg_g, seg_b)


def category_segments(ev: EventFrame) -> pd.DataFrame:
    """The timeline as consecutive segments per rank: rank, start_ns, end_ns, category (a CATEGORIES name), from each
    rank's first event to its last. The same rule as the breakdown (the highest busy category active wins; an idle
    gap is host-bound when the next event's launch call had not returned, always on a CPU run), without the
    windows: what a trace viewer draws as counter tracks (`mmprof export`)."""
    cols = {"rank": [], "start_ns": [], "end_ns": [], "category": []}
    keep = np.flatnonzero(ev.end > ev.start)
    names = np.array(CATEGORIES + ("",), dtype=object)
    for r in np.unique(ev.rank[keep]).tolist():
        k = keep[ev.rank[keep] == r]
        n = len(k)
        t = np.concatenate([ev.start[k], ev.end[k]])
        d = np.concatenate([np.ones(n, np.int8), np.full(n, -1, np.int8)])
        c = np.concatenate([ev.cat[k], ev.cat[k]])
        e = np.concatenate([k, k])
        order = np.lexsort((d, t))  # ends before starts at the same instant
        t, d, c, e = t[order], d[order], c[order], e[order]
        act = np.full(len(t), -1, dtype=np.int64)
        for cat in range(_BUSY - 1, -1, -1):
            act[np.cumsum(np.where(c == cat, d, 0).astype(np.int64)) > 0] = cat
        gap = np.flatnonzero(act[:-1] == -1)
        if ev.source == "cpu_ops":
            act[gap] = CATEGORIES.index("idle_host")
        else:
            host = ev.launch_end[e[gap + 1]] > t[gap]
            act[gap] = np.where(host, CATEGORIES.index("idle_host"), CATEGORIES.index("idle_other"))
        seg_s, seg_e, seg_c = t[:-1], t[1:], act[:-1]
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
