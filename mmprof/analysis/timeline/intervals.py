"""Fast interval arithmetic over numpy arrays of half-open [start, end) intervals.

Used for GPU busy time (the union of kernel intervals over all streams), per-stream busy, idle gaps and
overlap between two sets (e.g. compute vs communication). Every function takes integer (or float) numpy
arrays of equal length, in any order, and runs in O(n log n) (one sort plus vector operations).

    >>> union_length(np.array([0, 5, 20]), np.array([10, 15, 30]))    # [0,15) + [20,30)
    25
"""

from __future__ import annotations

import numpy as np

__all__ = ["merge_intervals", "union_length", "gaps", "overlap_length", "intersect", "busy_by_key"]


def _arrays(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(starts)
    e = np.asarray(ends)
    if s.shape != e.shape or s.ndim != 1:
        raise ValueError(f"starts and ends must be 1-D arrays of the same length ({s.shape} vs {e.shape})")
    keep = e > s  # empty or negative intervals cover nothing
    if not keep.all():
        s, e = s[keep], e[keep]
    return s, e


def merge_intervals(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """The union of the intervals as disjoint, sorted intervals (touching intervals are merged).

    Returns (starts, ends) arrays; empty arrays when nothing is covered.
    """
    s, e = _arrays(starts, ends)
    if len(s) == 0:
        return s.copy(), e.copy()
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # a new merged interval begins where the start lies beyond everything seen so far
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], run_end[last]


def union_length(starts, ends) -> int | float:
    """Total length covered by at least one interval."""
    ms, me = merge_intervals(starts, ends)
    total = (me - ms).sum()
    return total.item() if hasattr(total, "item") else total


def gaps(starts, ends, lo=None, hi=None) -> tuple[np.ndarray, np.ndarray]:
    """The uncovered stretches between merged intervals, optionally also from `lo` and up to `hi`.

    Returns (starts, ends) of the gaps, sorted; zero-length gaps are dropped.
    """
    ms, me = merge_intervals(starts, ends)
    gs = np.concatenate([np.asarray([lo if lo is not None else 0], dtype=me.dtype), me])
    ge = np.concatenate([ms, np.asarray([hi if hi is not None else 0], dtype=ms.dtype)])
    if lo is None:
        gs, ge = gs[1:], ge[1:]
    if hi is None:
        gs, ge = gs[:-1], ge[:-1]
    if lo is not None:
        gs = np.maximum(gs, lo)
    if hi is not None:
        ge = np.minimum(ge, hi)
    keep = ge > gs
    return gs[keep], ge[keep]


def intersect(a_starts, a_ends, b_starts, b_ends) -> tuple[np.ndarray, np.ndarray]:
    """The intervals covered by both set A and set B (each set is unioned first)."""
    as_, ae = merge_intervals(a_starts, a_ends)
    bs, be = merge_intervals(b_starts, b_ends)
    if len(as_) == 0 or len(bs) == 0:
        return as_[:0], ae[:0]
    # every boundary of the result is a boundary of A or B; test each elementary piece for coverage
    points = np.unique(np.concatenate([as_, ae, bs, be]))
    ps, pe = points[:-1], points[1:]
    in_a = np.searchsorted(as_, ps, side="right") - 1
    in_a = (in_a >= 0) & (ae[np.clip(in_a, 0, None)] >= pe)
    in_b = np.searchsorted(bs, ps, side="right") - 1
    in_b = (in_b >= 0) & (be[np.clip(in_b, 0, None)] >= pe)
    both = in_a & in_b
    return merge_intervals(ps[both], pe[both])


def overlap_length(a: tuple, b: tuple) -> int | float:
    """Length covered by both interval sets; `a` and `b` are (starts, ends) pairs."""
    s, e = intersect(a[0], a[1], b[0], b[1])
    total = (e - s).sum()
    return total.item() if hasattr(total, "item") else total


def busy_by_key(keys, starts, ends) -> dict:
    """Union length per key (e.g. per stream): {key: covered length}."""
    keys = np.asarray(keys)
    starts = np.asarray(starts)
    ends = np.asarray(ends)
    out = {}
    if len(keys) == 0:
        return out
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    bounds = np.flatnonzero(np.r_[True, k[1:] != k[:-1], True])
    for i, j in zip(bounds[:-1], bounds[1:]):
        idx = order[i:j]
        key = k[i].item() if hasattr(k[i], "item") else k[i]
        out[key] = union_length(starts[idx], ends[idx])
    return out
