"""Issue 25 on the gate: selectors that name nothing that can exist are refused (no vacuous PASS), spec regexes
are bounded, checks are judged per phase, and "not applicable" is a result of its own."""

from __future__ import annotations

import pytest

from mmprof.analysis.checks.selectors import compile_bounded, valid_names, validate_spec
from mmprof.analysis.checks.spec import load_spec, parse_spec
from mmprof.analysis.checks.verify import verify
from mmprof.analysis.attribution.classify import load_rules
from mmprof.cli import main
from mmprof.errors import BadInput
from mmprof.profiles.io import save_profile
from tests.conftest import ROOT
from tests.fastpath_fixtures import runtime_profile


def _spec(text: str):
    import tomllib

    return parse_spec(tomllib.loads(text), "test.toml")


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


# -- selectors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["forbid", "require", "max_launches"])
@pytest.mark.parametrize("key, value, nearest", [
    ("family", "gemmm", "gemm"), ("family", "grouped_gem", "grouped_gemm"), ("library", "cuBLASS", "cuBLAS"),
    ("path", "fallbak", "fallback"), ("variant", "nvjit_tst_*", None), ("region", "layers.*.moe.routd", "layers.*.moe.routed"),
])
def test_a_selector_no_rule_can_produce_is_refused(kind, key, value, nearest):
    """Issue 25: `kind = "forbid"`, `family = "gemmm"` printed PASS and exited 0. The families, libraries, paths
    and variants come from the kernel rules (mmprof/rules/kernels_*.toml), regions from rules/roles.toml."""
    extra = 'max = 4\n' if kind == "max_launches" else ""
    region = value if key == "region" else "layers.*.moe.routed"
    sel = "" if key == "region" else f'{key} = "{value}"\n'
    if key == "region" and kind != "max_launches":
        sel = 'family = "gemm"\n'
    spec = _spec(f'[spec]\nchecks = []\n[[assert]]\nid = "x"\nkind = "{kind}"\nregion = "{region}"\n{sel}{extra}')
    with pytest.raises(BadInput, match="matches nothing the kernel rules or roles can produce") as e:
        verify(runtime_profile(device="nvidia"), spec)
    if nearest:
        assert f"nearest: {nearest}" in str(e.value)


def test_forbid_typo_exits_2_on_the_command_line(tmp_path, capsys):
    prof = tmp_path / "p.json.gz"
    save_profile(runtime_profile(device="nvidia"), prof)
    spec = tmp_path / "s.toml"
    spec.write_text('[spec]\nchecks = []\n[[assert]]\nid = "typo"\nkind = "forbid"\nfamily = "gemmm"\n')
    rc, out, err = run_cli(["verify-fastpath", str(prof), "--spec", str(spec)], capsys)
    assert rc == 2 and "PASS" not in out
    assert err.count("\n") == 1 and "family 'gemmm'" in err and "nearest: gemm" in err


def test_valid_names_are_read_from_the_rules_not_hard_coded(tmp_path):
    """A family that only a user's rules file defines is valid with that file and refused without it."""
    rules = tmp_path / "r.toml"
    rules.write_text('[[rule]]\nid = "site.x"\npattern = "my_site_kernel"\nfamily = "site_family"\nlibrary = "SiteLib"\n')
    spec = _spec('[spec]\nchecks = []\n[[assert]]\nid = "x"\nkind = "forbid"\nfamily = "site_family"\n')
    with pytest.raises(BadInput, match="site_family"):
        validate_spec(spec)
    validate_spec(spec, load_rules([rules]))
    v = valid_names()
    every_family = {r.family for r in load_rules().rules}
    assert every_family <= v["family"]  # every family a built-in rule can give (kernels adds more: read at run time)
    assert {"moe.routed", "attn.indexer", "attn.core"} <= v["layer_roles"] and "lm_head" in v["model_roles"]


def test_every_shipped_spec_validates():
    """The built-in specs and examples/specs/*.toml name only things the rules produce (no false refusal)."""
    specs = [load_spec(), load_spec(ROOT / "mmprof" / "rules" / "builtin_fastpath_generic.toml")]
    specs += [load_spec(p) for p in sorted((ROOT / "examples" / "specs").glob("*.toml"))]
    assert len(specs) >= 4
    for s in specs:
        validate_spec(s)


