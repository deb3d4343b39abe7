"""Graph replays in a profile: how many, how much of the device time, how well their kernels are attributed,
and what one graph launch costs next to launching the kernels one by one.

Reads the `graph` / `op_source` columns the importers fill (`mmprof.importers.graph_replays`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mmprof.analysis.timeline.columns import TABLE_KERNELS
from mmprof.analysis.timeline.events import EventFrame

SOURCES = ("capture", "eager", "ref")


@dataclass
class GraphSummary:
    replays: int
    kernels: int
    kernel_ns: int                 # device time of the replayed kernels
    share: float                   # of all kernel time
    attributed_ns: dict[str, int] = field(default_factory=dict)   # by op source
    kernels_per_replay: float | None = None
    graph_launch_ns: float | None = None     # median duration of one graph launch call
    kernel_launch_ns: float | None = None    # median duration of one kernel launch call outside graphs
    region_ns: dict[str, int] = field(default_factory=dict)       # replayed kernel time with a region, by label source
    no_region: int = 0                       # replayed kernels in no region
    no_region_ns: int = 0
    ambiguous: int = 0                       # replayed kernels whose equal-score alignments disagreed (left out)
    all_region_share: float | None = None    # share of all kernel time (eager and replayed) that has a region

    @property
    def attributed_share(self) -> float:
        return sum(self.attributed_ns.values()) / self.kernel_ns if self.kernel_ns else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"replays": self.replays, "kernels": self.kernels, "kernel_ns": self.kernel_ns, "share": self.share,
                "attributed_ns": self.attributed_ns, "attributed_share": self.attributed_share,
                "kernels_per_replay": self.kernels_per_replay, "graph_launch_ns": self.graph_launch_ns,
                "kernel_launch_ns": self.kernel_launch_ns, "region_ns": self.region_ns,
                "region_share": self.region_share, "no_region": self.no_region, "no_region_ns": self.no_region_ns,
                "ambiguous": self.ambiguous, "all_region_share": self.all_region_share}

    @property
    def region_share(self) -> float:
        return sum(self.region_ns.values()) / self.kernel_ns if self.kernel_ns else 0.0

    def line(self) -> str:
        """One sentence for the report."""
        by = ", ".join(f"{s} {v / self.kernel_ns:.0%}" for s, v in self.attributed_ns.items() if v) or "none"
        cost = ""
        if self.graph_launch_ns is not None and self.kernels_per_replay:
            cost = f"; one graph launch call takes {self.graph_launch_ns / 1e3:.1f} us for " \
                   f"{self.kernels_per_replay:.0f} kernels"
            if self.kernel_launch_ns is not None:
                cost += (f" (one by one: {self.kernels_per_replay:.0f} x {self.kernel_launch_ns / 1e3:.1f} us = "
                         f"{self.kernels_per_replay * self.kernel_launch_ns / 1e3:.1f} us)")
        unattr = "" if self.attributed_share >= 0.999 else \
            f"; {1 - self.attributed_share:.0%} of it has no op (no capture or eager run of the same kernels: " \
            "no shapes)"
        return (f"graph replays: {self.replays} launches ran {self.kernels} kernels ({self.share:.0%} of kernel "
                f"time), {self.attributed_share:.0%} of their time attributed to ops ({by}){unattr}{cost}"
                + self.region_line())

    def region_line(self) -> str:
        """How much of the replayed time has a region, and by which evidence."""
        if not self.kernel_ns:
            return ""
        by = ", ".join(f"{s} {v / self.kernel_ns:.0%}" for s, v in sorted(self.region_ns.items(), key=lambda x: -x[1])
                       if v >= 0.005 * self.kernel_ns) or "none"
        out = f"; regions for {self.region_share:.0%} of their time ({by})"
        if self.no_region:
            out += (f", {self.no_region} kernels ({self.no_region_ns / self.kernel_ns:.0%}) in none"
                    + (f" ({self.ambiguous} ambiguous)" if self.ambiguous else ""))
        if self.all_region_share is not None:
            out += f"; all kernels: {self.all_region_share:.0%} of kernel time in regions"
        return out


def graph_summary(profile: Any, ev: EventFrame, rank: int | None = None) -> GraphSummary | None:
    """Summary of the graph replays (None when the profile has none)."""
    if ev.source != "kernels":
        return None
    k = ev.table == TABLE_KERNELS
    if rank is not None:
        k &= ev.rank == rank
    g = k & (ev.graph >= 0)
    if not g.any():
        return None
    K = profile.tables["kernels"]
    rows = ev.row[g]
    src = K["op_source"][rows]
    dur = ev.dur[g]
    attributed = {}
    for s in SOURCES:
        code = profile.strings.index(s) if s in profile.strings else None
        if code is not None:
            attributed[s] = int(dur[src == code].sum())
    replays = np.unique(ev.graph[g])
    L = profile.tables["launches"]
    graph_launch = float(np.median(L["dur_ns"][replays])) if len(replays) else None
    eager = k & (ev.graph < 0) & (ev.launch_start >= 0)
    kernel_launch = float(np.median((ev.launch_end - ev.launch_start)[eager])) if eager.any() else None
    total = int(ev.dur[k].sum())
    has = np.asarray(ev.region[g] != None)  # noqa: E711
    srcs = np.asarray(ev.label_source[g], dtype=object)
    region_ns: dict[str, int] = {}
    for s in sorted({str(x) for x in srcs[has].tolist()}):  # sorted: the same JSON on every run
        region_ns[str(s)] = int(dur[has & (srcs == s)].sum())
    all_has = np.asarray(ev.region[k] != None)  # noqa: E711
    al = getattr(ev, "graph_align", None)
    return GraphSummary(len(replays), int(g.sum()), int(dur.sum()), float(dur.sum()) / total if total else 0.0,
                        attributed, g.sum() / len(replays), graph_launch, kernel_launch, region_ns,
                        int((~has).sum()), int(dur[~has].sum()), int(al.ambiguous) if al is not None else 0,
                        float(ev.dur[k][all_has].sum()) / total if total else None)
