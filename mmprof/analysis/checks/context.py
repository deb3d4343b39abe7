"""What every check sees (`Context`), what it returns (`CheckResult`), and helpers they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.checks.spec import Assertion, glob_mask
from mmprof.labels import region_pattern
from mmprof.units import fmt_ns


@dataclass
class CheckResult:
    """The verdict of one assertion or built-in check. status: pass | fail | no_evidence."""

    id: str
    code: str
    kind: str
    status: str
    message: str
    description: str = ""
    evidence: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "code": self.code, "kind": self.kind, "status": self.status, "message": self.message,
                "description": self.description, "evidence": self.evidence, "data": self.data}


MAX_EVIDENCE = 12


@dataclass
class Context:
    events: Any  # DataFrame: mmprof.analysis.events.EventFrame.frame() without memcpy rows
    dispatch: Any  # DataFrame of the dispatch table, strings decoded
    source: str
    meta: dict[str, Any]
    sparse_layers: Any = None
    moe_layers: Any = None


def dispatch_frame(profile: Any) -> Any:
    cols = {}
    for c in ("rank", "step", "layer"):
        cols[c] = profile.col("dispatch", c)
    for c in ("phase", "op", "impl", "requested", "reason", "scope"):
        cols[c] = profile.col("dispatch", c, decode=True)
    return pd.DataFrame(cols)


def top_kernels(df: Any, n: int = 5) -> list[str]:
    if not len(df):
        return []
    g = df.groupby("name", sort=False)["dur_ns"].agg(["count", "sum"]).sort_values("sum", ascending=False).head(n)
    return [f"{name[:110]} x{int(r['count'])} ({fmt_ns(r['sum'])})" for name, r in g.iterrows()]


def region_mask(events: Any, globs: tuple[str, ...]) -> Any:
    if not globs or "*" in globs:  # "*" is every event, attributed to a region or not
        return np.ones(len(events), dtype=bool)
    return glob_mask(events["region"], globs)


def scoped(a: Assertion, events: Any) -> Any:
    m = region_mask(events, a.region)
    if a.phase:
        m = m & (events["phase"] == a.phase).to_numpy(dtype=bool)
    if a.layers is not None:
        m = m & events["layer"].isin(list(a.layers)).to_numpy(dtype=bool)
    return events[m]


def seen_regions(events: Any) -> str:
    roles = events["region"].dropna()
    if not len(roles):
        return "no event is attributed to any region (no scope annotations in this profile)"
    pats = sorted({region_pattern(r) for r in roles})
    return "regions present: " + ", ".join(pats[:10]) + (" ..." if len(pats) > 10 else "")