@pytest.mark.parametrize("glob", ["layers.*.moe.routed", "layers.3.attn.indexer", "layers.1?.mlp", "embed", "*",
                                  "layers.*", "layers.*.moe.*"])
def test_valid_region_globs_are_accepted(glob):
    validate_spec(_spec(f'[spec]\nchecks = []\n[[assert]]\nid = "x"\nkind = "forbid"\nregion = "{glob}"\n'))


# -- bounded regexes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("rx", ["(a+)+$", "(a*)*b", "(?:x{1,}y?)+", "(\\w+\\s?)*$", "((ab)*c)+"])
def test_nested_quantifiers_run_in_linear_time_or_are_refused(rx, monkeypatch):
    """(a+)+ against 'aaaa...!' backtracks exponentially in Python's re: such a spec hung the gate (issues 25, 33).
    With RE2 the pattern runs in linear time (accepted, engine re2); without RE2 it is refused at load."""
    from mmprof import regex_safety

    for key in ("name", "pattern"):
        body = f"name = '{rx}'\nregion = '*'\nkind = 'forbid'" if key == "name" else f"pattern = '{rx}'\nkind = 'forbid_pattern'"
        spec = f'[spec]\nchecks = []\n[[assert]]\nid = "x"\n{body}\n'
        _spec(spec)
        assert compile_bounded(rx, "w", key).engine == "re2"
        with monkeypatch.context() as m:
            m.setattr(regex_safety, "_re2", None)
            with pytest.raises(BadInput, match="nests a repeat inside a repeat"):
                _spec(spec)


@pytest.mark.parametrize("rx", ["Mxfp4.*[Ee]mulat", "^nvjet_\\w+_\\d+x\\d+", "(ab)+", "a+b+c*", "(?:gemm|bmm)_\\d+"])
def test_ordinary_regexes_are_accepted(rx):
    import re

    assert compile_bounded(rx, "w", "name").pattern == re.compile(rx).pattern


def test_backreference_refused():
    with pytest.raises(BadInput, match="backreference"):
        compile_bounded(r"(a)\1", "w", "pattern")


# -- checks per phase --------------------------------------------------------------------------------------
HFB = ("hf_m3_decode_bmm",)


def test_fp003_fails_on_transformers_decode_bmm_naming_the_phase(capsys):
    """transformers' generate() on a GPU runs grouped_mm in prefill and batched_mm (a bmm over gathered expert
    weights) in decode (generation/utils.py `_optimize_model_for_decode`; tests/data/hf_m3_decode_bmm/README.md).
    Before issue 25 routed-experts-grouped passed on the prefill calls alone."""
    from tests.conftest import data_file

    rc, out, _ = run_cli(["verify-fastpath", str(data_file(*HFB, "decode_bmm.json.xz")), "--model",
                          str(data_file(*HFB, "config.json")), "--json"], capsys)
    import json

    doc = json.loads(out)
    r = next(x for x in doc["results"] if x["id"] == "routed-experts-grouped")
    assert rc == 1 and r["status"] == "fail"
    assert r["message"].startswith("decode: family=grouped_gemm never ran")
    assert "aten::bmm -> gemm/gemv (cuBLAS) x28" in r["message"]  # 14 bmm ops, 2 gemv kernels each
    assert r["data"]["phases"]["prefill"]["status"] == "pass" and r["data"]["phases"]["decode"]["status"] == "fail"
    assert "inferred per step from aten::embedding" in r["message"]


def test_phase_inferred_from_embedding_ids_only_without_phases():
    """The Profile's phase column wins; the embedding rule only fills a profile that has none."""
    import pandas as pd

    from mmprof.analysis.checks.steps import embedding_tokens, infer_phases

    assert embedding_tokens("[[4096, 768], [1, 256], [], []]") == 256
    assert embedding_tokens("[[4096, 768], [2, 1]]") == 1 and embedding_tokens("[[5]]") is None
    ev = pd.DataFrame({"phase": ["decode"], "rank": [0], "step": [1]})
    assert infer_phases(None, ev)[1] == "annotations"


