"""Fast-path spec language, built-in checks FP000-FP004, and the evaluator, on synthetic runtime-shaped
profiles (tests/fastpath_fixtures.py), real runs of the reference runtime on CPU, and a real H200 trace."""

from __future__ import annotations


import pytest

from mmprof.analysis.checks.registry import load_info
from mmprof.analysis.checks.spec import BUILTIN_CHECKS, load_spec, parse_spec
from mmprof.analysis.checks.verify import verify
from mmprof.errors import BadInput
from mmprof.profiles.profile import ProfileBuilder
from tests.conftest import DATA, ROOT
from tests.fastpath_fixtures import empty_profile, runtime_profile


def statuses(result) -> dict[str, tuple[str, str]]:
    return {r.id: (r.code, r.status) for r in result.results}


def failing_codes(result) -> set[str]:
    return {r.code for r in result.results if r.status == "fail"}


@pytest.mark.parametrize("device", ["cpu", "nvidia", "amd"])
def test_builtin_spec_passes_on_the_fast_configuration(device):
    r = verify(runtime_profile(device=device))
    assert r.exit_code == 0, [(x.id, x.message) for x in r.results if x.status != "pass"]
    assert r.source == ("cpu_ops" if device == "cpu" else "kernels")
    assert {x.code for x in r.results} >= set(BUILTIN_CHECKS)
    assert r.attributed == r.events > 0


@pytest.mark.parametrize("device", ["cpu", "nvidia", "amd"])
@pytest.mark.parametrize("switch, codes, ids", [
    # each code one check (rules/checks.toml): FP007 require, FP008 dispatch, FP009 forbid; FP003 the built-in
    (dict(shared="separate"), {"FP001", "FP008"}, {"shared-expert-fused", "shared-expert-dispatch-fused"}),
    (dict(experts="loop"), {"FP007", "FP008", "FP009"},
     {"routed-experts-grouped", "experts-dispatch-grouped", "no-expert-loop-gemms"}),
    (dict(block_reuse=1), {"FP002"}, {"block-selection-reused"}),
    (dict(experts="loop", experts_requested="grouped_mm"), {"FP003", "FP007", "FP008", "FP009"},
     {"fast-path-taken", "routed-experts-grouped"}),
])
def test_builtin_spec_fails_with_the_right_codes_when_a_switch_flips(device, switch, codes, ids):
    r = verify(runtime_profile(device=device, **switch))
    assert r.exit_code == 1
    assert failing_codes(r) == codes
    failed = {x.id for x in r.results if x.status == "fail"}
    assert ids <= failed


def test_failure_evidence_names_layers_and_kernels():
    r = verify(runtime_profile(device="nvidia", shared="separate"))
    fp1 = next(x for x in r.results if x.code == "FP001")
    text = "\n".join(fp1.evidence)
    assert "layers 3-7" in text and "nvjet_tst_128x64" in text and "2 GEMMs per layer-step" in text
    loop = verify(runtime_profile(device="amd", experts="loop"))
    req = next(x for x in loop.results if x.id == "routed-experts-grouped")
    assert "missing in layers 3-7" in req.message and "Cijk_" in req.evidence[0]
    assert req.data["missing_layers"] == "3-7"


def test_fp002_reports_adjacent_pairs_from_scopes_without_dispatch():
    r = verify(runtime_profile(device="nvidia", block_reuse=1, dispatch=False))
    fp2 = next(x for x in r.results if x.code == "FP002")
    assert fp2.status == "fail" and fp2.data["judged_from"] == "scope labels"
    assert "(3, 4)" in fp2.evidence[0]
    ok = verify(runtime_profile(device="nvidia", block_reuse=2, dispatch=False))
    assert next(x for x in ok.results if x.code == "FP002").status == "pass"


def test_no_scopes_no_dispatch_is_no_evidence_never_pass():
    r = verify(runtime_profile(device="nvidia", scopes=False, dispatch=False))
    st = statuses(r)
    assert st["shared-expert-fused"] == ("FP001", "no_evidence")
    assert st["block-selection-reused"] == ("FP002", "no_evidence")
    assert st["routed-experts-grouped"] == ("FP007", "no_evidence")
    assert r.exit_code == 2 and r.status == "no_evidence"


