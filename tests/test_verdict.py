"""`mmprof diff`'s answer (issue 31): which run is faster and why, on pairs whose true answer is known.

- synthetic pairs built on paper (tests/profile_builder.py): the shared expert's side stream switched off (kernels
  get cheaper, GPU busy rises: overlap lost), the same kernels with and without op shapes (no category moves);
- real pairs: the runtime's eager -> CUDA graphs -> compile rungs on one H200 (examples/h200, tests/data/h200_compile;
  the truth is `mmprof run`'s own plain timing in each Profile), vLLM's eager against its graph run of the same
  workload (tests/data/samples/vllm; vLLM runs the same kernels in both modes, vllm/models/minimax_m3/nvidia/model.py,
  so the reason must be host time), vLLM against the runtime (different models: refused, and when forced, vLLM's
  own timing decides).
"""

from __future__ import annotations

import pytest

from mmprof.analysis.compare.diff import diff_profiles
from mmprof.importers import import_paths
from tests.conftest import ROOT, data_file
from tests.profile_builder import SKINNY, Synth


def _moe_steps(side_stream: bool, steps: int = 4):
    """Per decode step, on paper: router 10 us, routed experts 60 us on the main stream and the shared expert 40 us
    on a side stream beside them (side_stream), or inline after them on the main stream, each kernel then a little
    cheaper (55 and 35 us: no contention); then 20 us more of main-stream work."""
    s = Synth()
    t = 0
    for st in range(1, steps + 1):
        kw = dict(phase="decode", step=st)
        s.kernel("router_gemm", t, 10_000, op=SKINNY, scope="layers.0.moe.router", launch_at=t - 900, **kw)
        t += 10_000
        if side_stream:
            s.kernel("fused_moe_kernel", t, 60_000, op=SKINNY, scope="layers.0.moe.routed", launch_at=t - 900, **kw)
            s.kernel("shared_gemm", t, 40_000, op=SKINNY, scope="layers.0.moe.shared", stream=229, launch_at=t - 800,
                     **kw)
            t += 60_000
        else:
            s.kernel("fused_moe_kernel", t, 55_000, op=SKINNY, scope="layers.0.moe.routed", launch_at=t - 900, **kw)
            t += 55_000
            s.kernel("shared_gemm", t, 35_000, op=SKINNY, scope="layers.0.moe.shared", launch_at=t - 900, **kw)
            t += 35_000
        s.kernel("o_proj", t, 20_000, op=SKINNY, scope="layers.1.attn.o_proj", launch_at=t - 900, **kw)
        t += 20_000 + 30_000
    return s.build()


def test_side_stream_off_every_kernel_cheaper_but_the_step_slower():
    d = diff_profiles(_moe_steps(True), _moe_steps(False))
    # busy per step 90 -> 120 us (10 + 60 + 20 -> 10 + 55 + 35 + 20); kernel time 130 -> 120 us; overlap 40 -> 0
    assert d.step().before_ns == 90_000 and d.step().after_ns == 120_000
    assert d.answer.faster == "before"
    lines = dict(d.answer.lines)
    assert "busy 90.0 us -> 120.0 us per step" in lines["GPU work"]
    assert "kernel time 130.0 us -> 120.0 us - overlap 40.0 us -> 0.0 us" in lines["GPU work"]
    assert "although kernel time went 130.0 us -> 120.0 us: overlap across streams 40.0 us -> 0.0 us" in lines["why"]
    assert "moe.shared 40.0 us -> 0.0 us" in lines["overlap"] and "moe.routed 40.0 us -> 0.0 us" in lines["overlap"]
    scope = {x.key: x for x in d.by_scope}
    assert scope["moe.shared"].after_ns < scope["moe.shared"].before_ns   # cheaper kernels, yet a slower step
    assert d.overlap_roles["moe.shared"] == (40_000, 0)


def _gemms(with_shapes: bool):
    s = Synth()
    for st in (1, 2, 3):
        t = st * 200_000
        s.kernel("nvjet_tst_128x64_qkv", t, 50_000, op=SKINNY if with_shapes else None, phase="decode", step=st,
                 scope="layers.0.attn.qkv", launch_at=t - 1000)
        s.kernel("nvjet_tst_128x64_oproj", t + 50_000, 50_000, op=SKINNY if with_shapes else None, phase="decode",
                 step=st, scope="layers.0.attn.o_proj", launch_at=t + 49_000)
    return s.build()


def test_missing_shapes_are_their_own_line_never_a_category_shift():
    # the same kernels, the after side without op shapes (as vLLM's graph replays with no captured twin): the
    # roofline is lost, not moved; the bottleneck statement sums compute- and memory-bound with unattributed
    d = diff_profiles(_gemms(True), _gemms(False))
    cats = {c.category: c for c in d.categories}
    assert cats["memory_bound"].before_share == 1.0 and cats["unattributed"].after_share == 1.0   # the raw shares
    missing = [t for k, t in d.answer.lines if k == "missing"]
    assert len(missing) == 1 and missing[0].startswith("no roofline for part of the GPU time: 0% of the before")
    assert "on the after side mostly because its kernels have no op shapes" in missing[0]
    assert "memory bandwidth" not in d.verdict and "unattributed" not in d.verdict
    assert "the bottleneck is still GPU compute" in d.verdict
    assert d.answer.faster is None and "no measurable change" in d.verdict


def _ladder(path):
    return import_paths([path])


