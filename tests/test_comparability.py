"""What `mmprof diff` says is compared, before any verdict (issue 31): each side's model, engine, mode, TP / EP,
batch, prompt, steps, profiler settings and device, read from the trace and its metadata; the differences that
change the meaning flagged; the same trace or two models refused unless forced.

Truths come from the runs themselves: the vLLM samples' `*.summary.json` (the engine arguments vLLM resolved, the
profiler_config the kit passed) and their READMEs (tests/data/samples/vllm: the eager run was recorded with
CUDA_LAUNCH_BLOCKING=1), `mmprof run`'s meta.run for the runtime, and the raw Kineto JSON (recounted with json).
"""

from __future__ import annotations

import json
import re

import orjson
import pytest

from mmprof.analysis.compare.comparability import compare_facts
from mmprof.analysis.compare.diff import diff_profiles
from mmprof.analysis.compare.plain import from_document
from mmprof.analysis.compare.runfacts import model_base, run_facts
from mmprof.analysis.timeline.breakdown import timeline
from mmprof.analysis.timeline.events import events_of
from mmprof.errors import NotComparable
from mmprof.importers import import_paths
from tests.conftest import ROOT, data_file, open_data

VLLM = ("samples", "vllm")
EAGER, GRAPHS = data_file(*VLLM, "m3_eager_b8.pt.trace.json.xz"), data_file(*VLLM, "m3_graphs_b8.pt.trace.json.xz")
QWEN = data_file("vllm_own", "qwen2moe_graphs_b1.pt.trace.json.xz")


def _facts(path, summary=None):
    p = import_paths([path])
    ev = events_of(p)
    plain = from_document(json.loads(open(summary).read()), summary.name) if summary else None
    return p, run_facts(p, ev, timeline(p, ev), plain)


def test_vllm_facts_are_the_ones_the_engine_resolved():
    for trace, name in ((EAGER, "m3_eager_b8"), (GRAPHS, "m3_graphs_b8")):
        summary = data_file(*VLLM, f"{name}.summary.json")
        doc = json.loads(summary.read_text())
        child, cfg = doc["child"], doc["meta"]["model_config"]
        _, f = _facts(trace)                                       # from the trace alone
        assert f.model.text == cfg["architectures"][0] == "MiniMaxM3SparseForCausalLM"
        assert f.model.source == "nn.Module events" and f.model.key == "minimaxm3"
        assert f.layers.key == cfg["text_config"]["num_hidden_layers"] == 6
        assert f.engine.text == "vLLM" and f.tiled
        assert f.batch.key == child["batch"] == 8 and f.tokens.key == 8
        assert f.prompt.key == child["prompt_len"] == 64            # 64 + 448 prompt tokens over 1 + 7 requests
        graphs = child["resolved"]["cudagraph_mode"] != "NONE"
        assert f.mode.text == ("CUDA graphs" if graphs else "eager")
        raw = orjson.loads(open_data(trace).read())["traceEvents"]
        assert child["profiler_config"]["torch_profiler_with_stack"] and f.profiler.stacks
        assert f.profiler.python_events == sum(1 for e in raw if e.get("cat") == "python_function")
        assert child["profiler_config"]["torch_profiler_record_shapes"] and f.profiler.shapes > 0.5
        assert f.profiler.tool == "PyTorch profiler (Kineto)" and f.device.text == "NVIDIA H200"


