"""Specs that mean what they say (issue 32): every built-in check judges the evidence the input has and names it,
a pass says how much of its region it covers, spec mistakes are errors with the nearest valid value, each check
has a code of its own. The truths are stated per test with where in the engine's source they come from."""

from __future__ import annotations

import json

import pytest

from mmprof.analysis.checks.spec import KINDS, parse_spec
from mmprof.analysis.checks.verify import verify
from mmprof.errors import BadInput
from mmprof.importers import import_paths
from mmprof.modelspec import ModelSpec
from tests.conftest import data_file, open_data
from tests.fastpath_fixtures import runtime_profile

VLLM_EAGER = ("samples", "vllm", "m3_eager_b8.pt.trace.json.xz")
M3_TINY = ("samples", "vllm", "config", "m3_tiny_config.json")
HF_BMM = ("hf_m3_decode_bmm", "decode_bmm.json.xz")
HF_BMM_CONFIG = ("hf_m3_decode_bmm", "config.json")


def _spec(text: str, source: str = "test.toml"):
    import tomllib

    return parse_spec(tomllib.loads(text), source)


def _by_id(res) -> dict:
    return {r.id: r for r in res.results}


REQUIRE = ('[spec]\nchecks = []\n[[assert]]\nid = "grouped"\nkind = "require"\nregion = "layers.*.moe.routed"\n'
           'family = "grouped_gemm"\n')


# ------------------------------------------------------------------------------------------------ codes
def test_each_check_and_assertion_kind_has_its_own_code():
    """One code per check: before, FP003 named the built-in check and every require / dispatch assertion."""
    from mmprof.analysis.checks.registry import load_info

    info = load_info()
    assert len(set(KINDS.values())) == len(KINDS)
    assert set(KINDS.values()).isdisjoint({"FP000", "FP001", "FP002", "FP003", "FP004"})
    names = {c.name for c in info.values()}
    assert len(names) == len(info)  # one name per code
    # the names read as what a pass means; the old ones are kept under `formerly` for the migration
    assert info["FP000"].name == "evidence-present" and "no-evidence" in info["FP000"].formerly
    res = verify(runtime_profile(device="nvidia"))
    per = {}
    for r in res.results:
        per.setdefault(r.code, set()).add(r.kind)
    assert all(len(v) == 1 for v in per.values()), per  # a code names one kind of check


# ------------------------------------------------------------------------------------------------ FP003 from kernels
def test_fast_path_taken_judged_from_kernel_classes_on_a_vllm_trace():
    """vLLM writes no dispatch log; FP003 judges the kernels' fast / fallback classes per region instead, says so,
    and passes on vLLM's M3 trace (no kernel of it is a fallback: fused_moe_kernel, nvjet GEMMs, the M3 sparse
    attention and indexer kernels of vllm/models/minimax_m3/nvidia)."""
    p = import_paths([data_file(*VLLM_EAGER)])
    spec = _spec('[spec]\nchecks = ["FP000", "FP003"]\n')
    res = verify(p, spec)
    fp3 = _by_id(res)["fast-path-taken"]
    assert fp3.status == "pass" and "fast / fallback" in fp3.judged_from and "no dispatch log" in fp3.judged_from
    assert "layers.*.moe.routed" in " ".join(fp3.evidence) and res.exit_code == 0


def test_fast_path_missing_in_a_region_fails_with_the_region_and_phase():
    """The math SDPA (rules/cpu_ops.toml: path fallback) in place of the flash path in layers.*.attn.core of a CPU
    run, no dispatch log: FP003 fails naming the region, the phases and the op; the fast configuration passes."""
    res = verify(runtime_profile(attn_math=True, dispatch=False), _spec('[spec]\nchecks = ["FP003"]\n'))
    r = res.results[0]
    assert r.status == "fail" and res.exit_code == 1
    text = " ".join(r.evidence)
    assert "layers.*.attn.core (prefill)" in text and "layers.*.attn.core (decode)" in text
    assert "never its fast path" in text and "aten::scaled_dot_product_attention" in text
    assert verify(runtime_profile(dispatch=False), _spec('[spec]\nchecks = ["FP003"]\n')).exit_code == 0


def test_fast_path_taken_is_no_evidence_when_no_kernel_is_classified():
    """Kernels the rules mark neither fast nor fallback say nothing about a fast path: never a pass."""
    from tests.profile_builder import Synth

    s = Synth()
    s.kernel("my_mystery_kernel", 1000, 500, scope="layers.0.moe.routed", step=0)
    res = verify(s.build(), _spec('[spec]\nchecks = ["FP003"]\n'))
    assert res.results[0].status == "no_evidence" and res.exit_code == 2


