"""FLOPs/bytes from shapes, the device peak table, and per-kernel roofline bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mmprof.analysis.attribution.flops import (
    attention_cost,
    cost_from_text,
    op_cost,
    op_family,
    sparse_attention_cost,
)
from mmprof.analysis.attribution.roofline import (
    BOUND_COMPUTE,
    BOUND_MEMORY,
    BOUND_UNKNOWN,
    event_roofline,
    summarise_bounds,
)
from mmprof.hardware import PEAKS, lookup, normalise
from tests.profile_builder import BF16, BIG, SKINNY, Synth

F32 = "float"


def test_mm_flops_and_bytes():
    c = op_cost("aten::mm", [[8, 6144], [6144, 1536]], [BF16, BF16])
    assert c.family == "gemm" and c.dtype_class == "bf16"
    assert c.flops == 2 * 8 * 6144 * 1536
    assert c.bytes == (8 * 6144 + 6144 * 1536 + 8 * 1536) * 2


def test_addmm_linear_bmm_matmul():
    a = op_cost("aten::addmm", [[1536], [8, 6144], [6144, 1536], [], []], [F32, F32, F32, "Scalar", "Scalar"])
    assert a.flops == 2 * 8 * 6144 * 1536 and a.dtype_class == "fp32"
    assert a.bytes == (8 * 6144 + 6144 * 1536 + 8 * 1536 + 1536) * 4
    lin = op_cost("aten::linear", [[2, 4, 64], [128, 64], [128]], [BF16, BF16, BF16])
    assert lin.flops == 2 * 8 * 64 * 128 + 8 * 128
    b = op_cost("aten::bmm", [[16, 32, 64], [16, 64, 8]], [BF16, BF16])
    assert b.flops == 2 * 16 * 32 * 64 * 8
    m = op_cost("aten::matmul", [[2, 12, 7, 64], [2, 12, 64, 7]], [F32, F32])   # eager attention scores
    assert m.flops == 2 * 24 * 7 * 64 * 7
    bc = op_cost("aten::matmul", [[3, 5, 16], [16, 4]], [F32, F32])               # broadcast weight
    assert bc.flops == 2 * 3 * 5 * 16 * 4
    assert op_cost("aten::mm", [[8, 6144], [1536, 6144]], [BF16, BF16]) is None   # inner dims disagree


def test_grouped_mm_with_and_without_tokens_per_expert():
    dims, types = [[32, 6144], [4, 6144, 1536], [4]], [BF16, BF16, "int"]
    c = op_cost("aten::_grouped_mm", dims, types)
    assert c.family == "grouped_gemm" and c.flops == 2 * 32 * 6144 * 1536
    assert c.bytes == (32 * 6144 + 32 * 1536) * 2 + 4 * 6144 * 1536 * 2     # all 4 experts read (upper bound)
    t = op_cost("aten::_grouped_mm", dims, types, tokens_per_expert=[20, 12, 0, 0])
    assert t.flops == c.flops and t.bytes == (32 * 6144 + 32 * 1536) * 2 + 2 * 6144 * 1536 * 2   # 2 active experts
    assert op_cost("aten::_grouped_mm", dims, types, tokens_per_expert=[1, 2]) is None            # wrong expert count
    e3 = op_cost("aten::_grouped_mm", [[4, 8, 64], [4, 64, 32]], [BF16, BF16])
    assert e3.flops == 2 * 4 * 8 * 64 * 32


def test_attention_dense_flash_and_block_sparse():
    c = op_cost("aten::_scaled_dot_product_flash_attention", [[1, 48, 8, 128], [1, 8, 4096, 128], [1, 8, 4096, 128]],
                [BF16] * 3)
    fl, by = attention_cost(1, 48, 8, 4096, 128, kv_heads=8)
    assert c.family == "attention" and c.flops == fl == 2 * 48 * 8 * 4096 * 256 and c.bytes == by
    f = op_cost("aten::_flash_attention_forward", [[2, 16, 8, 64], [2, 32, 8, 64], [2, 32, 8, 64]], [BF16] * 3)
    assert f.flops == 2 * 2 * 8 * 16 * 32 * 128
    sfl, _ = sparse_attention_cost(1, 48, 8, blocks_selected=16, block_size=64, head_dim=128, kv_heads=8)
    assert sfl == attention_cost(1, 48, 8, 16 * 64, 128, kv_heads=8)[0] and sfl < fl


def test_pointwise_and_unknown_ops():
    n = op_cost("aten::rms_norm", [[8, 6144], [], [6144], []], [BF16, "", BF16, ""])
    assert n.family == "norm" and n.bytes == 2 * 8 * 6144 * 2 and n.flops == 4 * 8 * 6144
    add = op_cost("aten::add", [[8, 6144], [8, 6144], []], [BF16, BF16, "Scalar"])
    assert add.flops == 8 * 6144 and add.bytes == 3 * 8 * 6144 * 2
    assert op_cost("aten::frobnicate", [[8, 8]], [F32]) is None                   # unknown op: no guess
    assert op_cost("aten::mm", [[], []], ["", ""]) is None                        # no shapes: no guess
    assert cost_from_text("aten::mm", None, None) is None
    assert cost_from_text("aten::mm", "[[2, 3], [3, 4]]", '["float", "float"]').flops == 48
    assert op_family("c10d::allreduce_") == "communication"


def test_hardware_lookup_and_unknown_devices():
    assert normalise("AMD Instinct MI355X") == "mi355x" and normalise(None, "gfx950") == "mi355x"
    assert normalise("NVIDIA H200") == "h200" and normalise("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert normalise(None, "gfx942") is None                                       # MI300X or MI325X: not certain
    p, w = lookup({"name": "NVIDIA H200", "peak_key": "H200"})
    assert p.key == "h200" and w is None and math.isclose(p.ridge("bf16"), 989.4 / 4.8)
    assert PEAKS["mi355x"].ridge("bf16") == pytest.approx(314.6, abs=0.1)
    p, w = lookup({"name": "NVIDIA A100-PG509-200", "peak_key": "A100"})
    assert p is None and "cannot be told" in w
    p, w = lookup({"name": "Some Future GPU"})
    assert p is None and "unknown device" in w
    p, w = lookup({"name": "Intel Xeon", "vendor": "cpu"})
    assert p is None and "CPU" in w
    p, w = lookup({"name": "Intel Xeon", "vendor": "cpu", "peaks": {"fp32_tflops": 1.5, "hbm_tbs": 0.05}})
    assert p.key == "measured" and p.flops_per_s("fp32") == 1.5e12 and p.flops_per_s("bf16") is None
    assert lookup(None)[0] is None


def _kernels_with_ops(device=None):
    s = Synth(device=device)
    s.kernel("big_gemm", 0, 200_000, op=BIG)
    s.kernel("skinny_gemm", 300_000, 10_000, op=SKINNY)
    s.kernel("opless", 400_000, 10_000)
    return s.build()


def test_event_roofline_bounds_and_efficiency():
    p = _kernels_with_ops()
    K = p.tables["kernels"]
    r = event_roofline(p, K["op"], K["dur_ns"], K["rank"])
    assert r.bound.tolist() == [BOUND_COMPUTE, BOUND_MEMORY, BOUND_UNKNOWN]
    big_flops = 2 * 4096 ** 3
    assert r.achieved_flops[0] == pytest.approx(big_flops / 200e-6)
    assert r.efficiency[0] == pytest.approx(big_flops / 200e-6 / 989.4e12)
    skinny_bytes = (8 * 6144 + 6144 * 1536 + 8 * 1536) * 2
    assert r.efficiency[1] == pytest.approx(skinny_bytes / 10e-6 / 4.8e12)
    s = summarise_bounds(r, K["dur_ns"], K["rank"])
    assert (s.compute_ns, s.memory_ns, s.unknown_ns) == (200_000, 10_000, 10_000)
    assert s.memory_eff == pytest.approx(r.efficiency[1])


def test_unknown_device_gives_no_bound_and_a_warning():
    p = _kernels_with_ops(device={"index": 0, "name": "Mystery Accelerator 9000"})
    K = p.tables["kernels"]
    r = event_roofline(p, K["op"], K["dur_ns"], K["rank"])
    assert (r.bound == BOUND_UNKNOWN).all()
    assert np.isfinite(r.intensity[:2]).all()          # the work is still known, only the peak is not
    assert any("Mystery Accelerator 9000" in w for w in r.warnings)


def test_op_work_is_shared_among_its_kernels():
    s = Synth()
    op = s.op(SKINNY, 0, 100)
    s.kernel("part1", 1_000, 3_000, op=op)
    s.kernel("part2", 5_000, 1_000, op=op)
    p = s.build()
    K = p.tables["kernels"]
    r = event_roofline(p, K["op"], K["dur_ns"], K["rank"])
    total = 2 * 8 * 6144 * 1536
    assert r.flops.tolist() == pytest.approx([0.75 * total, 0.25 * total])
    assert r.achieved_flops[0] == pytest.approx(r.achieved_flops[1])   # same op, same achieved rate


def test_events_above_the_peak_are_flagged_not_hidden():
    """A measured peak that is too low (a busy CPU) gives >100% efficiency: say so in the warnings."""
    import numpy as np

    from mmprof.analysis.attribution.roofline import event_roofline
    from mmprof.profiles.profile import ProfileBuilder

    b = ProfileBuilder({"ranks": [{"rank": 0, "devices": [{"index": -1, "name": "cpu", "vendor": "cpu",
                                                            "peaks": {"fp32_tflops": 1e-6, "hbm_tbs": 1e-6}}]}]})
    b.row("ops", rank=0, tid=1, start_ns=0, dur_ns=1000, name="aten::mm", input_dims="[[64, 64], [64, 64]]",
          input_types='["float", "float"]')
    r = event_roofline(b.build(), np.array([0]), np.array([1000]), np.array([0]))
    assert r.efficiency[0] > 1.1
    w = [w for w in r.warnings if "above the peak" in w]
    assert w and "aten::mm x1" in w[0] and "measured once" in w[0]  # which op, and why for a measured peak


def _cpu_profile(peaks: list[dict], ops: list[tuple[str, str, int]]):
    """A CPU-run profile: one device per rank with these measured peaks; ops (name, dims, dur_ns) on every rank."""
    from mmprof.profiles.profile import ProfileBuilder

    b = ProfileBuilder({"ranks": [{"rank": r, "devices": [{"index": -1, "name": "x86_64", "vendor": "cpu",
                                                           "peaks": pk}]} for r, pk in enumerate(peaks)]})
    for r in range(len(peaks)):
        for i, (name, dims, dur) in enumerate(ops):
            b.row("ops", rank=r, tid=1, start_ns=i * 10**9, dur_ns=dur, name=name, input_dims=dims,
                  input_types='["float", "float"]')
    return b.build()


BIG_MM = ("aten::mm", "[[1024, 1024], [1024, 1024]]", 10**8)         # 2.1 GFLOP, 12 MiB: compute-bound
SMALL_ADD = ("aten::add", "[[512, 64], [512, 64]]", 10_000)          # 384 KiB: memory-bound, fits a cache
HUGE_ADD = ("aten::add", "[[8192, 8192], [8192, 8192]]", 10**8)      # 768 MiB: memory-bound, DRAM


def test_cpu_peaks_per_cache_level_bound_each_working_set():
    """New measurements carry the bandwidth per working-set size: a small op is bounded by the cache it fits."""
    import numpy as np

    from mmprof.hardware import lookup

    levels = [[65536, 0.05], [524288, 0.2], [4194304, 0.15], [134217728, 0.02]]
    p, _ = lookup({"vendor": "cpu", "name": "x", "peaks": {"fp32_tflops": 0.2, "hbm_tbs": 0.02, "alone": True,
                                                            "mem_levels": levels}})
    roof = p.mem_bytes_per_s(np.array([1e3, 65536.0, 3e5, 1e6, 1e8, 1e10]))
    # the fastest level among those at least as large as the working set; DRAM beyond the largest
    assert roof.tolist() == pytest.approx([0.2e12, 0.2e12, 0.2e12, 0.15e12, 0.02e12, 0.02e12])
    prof = _cpu_profile([{"fp32_tflops": 0.2, "hbm_tbs": 0.02, "alone": True, "mem_levels": levels}],
                        [BIG_MM, SMALL_ADD, HUGE_ADD])
    from mmprof.analysis.timeline.events import events_of

    ev = events_of(prof)
    eff = dict(zip((n for n, _, _ in (BIG_MM, SMALL_ADD, HUGE_ADD)), ev.roof.efficiency))
    small_bytes = 3 * 512 * 64 * 4
    assert ev.roof.bound.tolist() == [0, 1, 1]
    assert eff["aten::add"] == pytest.approx(3 * 8192 * 8192 * 4 / 0.1 / 0.02e12)  # the huge add: DRAM roof
    assert ev.roof.efficiency[1] == pytest.approx(small_bytes / 1e-5 / 0.2e12)   # the small add: cache roof
    assert not any("ran from cache" in n for n in ev.notes) and not ev.warnings


def test_legacy_cpu_peaks_keep_bounds_but_drop_unsupported_efficiencies():
    """Profiles measured before per-level, one-rank-at-a-time peaks (the committed examples/cpu-tp): bounds stay,
    efficiencies the figures cannot support go, and a note says why."""
    from mmprof.analysis.timeline.events import events_of

    legacy = {"fp32_tflops": 0.05, "hbm_tbs": 0.04}
    one = events_of(_cpu_profile([legacy], [BIG_MM, SMALL_ADD, HUGE_ADD]))
    assert one.roof.bound.tolist() == [0, 1, 1]
    e = one.roof.efficiency
    assert e[0] > 0 and e[0] == pytest.approx(2 * 1024**3 / 0.1 / 0.05e12)  # one rank measured alone: kept
    assert e[1] != e[1] and e[2] > 0  # the cache-resident add has no efficiency; the DRAM-sized one has
    assert any("ran from cache" in n for n in one.notes)
    two = events_of(_cpu_profile([legacy, legacy], [BIG_MM, SMALL_ADD, HUGE_ADD]))
    assert (two.roof.bound >= 0).all()
    assert all(x != x for x in two.roof.efficiency[two.roof.bound == 0])  # measured under contention: none
    assert any("while the others ran" in n for n in two.notes)
    assert not any("while the others ran" in n for n in one.notes)


def test_committed_examples_have_no_efficiency_over_150_percent():
    import numpy as np

    from mmprof.analysis.timeline.events import events_of
    from mmprof.importers import import_paths
    from tests.conftest import ROOT

    # every committed example Profile (excerpts of the runs, examples/trim.py: 18 files)
    files = sorted((ROOT / "examples").glob("*/**/*.json.gz"))
    assert len(files) >= 14
    for f in files:
        e = events_of(import_paths([f])).roof.efficiency
        assert not np.isfinite(e).any() or np.nanmax(e) <= 1.5, (f, np.nanmax(e))


def test_inductor_kernels_are_memory_bound_with_the_bytes_of_their_arguments():
    """torch/_inductor/runtime/triton_heuristics.py records each Inductor kernel launch as a CPU op named after the
    kernel with its arguments' shapes; a pointwise / reduction kernel reads or writes each argument once (Inductor's
    own byte estimate, torch/_inductor/codegen/simd.py estimate_kernel_num_bytes), so it is memory-bound by kind
    with those bytes, unless its fused ops (index, slice, gather, ...) touch an argument in part: then no bytes."""
    norm = op_cost("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0",
                   [[1, 1, 2048], [2048], [1, 1, 2048], [], []], [BF16, BF16, BF16, "Scalar", "Scalar"])
    assert norm.bound == "memory" and norm.family == "reduction" and math.isnan(norm.flops)
    assert norm.bytes == 3 * 2048 * 2
    act = op_cost("triton_poi_fused__unsafe_view_add_clamp_mul_sigmoid_split_0", [[1, 12288], [1, 1, 6144], []],
                  [BF16, BF16, "Scalar"])
    assert act.family == "elementwise" and act.bytes == (12288 + 6144) * 2
    # a KV insert writes one position of a [1, 4, 528, 128] cache; a slice reads 2048 of 3072: bytes unknown
    for name in ("triton_poi_fused_add_arange_index_put_slice_transpose_view_5",
                 "triton_per_fused__to_copy_mean_pow_slice_view_0", "triton_poi_fused_1"):
        c = op_cost(name, [[1], [1, 1, 3072], [1, 4, 528, 128], []], ["long int", BF16, BF16, "Scalar"])
        assert c.bound == "memory" and math.isnan(c.bytes), name
    # not Inductor's: a hand-written kernel named triton_* and Inductor's templates (GEMMs) are not memory-bound
    # by kind
    assert op_cost("triton_tem_fused_mm_0", [[8, 64], [64, 64], [8, 64]], [BF16, BF16, BF16]) is None
    assert op_family("triton_w4a16_gemm_kernel") is None


def test_committed_compile_profile_gives_inductor_kernels_a_bound():
    """The H200 compile rung's profile (tests/data/h200_compile): every replayed Inductor kernel of the decode steps
    is memory-bound; those whose names list no partial access get an efficiency from their arguments' bytes, recounted
    here from the op rows' JSON."""
    import json

    from mmprof.analysis.timeline.events import events_of
    from mmprof.profiles.io import load_profile
    from tests.conftest import data_file

    p = load_profile(data_file("h200_compile/compile_b1.json.xz"))
    ev = events_of(p)
    name = ev.frame()["name"].to_numpy()
    ind = np.array([str(n).startswith(("triton_poi_fused", "triton_per_fused", "triton_red_fused")) for n in name])
    assert ind.sum() > 1000
    roof = ev.roof
    assert (roof.bound[ind] == BOUND_MEMORY).all()
    norm = np.flatnonzero(name == "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0")
    assert len(norm) and np.isfinite(roof.efficiency[norm]).all()
    # an eager call (one kernel per launch op) has its op's bytes, recounted from the op row's shapes
    one = norm[ev.graph[norm] < 0][0]
    dims = json.loads(p.strings[p.tables["ops"]["input_dims"][ev.op[one]]])
    want = sum(math.prod(d) * 2 for d in dims if d)  # every argument is bf16 here
    assert roof.bytes[one] == pytest.approx(want)
    gathers = np.flatnonzero(np.array(["index_put" in str(n) for n in name]) & ind)
    assert len(gathers) and np.isnan(roof.efficiency[gathers]).all() and np.isnan(roof.bytes[gathers]).all()


def test_the_runtime_fused_experts_op_gets_the_fused_moe_cost():
    """The Triton experts' launcher is the custom op `mmprof::fused_experts` with vLLM's fused-MoE schema
    (runtime/kernels/ops.py): the general fused-MoE formula prices it from its shapes. Batch 1 of `small`: 4 routed
    experts + the fused shared slot, each gate/up [1536, 2048] and down [2048, 768] in bf16, read once."""
    dims = [[1, 2048], [129, 1536, 2048], [129, 2048, 768], [1, 5], [1, 5], [], []]
    types = [BF16, BF16, BF16, "float", "int", "Scalar", "Scalar"]
    c = op_cost("mmprof::fused_experts", dims, types)
    assert c.family == "grouped_gemm" and c.dtype_class == "bf16"
    assert c.flops == 2 * 5 * (1536 * 2048 + 2048 * 768)
    assert c.bytes == 2 * 2048 * 2 + 5 * (1536 * 2048 + 2048 * 768) * 2 + 5 * (4 + 4)
