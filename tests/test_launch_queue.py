"""Launch and queueing: launch-to-start delay, short kernels, launches per step, launch-bound verdict."""

from __future__ import annotations

from mmprof.analysis.timeline.launch_queue import launch_analysis
from mmprof.importers import import_paths
from tests.conftest import data_file
from tests.profile_builder import SKINNY, Synth, decode_run


def test_delays_short_kernels_and_launches_per_step():
    s = Synth()
    # queued kernels: launched well before they start (deep queue)
    s.kernel("a", 100_000, 50_000, op=SKINNY, launch_at=10_000, launch_dur=2_000, phase="decode", step=1)
    s.kernel("b", 150_000, 1_000, op=SKINNY, launch_at=12_000, launch_dur=2_000, phase="decode", step=1)  # short
    s.kernel("c", 151_000, 50_000, op=SKINNY, launch_at=14_000, launch_dur=2_000, phase="decode", step=2)
    r = launch_analysis(s.build())
    d = r.phase("decode")
    assert d.kernels == 3 and d.linked == 3
    assert d.delay_p50_ns == 137_000                    # 90k, 138k, 137k -> median 137k
    assert d.short_kernels == 1 and d.short_kernel_ns == 1_000
    assert d.launches_per_step == 1.5                   # steps 1 (2 kernels) and 2 (1 kernel)
    assert d.verdict == "not launch-bound"
    assert r.top_delays[0]["median_delay_ns"] == 138_000


def test_launch_bound_when_gpu_waits_for_launches():
    p = decode_run(steps=3, layers=2, launch_gap=20_000)   # every kernel launched only after the GPU went idle
    d = launch_analysis(p).phase("decode")
    assert d.verdict == "launch-bound"
    assert d.idle_host_share > 0.5
    assert d.delay_p50_ns == 1_500 and d.launches_per_step == 18
    p2 = decode_run(steps=3, layers=2, launch_gap=0)
    assert launch_analysis(p2).phase("decode").verdict == "not launch-bound"


def test_no_launch_links_is_no_evidence_not_a_pass():
    s = Synth()
    s.kernel("a", 0, 10_000, op=SKINNY)
    s.kernel("b", 50_000, 10_000, op=SKINNY)
    r = launch_analysis(s.build())
    assert r.phases[0].verdict == "no evidence"
    assert r.warnings and "launch" in r.warnings[0]


def test_cpu_profile_has_no_launches():
    s = Synth(device={"index": 0, "name": "cpu", "vendor": "cpu"})
    s.op(SKINNY, 0, 1_000)
    r = launch_analysis(s.build())
    assert r.phases == [] and "CPU-run" in r.warnings[0]


def test_real_trace_launch_delays():
    p = import_paths([data_file("kineto_own", "h200_probe.json.gz")])
    d = launch_analysis(p).phase("decode")
    assert d.linked == d.kernels > 0                    # every kernel carries its launch through correlation
    assert 0 < d.delay_p50_ns < 1e6                     # microseconds, not milliseconds
    assert d.launches_per_step and d.launches_per_step > 10