def test_empty_profile_is_fp000_and_exit_2():
    r = verify(empty_profile())
    assert statuses(r)["evidence-present"] == ("FP000", "no_evidence")
    assert r.events == 0 and r.exit_code == 2
    assert all(x.status == "no_evidence" for x in r.results)


def test_kernel_without_scope_is_attributed_through_its_launching_op():
    r = verify(runtime_profile(device="nvidia", kernel_scopes=False))
    assert r.exit_code == 0 and r.attributed == r.events


def test_math_sdpa_fallback_is_fp004_on_cpu_and_gpu():
    cpu = verify(runtime_profile(attn_math=True))
    fp4 = next(x for x in cpu.results if x.code == "FP004" and x.kind == "check")
    assert fp4.status == "fail" and "layers.*.attn.core" in fp4.message
    assert "aten::scaled_dot_product_attention" in fp4.evidence[0]


def _spec(text: str):
    import tomllib

    return parse_spec(tomllib.loads(text), "test.toml")


def test_region_that_matches_nothing_is_no_evidence():
    """A region the roles can produce but this profile does not have (the shared expert is fused): no evidence.
    A typo (`routd`) is refused before anything is judged (tests/test_trust_gate.py)."""
    spec = _spec('''
[spec]
checks = []
[[assert]]
id = "absent"
kind = "require"
region = "layers.*.moe.shared"
family = "gemm"
''')
    r = verify(runtime_profile(device="nvidia"), spec)
    res = r.results[0]
    assert res.status == "no_evidence" and "layers.*.moe.routed" in res.message  # lists regions present
    assert r.exit_code == 2


def test_forbid_absent_region_judged_from_its_context():
    spec = _spec('''
[spec]
checks = []
[[assert]]
id = "no-shared"
kind = "forbid"
region = "layers.*.moe.shared"
''')
    assert verify(runtime_profile(device="amd"), spec).results[0].status == "pass"
    assert verify(runtime_profile(device="amd", shared="separate"), spec).results[0].status == "fail"
    assert verify(runtime_profile(device="amd", scopes=False), spec).results[0].status == "no_evidence"


def test_max_launches_min_time_share_forbid_pattern_dispatch_layers():
    spec = _spec('''
[spec]
checks = []
[[assert]]
id = "moe-budget"
kind = "max_launches"
region = "layers.*.moe.routed"
max = 5
[[assert]]
id = "grouped-share"
kind = "require"
region = "layers.*.moe.routed"
family = "grouped_gemm"
every_layer = false
min_time_share = 0.35
[[assert]]
id = "no-flash"
kind = "forbid_pattern"
pattern = "flash_fwd"
[[assert]]
id = "indexer-computed-in-3"
kind = "dispatch"
op = "attn.indexer"
impl = "computed"
layers = "3,5,7"
[[assert]]
id = "decode-only"
kind = "require"
region = "layers.*.attn.core"
library = "FlashAttention"
phase = "decode"
''')
    fast = {x.id: x for x in verify(runtime_profile(device="nvidia"), spec).results}
    assert fast["moe-budget"].status == "pass" and fast["moe-budget"].data["max_seen"] == 5
    assert fast["grouped-share"].status == "pass" and abs(fast["grouped-share"].data["time_share"] - 0.4) < 1e-9
    assert fast["no-flash"].status == "fail" and fast["no-flash"].data["events"] == 24
    assert fast["indexer-computed-in-3"].status == "pass"
    assert fast["decode-only"].status == "pass"
    loop = {x.id: x for x in verify(runtime_profile(device="nvidia", experts="loop"), spec).results}
    assert loop["moe-budget"].status == "fail" and loop["moe-budget"].code == "FP005"
    assert loop["moe-budget"].data["max_seen"] == 11 and "layer 3" in loop["moe-budget"].evidence[0]
    assert loop["grouped-share"].status == "fail"
    reuse1 = {x.id: x for x in verify(runtime_profile(device="nvidia", block_reuse=1), spec).results}
    assert reuse1["indexer-computed-in-3"].status == "pass"
    amd = {x.id: x for x in verify(runtime_profile(device="amd"), spec).results}
    assert amd["no-flash"].status == "pass" and amd["no-flash"].code == "FP006"
    assert amd["decode-only"].status == "fail"


