"""The diff's hot paths at 1M kernels were rewritten for speed (issue 24); each rewrite must give exactly what the
formulation it replaced gave. The truth here is that earlier formulation, run on random inputs with many ties,
repeats and edge cases (empty, one row, huge ranges): numpy's `lexsort`, pandas' `factorize` / `groupby().cummax()` /
`MultiIndex.from_arrays`, float `bincount`, and the per-event phase labels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mmprof.analysis.timeline.columns import column_codes, group_codes
from mmprof.analysis.timeline.events import events_of
from mmprof.analysis.ranks.imbalance import _first_rows, _group_cummax, _phase_factorize, _phases, _run_sums, _sorted_pairs
from mmprof.analysis.timeline.phases import (NO_PHASE, event_phases, phase_codes, phase_labels, phase_mask, sorted_codes,
                                             time_order)
from tests.profile_builder import SKINNY, Synth

RNG = np.random.default_rng(24)


@pytest.mark.parametrize("n,span", [(0, 10), (1, 10), (500, 20), (5000, 10**9), (3000, 3)])
def test_time_order_is_lexsort(n, span):
    t = RNG.integers(0, span, n).astype(np.int64) + 1_700_000_000_000_000_000
    d = RNG.choice(np.array([-1, 0, 1], np.int8), n)
    assert np.array_equal(time_order(t, d), np.lexsort((d > 0, t)))


def test_time_order_falls_back_on_huge_ranges():
    t = np.array([np.iinfo(np.int64).max - 5, -(1 << 62), 0, np.iinfo(np.int64).max - 5], dtype=np.int64)
    d = np.array([1, -1, 0, -1], np.int8)
    assert np.array_equal(time_order(t, d), np.lexsort((d > 0, t)))


@pytest.mark.parametrize("kind", ["narrow", "wide", "neg", "obj"])
def test_group_codes_is_first_appearance_of_combinations(kind):
    """group_codes numbers the distinct rows in first-appearance order (what drop_duplicates keeps); the narrow
    integer columns now skip hashing, the wide ones and objects do not."""
    n = 4000
    a = RNG.integers(0, 5, n)
    b = {"narrow": RNG.integers(0, 40, n), "wide": RNG.integers(0, 1 << 40, n) * (RNG.random(n) < 0.01),
         "neg": RNG.integers(-3, 3, n), "obj": RNG.choice(np.array(["x", None, "y"], dtype=object), n)}[kind]
    key, first = group_codes(a, b)
    df = pd.DataFrame({"a": a, "b": b})
    assert np.array_equal(first, df.drop_duplicates().index.to_numpy())
    assert np.array_equal(key, pd.factorize(pd.MultiIndex.from_arrays([a, pd.Series(b).fillna("<NA>")]))[0])
    codes, k = column_codes(b)
    assert len(pd.unique(codes)) == len(pd.unique(pd.Series(b))) and codes.max() < k  # a bijection into 0..k-1


def test_ranks_helpers_equal_what_they_replaced():
    n = 6000
    w = np.sort(RNG.integers(0, 50, n))
    first = np.r_[True, w[1:] != w[:-1]]
    v = RNG.integers(10**9, 10**9 + 10**6, n)
    assert np.array_equal(_group_cummax(w, first, v), pd.Series(v).groupby(w, sort=False).cummax().to_numpy())
    huge = np.array([0, np.iinfo(np.int64).max // 2, 5, np.iinfo(np.int64).max // 2 - 1])  # the lift would overflow
    hw = np.array([0, 0, 1, 1])
    assert np.array_equal(_group_cummax(hw, np.array([True, False, True, False]), huge),
                          pd.Series(huge).groupby(hw, sort=False).cummax().to_numpy())
    heads = np.flatnonzero(first)
    nw = int(w.max()) + 1
    assert np.array_equal(_run_sums(w, heads, v, nw), np.bincount(w, weights=v, minlength=nw).astype(np.int64))
    codes = pd.factorize(RNG.integers(0, 30, n))[0]
    assert np.array_equal(_first_rows(codes), pd.Series(codes).drop_duplicates().index.to_numpy())
    ks = np.unique(RNG.integers(0, 50 * 97, 800))
    got, want = _sorted_pairs(ks // 97, ks % 97), pd.MultiIndex.from_arrays([ks // 97, ks % 97], names=["w", "reg"])
    assert got.equals(want) and all(a.equals(b) for a, b in zip(got.levels, want.levels)) and got.names == want.names


def _phased(phases_per_kernel, coll_phases=()):
    s = Synth()
    ks = [s.kernel("nvjet_tst_64x8_64x4_1x2_h_bz_TNT", 1000 * i, 500, op=SKINNY, phase=p, step=i % 3)
          for i, p in enumerate(phases_per_kernel)]
    for k, p in zip(ks, coll_phases):
        s.b.row("collectives", rank=0, start_ns=1000, dur_ns=10, name="allreduce", kernel=k, phase=p, step=0)
    return s.build()


@pytest.mark.parametrize("phases,coll", [(["prefill", "decode", None, "decode", "mixed"], ["decode", None]),
                                         ([None, None, None], [None]), ([None, None], ["decode"]),
                                         (["decode"] * 4, [])])
def test_phase_labels_and_codes_from_ids_equal_the_per_event_labels(phases, coll):
    """Phase labels are looked up per distinct id and shared by timeline, ranks and diff; they must equal
    `phase_labels` of the events (and, for ranks, of events and collectives together: NO_PHASE only when
    nothing at all has a phase)."""
    p = _phased(phases, coll)
    ev = events_of(p)
    lab = phase_labels(p, ev.phase)
    assert list(event_phases(p, ev)) == list(lab)
    fast = phase_codes(p, ev.phase)
    ref = sorted_codes(lab, str)
    if fast is not None:
        assert np.array_equal(fast[0], ref[0]) and np.array_equal(fast[1], ref[1])
    else:
        assert (ev.phase < 0).all()
    for ph in ("decode", "prefill", "other", NO_PHASE, "nope"):
        assert np.array_equal(phase_mask(p, ev, ph), lab == ph), ph
    C = p.tables["collectives"]
    both = phase_labels(p, np.concatenate([ev.phase, C["phase"]]))
    ev_ph, c_ph = _phases(p, ev, C["phase"])
    assert list(ev_ph) + list(c_ph) == list(both)
    inv, uniq = _phase_factorize(p, ev, ev_ph, c_ph)
    rinv, runiq = pd.factorize(both)
    assert np.array_equal(inv, rinv) and list(uniq) == list(runiq)


def test_diff_turns_huge_pages_off_only_while_it_runs():
    """`diff_profiles` asks numpy not to madvise huge pages for its short-lived arrays (a kernel hint, no result
    changes) and restores the caller's setting afterwards, also when it raises."""
    from mmprof.analysis.compare.diff import _SET_HUGEPAGE, _short_lived_arrays

    if _SET_HUGEPAGE is None:
        pytest.skip("this numpy has no madvise switch: the diff leaves the setting alone")  # numpy < 1.20 only
    orig = _SET_HUGEPAGE(True)
    for before in (True, False):
        _SET_HUGEPAGE(before)
        with pytest.raises(RuntimeError):
            with _short_lived_arrays():
                assert _SET_HUGEPAGE(False) is False       # off inside
                raise RuntimeError("boom")
        assert _SET_HUGEPAGE(True) is before                # restored
    _SET_HUGEPAGE(orig)
