"""The noise band on a step-time change (docs/glossary.md "noise band"): from the steps' spread (bootstrap of the
median, fixed seed) or from repeated runs (`mmprof diff A1 A2 -- B1 B2`); "within noise" claims no direction."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from mmprof.analysis.compare.bands import MIN_STEPS, runs_band, steps_band
from mmprof.analysis.compare.diff import diff_profiles
from mmprof.profiles import save_profile
from tests.profile_builder import Synth, decode_run


def test_steps_band_holds_the_true_ratio_and_says_within_noise():
    rng = np.random.default_rng(7)
    x = 100.0 * (1 + 0.1 * rng.standard_normal(40))     # 10% noise, same median: within noise
    y = 100.0 * (1 + 0.1 * rng.standard_normal(40))
    b = steps_band(x, y)
    assert b.lo < 0 < b.hi and b.within and b.n == (40, 40) and b.basis == "steps"
    b = steps_band(x, 0.7 * x)                          # 30% faster, same noise: outside, and the band holds -30%
    assert not b.within and b.lo <= -0.3 + 1e-12 <= b.hi + 1e-12
    assert steps_band(x, y) == steps_band(x, y)         # a fixed seed: the same band every time
    assert steps_band([1.0] * (MIN_STEPS - 1), [1.0] * 10) is None


def test_runs_band_is_the_change_over_every_pair_of_runs():
    b = runs_band([10.0, 11.0], [9.0, 9.5, 10.5])
    assert (b.lo, b.hi) == pytest.approx((9.0 / 11.0 - 1, 10.5 / 10.0 - 1)) and b.within
    assert not runs_band([10.0, 10.2], [8.0, 8.1]).within
    assert runs_band([10.0], [9.0]) is None              # one run a side: no run-to-run spread


def _jittered(times_us: list[int]):
    """One decode kernel per step, of the given durations: the step times are exactly these."""
    s = Synth()
    t = 0
    for i, d in enumerate(times_us, start=1):
        s.kernel("k", t, d * 1000, phase="decode", step=i, launch_at=t - 100, launch_dur=50)
        t += d * 1000 + 10_000
    return s.build()


def test_a_change_inside_the_steps_noise_claims_no_direction():
    before = _jittered([100, 120, 90, 110, 105, 95, 115])
    after = _jittered([102, 95, 118, 108, 99, 112, 93])          # median 102 vs 105: -2.9%, well inside
    d = diff_profiles(before, after)
    st = d.step()
    assert st.change == pytest.approx(102 / 105 - 1) and st.within_noise
    assert d.answer.faster is None and "no measurable change: within noise" in d.verdict
    far = diff_profiles(before, _jittered([60, 70, 55, 65, 62, 58, 66]))
    assert far.answer.faster == "after" and not far.step().within_noise


def test_cli_takes_repeated_runs_and_bands_from_them(tmp_path, capsys):
    from mmprof.cli import main

    paths = []
    for name, scale in (("a1", 1.0), ("a2", 1.03), ("b1", 0.99), ("b2", 1.02)):
        p = tmp_path / f"{name}.json"
        save_profile(decode_run(steps=2, layers=1, gemm_scale=scale), p)
        paths.append(str(p))
    with pytest.raises(SystemExit) as e:
        main(["diff", paths[0], paths[1], "--", paths[2], paths[3], "--json"])
    assert e.value.code == 0
    doc = orjson.loads(capsys.readouterr().out)
    st = next(s for s in doc["steps"] if s["phase"] == "decode")
    assert st["band"]["basis"] == "runs" and st["band"]["n"] == [2, 2] and st["within_noise"]
    assert doc["answer"]["faster"] is None
    for argv in (["diff", paths[0], paths[1], paths[2]], ["diff", paths[0], "--", paths[1], "--", paths[2]]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1 and "BEFORE... -- AFTER..." in err
