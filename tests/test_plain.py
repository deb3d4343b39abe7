"""Plain (unprofiled) time beside the profiled time in `mmprof diff` (issue 31): from `mmprof run`'s meta.run, from
the vllm-kit summary beside a vLLM trace (vLLM's own timing), from a number or a JSON file the user passes; never
"plain: null". Every figure is recomputed here from the file it came from."""

from __future__ import annotations

import json

import orjson
import pytest

from mmprof.analysis.compare.plain import (NO_PLAIN, from_benchmark, from_run_meta, from_value, from_vllm_kit,
                                           plain_change)
from mmprof.errors import BadInput
from mmprof.profiles.io import load_profile
from tests.conftest import ROOT, data_file

VLLM = ("samples", "vllm")


def _cli(args, capsys):
    from mmprof.cli import main

    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_mmprof_runs_own_timing_and_the_profilers_cost():
    meta = load_profile(ROOT / "examples" / "h200" / "graphs" / "graphs_b1.json.gz").meta
    t = from_run_meta(meta)
    plain, full = meta["run"]["timings"]["plain"], meta["run"]["timings"]["full"]
    steps = meta["run"]["workload"]["decode_steps"]
    assert t.step_ms == pytest.approx(plain["decode_ms"] / steps) and not t.bound
    assert t.runs_ms == pytest.approx([x / steps for x in plain["decode_ms_all"]])
    assert t.cost == pytest.approx(meta["run"]["dilation_by_phase"]["full"]["decode"])   # what mmprof run printed
    assert t.profiled_step_ms == pytest.approx(full["decode_ms"] / steps)
    assert from_run_meta({}) is None and from_run_meta({"run": {"timings": {}}}) is None


def test_vllm_kit_summary_gives_vllms_own_timing_as_an_upper_bound():
    doc = json.loads(data_file(*VLLM, "m3_eager_b8.summary.json").read_text())
    t = from_vllm_kit(doc, "m3_eager_b8.summary.json")
    c = doc["child"]
    steps = c["sampling"]["max_tokens"] - 1            # a generate: one prefill step, then decode steps
    assert t.bound and t.step_ms == pytest.approx(c["timed_unprofiled"]["wall_s"] * 1000 / steps)
    assert t.tok_s == c["timed_unprofiled"]["output_tok_per_s"]
    assert t.tok_s_runs == [c["timed_unprofiled"]["output_tok_per_s"], c["warmup"]["output_tok_per_s"]]
    assert t.cost == pytest.approx(c["timed_unprofiled"]["output_tok_per_s"] / c["profiled_generate"]["output_tok_per_s"])
    assert t.workload["batch"] == 8 and t.workload["prompt_len"] == 64 and t.workload["tp"] == 1
    assert from_vllm_kit({"child": {}}, "x") is None and from_vllm_kit([], "x") is None


def test_plain_change_compares_like_with_like():
    exact = from_value("4.0ms", "--plain-before")
    assert exact.step_ms == 4.0 and not exact.bound
    bound = from_vllm_kit(json.loads(data_file("vllm_own", "m3_graphs_b1.summary.json").read_text()), "s.json")
    c = plain_change(exact, bound)      # an upper bound below a measured time decides
    assert bound.step_ms < 4.0 and c.faster == "after" and c.band is None
    c = plain_change(from_value("1ms", "--plain-before"), bound)
    assert c.faster is None and "cannot say which is faster" in c.text   # the bound is above: undecidable
    c = plain_change(from_value("200tok/s", "x"), from_value("250tok/s", "y"))
    assert c.change == pytest.approx(200 / 250 - 1) and c.faster == "after"
    c = plain_change(from_value("200tok/s", "x"), from_value("5ms", "y"))
    assert c.faster is None and "not the same measure" in c.text
    # repeats on both sides: within the run-to-run spread when the runs' ranges overlap
    b = from_benchmark({"decode_ms_per_step": 1.9, "repeats_ms": [1.65, 1.9, 1.94]}, "vllm")
    a = from_benchmark({"decode_ms_per_step": 1.67, "repeats_ms": [1.63, 1.67, 1.97]}, "rt")
    c = plain_change(b, a)
    assert c.within_noise and c.faster is None and "within the run-to-run spread" in c.text
    assert plain_change(None, None).text == NO_PLAIN
    for bad in ("4.3", "fast", "-1ms", "0ms"):
        with pytest.raises(BadInput, match="--plain-after"):
            from_value(bad, "--plain-after")


