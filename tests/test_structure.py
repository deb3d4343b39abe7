"""Model structure from traces of runtimes mmprof did not write: transformers' own MoE models (tests/data/hf_moe,
README there says how they were made and what the modeling code does).

Sources: nn.Module events of with_stack traces, and op shapes matched against the model's config.json (--model).
The verdicts each test expects come from transformers' modeling code (tests/data/hf_moe/README.md): the shared
expert is its own MLP called in every MoE layer (M3, DeepSeek), M3 and DeepSeek-V3.2 run an indexer in every
sparse layer, `experts_implementation="eager"` loops over the experts, "grouped_mm" runs two grouped GEMMs."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from mmprof.analysis.checks.verify import verify
from mmprof.analysis.timeline.events import events_of
from mmprof.analysis.shapes.problems import rank_problems
from mmprof.analysis.shapes.shape_match import match_profile
from mmprof.cli import main
from mmprof.importers import import_paths
from mmprof.modelspec import ModelSpec

from .conftest import data_file

HF = ("hf_moe",)
_cache: dict = {}


def trace(name: str):
    if name not in _cache:
        _cache[name] = import_paths([data_file(*HF, f"{name}.json.gz")])
    return _cache[name]


def config(name: str) -> ModelSpec:
    return ModelSpec.load(data_file(*HF, "configs", f"{name}.json"))


def failing(res) -> dict[str, str]:
    return {r.id: r.status for r in res.results}


# name -> (config, verdicts: assertion/check id -> status, layers with a separate shared expert, layers whose
#          indexer computed the selection)
CASES = {
    "m3_eager": ("m3", {"shared-expert-fused": "fail", "block-selection-reused": "fail",
                        "routed-experts-grouped": "fail", "no-expert-loop-gemms": "fail"}, {1, 2, 3}, {1, 2, 3}),
    "m3_grouped": ("m3", {"shared-expert-fused": "fail", "block-selection-reused": "fail",
                          "routed-experts-grouped": "pass", "no-expert-loop-gemms": "pass"}, {1, 2, 3}, {1, 2, 3}),
    # no indexer in Qwen3-MoE / DeepSeek-V3 (no indexer modules, no indexer kernels): FP002 is not applicable
    # (issue 25), neither a pass nor missing evidence. Qwen3-MoE has no shared expert at all
    # (transformers' Qwen3MoeSparseMoeBlock: gate + experts only): MoE blocks with no shared-expert module are no
    # evidence of a fused one (issue 33: never a pass on absence); with the config (--model) FP001 is N/A
    "qwen3moe_grouped": ("qwen3moe", {"shared-expert-fused": "no_evidence", "block-selection-reused": "not_applicable",
                                      "routed-experts-grouped": "pass", "no-expert-loop-gemms": "pass"}, set(), set()),
    "dsv3_eager": ("dsv3", {"shared-expert-fused": "fail", "block-selection-reused": "not_applicable",
                            "routed-experts-grouped": "fail", "no-expert-loop-gemms": "fail"}, {1, 2, 3}, set()),
    "dsv32_grouped": ("dsv32", {"shared-expert-fused": "fail", "block-selection-reused": "fail",
                                "routed-experts-grouped": "pass", "no-expert-loop-gemms": "pass"},
                      {1, 2, 3}, {0, 1, 2, 3}),
}


def _layers_of(frame, role: str) -> set[int]:
    return {int(x) for x in frame.layer[frame.role == role] if x >= 0}


@pytest.mark.parametrize("name", list(CASES))
def test_module_events_give_the_structure_and_the_verdicts(name):
    _, want, shared, indexer = CASES[name]
    p = trace(f"{name}_stack")
    frame = events_of(p)
    assert set(frame.label_source[frame.region != None]) == {"module"}  # noqa: E711
    share = frame.dur[frame.region != None].sum() / frame.dur.sum()  # noqa: E711
    assert share >= 0.90, share
    assert _layers_of(frame, "moe.shared") == shared and _layers_of(frame, "attn.indexer") == indexer
    res = verify(p)
    assert res.spec_id == "mmprof-moe-fast"  # no dispatch log: the spec for any runtime
    got = failing(res)
    assert {k: got[k] for k in want} == want
    if want["shared-expert-fused"] == "fail":
        r = next(r for r in res.results if r.id == "shared-expert-fused")
        assert f"layers {min(shared)}-{max(shared)}" in r.evidence[0]


@pytest.mark.parametrize("name", list(CASES))
def test_op_shapes_alone_give_the_same_structure(name):
    cfg, want, shared, indexer = CASES[name]
    p = trace(f"{name}_nostack")
    assert all(n.startswith("ProfilerStep#") for n in p.col("scopes", "name", decode=True))  # no labels, no modules
    ss = match_profile(p, config(cfg))
    rep = ss.report
    # the committed excerpts keep ProfilerStep#1 (16-token prefill) and #2 (the first decode): 2 forwards
    assert rep.forwards == rep.forwards_layered == 2 and not rep.unexplained
    frame = events_of(p, shape_regions=ss.regions)
    share = frame.dur[frame.region != None].sum() / frame.dur.sum()  # noqa: E711
    assert share >= 0.80, share
    assert set(frame.label_source[frame.region != None]) == {"shape"}  # noqa: E711
    assert _layers_of(frame, "moe.shared") == shared and _layers_of(frame, "attn.indexer") == indexer
    got = failing(verify(p, shape_regions=ss.regions, model=config(cfg)))
    if name == "qwen3moe_grouped":  # the config says: no shared expert
        want = dict(want, **{"shared-expert-fused": "not_applicable"})
    assert {k: got[k] for k in want} == want


@pytest.mark.parametrize("name", ["m3_grouped", "m3_eager", "dsv3_eager", "qwen3moe_grouped", "dsv32_grouped"])
def test_two_independent_sources_agree_op_by_op(name):
    """On one with_stack trace (shapes recorded too), the module tree and the shape matching label the same
    GEMMs with the same layer and role: two independent ways of reading the structure. Where the shapes leave
    the part of a MoE block open (`layers.N.moe`), the module tree names a part of that block."""
    cfg = CASES[name][0]
    p = trace(f"{name}_stack")
    ss = match_profile(p, config(cfg))
    frame = events_of(p)  # labelled by the module tree
    ops = frame.row
    direct = ss.direct[ops]
    assert direct.sum() > 50
    mod = frame.region[direct].astype(str)
    shp = np.asarray(ss.regions.region, dtype=object)[ops][direct].astype(str)
    open_part = np.char.endswith(shp.astype("U"), ".moe")
    assert (mod[~open_part] == shp[~open_part]).all(), Counter(zip(mod[mod != shp], shp[mod != shp]))
    assert all(m.startswith(s + ".") for m, s in zip(mod[open_part], shp[open_part]))


def test_ambiguous_shapes_are_reported_not_forced():
    """Eager M3 decode: one token, so a routed expert's GEMM and the shared expert's have the same shape and
    the same M; the matching says so (role `moe`, the block known, the part not) rather than guess."""
    ss = match_profile(trace("m3_eager_nostack"), config("m3"))
    amb = ss.report.ambiguous
    assert amb and all(a["roles"] == ["moe.routed", "moe.shared"] and a["mnk"][0] == 1 for a in amb)
    assert {a["step"] for a in amb} == {2}  # the decode step only (#2; the full trace: 2-4); the prefill is not
    roles = Counter(r for r in ss.regions.role if r)
    assert roles["moe"] > 0 and roles["moe.shared"] > 0


def test_tp2_attention_replicated_across_ranks(capsys):
    """transformers' tp_plan gathers q/k/v back to full heads: attention runs all 8 heads on each of the 2 ranks
    (TP 2 should give 4), with 13 all-gathers per rank per step, and the indexer, shared expert and dense MLP
    stay whole on every rank (not in the plan)."""
    a, b = (str(data_file(*HF, f"m3_tp2_rank{r}.json.gz")) for r in (0, 1))
    with pytest.raises(SystemExit) as e:
        main(["shapes", "--profile", a, "--profile", b, "--model", str(data_file(*HF, "configs", "m3.json")),
              "--tp", "2", "--json"])
    assert e.value.code == 0
    d = json.loads(capsys.readouterr().out)
    f = {x["title"]: x for x in d["findings"] if x["code"] == "SH008"}
    att = f["attention replicated across TP ranks"]
    assert att["cost"]["heads_seen"] == 8 and att["cost"]["heads_per_rank_expected"] == 4
    assert att["cost"]["allgathers_per_step"] == {"0": 13.0, "1": 13.0} and att["ranks"] == [0, 1]
    gem = f["GEMMs replicated across TP ranks"]
    assert set(gem["cost"]) == {"attn.indexer", "mlp", "moe.shared"}
    assert not [x for x in d["findings"] if x["code"] == "SH009"]


def test_unexplained_gemms_with_the_wrong_config():
    """The Qwen3-MoE trace matched against the M3 config: its GEMMs are not M3's (SH009), never forced."""
    from mmprof.analysis.checks.shapes_traced import traced_findings

    p = trace("qwen3moe_grouped_nostack")
    ss = match_profile(p, config("m3"))
    assert ss.report.matched == 0 and len(ss.report.unexplained) == ss.report.gemms > 0
    f = traced_findings(ss.report, p)
    assert [x.code for x in f] == ["SH009"] and f"{ss.report.gemms} of {ss.report.gemms} GEMMs" in f[0].message