@pytest.mark.parametrize("before,after,reason", [
    (("examples", "h200", "graphs", "fused_b1.json.gz"), ("examples", "h200", "graphs", "graphs_b1.json.gz"),
     "GPU idle (host) time per step"),   # graphs replace ~1,900 launches per step: launch/queue time goes
    (("examples", "h200", "graphs", "graphs_b1.json.gz"), ("tests", "data", "h200_compile", "compile_b1.json.xz"),
     "GPU busy per step"),               # compile fuses the region math: fewer, faster kernels
], ids=["eager-graphs", "graphs-compile"])
def test_runtime_rungs_faster_for_the_right_reason(before, after, reason):
    pb, pa = _ladder(ROOT.joinpath(*before)), _ladder(ROOT.joinpath(*after))
    d = diff_profiles(pb, pa)
    tb, ta = (p.meta["run"]["timings"]["plain"]["decode_ms"] / p.meta["run"]["workload"]["decode_steps"]
              for p in (pb, pa))
    assert d.plain["before"]["step_ms"] == pytest.approx(tb) and d.plain["after"]["step_ms"] == pytest.approx(ta)
    assert ta < tb and d.plain["faster"] == "after" and d.answer.faster == "after"
    assert d.answer.basis.startswith("the plain timing")
    assert f"why: {reason}" in d.verdict
    assert not any(w.startswith(("different", "prompt", "batch")) for w in d.preface)   # one model, one workload
    if "compile" in after[-1]:   # Inductor kernels have no FLOP model: the roofline is said lost, not moved
        assert any(k == "missing" and t.startswith("no roofline") for k, t in d.answer.lines)


def test_vllm_eager_against_graphs_names_host_time_and_the_profilers_cost():
    s = ("samples", "vllm")
    d = diff_profiles(import_paths([data_file(*s, "m3_eager_b8.pt.trace.json.xz")]),
                      import_paths([data_file(*s, "m3_graphs_b8.pt.trace.json.xz")]))
    assert d.answer.faster == "after" and "why: GPU idle (host) time per step" in d.verdict
    gpu = dict(d.answer.lines)["GPU work"]                 # the same kernels: GPU busy within 10%
    mb = d.moves and sum(m.before_ns for m in d.moves if m.category in
                         ("compute_bound", "memory_bound", "unattributed", "communication", "memcpy"))
    ma = sum(m.after_ns for m in d.moves if m.category in
             ("compute_bound", "memory_bound", "unattributed", "communication", "memcpy"))
    assert abs(ma / mb - 1) < 0.10 and gpu.startswith("busy ")
    assert any("synchronous" in c for c in d.compared.caveats)     # CUDA_LAUNCH_BLOCKING=1 on the eager run
    assert "host time inflated by the profiler: before: synchronous launches" in dict(d.answer.lines)["why"]
    assert {r.label: r.same for r in d.compared.rows}["mode"] is False


def test_vllm_against_the_runtime_is_refused_then_decided_by_vllms_own_timing():
    from mmprof.errors import NotComparable

    rt = _ladder(ROOT / "examples" / "h200" / "graphs" / "graphs_b1.json.gz")      # small: 12 layers
    vllm = import_paths([data_file("vllm_own", "m3_graphs_b1.pt.trace.json.xz")])  # M3 tiny: 6 layers
    with pytest.raises(NotComparable, match="different models: 12 vs 6 layers"):
        diff_profiles(rt, vllm)
    from mmprof.analysis.compare.plain import from_document
    import json
    summary = data_file("vllm_own", "m3_graphs_b1.summary.json")
    kit = from_document(json.loads(summary.read_text()), summary.name)
    d = diff_profiles(rt, vllm, force=True, plain=(None, kit))
    flags = " ".join(d.preface)
    assert "different engines (mmprof reference runtime vs vLLM)" in flags and "prompt length differs" in flags
    assert "the steps are measured differently" in flags
    assert d.plain["measure"].startswith("ms per decode step (one side an upper bound)")
    assert kit.step_ms < d.plain["before"]["step_ms"] and d.answer.faster == "after"
    assert "why: GPU busy per step" in d.verdict   # 6 smaller layers: far less GPU work per step


def test_the_h200_pairs_script_refuses_and_answers_on_cpu(tmp_path):
    """benchmarks/h200/compare_pairs.py's diff part (the part that needs no GPU), on vLLM's real traces laid out as
    benchmarks/h200/vllm_families.py writes its cases: two models refused, a file with itself refused, the pairs
    whose files are missing said so."""
    import importlib.util
    import json
    import shutil

    spec = importlib.util.spec_from_file_location("compare_pairs", ROOT / "benchmarks" / "h200" / "compare_pairs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fam = tmp_path / "families"
    for case, src in (("m3_graphs_b8_stream", data_file("samples", "vllm", "m3_graphs_b8.pt.trace.json.xz")),
                      ("qwen2moe_graphs_b8", data_file("vllm_own", "qwen2moe_graphs_b1.pt.trace.json.xz"))):
        (fam / case).mkdir(parents=True)
        shutil.copy(src, fam / case / "trace.pt.trace.json.xz")
    out = tmp_path / "out"
    out.mkdir()
    assert mod.main([str(out), "--families", str(fam)]) == 0
    res = json.loads((out / "pairs.json").read_text())
    assert res["two_models_m3_vs_qwen2moe"]["rc"] == 2 and "different models" in res["two_models_m3_vs_qwen2moe"]["error"]
    assert res["a_file_with_itself"]["rc"] == 2 and "same trace" in res["a_file_with_itself"]["error"]
    assert "skipped" in res["vllm_vs_runtime_small_b1"] and set(res) == set(mod.PAIRS)
