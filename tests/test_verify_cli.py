"""`mmprof verify-fastpath`: exit codes 0 / 1 / 2, JSON, and JUnit XML read back with junitparser."""

from __future__ import annotations

import json

import pytest
from junitparser import Error, Failure, JUnitXml

from mmprof.cli import main
from mmprof.profiles.io import save_profile
from tests.conftest import DATA, ROOT
from tests.fastpath_fixtures import empty_profile, runtime_profile


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


@pytest.fixture
def profiles(tmp_path):
    paths = {}
    for name, kw in {"fast": dict(device="nvidia"), "separate": dict(device="nvidia", shared="separate"),
                     "cpu_reuse1": dict(block_reuse=1), "noscope": dict(device="amd", scopes=False, dispatch=False)}.items():
        paths[name] = tmp_path / f"{name}.json.gz"
        save_profile(runtime_profile(**kw), paths[name])
    paths["empty"] = tmp_path / "empty.json"
    save_profile(empty_profile(), paths["empty"])
    return paths


def test_pass_exits_0_with_region_table(profiles, capsys):
    rc, out, err = run_cli(["verify-fastpath", str(profiles["fast"])], capsys)
    assert rc == 0, out + err
    assert "layers.*.moe.routed" in out and "PASS" in out and "0 failed" in out


def test_violation_exits_1_and_names_the_rule(profiles, capsys, tmp_path):
    junit = tmp_path / "report.xml"
    rc, out, _ = run_cli(["verify-fastpath", str(profiles["separate"]), "--junit", str(junit)], capsys)
    assert rc == 1 and "FP001" in out and "FAIL" in out
    xml = JUnitXml.fromfile(str(junit))
    suites = list(xml) if hasattr(xml, "__iter__") else [xml]
    cases = [c for s in suites for c in s]
    spec_cases = {c.name: c for c in cases}
    assert len(cases) == 9  # 5 built-in checks + 4 assertions of the built-in spec
    fp1 = spec_cases["shared-expert-fused"]
    assert fp1.classname == "mmprof-reference-fast.FP001"
    res = fp1.result
    assert len(res) == 1 and isinstance(res[0], Failure) and "FP001" in res[0].message
    assert "layers 3-7" in res[0].text
    assert any(isinstance(r, Failure) for r in spec_cases["shared-expert-dispatch-fused"].result)
    assert spec_cases["routed-experts-grouped"].is_passed
    assert sum(1 for c in cases if not c.is_passed) == 2


def test_no_evidence_exits_2_with_errors_in_junit(profiles, capsys, tmp_path):
    junit = tmp_path / "empty.xml"
    rc, out, err = run_cli(["verify-fastpath", str(profiles["empty"]), "--junit", str(junit)], capsys)
    # a profile with every table empty is refused when read (issue 33), one line: never judged, never a pass
    assert rc == 2 and "every table is empty" in err and err.count("\n") == 1 and "PASS" not in out
    cases = [c for s in JUnitXml.fromfile(str(junit)) for c in s]
    assert cases and all(isinstance(c.result[0], Error) for c in cases)
    assert not any(c.is_passed for c in cases)


def test_no_scopes_is_exit_2_not_a_pass(profiles, capsys):
    rc, out, _ = run_cli(["verify-fastpath", str(profiles["noscope"]), "--json"], capsys)
    doc = json.loads(out)
    assert rc == 2 and doc["exit_code"] == 2 and doc["status"] == "no_evidence"
    assert doc["counts"]["no_evidence"] >= 3 and doc["counts"]["fail"] == 0


def test_json_output_matches_exit_code(profiles, capsys):
    rc, out, _ = run_cli(["verify-fastpath", str(profiles["cpu_reuse1"]), "--json"], capsys)
    doc = json.loads(out)
    assert rc == 1 and doc["exit_code"] == 1 and doc["source"] == "cpu_ops"
    failed = [r for r in doc["results"] if r["status"] == "fail"]
    assert [r["code"] for r in failed] == ["FP002"]
    assert any(g["region"] == "layers.*.attn.indexer" for g in doc["regions"])


