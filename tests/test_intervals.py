"""Interval union / gaps / overlap helpers, checked against a brute-force integer timeline."""

from __future__ import annotations

import numpy as np

from mmprof.analysis.timeline.intervals import busy_by_key, gaps, intersect, merge_intervals, overlap_length, union_length


def _cover(s, e, n=200):
    m = np.zeros(n, bool)
    for a, b in zip(s, e):
        m[a:b] = True
    return m


def test_union_merge_known():
    s, e = np.array([20, 0, 5, 40, 30]), np.array([30, 10, 15, 45, 35])
    ms, me = merge_intervals(s, e)
    assert ms.tolist() == [0, 20, 40] and me.tolist() == [15, 35, 45]  # [20,30)+[30,35) touch -> merged
    assert union_length(s, e) == 35
    gs, ge = gaps(s, e)
    assert list(zip(gs.tolist(), ge.tolist())) == [(15, 20), (35, 40)]
    gs, ge = gaps(s, e, lo=-5, hi=50)
    assert list(zip(gs.tolist(), ge.tolist())) == [(-5, 0), (15, 20), (35, 40), (45, 50)]


def test_empty_and_degenerate():
    z = np.zeros(0, np.int64)
    assert union_length(z, z) == 0
    assert union_length(np.array([5, 7]), np.array([5, 3])) == 0  # empty and negative intervals cover nothing
    gs, ge = gaps(z, z, lo=0, hi=10)
    assert gs.tolist() == [0] and ge.tolist() == [10]


def test_random_against_brute_force():
    rng = np.random.default_rng(1)
    for _ in range(50):
        n = int(rng.integers(1, 30))
        s = rng.integers(0, 180, n)
        e = s + rng.integers(0, 20, n)
        s2 = rng.integers(0, 180, n)
        e2 = s2 + rng.integers(0, 20, n)
        a, b = _cover(s, e), _cover(s2, e2)
        assert union_length(s, e) == a.sum()
        assert overlap_length((s, e), (s2, e2)) == (a & b).sum()
        i_s, i_e = intersect(s, e, s2, e2)
        assert (_cover(i_s, i_e) == (a & b)).all()
        gs, ge = gaps(s, e, lo=0, hi=200)
        assert (ge - gs).sum() == 200 - a.sum()


def test_busy_by_key():
    keys = np.array([7, 7, 9, 7])
    s = np.array([0, 5, 0, 100])
    e = np.array([10, 12, 3, 101])
    assert busy_by_key(keys, s, e) == {7: 13, 9: 3}
