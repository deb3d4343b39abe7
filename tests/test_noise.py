"""Measured numbers with their noise (mmprof/analysis/timeline/noise.py; issue 25: `run --baseline` printed dilation 0.46x
unflagged, and a decode speed-up of 1.59x in one run was 1.16x in the next with no noise band)."""

from __future__ import annotations

import pytest

from mmprof.analysis.timeline.noise import measurement_warnings, speedup_noise, spread


def _run(prefill_all, decode_all, dil_decode=1.5, batch_tok=(100.0, 10.0)):
    pre, dec = sorted(prefill_all)[len(prefill_all) // 2], sorted(decode_all)[len(decode_all) // 2]
    return {"timings": {"plain": {"prefill_ms_all": prefill_all, "decode_ms_all": decode_all,
                                  "repeats": len(decode_all), "prefill_ms": pre, "decode_ms": dec}},
            "dilation_by_phase": {"full": {"prefill": 2.0, "decode": dil_decode, "total": 1.8}},
            "tokens_per_s": {"plain": {"prefill": batch_tok[0], "decode": batch_tok[1]}}}


def test_spread_is_range_over_median():
    assert spread([90.0, 100.0, 120.0]) == pytest.approx(0.3)
    assert spread([100.0]) is None and spread([]) is None


def test_dilation_below_one_is_flagged_with_the_spread():
    w = measurement_warnings(_run([10, 11, 12], [100.0, 130.0, 200.0], dil_decode=0.46))
    assert len(w) == 1 and "0.46x < 1 (full capture, decode)" in w[0] and "spread 77%" in w[0]  # 100/130
    assert measurement_warnings(_run([10, 11, 12], [100, 101, 102])) == []


def test_single_plain_run_has_no_noise_band():
    assert any("one plain run" in x for x in measurement_warnings(_run([10], [100])))
    assert speedup_noise(_run([10], [100]), _run([10], [100]), "decode") == (None, None)


def test_speedup_inside_the_spread_is_flagged():
    """Before: decode runs 100-130 ms (spread 30%/110 = 27%), after 80-90 (12%): a 1.16x speed-up is inside the
    39% band, a 2x one is not."""
    before = _run([10, 10, 10], [100.0, 110.0, 130.0], batch_tok=(100.0, 10.0))
    after = _run([10, 10, 10], [80.0, 85.0, 90.0], batch_tok=(100.0, 11.6))
    band, inside = speedup_noise(before, after, "decode")
    assert band == pytest.approx(30 / 110 + 10 / 85) and inside is True
    after2 = _run([10, 10, 10], [50.0, 51.0, 52.0], batch_tok=(100.0, 20.0))
    assert speedup_noise(before, after2, "decode")[1] is False