def _names_only_profile(score_per_step: int, steps: int = 2):
    b = ProfileBuilder({"source": {"format": "kineto"}})
    t = 0
    for s in range(steps):
        for _ in range(score_per_step):
            b.row("kernels", rank=0, start_ns=t, dur_ns=100, name="_index_block_score_kernel", step=s)
            b.row("kernels", rank=0, start_ns=t + 200, dur_ns=100, name="_topk_index_kernel", step=s)
            t += 1000
    return b.build()


@pytest.mark.parametrize("per_step, sparse, status", [(57, 57, "fail"), (15, 57, "pass"), (29, 57, "pass"),
                                                      (30, 57, "fail"), (15, None, "no_evidence")])
def test_fp002_from_kernel_counts_per_step(per_step, sparse, status):
    spec = _spec('[spec]\nchecks = ["FP002"]\n')
    r = verify(_names_only_profile(per_step), spec, sparse_layers=sparse)
    assert r.results[0].status == status, r.results[0].message


def test_fp002_reads_sparse_layers_from_model_config():
    p = _names_only_profile(40)
    p.meta["model"] = {"attn_types": ["full"] * 3 + ["sparse"] * 57}
    r = verify(p, _spec('[spec]\nchecks = ["FP002"]\n'))
    assert r.results[0].status == "fail" and r.results[0].data["sparse_layers"] == 57


@pytest.mark.parametrize("text, msg", [
    ('[[assert]]\nid = "a"\nkind = "requires"\nregion = "x"\n', "kind"),
    ('[[assert]]\nid = "a"\nkind = "require"\nfamily = "gemm"\n', "needs a `region`"),
    ('[[assert]]\nid = "a"\nkind = "require"\nregion = "x"\n', "at least one of"),
    ('[[assert]]\nid = "a"\nkind = "forbid_pattern"\npattern = "("\n', "bad regex .* in `pattern`"),
    ('[[assert]]\nid = "a"\nkind = "max_launches"\nregion = "x"\n', "integer `max`"),
    ('[[assert]]\nid = "a"\nkind = "dispatch"\nop = "moe.experts"\n', "impl"),
    ('[[assert]]\nid = "a"\nkind = "require"\nregion = "x"\nfamily = "g"\nlayers = "3-x"\n', "layer range"),
    ('[[assert]]\nid = "a"\nkind = "require"\nregion = "x"\nfamily = "g"\nfamliy = "g"\n', "unknown key"),
    ('[[assert]]\nid = "a"\nkind = "forbid"\nregion = "x"\n[[assert]]\nid = "a"\nkind = "forbid"\nregion = "y"\n', "duplicate"),
    ('[spec]\nchecks = ["FP009"]\n', "FP009"),
    ('[spec]\nchecks = []\n', "nothing to verify"),
    ('[assertion]\n', "unknown top-level"),
])
def test_bad_specs_are_one_line_bad_input(text, msg):
    with pytest.raises(BadInput, match=msg):
        _spec(text)


