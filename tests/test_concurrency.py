"""Device work that ran beside other device work (docs/glossary.md "overlap"): per event (`concurrency.overlapped_ns`)
and per timeline window (`overlap_ns`: GPU busy = kernel time - overlap), against a brute-force recount."""

from __future__ import annotations

import numpy as np
import pytest

from mmprof.analysis.timeline.breakdown import BUSY_CATEGORIES, timeline
from mmprof.analysis.timeline.concurrency import overlapped_ns
from mmprof.analysis.timeline.events import events_of
from mmprof.importers import import_paths
from tests.conftest import data_file
from tests.profile_builder import Synth


def _brute(starts, ends, ranks):
    """Per event, the time during which another event of its rank also ran (plain Python)."""
    out = []
    for i, (s, e, r) in enumerate(zip(starts, ends, ranks)):
        pts = sorted({s, e} | {x for j, (s2, e2, r2) in enumerate(zip(starts, ends, ranks))
                               if j != i and r2 == r for x in (s2, e2) if s < x < e})
        tot = 0
        for a, b in zip(pts, pts[1:]):
            if any(j != i and r2 == r and s2 < b and e2 > a for j, (s2, e2, r2) in enumerate(zip(starts, ends, ranks))):
                tot += b - a
        out.append(tot)
    return out


def test_overlapped_time_per_event_matches_a_brute_force_recount():
    s = Synth(ranks=2)
    # rank 0: a 60 us kernel on the main stream, a 40 us one on the side stream from 10 us, a third from 90 us;
    # rank 1: the same times (ranks never overlap each other: separate devices)
    for r in (0, 1):
        s.kernel("routed", 0, 60_000, rank=r, stream=7, phase="decode", step=1)
        s.kernel("shared", 10_000, 40_000, rank=r, stream=229, phase="decode", step=1)
        s.kernel("next", 90_000, 5_000, rank=r, stream=7, phase="decode", step=1)
        s.kernel("tail", 92_000, 10_000, rank=r, stream=229, phase="decode", step=1)
    ev = events_of(s.build())
    idx = np.arange(len(ev))
    got = overlapped_ns(ev, idx).tolist()
    assert got == _brute(ev.start.tolist(), ev.end.tolist(), ev.rank.tolist())
    assert sorted(got[:4]) == [3_000, 3_000, 40_000, 40_000]
    w = timeline(s.build()).windows
    w = w[w["step"] == 1]
    busy = w[list(BUSY_CATEGORIES)].sum(axis=1)
    # per window: summed event time = busy + overlap: 60 + 40 + 5 + 10 = 115 us = 72 us busy ([0, 60] and [90, 102])
    # + 43 us overlap (40 us of the side kernel under the main one, 3 us of the tail under `next`), per rank
    assert (busy == 72_000).all() and (w["overlap_ns"] == 43_000).all() and (w["span_ns"] == 102_000).all()


def test_vllm_side_stream_overlap_on_a_real_trace():
    # vLLM 0.26's graph run of M3 ran the shared expert on its side stream (VLLM_DISABLE_SHARED_EXPERTS_STREAM=0,
    # the sample's summary); the eager run had it off (=1): overlap only in the graph run
    for name, side_stream in (("m3_graphs_b8", True), ("m3_eager_b8", False)):
        p = import_paths([data_file("samples", "vllm", f"{name}.pt.trace.json.xz")])
        ev = events_of(p)
        o = overlapped_ns(ev, np.arange(len(ev)))
        if not side_stream:
            assert o.sum() == 0
            continue
        k = np.flatnonzero(o > 0)
        assert len(np.unique(ev.stream[k])) >= 2          # the overlap is between streams
        sample = k[:40]                                   # a brute-force recount on a sample of them
        lo, hi = ev.start[sample].min(), ev.end[sample].max()
        near = np.flatnonzero((ev.end > lo) & (ev.start < hi))
        ref = dict(zip(near.tolist(), _brute(ev.start[near].tolist(), ev.end[near].tolist(), ev.rank[near].tolist())))
        assert [int(o[i]) for i in sample] == [ref[i] for i in sample.tolist()]
        roles = {ev.role[i] for i in k}
        assert "moe.shared" in roles                      # the shared expert is what ran beside the routed experts
        tl = timeline(p, ev)
        rows = tl.step_rows("decode")
        assert (rows["overlap_ns"] > 0).all()
        # per decode window: busy + overlap = the device time inside the window (events clipped to it; the
        # sampler's kernels launched between two steps are the window's too)
        for _, r in rows.iterrows():
            inside = np.clip(np.minimum(ev.end, r["end_ns"]) - np.maximum(ev.start, r["start_ns"]), 0, None)
            busy = sum(r[c] for c in BUSY_CATEGORIES)
            assert busy + r["overlap_ns"] == int(inside[ev.rank == r["rank"]].sum())
