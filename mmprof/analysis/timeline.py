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

Events outside every phase ("other") and events of a phase outside all of its steps are scattered across the run
(set-up, sampling between steps): their windows count busy time only, no idle.

The events are `mmprof.analysis.events` (kernels and copies; on a CPU run, the outermost compute ops). On a CPU
run every gap between compute ops is host time (Python / framework overhead): idle_host.
"""

from __future__ import annotations

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


def timeline(profile, events: EventFrame | None = None) -> TimelineResult:
    """The per-window category breakdown of a profile (see the module docstring)."""
    ev = events if events is not None else events_of(profile)
    if not len(ev):
        raise NoEvidence("profile has no kernels, copies or CPU ops: nothing to put on a timeline")
    phase = phase_labels(profile, ev.phase)
    ph_u, ph_inv = np.unique(phase.astype(str), return_inverse=True) if len(ev) else (np.array([]), np.zeros(0, np.int64))
    step_lo = int(ev.step.min()) if len(ev) else 0
    span_s = int(ev.step.max()) - step_lo + 1 if len(ev) else 1
    key = (ev.rank.astype(np.int64) * len(ph_u) + ph_inv) * span_s + (ev.step - step_lo)
    kuniq, gcode = codes(key)
    G = len(kuniq)
    g_step = kuniq % span_s + step_lo
    g_phase = ph_u[(kuniq // span_s) % max(len(ph_u), 1)] if G else np.array([], dtype=object)
    g_rank = kuniq // span_s // max(len(ph_u), 1)
    cols = {c: np.zeros(G, dtype=np.int64) for c in CATEGORIES}
    comm_total = np.zeros(G, dtype=np.int64)
    comm_over = np.zeros(G, dtype=np.int64)
    span_df = pd.DataFrame({"g": gcode, "s": ev.start, "e": ev.end}).groupby("g").agg(s=("s", "min"), e=("e", "max"))
    wstart = np.zeros(G, dtype=np.int64)
    wend = np.zeros(G, dtype=np.int64)
    wstart[span_df.index.to_numpy()] = span_df["s"].to_numpy()
    wend[span_df.index.to_numpy()] = span_df["e"].to_numpy()
    _sweep(gcode, ev, cols, comm_total, comm_over)
    span = wend - wstart
    busy = sum(cols[c] for c in CATEGORIES[:_BUSY])
    idle = np.maximum(span - busy, 0)
    # events outside every phase ("other") or outside every step of a phase that has steps are scattered across
    # the run (set-up, sampling between steps): their first-to-last span overlaps the real windows, so they
    # count with their busy time only
    if G:
        wk = pd.DataFrame({"r": g_rank, "p": g_phase, "s": g_step})
        stepped = wk[wk["s"] >= 0].groupby(["r", "p"]).size()
        has_steps = pd.MultiIndex.from_frame(wk[["r", "p"]]).isin(stepped.index)
        scattered = ((g_phase == "other") | ((g_step < 0) & has_steps)) if len(ph_u) else np.zeros(G, bool)
        idle[scattered] = 0
        cols["idle_host"][scattered] = 0
    if ev.source == "cpu_ops":
        cols["idle_host"] = idle
    else:
        cols["idle_host"] = np.minimum(cols["idle_host"], idle)
    cols["idle_other"] = idle - cols["idle_host"]
    span = busy + idle
    w = pd.DataFrame({"rank": g_rank, "phase": g_phase, "step": g_step,
                      "start_ns": wstart, "end_ns": wend, "span_ns": span, **cols,
                      "comm_total_ns": comm_total, "comm_overlapped_ns": comm_over})
    return TimelineResult(ev.source, w, list(ev.notes), list(ev.warnings))


def _sweep(gcode: np.ndarray, ev: EventFrame, cols: dict, comm_total: np.ndarray, comm_over: np.ndarray) -> None:
    """Vectorised interval sweep over all windows at once; fills the busy categories and idle_host."""
    keep = np.flatnonzero(ev.end > ev.start)
    n = len(keep)
    if n == 0:
        return
    G = len(comm_total)
    g = np.concatenate([gcode[keep], gcode[keep]])
    t = np.concatenate([ev.start[keep], ev.end[keep]])
    d = np.concatenate([np.ones(n, np.int8), np.full(n, -1, np.int8)])
    c = np.concatenate([ev.cat[keep], ev.cat[keep]])
    e = np.concatenate([keep, keep])
    # order by (window, time, ends before starts at the same instant): one int64 sort key when it fits
    t0 = int(t.min())
    trange = int(t.max()) - t0 + 1
    bits = int(2 * trange).bit_length()
    if bits + int(G).bit_length() < 63:
        order = np.argsort((g.astype(np.int64) << bits) | ((t - t0) * 2 + (d > 0)), kind="stable")
    else:
        order = np.lexsort((d, t, g))
    g, t, d, c, e = g[order], t[order], d[order], c[order], e[order]
    seg = np.zeros(len(t), dtype=np.int64)
    same = g[1:] == g[:-1]
    seg[:-1] = np.where(same, t[1:] - t[:-1], 0)
    act = np.full(len(t), -1, dtype=np.int8)
    comm_active = None
    for k in range(_BUSY - 1, -1, -1):
        cnt = np.cumsum(np.where(c == k, d, 0).astype(np.int32))
        on = cnt > 0
        act[on] = k
        if k == CAT_COMM:
            comm_active = on
    for k, name in enumerate(CATEGORIES[:_BUSY]):
        m = act == k
        cols[name] += np.bincount(g[m], weights=seg[m], minlength=G).astype(np.int64)
    comm_total += np.bincount(g[comm_active], weights=seg[comm_active], minlength=G).astype(np.int64)
    ov = comm_active & (act >= 0) & (act < CAT_COMM)
    comm_over += np.bincount(g[ov], weights=seg[ov], minlength=G).astype(np.int64)
    # idle gaps: the next boundary is the start of the event that ends the gap
    gap = np.flatnonzero((act == -1) & (seg > 0))
    if len(gap):
        nxt = e[gap + 1]
        le = ev.launch_end[nxt]
        # the next kernel's launch call had not returned when the GPU went idle: the whole gap (the rest of the
        # call plus the launch latency) is the GPU waiting for the host
        host = np.where(le > t[gap], seg[gap], 0)
        cols["idle_host"] += np.bincount(g[gap], weights=host, minlength=G).astype(np.int64)


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