def test_spec_files_load(tmp_path):
    with pytest.raises(BadInput, match="no such spec"):
        load_spec(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[spec\n")
    with pytest.raises(BadInput, match="not valid TOML"):
        load_spec(bad)
    builtin = load_spec()
    assert builtin.id == "mmprof-reference-fast" and not builtin.example and len(builtin.assertions) >= 3


@pytest.mark.parametrize("name", ["vllm-m3-mi355x.toml", "vllm-m3-h200.toml"])
def test_example_specs_parse_and_are_marked_examples(name):
    spec = load_spec(ROOT / "examples" / "specs" / name)
    assert spec.example is True and spec.sparse_layers == 57
    kinds = {a.kind for a in spec.assertions}
    assert {"require", "forbid"} <= kinds
    # They run against a profile without crashing and never pass vacuously on an empty one.
    assert verify(empty_profile(), spec).exit_code == 2


def test_rule_registry_is_documented():
    checks = load_info()
    assert [c for c in checks if c.startswith("FP")] == [f"FP00{i}" for i in range(10)]
    assert [c for c in checks if c.startswith("SH")] == [f"SH00{i}" for i in range(1, 10)]
    doc = (ROOT / "docs" / "rules.md").read_text()
    for code, c in checks.items():
        for key in ("name", "status", "severity", "summary", "what", "why", "example", "known_problems"):
            assert getattr(c, key), f"{code} lacks {key}"
        if code.startswith("FP"):  # no check passes on absence: each says what evidence makes it pass
            assert c.evidence and c.formerly, f"{code} lacks evidence / formerly"
        section = doc.split(f"## {code}", 1)[1].split("\n## ", 1)[0]
        for head in ("What it does", "Why", "Example", "Known problems"):
            assert head in section, f"docs/rules.md {code} lacks {head}"


def test_h200_trace_of_the_runtime_separate_shared_expert():
    """The real H200 trace ran a separate shared expert (tests/data/h200/README.md): FP001 must catch it."""
    from mmprof.importers import import_paths

    r = verify(import_paths([DATA / "kineto_own" / "h200_probe.json.gz"]))
    st = statuses(r)
    assert st["shared-expert-fused"] == ("FP001", "fail")
    assert st["routed-experts-grouped"] == ("FP007", "pass")
    # a plain trace has no dispatch log: the default spec is the one for any runtime (no dispatch assertions)
    assert r.spec_id == "mmprof-moe-fast" and "experts-dispatch-grouped" not in st
    assert r.exit_code == 1


# ----------------------------------------------------------------------------- the real reference runtime
def _runtime_run(**switches):
    """Run the tiny preset on CPU under torch.profiler with the given switches; Profile with dispatch rows."""
    import os
    import tempfile

    import torch

    from mmprof.importers import import_paths
    from mmprof.profiles.profile import merge_profiles
    from mmprof.runtime.config import get_preset
    from mmprof.runtime.generate import Workload, generate
    from mmprof.runtime.transformer import Switches, build_model

    args = get_preset("tiny")
    model = build_model(args, Switches(**switches))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        generate(model, Workload(prompt_len=64, decode_steps=2))
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "trace.json")
        prof.export_chrome_trace(f)
        p = import_paths([f])
    b = ProfileBuilder({})
    for row in model.dispatch.rows():
        b.row("dispatch", **row)
    return merge_profiles([p, b.build()], meta=dict(p.meta, model=args.to_dict()))


@pytest.mark.slow
@pytest.mark.parametrize("switches, codes", [
    (dict(block_reuse=2), set()),
    (dict(block_reuse=2, shared_expert="separate"), {"FP001", "FP008"}),
    (dict(block_reuse=2, moe_impl="loop"), {"FP007", "FP008", "FP009"}),
    (dict(block_reuse=1), {"FP002"}),
])
def test_reference_runtime_cpu_runs(switches, codes):
    from mmprof.analysis.attribution.classify import classify_names

    p = _runtime_run(**switches)
    cls = classify_names(list(p.col("ops", "name", decode=True)))  # every CPU op name the run recorded
    dur = p.col("ops", "dur_ns").astype(float)
    assert len(cls) > 1000 and dur[cls["rule"].isna().to_numpy()].sum() / dur.sum() < 0.05
    r = verify(p)
    assert r.source == "cpu_ops" and r.events > 1000
    assert failing_codes(r) == codes, [(x.id, x.message) for x in r.results if x.status != "pass"]
    assert r.exit_code == (1 if codes else 0)


# ----------------------------------------------------------------------------- scope attribution
@pytest.mark.parametrize("path, region", [
    ("mmprof.decode > mmprof.step.3 > layers.12.moe.routed", "layers.12.moe.routed"),
    ("layers.4.attn.indexer > inner_loop", "layers.4.attn.indexer"),
    ("layers.4.moe.routed.expert_3", "layers.4.moe.routed"),
    ("model.layers.12.mlp.experts", "layers.12.moe.routed"),
    ("model.layers.3.mlp.shared_experts.down_proj", "layers.3.moe.shared"),
    ("model.layers.3.mlp.gate", "layers.3.moe.router"),
    ("model.layers.0.mlp.down_proj", "layers.0.mlp"),
    ("model.layers.7.self_attn.qkv_proj", "layers.7.attn.qkv"),
    ("model.layers.7.self_attn.o_proj", "layers.7.attn.o_proj"),
    ("model.layers.7.self_attn.attn", "layers.7.attn.core"),
    ("model.layers.9.input_layernorm", "layers.9.norm"),
    ("model.norm", "final_norm"),
    ("lm_head", "lm_head"),
    ("model.embed_tokens", "embed"),
    ("ProfilerStep#3", None),
])
def test_scope_labels_and_module_paths(path, region):
    from mmprof.labels import parse_path as parse_scope_path

    r = parse_scope_path(path)
    assert (r.name if r else None) == region


def test_vllm_module_path_scopes_drive_fp001():
    """A trace annotated with vLLM module paths (no dispatch log): a separate shared expert is caught."""
    b = ProfileBuilder({"source": {"format": "kineto"}})
    t = 0
    for step in range(2):
        for layer in (3, 4):
            for scope, name in ((f"model.layers.{layer}.mlp.experts", "fused_moe_kernel"),
                                (f"model.layers.{layer}.mlp.shared_experts.gate_up_proj", "nvjet_tst_64x8_64x16_2x1_v_bz_splitK_TNT"),
                                (f"model.layers.{layer}.mlp.shared_experts.down_proj", "nvjet_tst_64x8_64x16_2x1_v_bz_splitK_TNT")):
                b.row("kernels", rank=0, start_ns=t, dur_ns=500, name=name, scope=scope,
                      scope_path=f"execute_model > {scope}", step=step)
                t += 1000
    r = verify(b.build(), _spec('[spec]\nchecks = ["FP001"]\n'))
    assert r.results[0].status == "fail" and "layers 3-4" in r.results[0].evidence[0]


def test_cpu_ops_without_parent_links_nest_by_time():
    """An importer that could not record op parents: nesting is inferred, so _grouped_mm's inner mm is hidden."""
    import numpy as np

    from mmprof.analysis.timeline.events import events_of
    from mmprof.analysis.timeline.op_tree import infer_parents

    p = runtime_profile(steps=1)
    linked = p.tables["ops"]["parent"].copy()
    p.tables["ops"]["parent"] = np.full(p.n("ops"), -1, dtype=np.int64)
    assert (infer_parents(p) == linked).all()
    frame = events_of(p)
    assert frame.source == "cpu_ops" and "aten::mm" not in set(frame.frame()["name"])
    assert verify(p).exit_code == 0


def test_region_star_covers_unattributed_events_for_per_step_budgets():
    spec = _spec('''
[spec]
checks = []
[[assert]]
id = "dense-gemm-budget"
kind = "max_launches"
region = "*"
family = "gemm"
max = 31
[[assert]]
id = "grouped-anywhere"
kind = "require"
region = "*"
family = "grouped_gemm"
every_layer = false
''')
    fused = {x.id: x for x in verify(runtime_profile(device="nvidia", scopes=False, dispatch=False), spec).results}
    # dense GEMMs per step: qkv + o_proj in 8 layers, 2 in each of 3 dense MLPs, 5 routers, 3 indexers, lm_head
    assert fused["grouped-anywhere"].status == "pass"
    seen = fused["dense-gemm-budget"].data["max_seen"]
    assert seen == 2 * 8 + 2 * 3 + 5 + 3 + 1 and fused["dense-gemm-budget"].status == "pass"
    sep = {x.id: x for x in verify(runtime_profile(device="nvidia", scopes=False, dispatch=False, shared="separate"),
                                   spec).results}
    assert sep["dense-gemm-budget"].data["max_seen"] == seen + 2 * 5  # + gate_up and down in 5 MoE layers
    assert sep["dense-gemm-budget"].status == "fail" and sep["dense-gemm-budget"].code == "FP005"
