"""Device work that ran beside other device work: per event, the time it ran while another kernel or copy of the
same rank ran too (a shared expert on vLLM's side stream beside the routed experts on the main stream).

The timeline's windows carry the total (`overlap_ns`: summed event time minus busy time, `breakdown`); this module
says which events it was: `overlapped_ns(ev, idx)` gives, for each event of `idx`, the part of its duration during
which at least one other event of its rank was running. Summed by region it answers "which regions overlapped"
(docs/glossary.md "overlap"). One sort per rank and a prefix sum; no per-event Python.
"""

from __future__ import annotations

import numpy as np

from mmprof.analysis.timeline.phases import time_order


def overlapped_ns(ev, idx: np.ndarray) -> np.ndarray:
    """For each event `idx[i]` of the frame `ev` (kernels and copies, or CPU ops), the ns of its duration during
    which another event of the same rank in `idx` also ran (int64, aligned with `idx`)."""
    idx = np.asarray(idx, dtype=np.int64)
    out = np.zeros(len(idx), dtype=np.int64)
    if not len(idx):
        return out
    start, end = ev.start[idx], np.maximum(ev.end[idx], ev.start[idx])
    rank = ev.rank[idx]
    for r in np.unique(rank).tolist():
        sel = np.flatnonzero(rank == r)
        s, e = start[sel], end[sel]
        n = len(sel)
        t = np.concatenate([s, e])
        d = np.concatenate([np.ones(n, np.int8), np.full(n, -1, np.int8)])
        order = time_order(t, d)                  # ends before starts at the same instant
        t, d = t[order], d[order]
        nact = np.cumsum(d, dtype=np.int64)       # events running from t[i] to t[i + 1]
        seg = np.zeros(len(t), dtype=np.int64)
        seg[:-1] = t[1:] - t[:-1]
        two = np.where(nact >= 2, seg, 0)
        cum = np.concatenate([[0], np.cumsum(two)])   # cum[i]: time with two or more running before point i
        pos = np.empty(2 * n, dtype=np.int64)
        pos[order] = np.arange(2 * n)              # where each start / end landed in the sorted points
        out[sel] = cum[pos[n:]] - cum[pos[:n]]
    return out
