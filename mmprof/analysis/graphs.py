"""Graph replays in a profile: how many, how much of the device time, how well their kernels are attributed,
and what one graph launch costs next to launching the kernels one by one.

Reads the `graph` / `op_source` columns the importers fill (`mmprof.importers.graphs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mmprof.analysis.events import TABLE_KERNELS, EventFrame

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

    @property
    def attributed_share(self) -> float:
        return sum(self.attributed_ns.values()) / self.kernel_ns if self.kernel_ns else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"replays": self.replays, "kernels": self.kernels, "kernel_ns": self.kernel_ns, "share": self.share,
                "attributed_ns": self.attributed_ns, "attributed_share": self.attributed_share,
                "kernels_per_replay": self.kernels_per_replay, "graph_launch_ns": self.graph_launch_ns,
                "kernel_launch_ns": self.kernel_launch_ns}

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
            "classified by name only, no shapes)"
        return (f"graph replays: {self.replays} launches ran {self.kernels} kernels ({self.share:.0%} of kernel "
                f"time), {self.attributed_share:.0%} of their time attributed to ops ({by}){unattr}{cost}")


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
    return GraphSummary(len(replays), int(g.sum()), int(dur.sum()), float(dur.sum()) / total if total else 0.0,
                        attributed, g.sum() / len(replays), graph_launch, kernel_launch)