# ------------------------------------------------------------------------------------------------ FP001 evidence
def test_shared_expert_check_never_passes_on_absence():
    """Qwen3-MoE has no shared expert (transformers' Qwen3MoeSparseMoeBlock: gate + experts; vLLM qwen3_moe.py:
    no shared_experts): MoE regions without a shared-expert region are no evidence of a fused one; with the
    config the check does not apply. Issue 33 / 37."""
    p = import_paths([data_file("hf_moe", "qwen3moe_grouped_stack.json.gz")])
    spec = _spec('[spec]\nchecks = ["FP001"]\n')
    r = verify(p, spec).results[0]
    assert r.status == "no_evidence" and "--model" in r.message
    cfg = ModelSpec.load(data_file("hf_moe", "configs", "qwen3moe.json"))
    na = verify(p, spec, model=cfg).results[0]
    assert na.status == "not_applicable" and "no shared expert" in na.message


def test_shared_expert_fused_passes_on_the_reference_runtimes_slot():
    """The reference runtime's fused shared expert is slot n_local of w13 / w2 (runtime/moe.py): the routed
    grouped GEMM has one slot more than the router scores experts. That is evidence of fusion from shapes."""
    p = import_paths([data_file("h200_runtime", "runtime_fast.json.xz")])
    r = _by_id(verify(p))["shared-expert-fused"]
    assert r.status == "pass" and "17 expert slots for 16 routed experts" in r.evidence[0]


def test_dense_model_moe_checks_are_not_applicable_from_its_structure():
    """A dense model's trace (no MoE region, dispatch row or MoE kernel anywhere; its layers' attention and MLP
    regions from scope labels): the MoE checks do not apply, whatever the mode it ran in."""
    from tests.profile_builder import SKINNY, Synth

    s = Synth()
    for step in range(3):
        for layer in range(2):
            t = 1_000_000 * (step + 1) + 100_000 * layer
            s.kernel("nvjet_tst_128x64_qkv", t, 1000, op=SKINNY, scope=f"layers.{layer}.attn.qkv", step=step)
            s.kernel("flash_fwd_splitkv_kernel", t + 2000, 1000, scope=f"layers.{layer}.attn.core", step=step)
    res = verify(s.build())  # the built-in spec for any runtime
    st = {r.code: r.status for r in res.results}
    assert st["FP001"] == st["FP007"] == st["FP009"] == "not_applicable"


# ------------------------------------------------------------------------------------------------ coverage
def _no_markers(tmp_path):
    """The transformers M3 decode fixture without its ProfilerStep markers (the issue's case: no step markers)."""
    doc = json.load(open_data(data_file(*HF_BMM)))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    out = tmp_path / "no_markers.json"
    out.write_text(json.dumps(doc))
    return out


def test_require_without_step_markers_judges_each_forward(tmp_path):
    """transformers' generate() on a GPU: grouped_mm experts in the prefill, a batched bmm in every decode forward
    (generation/utils.py `_optimize_model_for_decode`; the fixture's make_fixture.py). Without step markers the
    forwards still show in the shapes (one aten::embedding each, [1, 256] then [1, 1]): the assertion is judged
    per forward and phase and fails in decode, where before it said `PASS: 14 of 224 events, 30.6% of its time`."""
    from mmprof.analysis.shapes.shape_match import match_profile

    p = import_paths([_no_markers(tmp_path)])
    assert not (p.col("kernels", "step") >= 0).any()
    cfg = ModelSpec.load(data_file(*HF_BMM_CONFIG))
    res = verify(p, _spec(REQUIRE), shape_regions=match_profile(p, cfg).regions, model=cfg)
    r = res.results[0]
    assert r.status == "fail" and res.exit_code == 1
    assert r.data["phases"]["prefill"]["status"] == "pass" and r.data["phases"]["decode"]["status"] == "fail"
    assert "forwards split at each aten::embedding" in r.message and "token ids" in r.message
    assert "forwards split" in r.judged_from


def test_a_pass_says_its_coverage_by_steps_and_time():
    p = runtime_profile(device="nvidia", steps=5)
    r = verify(p, _spec(REQUIRE)).results[0]
    assert r.status == "pass"
    dec = r.data["phases"]["decode"]
    assert dec["steps"] == dec["steps_covered"] == 4 and dec["step_share"] == 1.0
    assert "in 4 of 4 steps (every layer)" in r.message and "of its time" in r.message


