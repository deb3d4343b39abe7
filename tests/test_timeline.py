"""GPU timeline by interval union: categories, exposed vs overlapped communication, host-bound idle."""

from __future__ import annotations

import numpy as np
import pytest

from mmprof.analysis.timeline.breakdown import CATEGORIES, timeline
from mmprof.errors import NoEvidence
from mmprof.importers import import_paths
from mmprof.profiles.profile import ProfileBuilder
from tests.conftest import data_file
from tests.profile_builder import BIG, SKINNY, Synth, decode_run


def shares_sum_to_one(tl):
    w = tl.windows
    assert (w[list(CATEGORIES)].sum(axis=1) == w["span_ns"]).all()


def test_overlapping_streams_count_once():
    s = Synth()
    s.kernel("big", 0, 100_000, stream=1, op=BIG)            # compute-bound [0, 100us)
    s.kernel("skinny", 50_000, 100_000, stream=2, op=SKINNY)  # memory-bound [50, 150us), overlaps 50us
    tl = timeline(s.build())
    b = tl.breakdown()
    assert b.span_ns == 150_000
    assert b.time_ns["compute_bound"] == 100_000 and b.time_ns["memory_bound"] == 50_000
    assert b.time_ns["idle_host"] == b.time_ns["idle_other"] == 0
    shares_sum_to_one(tl)


def test_communication_exposed_vs_overlapped():
    s = Synth()
    s.kernel("big", 0, 100_000, stream=1, op=BIG)
    k = s.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 80_000, 50_000, stream=3)
    s.collective(k)
    b = timeline(s.build()).breakdown()
    assert b.comm_total_ns == 50_000
    assert b.comm_overlapped_ns == 20_000                 # [80, 100) under compute
    assert b.time_ns["communication"] == 30_000           # exposed [100, 130)
    assert b.span_ns == 130_000


def test_idle_split_host_bound_vs_other():
    s = Synth()
    s.kernel("a", 0, 10_000, op=SKINNY, launch_at=-5_000, launch_dur=1_000)
    s.kernel("b", 20_000, 10_000, op=SKINNY, launch_at=15_000, launch_dur=1_000)  # launched during the gap
    s.kernel("c", 40_000, 10_000, op=SKINNY, launch_at=1_000, launch_dur=1_000)   # queued long before the gap
    b = timeline(s.build()).breakdown()
    assert b.time_ns["idle_host"] == 10_000
    assert b.time_ns["idle_other"] == 10_000
    assert b.time_ns["memory_bound"] == 30_000 and b.span_ns == 50_000


def test_gap_without_launch_evidence_is_other():
    s = Synth()
    s.kernel("a", 0, 10_000, op=SKINNY)
    s.kernel("b", 30_000, 10_000, op=SKINNY)
    b = timeline(s.build()).breakdown()
    assert b.time_ns["idle_other"] == 20_000 and b.time_ns["idle_host"] == 0


def test_memcpy_and_unattributed_categories():
    s = Synth()
    s.kernel("no_op_kernel", 0, 10_000)                  # no shapes: unattributed, not guessed
    s.memcpy(10_000, 5_000)
    s.kernel("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>", 15_000, 5_000)
    b = timeline(s.build()).breakdown()
    assert b.time_ns["unattributed"] == 10_000
    assert b.time_ns["memcpy"] == 10_000                 # the memcpy row plus the copy kernel


def test_windows_per_phase_and_step_and_median_step():
    p = decode_run(steps=3, layers=2, launch_gap=1_000)
    tl = timeline(p)
    assert tl.phases == ["prefill", "decode"]
    w = tl.windows
    assert sorted(w.loc[w["phase"] == "decode", "step"].tolist()) == [1, 2, 3]
    # per layer: 30+25+20+5+4*12+15 = 143 us of kernels plus 9 gaps of 1 us
    assert tl.step_stats("decode").median_ns == 2 * (143_000 + 9 * 1_000) - 1_000
    b = tl.breakdown("decode")
    assert b.time_ns["idle_host"] == 3 * (2 * 9 - 1) * 1_000   # every gap: launched while the GPU idled
    shares_sum_to_one(tl)


def test_per_rank_windows_and_rank_breakdown():
    p = decode_run(steps=2, layers=1, ranks=2, allreduce_ns=40_000)
    tl = timeline(p)
    assert tl.ranks == [0, 1]
    assert tl.breakdown("decode", 0).time_ns["communication"] == 2 * 40_000
    assert tl.breakdown("decode").span_ns == 2 * tl.breakdown("decode", 1).span_ns