@pytest.mark.parametrize("tp, ep", [(1, 1), (2, 1), (4, 1), (8, 1), (8, 8)])
def test_problem_table_equals_the_runtimes_meta_build(tp, ep):
    """The shape arithmetic of analysis/shapes/problems.py against the reference runtime's own sharding on the meta
    device, for the real M3 config: every GEMM (N, K, groups) the runtime builds is in the table for its role."""
    from mmprof.runtime import analytic, get_preset, to_spec

    args = get_preset("m3")
    built = analytic(args, tp, ep)
    table = {lp.layer: lp for lp in rank_problems(to_spec(args), tp, ep)}
    for kind in built.ranks[0].kinds:
        probs = table[kind.layers[0]].problems
        for g in kind.gemms:
            fits = [p for p in probs if p.role == g.scope and p.n == g.n and p.k == g.k
                    and (p.groups == g.weight_groups if g.groups > 1 else p.groups == 1)]
            assert fits, (kind.kind, g.name, g.n, g.k, g.weight_groups)


def test_diff_by_layer_and_region_from_shapes(capsys):
    m3 = str(data_file(*HF, "configs", "m3.json"))
    with pytest.raises(SystemExit) as e:
        main(["diff", str(data_file(*HF, "m3_eager_nostack.json.gz")), str(data_file(*HF, "m3_grouped_nostack.json.gz")),
              "--model", m3, "--json"])
    assert e.value.code == 0
    d = json.loads(capsys.readouterr().out)
    assert [x["key"] for x in d["layers"]] == ["layer 0", "layer 1", "layer 2", "layer 3", "(no layer)"]
    scopes = {x["key"] for x in d["by_scope"]}
    assert {"attn.qkv", "attn.indexer", "moe.routed", "moe.shared", "moe.router", "mlp"} <= scopes
    assert "(unscoped)" not in scopes
    pc = next(x for x in d["path_changes"] if x["region"] == "moe.routed")
    assert "gemm" in pc["summary"].split("->")[0] and "grouped_gemm" in pc["summary"].split("->")[1]