def test_each_phase_is_judged_and_reported():
    """The reference runtime's loop experts fail in both phases, each named; an explicit `phase` is judged once."""
    spec = _spec('[spec]\nchecks = []\n[[assert]]\nid = "grouped"\nkind = "require"\n'
                 'region = "layers.*.moe.routed"\nfamily = "grouped_gemm"\nphase = "decode"\n')
    r = verify(runtime_profile(device="nvidia", experts="loop"), spec).results[0]
    assert r.status == "fail" and "phases" not in r.data
    spec2 = _spec('[spec]\nchecks = []\n[[assert]]\nid = "grouped"\nkind = "require"\n'
                  'region = "layers.*.moe.routed"\nfamily = "grouped_gemm"\n')
    r2 = verify(runtime_profile(device="nvidia", experts="loop"), spec2).results[0]
    assert r2.status == "fail" and set(r2.data["phases"]) == {"prefill", "decode"}
    assert r2.message.startswith("prefill: ") and "; decode: " in r2.message
    ok = verify(runtime_profile(device="nvidia"), spec2).results[0]
    assert ok.status == "pass" and {p["status"] for p in ok.data["phases"].values()} == {"pass"}


# -- not applicable ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("trace, cfg, fp001", [("qwen3moe_grouped", "qwen3moe", "not_applicable"),
                                               ("dsv3_eager", "dsv3", "fail")])
def test_generic_gate_on_a_moe_model_without_sparse_attention_is_not_exit_2(trace, cfg, fp001, capsys):
    """Qwen3-MoE and DeepSeek-V3 have no indexer (their configs; modelspec.py): FP002 is not applicable, not
    missing evidence, and the gate exits with the remaining checks (0 or 1). Qwen3-MoE has no shared expert."""
    import json

    from tests.conftest import data_file

    rc, out, _ = run_cli(["verify-fastpath", str(data_file("hf_moe", f"{trace}_nostack.json.gz")), "--model",
                          str(data_file("hf_moe", "configs", f"{cfg}.json")), "--json"], capsys)
    doc = json.loads(out)
    st = {r["code"] + ":" + r["id"]: r["status"] for r in doc["results"]}
    assert st["FP002:block-selection-reused"] == "not_applicable"
    assert st["FP001:shared-expert-fused"] == fp001
    assert rc in (0, 1) and rc == (1 if "fail" in st.values() else 0)
    assert doc["counts"]["not_applicable"] >= 1


def test_dense_attention_run_makes_fp002_not_applicable():
    """`run --attention dense`: the dispatch log shows attn.core = dense in every call and no indexer calls."""
    from mmprof.analysis.checks.context import Context, dense_attention_only

    import pandas as pd

    d = pd.DataFrame({"op": ["attn.core", "attn.core", "moe.experts"], "impl": ["dense", "dense", "grouped_mm"],
                      "phase": ["prefill", "decode", "decode"], "layer": [0, 0, 2], "rank": 0, "step": [0, 1, 1],
                      "requested": ["dense", "dense", "grouped_mm"], "reason": None, "scope": None})
    ctx = Context(events=pd.DataFrame(), dispatch=d, source="kernels", meta={})
    assert dense_attention_only(ctx)
    d2 = d.copy()
    d2.loc[0, "impl"] = "sparse"
    assert not dense_attention_only(Context(events=pd.DataFrame(), dispatch=d2, source="kernels", meta={}))


def test_reference_run_with_dense_attention_is_not_exit_2(tmp_path, capsys):
    pytest.importorskip("torch")
    rc, out, _ = run_cli(["verify-fastpath", "--run", "--preset", "tiny", "--attention", "dense", "--batch", "1",
                          "--prompt-len", "16", "--decode-steps", "2", "--json"], capsys)
    import json

    doc = json.loads(out)
    st = {r["code"]: r["status"] for r in doc["results"] if r["kind"] == "check"}
    assert st["FP002"] == "not_applicable" and st["FP003"] == "pass"
    assert rc in (0, 1)


def test_not_applicable_is_skipped_in_junit_and_all_na_is_exit_2(tmp_path):
    from junitparser import JUnitXml, Skipped

    from mmprof.analysis.checks.context import CheckResult
    from mmprof.analysis.checks.verify import VerifyResult
    from mmprof.render.junit import write_junit

    na = CheckResult(id="x", code="FP002", kind="check", status="not_applicable", message="the model has no indexer")
    ok = CheckResult(id="y", code="FP004", kind="check", status="pass", message="fine")
    res = VerifyResult("s", "src", "kernels", 1, 1, [na, ok], [])
    assert res.exit_code == 0 and res.counts()["not_applicable"] == 1
    assert VerifyResult("s", "src", "kernels", 1, 1, [na], []).exit_code == 2  # nothing judged
    write_junit(res, tmp_path / "j.xml")
    cases = [c for s in JUnitXml.fromfile(str(tmp_path / "j.xml")) for c in s]
    x = next(c for c in cases if c.name == "x")
    assert isinstance(x.result[0], Skipped) and "not applicable" in x.result[0].message
    assert next(c for c in cases if c.name == "y").is_passed