def test_cpu_profile_uses_ops_and_self_time():
    s = Synth(device={"index": 0, "name": "cpu", "vendor": "cpu"})
    parent = s.op(("aten::linear", [[8, 6144], [1536, 6144]], ["c10::BFloat16"] * 2), 0, 10_000)
    s.op(SKINNY, 1_000, 8_000, parent=parent)
    s.op(("c10d::allreduce_", None, None), 15_000, 5_000)
    tl = timeline(s.build())
    assert tl.source == "cpu_ops" and "CPU-run profile" in tl.notes[0]
    b = tl.breakdown()
    assert b.span_ns == 20_000
    assert b.time_ns["unattributed"] == 10_000             # no measured CPU peaks: no roofline
    assert b.time_ns["communication"] == 5_000
    assert b.time_ns["idle_host"] == 5_000                 # the gap between top-level ops
    assert any("CPU" in w for w in tl.warnings)


def test_cpu_profile_with_measured_peaks_gets_bounds():
    dev = {"index": 0, "name": "cpu", "vendor": "cpu", "peaks": {"bf16_tflops": 1.0, "hbm_tbs": 0.1}}
    s = Synth(device=dev)
    s.op(BIG, 0, 10_000)
    s.op(SKINNY, 20_000, 10_000)
    b = timeline(s.build()).breakdown()
    assert b.time_ns["compute_bound"] == 10_000 and b.time_ns["memory_bound"] == 10_000


def test_empty_profile_is_no_evidence():
    with pytest.raises(NoEvidence):
        timeline(ProfileBuilder({}).build())


def test_real_nccl_trace_adds_up():
    p = import_paths([data_file("samples", "kineto", "nccl_data.json.xz")])
    tl = timeline(p)
    shares_sum_to_one(tl)
    b = tl.breakdown()
    assert b.comm_total_ns > 0 and b.time_ns["communication"] <= b.comm_total_ns
    # the A100 board name does not say 40 or 80 GB: no roofline, said out loud
    assert b.time_ns["compute_bound"] == b.time_ns["memory_bound"] == 0
    assert any("A100" in w for w in tl.warnings)
    # busy time is the union over streams: never more than the summed kernel time
    K = p.tables["kernels"]
    busy = sum(b.time_ns[c] for c in CATEGORIES[:5])
    assert busy <= K["dur_ns"].sum() + p.tables["memcpy"]["dur_ns"].sum()


def test_real_h200_trace_has_roofline_bounds():
    p = import_paths([data_file("kineto_own", "h200_probe.json.gz")])
    tl = timeline(p)
    b = tl.breakdown("decode")
    assert b.time_ns["memory_bound"] > 0                  # decode GEMMs at batch 1 are memory-bound on an H200
    assert b.time_ns["compute_bound"] < b.time_ns["memory_bound"]
    shares_sum_to_one(tl)


def test_random_profile_invariants():
    rng = np.random.default_rng(3)
    s = Synth(ranks=2)
    for i in range(300):
        r = int(rng.integers(0, 2))
        st = int(rng.integers(0, 5_000_000))
        s.kernel(f"k{i % 7}", st, int(rng.integers(1, 50_000)), rank=r, stream=int(rng.integers(0, 4)),
                 op=[BIG, SKINNY, None][i % 3], phase="decode", step=st // 1_000_000,
                 launch_at=st - int(rng.integers(0, 20_000)))
    tl = timeline(s.build())
    shares_sum_to_one(tl)
    w = tl.windows
    assert (w["comm_overlapped_ns"] <= w["comm_total_ns"]).all()
    assert (w[list(CATEGORIES)] >= 0).all().all()


def test_events_outside_phases_and_steps_count_busy_time_only():
    s = Synth()
    s.kernel("setup", 0, 5_000, op=SKINNY)                                  # no phase: before the run
    for step in (1, 2):
        s.kernel("k", step * 100_000, 10_000, op=SKINNY, phase="decode", step=step)
        s.kernel("k", step * 100_000 + 20_000, 10_000, op=SKINNY, phase="decode", step=step)
    s.kernel("sampling", 150_000, 2_000, op=SKINNY, phase="decode")        # decode, but outside every step
    s.kernel("teardown", 400_000, 5_000, op=SKINNY)                         # no phase: after the run
    tl = timeline(s.build())
    other = tl.breakdown("other")
    assert other.span_ns == 10_000 and other.time_ns["idle_other"] == 0    # not the 405 us from first to last
    dec = tl.breakdown("decode")
    assert dec.span_ns == 2 * 30_000 + 2_000 and dec.time_ns["idle_other"] == 2 * 10_000
    assert tl.step_stats("decode").median_ns == 30_000