@pytest.mark.parametrize("bad, msg", [
    ({"hidden_size": 64}, "num_hidden_layers"),
    ({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 0,
      "vocab_size": 10, "intermediate_size": 8}, "num_key_value_heads"),
    ({"hidden_size": "64", "num_hidden_layers": 2}, "hidden_size"),
    ({"hidden_size": 64, "num_hidden_layers": None}, "num_hidden_layers"),
    ({"hidden_size": 64.5, "num_hidden_layers": 2}, "hidden_size"),
    ([1, 2], "JSON object"),
])
def test_bad_configs_are_refused_not_defaulted(bad, msg, tmp_path):
    from mmprof.errors import BadInput

    f = tmp_path / "config.json"
    f.write_text(json.dumps(bad))
    with pytest.raises(BadInput, match=msg):
        ModelSpec.load(f)


def test_config_families():
    assert [config(n).family for n in ("m3", "qwen3moe", "dsv3", "dsv32", "mixtral", "gptoss")] == [
        "minimax_m3", "qwen_moe", "deepseek_v3", "deepseek_v32", "mixtral", "gpt_oss"]
    m3 = ModelSpec.load(data_file("m3_config", "config.json"))  # the released config's legacy keys
    assert m3.mlp_types.count("moe") == 57 and m3.attn_types.count("sparse") == 57 and m3.index_topk == 16
