"""docs/glossary.md: one definition per word, checked by running every command on the same profiles.

Issue 31 found, on one vLLM decode trace, a "step" of 8.01 ms in `report` / `diff` and 4.19 ms in `ranks`, three
slow layers named for one straggler, and 5,575 "kernels" in `classify` where `summary` said 5,093 kernels and 482
copies. Here `report`, `diff`, `ranks`, `summary` and `classify` run as a user runs them (the CLI, --json) on a
vLLM trace with engine steps, a runtime profile with marker steps and a two-rank TP run, and every command must
print the same step time, kernel count and straggler layer; the kernel and copy counts are recounted from the raw
trace (json, not mmprof).
"""

from __future__ import annotations

import re

import orjson
import pytest

from mmprof.importers import import_paths
from tests.conftest import ROOT, data_file, open_data

VLLM_GRAPHS = data_file("samples", "vllm", "m3_graphs_b8.pt.trace.json.xz")
VLLM_EAGER = data_file("samples", "vllm", "m3_eager_b8.pt.trace.json.xz")
CASES = {  # profile, the other side of a diff (a real run of the same model)
    "vllm-engine-steps": (VLLM_GRAPHS, VLLM_EAGER),
    "runtime-marker-steps": (ROOT / "examples" / "h200" / "graphs" / "graphs_b1.json.gz",
                             ROOT / "examples" / "h200" / "graphs" / "fused_b1.json.gz"),
    "tp2-two-ranks": (ROOT / "examples" / "h200x2" / "tp2_fused_eager_b64.json.gz",
                      ROOT / "examples" / "h200x2" / "tp2_separate_eager_b64.json.gz"),
}
PHASES = {"vllm-engine-steps": ("prefill", "decode"), "runtime-marker-steps": ("decode",),  # the excerpt: decode
          "tp2-two-ranks": ("decode",)}   # the excerpts keep decode steps only (examples/README.md)


def _json(args):
    """Run one command as a user does (the CLI, --json) and parse what it printed."""
    import contextlib
    import io

    from mmprof.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as e:
        main([*map(str, args), "--json"])
    assert e.value.code in (0, 1), err.getvalue()
    return orjson.loads(out.getvalue())


@pytest.fixture(scope="module", params=list(CASES))
def outputs(request):
    path, other = CASES[request.param]
    return request.param, path, {
        "report": _json(["report", path]), "ranks": _json(["ranks", path]), "summary": _json(["summary", path]),
        "classify": _json(["classify", path]),
        "diff": {ph: _json(["diff", path, other, "--phase", ph, "--force"]) for ph in PHASES[request.param]}}


def test_step_time_is_one_number_in_every_command(outputs):
    name, _, o = outputs
    rep = {p["phase"]: p for p in o["report"]["phases"]}
    per_rank_rep = {(p["phase"], p["rank"]): p for p in o["report"]["per_rank"]}
    for ph in PHASES[name]:
        step = rep[ph]["step"]["median_ns"]
        assert step and step > 0, (name, ph)
        d = next(s for s in o["diff"][ph]["steps"] if s["phase"] == ph)
        assert d["before_ns"] == step, (name, ph)                  # diff's median step of the before side
        assert d["before_dist"]["median_ns"] == step
        for r in o["ranks"]["per_rank"]:                           # ranks: the same window, per rank
            if r["phase"] == ph:
                own = per_rank_rep.get((ph, r["rank"]), rep[ph])   # report lists ranks apart when it has several
                assert r["step_ns"] == own["step"]["median_ns"], (name, ph, r["rank"])
                assert r["busy_ns"] <= r["step_ns"]
        if len(o["ranks"]["ranks"]) == 1:
            assert next(r["step_ns"] for r in o["ranks"]["per_rank"] if r["phase"] == ph) == step
    # the per-step parts diff shows are means of the same windows: they add up to the mean step
    d = o["diff"]["decode"]
    dist = next(s for s in d["steps"] if s["phase"] == "decode")["before_dist"]
    assert sum(m["before_ns"] for m in d["moves"]) == pytest.approx(dist["mean_ns"], rel=1e-9)


def test_kernel_is_a_row_of_the_kernels_table_and_copies_are_counted_apart(outputs):
    name, path, o = outputs
    prof = import_paths([path])
    kernels, copies = prof.n("kernels"), prof.n("memcpy")
    assert sum(r["kernels"] for r in o["summary"]["ranks"]) == kernels == o["classify"]["kernels"], name
    assert sum(r["memcpy"] for r in o["summary"]["ranks"]) == copies == o["classify"]["copies"], name
    assert o["classify"]["events"] == kernels + copies
    if name == "vllm-engine-steps":   # an independent count: the raw Kineto events
        raw = orjson.loads(open_data(path).read())["traceEvents"]
        assert kernels == sum(1 for e in raw if e.get("cat") == "kernel")
        assert copies == sum(1 for e in raw if e.get("cat") in ("gpu_memcpy", "gpu_memset"))


def test_one_straggler_layer_per_phase(outputs):
    name, _, o = outputs
    if len(o["ranks"]["ranks"]) < 2:            # one rank: no straggler, in no command
        assert all(v["straggler"] is None and v["layer"] is None for v in o["ranks"]["phases"]), name
        assert not o["ranks"]["findings"]
        return
    assert name == "tp2-two-ranks"
    for v in o["ranks"]["phases"]:
        if not v["steps"]:
            continue
        layer = v["layer"]
        assert layer is None or layer == v["layers"][0]["region"]
        if layer and v["finding"] and v["consistent"]:
            finding = next(f for f in o["ranks"]["findings"] if f.startswith(f"{v['phase']}:"))
            assert re.findall(r"layers\.\d+", finding) == [layer] or finding.count("layers.") == 1, finding
        steps = [x for x in o["ranks"]["steps"] if x["phase"] == v["phase"]]
        if len(steps) == 1 and layer:          # one step: its straggler layer is the phase's
            assert steps[0]["regions"][0]["region"] == layer
        # report and diff carry the same verdict (the same function, the same straggler layer)
        rep = next(p for p in o["report"]["ranks"]["phases"] if p["phase"] == v["phase"])
        assert (rep["straggler"], rep["layer"]) == (v["straggler"], v["layer"])
        dside = o["diff"]["decode"]["ranks"]["before"]
        if v["phase"] == "decode" and dside:
            dv = next(p for p in dside["phases"] if p["phase"] == "decode")
            assert (dv["straggler"], dv["layer"]) == (v["straggler"], v["layer"])
