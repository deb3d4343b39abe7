"""Launch and queueing: how long each kernel waited after its CPU launch call, and whether the host keeps up.

Per kernel (joined to its launch call through `kernels.launch`, i.e. the correlation id):
    delay = kernel start - launch call start   (launch latency plus time queued behind earlier work)
A deep queue (large delays) means the GPU has work waiting: not launch-bound. Small delays while the GPU idles
between kernels (the timeline's host-bound idle) mean the CPU cannot launch fast enough: launch-bound.

Also: kernels shorter than their own launch call (the CPU spends longer launching than the GPU running them),
and launches per step (kernels + copies per rank per step).

A CUDA / HIP graph replay is one launch: its first event stands for it (delay, launches per step) and its
kernels are not compared with the one graph launch call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.timeline.events import EventFrame, events_of
from mmprof.analysis.timeline.breakdown import TimelineResult, timeline
from mmprof.analysis.timeline.phases import phase_labels
from mmprof.names import display_name

# The GPU is launch-bound when at least this share of the wall span is idle waiting for the host.
LAUNCH_BOUND_SHARE = 0.25


@dataclass
class LaunchStats:
    phase: str
    kernels: int
    linked: int                    # kernels whose launch call is known
    delay_p50_ns: float | None
    delay_p90_ns: float | None
    delay_p99_ns: float | None
    short_kernels: int             # kernels shorter than their launch call
    short_kernel_ns: int
    launches_per_step: float | None
    idle_host_share: float | None
    verdict: str                   # "launch-bound", "not launch-bound" or "no evidence"
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class LaunchResult:
    phases: list[LaunchStats]
    top_delays: list[dict[str, Any]]   # kernels with the longest median launch delay
    warnings: list[str] = field(default_factory=list)

    def phase(self, name: str) -> LaunchStats | None:
        return next((p for p in self.phases if p.phase == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"phases": [p.to_dict() for p in self.phases], "top_delays": self.top_delays, "warnings": self.warnings}


def _launch_units(ev: EventFrame) -> np.ndarray:
    """Events that stand for one launch: every event launched on its own, and the first event of each replay."""
    unit = ev.graph < 0
    g = np.flatnonzero(~unit)
    if len(g):
        order = g[np.lexsort((ev.start[g], ev.graph[g]))]
        first = np.ones(len(order), dtype=bool)
        first[1:] = ev.graph[order][1:] != ev.graph[order][:-1]
        unit[order[first]] = True
    return unit


def launch_analysis(profile, events: EventFrame | None = None, tl: TimelineResult | None = None,
                    rank: int | None = None) -> LaunchResult:
    ev = events if events is not None else events_of(profile)
    tl = tl if tl is not None else timeline(profile, ev)
    warnings: list[str] = []
    if ev.source != "kernels":
        return LaunchResult([], [], ["CPU-run profile: no kernel launches to analyse"])
    phase = phase_labels(profile, ev.phase)
    sel = np.ones(len(ev), dtype=bool) if rank is None else ev.rank == rank
    # a graph replay is one launch: its first event stands for it in delays and launch counts, and its kernels
    # are not compared one by one with the (single) graph launch call
    unit = _launch_units(ev)
    linked = (ev.launch_start >= 0) & sel & unit
    delay = (ev.start - ev.launch_start).astype(np.float64)
    launch_dur = (ev.launch_end - ev.launch_start).astype(np.float64)
    out = []
    for ph in tl.phases:
        m = sel & (phase == ph)
        lm = m & linked
        n, nl = int(m.sum()), int(lm.sum())
        d = delay[lm]
        short = lm & (ev.dur < launch_dur) & (ev.graph < 0)
        steps = pd.DataFrame({"r": ev.rank[m & unit], "s": ev.step[m & unit]})
        steps = steps[steps["s"] >= 0]
        lps = float(steps.groupby(["r", "s"]).size().median()) if len(steps) else None
        br = tl.breakdown(ph, rank)
        share = br.share("idle_host") if br.span_ns else None
        if nl == 0:
            verdict, reason = "no evidence", "no kernel is linked to its launch call (no correlation ids)"
        elif share is not None and share >= LAUNCH_BOUND_SHARE:
            verdict = "launch-bound"
            reason = (f"the GPU idles {share:.0%} of the wall time waiting for launches "
                      f"(median launch-to-start {np.median(d) / 1e3:.1f} us)")
        else:
            verdict = "not launch-bound"
            reason = f"host-bound idle is {share or 0:.0%} of the wall time (threshold {LAUNCH_BOUND_SHARE:.0%})"
            host = br.share("idle_between") + br.share("idle_prep")
            if host:  # engine steps: the host's own time is not launch overhead
                reason += (f"; the GPU waits {host:.0%} of the wall time for the host's own work inside and between "
                           "the engine steps")
        out.append(LaunchStats(
            ph, n, nl, *(float(np.percentile(d, q)) if nl else None for q in (50, 90, 99)),
            int(short.sum()), int(ev.dur[short].sum()), lps, share, verdict, reason))
    top: list[dict[str, Any]] = []
    if linked.any():
        df = pd.DataFrame({"name": ev.name[linked], "delay": delay[linked]})
        g = df.groupby("name")["delay"].agg(["median", "count"]).sort_values("median", ascending=False).head(10)
        top = [{"name": (n := profile.string(int(k))), "display_name": display_name(n) if n else n,
                "median_delay_ns": float(v["median"]), "count": int(v["count"])} for k, v in g.iterrows()]
    else:
        warnings.append("no kernel carries a launch reference: launch delays unknown")
    return LaunchResult(out, top, warnings)