def _sync_share(raw) -> float:
    """Kernels whose launch call (same correlation) returned after the kernel ended, recounted from the raw JSON."""
    launch = {e["args"]["correlation"]: e["ts"] + e["dur"] for e in raw
              if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaLaunchKernel"}
    ks = [e for e in raw if e.get("cat") == "kernel" and e["args"].get("correlation") in launch]
    return sum(launch[k["args"]["correlation"]] >= k["ts"] + k["dur"] for k in ks) / len(ks)


def test_synchronous_launches_are_read_from_the_launch_calls():
    # the eager sample was recorded with CUDA_LAUNCH_BLOCKING=1 (tests/data/samples/vllm/README.md): every launch
    # call returns after its kernel; the graph run's launches are asynchronous
    _, fe = _facts(EAGER)
    _, fg = _facts(GRAPHS)
    assert fe.profiler.synchronous and not fg.profiler.synchronous
    for f, trace in ((fe, EAGER), (fg, GRAPHS)):
        raw = orjson.loads(open_data(trace).read())["traceEvents"]
        assert f.profiler.sync_launches == pytest.approx(_sync_share(raw), abs=0.02)   # one-by-one launches only
    comp = compare_facts(fe, fg)
    assert any("only the before trace was taken with synchronous launches" in x for x in comp.flags)
    assert any(c.startswith("before: the launches were synchronous") and "CUDA_LAUNCH_BLOCKING" in c
               for c in comp.caveats)
    assert any("torch_profiler_with_stack=false" in c for c in comp.caveats)   # how to take a cleaner trace


def test_runtime_facts_come_from_mmprof_runs_metadata():
    path = ROOT / "examples" / "h200" / "graphs" / "graphs_b1.json.gz"
    p, f = _facts(path)
    run = p.meta["run"]
    assert f.model.text == f"MiniMax M3 ({run['preset']} preset)" and f.layers.key == p.meta["model"]["n_layers"]
    assert f.engine.text == "mmprof reference runtime" and not f.tiled
    assert f.mode.text == "CUDA graphs" and run["switches"]["graphs"]
    assert (f.batch.key, f.prompt.key) == (run["workload"]["batch"], run["workload"]["prompt_len"]) == (1, 512)
    assert f.parallel.key == (1, 1) and f.profiler.capture == "full"


def test_two_models_are_refused_unless_forced():
    # M3 (MiniMaxM3SparseForCausalLM) against Qwen2-MoE (Qwen2MoeForCausalLM), both vLLM's own traces
    m3, qwen = import_paths([GRAPHS]), import_paths([QWEN])
    with pytest.raises(NotComparable, match=r"different models: MiniMaxM3SparseForCausalLM .* Qwen2MoeForCausalLM"):
        diff_profiles(m3, qwen)
    d = diff_profiles(m3, qwen, force=True)
    assert d.preface[0].startswith("compared although different models")
    assert {r.label: r.same for r in d.compared.rows}["model"] is False
    assert model_base("MiniMaxM3VLForCausalLM") == model_base("MiniMaxM3SparseForCausalLM") == "minimaxm3"
    assert model_base("Qwen2MoeForCausalLM") == "qwen2moe" and model_base(None) is None


def sglang_shaped(src, out):
    """A real vLLM trace with its engine step annotations written in SGLang's format (SGLang's
    build_step_span_name, python/sglang/srt/utils/profile_utils.py: `step[EXTEND bs=N toks=T]`, `step[MIXED ...]`,
    `step[DECODE bs=M]`, `step[IDLE bs=0]`); every other event as it was. The same run under another engine's
    labels: the truth is "no change" with the engines flagged."""
    doc = orjson.loads(open_data(src).read())
    pat = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")
    for e in doc["traceEvents"]:
        m = pat.match(str(e.get("name", "")))
        if m:
            n, t, g, gt = (int(x) for x in m.groups())
            e["name"] = (f"step[EXTEND bs={n} toks={t}]" if n and not g else f"step[MIXED bs={n + g} toks={t + gt}]"
                         if n else f"step[DECODE bs={g}]" if g else "step[IDLE bs=0]")
    out.write_bytes(orjson.dumps(doc))
    return out


def test_an_sglang_shaped_trace_against_vllms_matches_regions_by_role(tmp_path):
    vllm = import_paths([GRAPHS])
    sgl = import_paths([sglang_shaped(GRAPHS, tmp_path / "sglang.pt.trace.json")])
    ev = events_of(sgl)
    f = run_facts(sgl, ev, timeline(sgl, ev))
    assert f.engine.text == "SGLang" and f.batch.key == 8 and f.prompt.key == 64 and f.tiled
    d = diff_profiles(vllm, sgl)            # not the same trace: the step annotations differ
    assert any(w.startswith("different engines (vLLM vs SGLang)") for w in d.preface)
    # the same kernels in the same windows: no change, and every region matched by role with equal time
    assert d.answer.faster is None and d.step().change == 0
    assert d.answer.lines[0] == ("faster", "no change, by the profiled steps")
    roles = {x.key for x in d.by_scope}
    assert {"attn.qkv", "moe.routed", "moe.shared", "attn.indexer"} <= roles
    assert all(x.delta_ns == 0 for x in d.by_scope) and not d.path_changes


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory):
    """The reference runtime on CPU (tiny preset), as `mmprof run` records it: two prompt lengths and two batches."""
    from mmprof.capture.workflows.run import run_workload
    from mmprof.capture.workflows.run_options import RunOptions

    def run(prompt, batch):
        return run_workload(RunOptions(prompt_len=prompt, batch=batch, decode_steps=3, repeats=1))
    return {"p32": run(32, 1), "p96": run(96, 1), "b2": run(32, 2)}


@pytest.mark.slow
def test_two_prompt_lengths_and_two_batches_are_flagged(cpu_runs):
    d = diff_profiles(cpu_runs["p32"], cpu_runs["p96"])
    assert any(w.startswith("prompt length differs (32 tokens vs 96 tokens)") for w in d.preface)
    assert not any(w.startswith("decode steps differ") for w in d.preface)   # same steps: not flagged
    rows = {r.label: r for r in d.compared.rows}
    assert rows["prompt"].same is False and rows["batch"].same is True and rows["steps"].same is True
    d = diff_profiles(cpu_runs["p32"], cpu_runs["b2"])
    assert any(w.startswith("batch differs (1 request vs 2 requests per decode step)") for w in d.preface)
    # both sides carry mmprof run's plain timing: shown beside the profiled one, with the profiler's cost
    for side in ("before", "after"):
        assert d.plain[side]["source"] == "mmprof run" and d.plain[side]["cost"] > 0
