"""Kernel names and fast-path verdicts on real H200 traces of the reference runtime (tests/data/h200_runtime: the
prefill and the first decode step of each run, cut by tests/data/samples/derive.py; README there)."""

from __future__ import annotations

import json

import pytest

from mmprof.analysis.views.coverage import coverage
from mmprof.analysis.timeline.events import events_of
from mmprof.analysis.checks.verify import verify
from mmprof.importers import import_paths
from tests.conftest import open_data, data_file

# Raw Kineto traces carry kernels and scopes but not the runtime's dispatch log, so the built-in spec's
# dispatch assertions have no evidence here (exit 2 when nothing else fails: never a pass); the kernel-based
# assertions decide. (With the dispatch log, `mmprof run` profiles also fail FP008 for a separate expert.)
# FP001 passes only on evidence of the fusion: the routed grouped GEMM's 17 slots for the router's 16 experts
# (runtime/moe.py: the shared expert is slot n_local of w13 / w2); with loop experts there is no grouped GEMM and no
# config in a raw trace, so nothing shows the shared expert fused: no evidence (never a pass), the loop still fails.
CASES = [
    ("runtime_fast.json.xz", set(), set()),
    ("runtime_separate_shared.json.xz", {"FP001"}, set()),
    ("runtime_loop_experts.json.xz", {"FP007", "FP009"}, {"FP001"}),
    ("runtime_block_reuse_1.json.xz", {"FP002"}, set()),
]


@pytest.mark.parametrize("name, codes, unknown", CASES, ids=[c[0].split(".")[0] for c in CASES])
def test_h200_runtime_kernels_classify_and_verify(name, codes, unknown):
    p = import_paths([data_file("h200_runtime", name)])
    assert p.device_info(0)["peak_key"] == "H200"
    cov = coverage(events_of(p))
    # every GPU event of the raw JSON (kernels, copies, memsets), counted here; 1,500-3,000 kernels per file
    raw = json.load(open_data(data_file("h200_runtime", name)))["traceEvents"]
    n_gpu = sum(e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") for e in raw)
    assert cov.events == n_gpu > 1500 and cov.unclassified_share < 0.05, cov.unclassified[:5]
    r = verify(p)
    assert r.source == "kernels"
    failing = {x.code for x in r.results if x.status == "fail"}
    assert failing == codes, [(x.id, x.message) for x in r.results if x.status != "pass"]
    # no dispatch log in these traces: the default spec is the one for any runtime, judged from the scopes
    assert r.spec_id == "mmprof-moe-fast"
    assert {x.code for x in r.results if x.status not in ("pass", "fail")} == unknown
    assert r.exit_code == (1 if codes else 0)
    if name == "runtime_fast.json.xz":
        fp1 = next(x for x in r.results if x.code == "FP001")
        assert "17 expert slots for 16 routed experts" in fp1.evidence[0] and "op shapes" in fp1.judged_from


def test_h200_grouped_gemm_kernel_is_the_cutlass_grouped_path():
    p = import_paths([data_file("h200_runtime", "runtime_fast.json.xz")])
    from mmprof.analysis.attribution.classify import classify_profile

    cls = classify_profile(p)
    k = p.df("kernels")
    routed = k.scope.astype(object).fillna("").str.endswith("moe.routed")
    fams = set(cls.family[routed.to_numpy()])
    assert "grouped_gemm" in fams and "gemm" not in fams  # no per-expert GEMMs left in the routed experts


def _ladder(name: str):
    from mmprof.profiles import load_profile
    from tests.conftest import ROOT

    return load_profile(ROOT / "examples" / "h200" / "ladder" / f"{name}.json.gz")


def test_h200_ladder_profiles_diff_step_by_step():
    """The committed H200 ladder (mmprof run --preset small --device cuda, batch 8; each file is decode step 2 of
    its run, examples/trim.py): each step's diff names the path change it made; the expert loop -> grouped GEMM
    step is a large step-time win."""
    from mmprof.analysis.compare.diff import diff_profiles

    base, grouped, fused, reuse2 = (_ladder(n) for n in ("baseline", "grouped", "fused", "reuse2"))
    d = diff_profiles(base, grouped, phase="decode")
    routed = next(p for p in d.path_changes if p.region == "moe.routed")
    assert any(v.family == "grouped_gemm" for v in routed.appeared)
    assert any(v.family == "gemm" for v in routed.vanished)
    assert d.step("decode").change < -0.5  # the loop launched a GEMM per active expert

    d = diff_profiles(grouped, fused, phase="decode")
    assert any(p.region == "moe.shared" and p.vanished and not p.appeared for p in d.path_changes)

    d = diff_profiles(fused, reuse2, phase="decode")
    idx = [m for m in d.matched if m.key.startswith("attn.indexer")]
    assert idx and sum(m.after_count for m in idx) < sum(m.before_count for m in idx)


def test_h200_ladder_profiles_carry_plain_and_profiled_timings():
    for name in ("baseline", "reuse4"):
        run = _ladder(name).meta["run"]
        assert run["device"] == "cuda" and run["preset"] == "small"
        assert run["tokens_per_s"]["plain"]["decode"] > 0 and run["dilation_by_phase"]["full"]["decode"] > 1


def test_diff_reports_the_plain_timing_next_to_the_profiled_one():
    from mmprof.analysis.compare.diff import diff_profiles

    d = diff_profiles(_ladder("baseline"), _ladder("grouped"), phase="decode")
    # issue 31: the plain timing mmprof run stored (meta.run) beside the profiled one, per side, with the profiler's
    # cost; 86.8 -> 176.8 decode tok/s without the profiler is a time change of 86.8 / 176.8 - 1 = -51%
    runs = {s: _ladder(s).meta["run"] for s in ("baseline", "grouped")}
    assert d.plain is not None and d.plain["change"] == pytest.approx(
        runs["grouped"]["timings"]["plain"]["decode_ms"] / runs["baseline"]["timings"]["plain"]["decode_ms"] - 1)
    assert d.plain["change"] < -0.4 and d.plain["faster"] == "after" and d.answer.faster == "after"
    for side, name in (("before", "baseline"), ("after", "grouped")):  # the cost is mmprof run's own dilation
        assert d.plain[side]["cost"] == pytest.approx(runs[name]["dilation_by_phase"]["full"]["decode"], rel=1e-9)
    assert "null" not in json.dumps(d.plain["before"]["text"])