def test_require_fails_when_the_fast_path_skips_steps_unless_the_spec_allows_it():
    """Grouped experts in 3 of 4 decode steps (step 2 ran the per-expert loop): no pass by default; with
    `min_step_share = 0.75` the spec asks for three quarters of the steps and it passes, saying so."""
    p = runtime_profile(device="nvidia", steps=5, experts_by_step={2: "loop"})
    r = verify(p, _spec(REQUIRE + 'phase = "decode"\n')).results[0]
    assert r.status == "fail" and r.data["steps_covered"] == 3 and r.data["steps"] == 4
    assert "in 3 of 4 steps (75%; the spec asks every step); not in steps 2" in r.message
    ok = verify(p, _spec(REQUIRE + 'phase = "decode"\nmin_step_share = 0.75\n')).results[0]
    assert ok.status == "pass" and "in 3 of 4 steps" in ok.message
    low = verify(p, _spec(REQUIRE + 'phase = "decode"\nmin_step_share = 0.8\n')).results[0]
    assert low.status == "fail" and "the spec asks 80% of them" in low.message


def test_every_layer_false_still_needs_every_step():
    """`every_layer = false` relaxes layers, not steps: a fast path that ran in one step of four is no pass."""
    p = runtime_profile(device="nvidia", steps=5, experts_by_step={1: "loop", 2: "loop", 3: "loop"})
    r = verify(p, _spec(REQUIRE + 'phase = "decode"\nevery_layer = false\n')).results[0]
    assert r.status == "fail" and "in 1 of 4 steps" in r.message


# ------------------------------------------------------------------------------------------------ spec mistakes
def test_layers_the_model_does_not_have_are_an_error():
    """`layers = "2-59"` on vLLM's 6-layer M3 (config num_hidden_layers 6) must not pass on layers 2-5."""
    p = import_paths([data_file(*VLLM_EAGER)])
    with pytest.raises(BadInput, match=r"layers 6-59 do not exist: the model has 6 layers \(0-5.*nearest valid: 2-5"):
        verify(p, _spec(REQUIRE + 'layers = "2-59"\n'))
    cfg = ModelSpec.load(data_file(*M3_TINY))
    with pytest.raises(BadInput, match=r"from --model"):
        verify(p, _spec(REQUIRE + 'layers = "2-59"\n'), model=cfg)
    assert verify(p, _spec(REQUIRE + 'layers = "2-5"\n')).results[0].status == "pass"


@pytest.mark.parametrize("text, msg", [
    (REQUIRE + 'phase = "decde"\n', r"phase 'decde' is not a phase \(nearest: decode"),
    ('[[assert]]\nid = "a"\nkind = "requre"\nregion = "*"\nfamily = "gemm"\n', r"nearest: require"),
    ('[spec]\nchecks = ["FP03"]\n', r"'FP03' is no check \(nearest: FP003"),
    ('[spec]\nchecks = ["FP007"]\n', r"FP007 is the code of `require` assertions"),
    (REQUIRE + 'min_step_share = 0\n', r"min_step_share.*\(0, 1\]"),
    ('[[assert]]\nid = "a"\nkind = "forbid"\nregion = "*"\nfamily = "gemm"\nmin_step_share = 0.5\n',
     "require assertions only"),
])
def test_spec_mistakes_are_errors_with_the_nearest_value(text, msg):
    with pytest.raises(BadInput, match=msg):
        _spec(text)


def test_mixed_is_a_phase():
    """vLLM's engine steps with prefill and decode requests are `mixed` (labels.engine_step): a spec may name it."""
    p = import_paths([data_file(*VLLM_EAGER)])
    r = verify(p, _spec(REQUIRE + 'phase = "mixed"\n')).results[0]
    assert r.status == "pass" and r.data["steps"] == 1


def test_unknown_regions_and_families_name_the_nearest():
    p = runtime_profile(device="nvidia")
    with pytest.raises(BadInput, match="nearest: grouped_gemm"):
        verify(p, _spec(REQUIRE.replace('"grouped_gemm"', '"grouped_gemn"')))
    with pytest.raises(BadInput, match="nearest: layers.*moe.routed"):
        verify(p, _spec(REQUIRE.replace("moe.routed", "moe.rooted")))


def test_failing_seed_checks_say_what_the_engine_offers():
    """On a vLLM CUDA trace FP001 and FP002 fail by vLLM's design (nvidia/model.py: SharedExperts, no index reuse):
    the message says so and what to do; on ROCm it names the switch that fuses (amd/model.py)."""
    from mmprof.analysis.shapes.engines import EngineGuess

    p = import_paths([data_file(*VLLM_EAGER)])
    res = _by_id(verify(p, _spec('[spec]\nchecks = ["FP001", "FP002"]\n'), engine=EngineGuess("vllm", "cuda", "")))
    assert "no fused path exists there" in res["shared-expert-fused"].message
    assert "no reuse exists there" in res["block-selection-reused"].message
    rocm = _by_id(verify(p, _spec('[spec]\nchecks = ["FP001"]\n'), engine=EngineGuess("vllm", "rocm", "")))
    assert "VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS=1" in rocm["shared-expert-fused"].message