# -- input that does not fit -------------------------------------------------------------------------------
def test_wrong_model_config_is_warned_and_not_used(capsys):
    """A Mixtral config on the M3 trace explained none of its GEMMs but labelled 12,650 kernels `embed`."""
    import json

    from tests.conftest import data_file

    rc, out, _ = run_cli(["verify-fastpath", str(data_file("hf_moe", "m3_grouped_nostack.json.gz")), "--model",
                          str(data_file("hf_moe", "configs", "mixtral.json")), "--json"], capsys)
    doc = json.loads(out)
    assert any("does not fit this trace" in w for w in doc["warnings"])
    assert doc["attributed"] == 0 and rc == 2  # nothing judged from a wrong labelling
    rc, out, _ = run_cli(["verify-fastpath", str(data_file("hf_moe", "m3_grouped_nostack.json.gz")), "--model",
                          str(data_file("hf_moe", "configs", "mixtral.json"))], capsys)
    assert out.index("warning:") < out.index("assertions")


def test_example_and_other_device_specs_are_warned(tmp_path, capsys):
    prof = tmp_path / "p.json.gz"
    save_profile(runtime_profile(device="amd", meta={"ranks": [{"rank": 0, "devices": [{"name": "AMD Instinct MI300X"}]}]}),
                 prof)
    spec = tmp_path / "s.toml"
    spec.write_text('[spec]\nexample = true\ndevice = "MI355X"\nchecks = ["FP000"]\n')
    import json

    rc, out, _ = run_cli(["verify-fastpath", str(prof), "--spec", str(spec), "--json"], capsys)
    w = " ".join(json.loads(out)["warnings"])
    assert "is an example" in w and "is for MI355X, but this profile ran on AMD Instinct MI300X" in w


def test_bad_input_still_writes_junit(tmp_path, capsys):
    """docs/fastpath.md: the JUnit file is written in every case, bad input included (one <error>)."""
    from junitparser import Error, JUnitXml

    j = tmp_path / "j.xml"
    rc, _, err = run_cli(["verify-fastpath", "/nonexistent/p.json", "--junit", str(j)], capsys)
    assert rc == 2 and j.exists()
    case = next(c for s in JUnitXml.fromfile(str(j)) for c in s)
    assert isinstance(case.result[0], Error) and "no such file" in case.result[0].message


def test_fp002_not_applicable_without_any_indexer_but_no_evidence_when_sparse_layers_are_known():
    """A vLLM-style trace of Qwen2-MoE: no dispatch log, no indexer modules, none of the kernels of block selection
    (families indexer_score, sparse_attention, topk/index_topk in mmprof/rules/kernels_model.toml): FP002 does not
    apply. With --sparse-layers (the user says the model has sparse layers) the same profile is no evidence."""
    import pandas as pd

    from mmprof.analysis.checks.context import Context
    from mmprof.analysis.checks.fastpath import fp002

    ev = pd.DataFrame({"name": ["fused_moe_kernel", "nvjet_tst_64x8", "flash_fwd_kernel"],
                       "family": ["grouped_gemm", "gemm", "attention"], "variant": ["fused_moe_triton", "x", "fa"],
                       "role": [None, None, None], "region": [None, None, None], "layer": [-1, -1, -1],
                       "label_source": [None, None, None], "rank": 0, "step": [1, 1, 1], "phase": None,
                       "dur_ns": [10, 10, 10]})
    empty = pd.DataFrame({c: [] for c in ("rank", "step", "layer", "phase", "op", "impl", "requested", "reason", "scope")})
    assert fp002(Context(events=ev, dispatch=empty, source="kernels", meta={}))[0] == "not_applicable"
    st = fp002(Context(events=ev, dispatch=empty, source="kernels", meta={}, sparse_layers=57))[0]
    assert st == "no_evidence"
    idx = ev.copy()
    idx.loc[0, ["family", "variant"]] = ["topk", "index_topk"]  # one indexer kernel: not "no indexer"
    assert fp002(Context(events=idx, dispatch=empty, source="kernels", meta={}))[0] != "not_applicable"
