"""How much of a profile's device time the classification rules explain, per family and per library.

The events are the event frame's (docs/glossary.md "kernel"): kernels (rows of the kernels table, what `summary`
counts as kernels) and copies (memcpy / memset rows), counted apart; on a CPU run the outermost compute ops."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.timeline.columns import TABLE_KERNELS, TABLE_MEMCPY
from mmprof.analysis.timeline.events import EventFrame
from mmprof.names import display_name


@dataclass
class Coverage:
    """How much of the kernel time the rules explain, per family and per library."""

    source: str  # kernels | cpu_ops
    events: int               # every device event classified: kernels + copies (or CPU ops on a CPU run)
    total_ns: int
    unclassified_ns: int
    by_family: list[dict[str, Any]]
    by_library: list[dict[str, Any]]
    unclassified: list[dict[str, Any]]  # names no rule or word places: name, display_name, count, time_ns, op_family
    kernels: int = 0          # rows of the kernels table (what `summary` calls kernels)
    copies: int = 0           # memcpy / memset rows (what `summary` calls memcpy)
    by_evidence: list[dict[str, Any]] = field(default_factory=list)   # evidence, count, time_ns, share
    disagreements: list[dict[str, Any]] = field(default_factory=list)  # name / op pairs whose families differ

    @property
    def unclassified_share(self) -> float:
        return self.unclassified_ns / self.total_ns if self.total_ns else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "events": self.events, "kernels": self.kernels, "copies": self.copies,
                "total_ns": self.total_ns,
                "unclassified_ns": self.unclassified_ns, "unclassified_share": self.unclassified_share,
                "by_family": self.by_family, "by_library": self.by_library, "unclassified": self.unclassified,
                "by_evidence": self.by_evidence, "disagreements": self.disagreements}


def coverage(frame: EventFrame) -> Coverage:
    """Time share per family / library and the unclassified share of an event frame's device events."""
    ev = frame.frame()
    df = pd.DataFrame({"family": ev["family"], "library": ev["library"], "rule": ev["rule"], "name": ev["name"],
                       "dur": ev["dur_ns"].astype("int64").clip(lower=0)})
    source = frame.source
    total = int(df["dur"].sum())

    def group(col: str) -> list[dict[str, Any]]:
        g = df.assign(key=df[col].fillna("(none)")).groupby("key", sort=False)["dur"].agg(["count", "sum"])
        g = g.sort_values("sum", ascending=False)
        return [{col: k, "count": int(r["count"]), "time_ns": int(r["sum"]),
                 "share": (float(r["sum"]) / total if total else 0.0)} for k, r in g.iterrows()]

    unc = df[df["rule"].isna()]
    by_ev: list[dict[str, Any]] = []
    if frame.evidence is not None:
        df["evidence"] = np.asarray(frame.evidence.astype(object))
        df.loc[ev["kind"] == "memcpy", "evidence"] = "memcpy"
        by_ev = group("evidence")
        for r in by_ev:
            r["evidence"] = "none" if r["evidence"] == "(none)" else r["evidence"]
    # the names no rule or word places: those nothing placed, and those only their launching op placed (a rule
    # for them would let the name speak for itself)
    named_unc = df[df["rule"].isna() | (df.get("evidence", pd.Series(index=df.index, dtype=object)) == "op")]
    ug = named_unc.groupby("name", sort=False).agg(count=("dur", "count"), sum=("dur", "sum"),
                                                   op_family=("family", "first"), rule=("rule", "first"))
    ug = ug.sort_values("sum", ascending=False)
    stats = frame.evidence_stats
    dis = [dict(d, display_name=display_name(d["name"] or "")) for d in (stats.disagreements if stats else [])]
    kernels = int((frame.table == TABLE_KERNELS).sum()) if source == "kernels" else 0
    copies = int((frame.table == TABLE_MEMCPY).sum()) if source == "kernels" else 0
    return Coverage(source=source, events=len(df), total_ns=total, unclassified_ns=int(unc["dur"].sum()),
                    kernels=kernels, copies=copies,
                    by_family=group("family"), by_library=group("library"),
                    unclassified=[{"name": k, "display_name": display_name(k), "count": int(r["count"]),
                                   "time_ns": int(r["sum"]),
                                   "op_family": None if pd.isna(r["rule"]) else r["op_family"]}
                                  for k, r in ug.iterrows()],
                    by_evidence=by_ev, disagreements=dis)
