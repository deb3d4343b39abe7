"""What the analyses say about one run, as tables for the store (computed once, at `store add`).

- `steps`: one row per (rank, phase, step) window of `analysis.timeline.breakdown.timeline`: its span and the time
  of every category (compute-bound, memory-bound, communication, idle host, ...), ns.
- `regions`: kernel (or CPU op) time per (rank, phase, region): the event frame's regions (annotations, module
  frames, shapes), with role and layer.
- `variants`: per (phase, region pattern `layers.*.moe.routed`) the kernel variants that ran there (family,
  variant, library, fast / fallback path) with count, time and share of the region's time; `dominant` marks the
  one with the most time (what `mmprof history` follows from run to run).
- `checks`: the verdict of every built-in check of the default spec (`verify-fastpath`): code, status, message.
- `kernel_classes`: per kernels row the frame's family / variant / library / path / region / role / layer, added
  to the store's `kernels` table so that SQL can select kernels by what they are.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.checks.verify import verify
from mmprof.analysis.timeline.breakdown import CATEGORIES, timeline
from mmprof.analysis.timeline.columns import TABLE_KERNELS
from mmprof.analysis.timeline.events import events_of
from mmprof.errors import MmprofError
from mmprof.labels import region_pattern

CLASS_COLUMNS = ("family", "variant", "library", "path", "region", "role", "layer")
STEP_COLUMNS = ("rank", "phase", "step", "start_ns", "end_ns", "span_ns", *CATEGORIES, "comm_total_ns",
                "comm_overlapped_ns")


def derived_tables(profile: Any) -> tuple[dict[str, pd.DataFrame], dict[str, np.ndarray], list[str]]:
    """(views by name, the kernels table's class columns, notes on what could not be derived)."""
    notes: list[str] = []
    ev = events_of(profile)
    frame = ev.frame()
    views = {"steps": _steps(profile, ev, notes), "regions": _regions(frame), "variants": _variants(frame),
             "checks": _checks(profile, notes)}
    return views, _kernel_classes(profile, ev, frame), notes


def _steps(profile: Any, ev: Any, notes: list[str]) -> pd.DataFrame:
    if not len(ev):
        notes.append("no device events or CPU ops: no steps")
        return pd.DataFrame({c: [] for c in STEP_COLUMNS})
    w = timeline(profile, ev).windows
    return pd.DataFrame({c: (w[c].astype(object) if c == "phase" else w[c]) for c in STEP_COLUMNS}).reset_index(drop=True)


def _regions(frame: pd.DataFrame) -> pd.DataFrame:
    cols = ["rank", "phase", "region", "role", "layer"]
    if not len(frame):
        return pd.DataFrame({c: [] for c in [*cols, "events", "time_ns"]})
    g = frame.groupby(cols, dropna=False, sort=True)["dur_ns"].agg(["count", "sum"]).reset_index()
    return g.rename(columns={"count": "events", "sum": "time_ns"})


def _variants(frame: pd.DataFrame) -> pd.DataFrame:
    cols = ["phase", "pattern", "family", "variant", "library", "path"]
    f = frame[frame["region"].notna()] if len(frame) else frame
    if not len(f):
        return pd.DataFrame({c: [] for c in [*cols, "events", "time_ns", "share", "dominant"]})
    f = f.assign(pattern=f["region"].astype(str).map(region_pattern))
    g = (f.fillna({"variant": "-", "library": "-", "family": "unclassified", "path": "-"})
         .groupby(cols, dropna=False, sort=True)["dur_ns"].agg(["count", "sum"]).reset_index()
         .rename(columns={"count": "events", "sum": "time_ns"}))
    total = g.groupby(["phase", "pattern"], dropna=False)["time_ns"].transform("sum")
    g["share"] = np.where(total > 0, g["time_ns"] / total.where(total > 0, 1), 0.0)
    # the dominant variant: most time in its (phase, pattern); ties to the first in sort order
    order = g.sort_values(["phase", "pattern", "time_ns"], ascending=[True, True, False], kind="stable")
    first = ~order.duplicated(["phase", "pattern"], keep="first")
    g["dominant"] = first.reindex(g.index)
    return g


def _checks(profile: Any, notes: list[str]) -> pd.DataFrame:
    cols = ("code", "id", "kind", "status", "message")
    try:
        res = verify(profile)
    except MmprofError as e:  # nothing to judge (no events at all, ...): no rows, and the reason kept
        notes.append(f"checks not run: {e}")
        return pd.DataFrame({c: [] for c in cols})
    return pd.DataFrame([{c: getattr(r, c) for c in cols} for r in res.results], columns=list(cols))


def _kernel_classes(profile: Any, ev: Any, frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per kernels row: the frame's class columns (None / -1 for a kernel the frame does not hold)."""
    n = profile.n("kernels")
    out = {c: np.full(n, None, dtype=object) for c in CLASS_COLUMNS if c != "layer"}
    out["layer"] = np.full(n, -1, dtype=np.int64)
    if not n or not len(ev):
        return out
    sel = np.flatnonzero(ev.table == TABLE_KERNELS)
    rows = ev.row[sel]
    for c in CLASS_COLUMNS:
        vals = frame[c].to_numpy()[sel]
        if c == "layer":
            out[c][rows] = vals.astype(np.int64)
        else:
            out[c][rows] = np.where(pd.isna(vals), None, vals).astype(object)
    return out