def test_cli_reads_the_summary_beside_a_trace_and_the_options(tmp_path, capsys):
    b, a = data_file(*VLLM, "m3_eager_b8.pt.trace.json.xz"), data_file(*VLLM, "m3_graphs_b8.pt.trace.json.xz")
    rc, out, err = _cli(["diff", b, a, "--json"], capsys)
    assert rc == 0, err
    doc = orjson.loads(out)
    eager = json.loads(data_file(*VLLM, "m3_eager_b8.summary.json").read_text())["child"]
    assert doc["plain"]["before"]["tok_s"] == eager["timed_unprofiled"]["output_tok_per_s"]
    assert "m3_eager_b8.summary.json" in doc["plain"]["before"]["source"]
    rc, text, _ = _cli(["diff", b, a], capsys)
    assert rc == 0 and "plain before: <= " in text and "null" not in text
    # a number the user gives wins over the summary; a JSON benchmark line too
    line = tmp_path / "vllm.json"
    line.write_text(json.dumps({"engine": "vllm", "decode_ms_per_step": 1.9, "repeats_ms": [1.9, 1.95]}))
    rc, out, err = _cli(["diff", b, a, "--json", "--plain-before", "30ms", "--plain-after", line], capsys)
    assert rc == 0, err
    doc = orjson.loads(out)
    assert doc["plain"]["before"]["step_ms"] == 30 and doc["plain"]["after"]["step_ms"] == 1.9
    assert doc["plain"]["faster"] == "after" and doc["answer"]["faster"] == "after"
    rc, _, err = _cli(["diff", b, a, "--plain-after", "fast"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "--plain-after" in err
    # no plain timing anywhere: said in words, never "null"
    rc, text, _ = _cli(["diff", data_file("samples", "kineto", "sampled_rank-0.json.gz"),
                        data_file("samples", "kineto", "sampled_rank-1.json.gz")], capsys)
    assert rc == 0 and "null" not in text and "plain timing: no plain timing on either side" in " ".join(text.split())
    rc, out, _ = _cli(["diff", data_file("samples", "kineto", "sampled_rank-0.json.gz"),
                       data_file("samples", "kineto", "sampled_rank-1.json.gz"), "--json"], capsys)
    assert orjson.loads(out)["plain"]["text"] == NO_PLAIN


def test_vllm_families_case_summary_beside_its_trace(tmp_path, capsys):
    # benchmarks/h200/vllm_families.py's layout: CASE/trace.pt.trace.json.gz + CASE/summary.json with repeated
    # prefill-subtracted decode times per step (its child(): (full - prefill) / (out - 1)); the trace here is the
    # graph-mode vLLM sample, the summary written in that script's format with figures we state
    import shutil

    from mmprof.analysis.compare.plain import from_vllm_families
    case = tmp_path / "m3_graphs"
    case.mkdir()
    trace = shutil.copy(data_file(*VLLM, "m3_graphs_b8.pt.trace.json.xz"), case / "trace.pt.trace.json.xz")
    doc = {"case": "m3_graphs", "batch": 8, "prompt_len": 64, "out_len": 32, "prof_out": 32,
           "engine_args": {"tensor_parallel_size": 1}, "profiled_generate": {"wall_s": 0.62, "output_tokens": 256},
           "timed_unprofiled": [{"prefill_only_s": 0.02, "full_s": 0.30, "decode_ms_per_step": 9.0322},
                                {"prefill_only_s": 0.02, "full_s": 0.31, "decode_ms_per_step": 9.3548},
                                {"prefill_only_s": 0.02, "full_s": 0.29, "decode_ms_per_step": 8.7097}]}
    (case / "summary.json").write_text(json.dumps(doc))
    t = from_vllm_families(doc, "summary.json")
    assert t.step_ms == 9.0322 and not t.bound and t.runs_ms == [9.0322, 9.3548, 8.7097]
    assert t.cost == pytest.approx(0.62 / 0.30)          # profiled generate / the median full generate
    rc, out, err = _cli(["diff", data_file(*VLLM, "m3_eager_b8.pt.trace.json.xz"), trace, "--json"], capsys)
    assert rc == 0, err
    after = orjson.loads(out)["plain"]["after"]
    assert after["step_ms"] == 9.0322 and "prefill-subtracted" in after["source"]
