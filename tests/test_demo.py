"""`mmprof demo`: before/after on the tiny model, and what summary / verify-fastpath / diff / shapes say."""

from __future__ import annotations

import json
import re

import pytest

from mmprof.capture.workflows.demo import DemoResult, run_demo, run_step
from mmprof.cli import main
from mmprof.errors import BadInput
from mmprof.profiles import load_profile
from mmprof.render.text.demo import render_demo
from rich.cells import cell_len
from rich.console import Console


def render(res):
    render_demo(res, Console(highlight=False, soft_wrap=False))


@pytest.fixture(scope="module")
def demo_result(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    return run_demo(out, prompt_len=32, decode_steps=2, repeats=1)


def test_demo_saves_before_and_after_profiles(demo_result):
    assert set(demo_result.runs) == {"before", "after"}
    b = load_profile(demo_result.runs["before"]["profile"])
    a = load_profile(demo_result.runs["after"]["profile"])
    assert b.meta["run"]["switches"] == {"moe_impl": "loop", "shared_expert": "separate", "block_reuse": 1,
                                         "attention": "sparse", "graphs": False, "compile": False,
                                         "compile_prefill": False, "triton_norm_rope": False,
                                         "triton_attention": False, "triton_moe": False}
    assert a.meta["run"]["switches"]["moe_impl"] == "grouped" and a.meta["run"]["switches"]["shared_expert"] == "fused"
    assert a.meta["run"]["switches"]["block_reuse"] == 4
    for run in demo_result.runs.values():
        assert run["tokens_per_s"]["plain"]["decode"] > 0
    sp = demo_result.speedup
    bt, at = (demo_result.runs[k]["tokens_per_s"]["plain"]["decode"] for k in ("before", "after"))
    assert sp["decode"] == pytest.approx(at / bt)


def test_verify_fastpath_fails_before_and_passes_after(demo_result):
    before, after = demo_result.step("verify:before"), demo_result.step("verify:after")
    assert before.status == "violations" and before.exit_code == 1
    failed = {r["id"] for r in before.data["results"] if r["status"] == "fail"}
    assert {"shared-expert-fused", "block-selection-reused"} <= failed
    assert any("loop" in r["message"] for r in before.data["results"] if r["status"] == "fail")
    assert after.status == "ok" and after.exit_code == 0 and after.data["status"] == "pass"


def test_diff_gives_a_verdict(demo_result):
    d = demo_result.step("diff")
    assert d.status == "ok", d.message
    assert isinstance(d.data["verdict"], str) and "decode" in d.data["verdict"]
    regions = json.dumps(d.data["path_changes"])
    assert "moe.shared" in regions and "moe.routed" in regions


def test_overlap_and_shapes(demo_result):
    o = demo_result.overlap
    assert o["pairs"] == [[2, 3], [3, 4], [4, 5]] or o["pairs"] == [(2, 3), (3, 4), (4, 5)]
    assert 0.0 <= o["mean_shared_fraction"] <= 1.0
    assert o["safe"] == (o["mean_shared_fraction"] >= o["threshold"])
    s = demo_result.step("shapes")
    assert s.status == "ok" and s.data["tp"] == 8 and s.data["model"] == "m3"


def test_render_tells_the_story(demo_result, capsys):
    render(demo_result)
    out = capsys.readouterr().out
    flat = " ".join(out.split())
    assert "loop / separate / K=1" in flat and "grouped / fused / K=4" in flat
    assert "speed-up after/before" in flat
    assert "before: FAIL (exit 1)" in flat and "after: PASS (exit 0)" in flat
    assert "FP001 shared-expert-fused" in flat and "FP002 block-selection-reused" in flat
    # issue 31: which run is faster and on what evidence comes first, then the step line with its noise band
    assert re.search(r"(after is faster|before is faster|no measurable change|not decidable), by the ", flat)
    assert "step: median decode step" in flat and "kernel paths that changed" in flat
    assert "reuse" in flat and "SH001" in flat
    assert demo_result.runs["before"]["profile"] in flat.replace(" ", "") or "before.json.gz" in flat
    json.dumps(demo_result.to_dict())  # --json output is serialisable
    for width in (80, 120):  # the story fits the terminal
        con = Console(width=width, record=True, color_system=None)
        render_demo(demo_result, con)
        assert max(cell_len(line) for line in con.export_text().splitlines()) <= width


def test_failing_step_is_reported_with_its_error_and_the_demo_goes_on(capsys):
    def fail():
        raise BadInput("/nonexistent/profile.json: no such file")

    s = run_step("diff", ["mmprof", "diff", "a", "b"], fail)
    assert s.status == "error" and s.exit_code == 2 and "/nonexistent/profile.json" in s.message
    res = DemoResult("d", steps=[s], overlap={"error": "no sparse layers"})
    render(res)
    out = " ".join(capsys.readouterr().out.split())
    assert "diff: could not run (exit 2): /nonexistent/profile.json" in out
    assert "could not measure: no sparse layers" in out


@pytest.mark.slow
def test_demo_cli_end_to_end(tmp_path, capsys):
    """No time limit here (a loaded machine took 122 s): benchmarks/demo_speed.py measures it."""
    with pytest.raises(SystemExit) as e:
        main(["demo", "--out-dir", str(tmp_path / "d"), "--json"])
    assert e.value.code == 0
    doc = json.loads(capsys.readouterr().out)
    assert (tmp_path / "d" / "before.json.gz").exists() and (tmp_path / "d" / "after.json.gz").exists()
    st = {s["name"]: s for s in doc["steps"]}
    assert st["verify:before"]["exit_code"] == 1 and st["verify:after"]["exit_code"] == 0
    assert st["diff"]["data"]["verdict"]


def test_the_demo_diff_never_contradicts_itself(demo_result):
    """Issue 31: on a busy machine the demo said the fast run was slower (+101%..+503%) with no caveat, and a
    median step sat above mean per-step categories. Now: the per-step parts are means of the same steps as the mean
    step they add up to; a profiled direction that the plain timing contradicts gets its own line; a change inside
    its noise band claims no direction."""
    d = demo_result.step("diff").data
    ans = {x["key"]: x["text"] for x in d["answer"]["lines"]}
    mb = sum(m["before_ns"] for m in d["moves"])
    ma = sum(m["after_ns"] for m in d["moves"])
    step = next(s for s in d["steps"] if s["phase"] == "decode")
    for total, dist in ((mb, step["before_dist"]), (ma, step["after_dist"])):
        assert total == pytest.approx(dist["mean_ns"], rel=1e-9)     # parts add up to the mean step
        assert all(m["before_ns"] <= step["before_dist"]["mean_ns"] * (1 + 1e-9) for m in d["moves"])
    prof_dir = None
    if step["change"] is not None and not step["within_noise"] and step["change"] != 0:
        prof_dir = "after" if step["change"] < 0 else "before"
    plain = d["plain"]
    if plain["faster"] and prof_dir and plain["faster"] != prof_dir:
        assert "disagree" in ans and d["answer"]["faster"] == plain["faster"]
    if step["within_noise"] and not plain["faster"]:
        assert d["answer"]["faster"] is None and ans["faster"].startswith("no measurable change")


def test_one_dilation_per_run_and_the_speed_up_carries_its_noise(demo_result, capsys):
    """Issue 25: one demo screen showed 4.56x / 3.67x (total) in its table and 3.34x -> 2.45x (decode) in the diff
    line for the same runs. Now the table shows the decode dilation, the same number the diff quotes."""
    import re

    render(demo_result)
    out = " ".join(capsys.readouterr().out.split())
    for label in ("before", "after"):
        r = load_profile(demo_result.runs[label]["profile"]).meta["run"]
        assert demo_result.runs[label]["decode_dilation"] == r["dilation_by_phase"]["full"]["decode"]
    b, a = (demo_result.runs[k]["decode_dilation"] for k in ("before", "after"))
    shown = {float(x) for x in re.findall(r"(\d+\.\d\d)x", out.split("speed-up")[0])}
    assert {round(b, 2), round(a, 2)} <= shown
    m = re.search(r"profiler dilation of decode (\d+\.\d\d)x -> (\d+\.\d\d)x", out)
    if m:
        assert (float(m.group(1)), float(m.group(2))) == (round(b, 2), round(a, 2))
    assert "no noise band: one plain run" in out  # the fixture runs repeats=1
    assert demo_result.speedup_noise["decode"] == {"band": None, "inside": None}


def test_demo_findings_are_cut_at_words_not_inside_them():
    """Issue 25: the demo printed `(245,760 B/t…` (a finding cut inside a word and an open parenthesis). A cut
    finding ends at a word boundary before an ellipsis, with every parenthesis it opened closed, and a short one is
    left whole."""
    from mmprof.render.text.demo import _clip_words

    msg = ("replicated KV heads: TP 8 > 4 KV heads: each KV head (and its index-q head) is held by 2 ranks; KV-cache "
           "memory and decode read bandwidth are 2x the unique KV (245,760 B/token per rank instead of 122,880)")
    out = _clip_words(msg, 150)
    assert out.endswith(" …") and len(out) <= 152
    body = out[:-2]
    assert msg.startswith(body) and msg[len(body)] in " ,;:("  # cut at a boundary
    assert body.count("(") == body.count(")")
    assert _clip_words("SH001 short", 150) == "SH001 short"
