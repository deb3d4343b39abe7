"""Numeric helpers for the Kineto importer: tolerant int/ns conversion and interval nesting per lane.

`Lanes` holds intervals on lanes (a CPU thread, or a GPU device/stream), computes each interval's parent
and depth with one sort and a stack sweep, and answers "innermost interval enclosing time t on lane L"
for many queries at once with vectorised parent-chain walks. Everything is O(n log n).
"""

from __future__ import annotations

import re

import numpy as np

from mmprof.profiles.schema import MAX_TIME_NS

_TRAILING_INT = re.compile(r"\d+$")

# A scope path (`kernels.scope_path`) holds at most this many of the outermost scopes: deeper ones are still scopes
# (their own name, depth and parent), but joining every ancestor's name at every depth would be quadratic in the
# nesting (20,000 nested annotations: gigabytes of paths). Real traces nest a few dozen deep. docs/limits.md.
MAX_PATH_DEPTH = 256


_I64 = 2**63


def to_int(v) -> int:
    """An id-like value (int, float, numeric or "stream 7"-style string) as an int64; -1 when unknown or when it
    does not fit 64 bits (a 2**64 correlation id links nothing rather than crash)."""
    if v is None:
        return -1
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v if -_I64 <= v < _I64 else -1
    if isinstance(v, float):
        return int(v) if v == v and abs(v) < 2.0**63 else -1
    if isinstance(v, str):
        try:
            n = int(v, 0)
        except ValueError:
            try:
                f = float(v)
                n = int(f) if f == f and abs(f) < 2.0**63 else -1
            except ValueError:
                m = _TRAILING_INT.search(v)  # old traces: "tid": "stream 7"
                n = int(m.group(0)) if m and len(m.group(0)) < 19 else -1
        return n if -_I64 <= n < _I64 else -1
    return -1


def int_array(vals: list) -> np.ndarray:
    try:
        return np.array(vals, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array([to_int(v) for v in vals], dtype=np.int64)


_MAX_US = MAX_TIME_NS / 1000


def finite_us(us: list) -> tuple[np.ndarray, np.ndarray]:
    """µs values as floats and a mask of the usable ones (numbers, finite, within MAX_TIME_NS)."""
    try:
        a = np.asarray(us, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        a = np.array([float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and abs(x) < 1e300
                      else np.nan for x in us], dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.isfinite(a) & (np.abs(a) <= _MAX_US)
    return a, ok


def to_ns(us: list) -> np.ndarray:
    """µs (float or int) -> integer ns, exact for integer µs and ns-resolution floats. Values that are not usable
    (see `finite_us`) become 0; callers drop them first."""
    a, ok = finite_us(us)
    a = np.where(ok, a, 0.0)
    ip = np.floor(a)
    return ip.astype(np.int64) * 1000 + np.rint((a - ip) * 1000.0).astype(np.int64)


SWEEP_BLOCK = 1 << 18


class Lanes:
    """Interval sets per lane (a CPU thread or a GPU stream) with a parent forest, for enclosing queries."""

    def __init__(self, lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        self.lane, self.start, self.end = lane, start, end
        n = len(start)
        self.order = np.lexsort((-(end - start), start, lane)) if n else np.zeros(0, np.int64)
        self.parent = np.full(n, -1, np.int64)
        self.depth = np.zeros(n, np.int64)
        # stack sweep per lane (sorted by lane, start, longest first), in blocks of SWEEP_BLOCK intervals so that
        # the Python lists it walks stay small however many intervals there are; the stack holds (row, end)
        parent, depth = self.parent, self.depth
        stack: list[int] = []
        ends: list[int] = []
        cur = None
        for a in range(0, n, SWEEP_BLOCK):
            ob = self.order[a:a + SWEEP_BLOCK]
            rows, lns, sts, ens = ob.tolist(), lane[ob].tolist(), start[ob].tolist(), end[ob].tolist()
            pb = [-1] * len(rows)
            db = [0] * len(rows)
            for k, i in enumerate(rows):
                if lns[k] != cur:
                    cur = lns[k]
                    stack, ends = [], []
                s = sts[k]
                while ends and ends[-1] <= s:
                    ends.pop()
                    stack.pop()
                if stack:
                    pb[k] = stack[-1]
                    db[k] = len(stack)
                stack.append(i)
                ends.append(ens[k])
            parent[ob] = pb
            depth[ob] = db
        self.max_depth = int(depth.max()) if n else 0
        # per lane: slice of `order`
        sl = lane[self.order]
        self.lanes: dict[int, tuple[int, int]] = {}
        if n:
            bounds = np.flatnonzero(np.r_[True, sl[1:] != sl[:-1], True])
            for a, z in zip(bounds[:-1], bounds[1:]):
                self.lanes[int(sl[a])] = (int(a), int(z))
        self.sorted_start = start[self.order]

    def enclosing(self, qlane: np.ndarray, t: np.ndarray) -> np.ndarray:
        """For each query (lane, time): the innermost interval on that lane with start <= t < end, or -1."""
        out = np.full(len(t), -1, np.int64)
        if not self.lanes or not len(t):
            return out
        for ln, (a, z) in self.lanes.items():
            q = np.flatnonzero(qlane == ln)
            if not len(q):
                continue
            tq = t[q]
            pos = np.searchsorted(self.sorted_start[a:z], tq, side="right") - 1
            cand = np.where(pos >= 0, self.order[a + np.clip(pos, 0, None)], -1)
            for _ in range(self.max_depth + 2):
                ok = cand >= 0
                bad = ok & (self.end[np.where(ok, cand, 0)] <= tq)
                if not bad.any():
                    break
                cand[bad] = self.parent[cand[bad]]
            out[q] = cand
        return out