def test_user_spec_and_rules(profiles, capsys, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text('''
[spec]
id = "site"
checks = ["FP000"]
[[assert]]
id = "no-cutlass-grouped"
kind = "forbid"
library = "SiteGrouped"
''')
    rules = tmp_path / "rules.toml"
    rules.write_text('''
[[rule]]
id = "moe.torch.grouped_mm"
pattern = 'GroupProblemShape'
family = "grouped_gemm"
library = "SiteGrouped"
''')
    # without the site's rules no rule produces library SiteGrouped: a forbid on it would pass vacuously, so it
    # is refused as bad input (issue 25), naming the nearest libraries the rules know
    rc, _, err = run_cli(["verify-fastpath", str(profiles["fast"]), "--spec", str(spec)], capsys)
    assert rc == 2 and "library 'SiteGrouped' matches nothing" in err and "nearest" in err
    rc, out, _ = run_cli(["verify-fastpath", str(profiles["fast"]), "--spec", str(spec), "--rules", str(rules), "--json"], capsys)
    doc = json.loads(out)
    assert rc == 1 and doc["spec"] == "site" and doc["results"][1]["code"] == "FP009"  # forbid (FP004 until 2026-12)


@pytest.mark.parametrize("args, msg", [
    (["verify-fastpath", "/nonexistent/p.json"], "no such file"),
    (["verify-fastpath"], "give a PROFILE"),
    (["verify-fastpath", "{fast}", "--spec", "/nonexistent/s.toml"], "no such spec file"),
])
def test_bad_input_exits_2_with_one_line(profiles, capsys, args, msg):
    args = [a.format(fast=profiles["fast"]) for a in args]
    rc, out, err = run_cli(args, capsys)
    assert rc == 2 and msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_raw_trace_is_imported_on_the_fly(capsys):
    rc, out, _ = run_cli(["verify-fastpath", str(DATA / "kineto_own" / "h200_probe.json.gz"), "--json"], capsys)
    doc = json.loads(out)
    assert rc == 1 and doc["source"] == "kernels"
    assert {r["code"] for r in doc["results"] if r["status"] == "fail"} == {"FP001"}


def test_example_ci_workflow_gates_on_the_spec():
    wf = (ROOT / "examples" / "ci" / "fastpath.yml").read_text()
    assert "mmprof run" in wf and "mmprof verify-fastpath" in wf and "--junit" in wf
    import yaml  # noqa: F401 - pyyaml ships with transformers

    doc = yaml.safe_load(wf)
    steps = doc["jobs"]["fastpath"]["steps"]
    assert any("verify-fastpath" in (s.get("run") or "") for s in steps)


@pytest.mark.slow
def test_run_option_runs_the_reference_runtime_first(tmp_path, capsys):
    """`verify-fastpath --run [run options]`: the fast configuration passes; a separate shared expert fails
    FP001, and -o keeps the run's Profile."""
    small = ["--preset", "tiny", "--prompt-len", "64", "--decode-steps", "2"]
    rc, out, err = run_cli(["verify-fastpath", "--run", *small, "--json"], capsys)
    assert rc == 0, out + err
    kept = tmp_path / "sep.json.gz"
    rc, out, err = run_cli(["verify-fastpath", "--run", *small, "--shared-expert", "separate", "-o", str(kept),
                            "--json"], capsys)
    doc = json.loads(out)
    assert rc == 1 and kept.exists()
    assert {r["code"] for r in doc["results"] if r["status"] == "fail"} >= {"FP001"}


def test_profile_and_run_together_is_bad_usage(profiles, capsys):
    rc, out, err = run_cli(["verify-fastpath", str(profiles["fast"]), "--run"], capsys)
    assert rc == 2 and "not both" in err and "Traceback" not in err
