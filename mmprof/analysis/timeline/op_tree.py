"""The nesting of CPU ops: parents from time containment (for importers that could not record `parent`) and the
flagged ancestors of every op, by pointer jumping. Used by the event frame of a CPU run (its outermost compute
ops) and by shape matching (the op under which a GEMM ran).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def infer_parents(profile: Any) -> np.ndarray:
    """Op nesting from time containment per (rank, thread), for importers that could not record `parent`."""
    ops = profile.tables["ops"]
    n = profile.n("ops")
    parent = np.full(n, -1, dtype=np.int64)
    start, end = ops["start_ns"], ops["start_ns"] + np.maximum(ops["dur_ns"], 0)
    order = np.lexsort((-end, start, ops["tid"], ops["rank"]))
    stack: list[int] = []
    key = None
    for i in order.tolist():
        k = (ops["rank"][i], ops["tid"][i])
        if k != key:
            stack, key = [], k
        while stack and start[i] >= end[stack[-1]]:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


def ancestors_scan(parent: np.ndarray, flag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(has_flagged_ancestor, topmost_flagged_ancestor_index or -1) by pointer jumping up `parent`."""
    n = len(parent)
    has = np.zeros(n, dtype=bool)
    top = np.full(n, -1, dtype=np.int64)
    cur = parent.astype(np.int64).copy()
    for _ in range(256):  # call stacks are far shallower; the bound guards against a cyclic parent column
        live = cur >= 0
        if not live.any():
            break
        hit = np.zeros(n, dtype=bool)
        hit[live] = flag[cur[live]]
        has |= hit
        top = np.where(hit, cur, top)
        nxt = np.full(n, -1, dtype=np.int64)
        nxt[live] = parent[cur[live]]
        cur = nxt
    return has, top
