"""Array helpers for the event frame's columns: codes of integer columns, codes of column combinations, per-event
Categoricals from per-key values, read-only concatenation of a kernels and a memcpy column, call ids of graph
replays, and the frame's constants (time categories, source tables).

`mmprof.analysis.timeline.events` builds the frame with them (through `frame_passes`); the analyses that group the
frame's events (timeline breakdown, ranks, diff, by-shape) use the same codes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

CAT_COMPUTE, CAT_MEMORY, CAT_UNATTR, CAT_COMM, CAT_MEMCPY = range(5)
TABLE_KERNELS, TABLE_MEMCPY, TABLE_OPS = 0, 1, 2


def codes(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unique values, inverse) of an integer array, hash-based (order of first appearance)."""
    inv, uniq = pd.factorize(arr)
    return np.asarray(uniq), inv.astype(np.int64)


def group_codes(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(code per row, first row of each code) of the combinations of several columns, codes numbered in order of
    first appearance (the rows `drop_duplicates` keeps, in its order). Mixed radix over factorized columns (a
    missing value is a value of its own), re-densified only where the key could overflow; one hash pass per
    column plus one for the key."""
    n = len(cols[0]) if cols else 0
    key = np.zeros(n, dtype=np.int64)
    radix = 1                                        # distinct values key can take so far
    for col in cols:
        cinv, ncu = column_codes(col)
        if radix * max(ncu, 1) >= 1 << 62:           # re-densify only when the key could overflow
            key = pd.factorize(key)[0].astype(np.int64)
            radix = int(key.max()) + 1 if n else 1
        key = key * ncu + cinv
        radix *= max(ncu, 1)
    key = pd.factorize(key)[0].astype(np.int64)
    first = np.empty(int(key.max()) + 1 if n else 0, dtype=np.int64)
    first[key[::-1]] = np.arange(n - 1, -1, -1)     # repeated indices: the last write (the first row) wins
    return key, first


def column_codes(col: np.ndarray) -> tuple[np.ndarray, int]:
    """(code per row, number of codes) of one column, a bijection of its values: an integer column of a narrow
    range (string ids, Categorical codes, layers, ranks, steps) as its offset from the minimum - no hashing -,
    anything else factorized. `group_codes` numbers the combinations afterwards, so the codes' order is free."""
    n = len(col)
    if n and col.dtype.kind in "iu":
        lo, hi = int(col.min()), int(col.max())
        if hi - lo < max(4 * n, 1 << 16):
            return np.subtract(col, lo, dtype=np.int64), hi - lo + 1   # one pass, widened as it goes
    cinv, cu = pd.factorize(col, use_na_sentinel=False)
    return cinv, len(cu)


def expand(values_per_unique, inv: np.ndarray) -> pd.Categorical:
    """A Categorical with one entry per event from values given per unique key (`inv` maps event -> key)."""
    vals = pd.Series(list(values_per_unique), dtype=object)
    c, cats = pd.factorize(vals, use_na_sentinel=True)
    c = c.astype(np.int8 if len(cats) < 127 else np.int16 if len(cats) < 32767 else np.int64)  # the codes' dtype
    return pd.Categorical.from_codes(c[inv] if len(inv) else np.zeros(0, np.int64), categories=cats)


def concat(a: np.ndarray, b: np.ndarray, copy: bool = True) -> np.ndarray:
    """`np.concatenate([a, b])`, without the copy when `b` is empty (a profile with no memcpy rows): then `a`
    itself, or, for a profile column (`copy`), a read-only view of it - the frame never writes into the profile
    and nothing writes into the frame through it."""
    if len(b) or np.result_type(a, b) != a.dtype:
        return np.concatenate([a, b])
    if not copy:
        return a
    v = a.view()
    v.flags.writeable = False
    return v


def call_ids(op: np.ndarray, graph: np.ndarray, n_launches: int) -> np.ndarray:
    """One id per call of an op: its row, or (op, replay) for work a graph replay ran (a captured op runs once per
    replay). Events with op -1 get ids of their own only per replay; callers mask them."""
    return op * (n_launches + 1) + (graph + 1)
