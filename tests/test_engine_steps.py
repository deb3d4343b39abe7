"""Engine steps: the step annotations of serving engines are the steps, and a decode step's time is split into GPU
busy, idle inside the step and the host's time, which add up to the step-to-step period.

Truth for vLLM (0.26, the engine that wrote tests/data/samples/vllm/): `Worker.annotate_profile`
(vllm/v1/worker/gpu_worker.py) wraps each `model_runner.execute_model` call in
`torch.profiler.record_function("execute_context_N(T)_generation_M(G)")`, N/T the prefill (context) requests and
tokens and M/G the decode (generation) ones, as `compute_iteration_details` (vllm/v1/utils.py) counts them; the
sampler (`sample_tokens`) is a separate call, outside the range. The committed vLLM traces are excerpts of the real
runs (tests/data/samples/vllm/README.md, cut by tests/data/samples/derive.py): the first 3 (eager) and 4 (graphs)
of the 34 engine steps, every event of those steps copied as it was; the full files are in ../shared/samples/vllm
and in git history at 01f295c. SGLang: `build_step_span_name`
(python/sglang/srt/utils/profile_utils.py). TensorRT-LLM: `PyExecutor._forward_step`'s nvtx_range
(tensorrt_llm/_torch/pyexecutor/py_executor.py). Every expected number on the real traces below is recounted from
the raw JSON here, not taken from mmprof.
"""

from __future__ import annotations

import bisect
import json

import numpy as np
import pandas as pd
import pytest

from mmprof.analysis.compare.diff import diff_profiles
from mmprof.analysis.timeline.engine_steps import engine_steps
from mmprof.analysis.views.report import build_report
from mmprof.analysis.timeline.breakdown import CATEGORIES, timeline
from mmprof.importers import import_paths
from mmprof.labels import engine_step, is_marker, parse_label, phase_of, step_values
from tests.conftest import open_data, data_file

EAGER = ("samples", "vllm", "m3_eager_b8.pt.trace.json.xz")
GRAPHS = ("samples", "vllm", "m3_graphs_b8.pt.trace.json.xz")
BUSY = CATEGORIES[:5]


@pytest.mark.parametrize("label,engine,phase,counts", [
    # vLLM: Worker.annotate_profile's join of compute_iteration_details
    ("execute_context_0(0)_generation_8(8)", "vllm", "decode", (0, 0, 8, 8)),
    ("execute_context_1(64)_generation_0(0)", "vllm", "prefill", (1, 64, 0, 0)),
    ("execute_context_7(448)_generation_1(1)", "vllm", "mixed", (7, 448, 1, 1)),
    ("execute_context_0(0)_generation_0(0)", "vllm", None, (0, 0, 0, 0)),      # no scheduled tokens
    ("execute_context_0(0)_generation_8(32)", "vllm", "decode", (0, 0, 8, 32)),  # spec decode: 3 drafts each
    # SGLang: build_step_span_name (EXTEND carries toks=, other modes bs only; roofline suffixes after)
    ("step[DECODE bs=8]", "sglang", "decode", (0, 0, 8, 8)),
    ("step[EXTEND bs=2 toks=130]", "sglang", "prefill", (2, 130, 0, 0)),
    ("step[DECODE bs=2 g_sq=2 g_sqsq=2 g_sqsk=30 g_sk=30]", "sglang", "decode", (0, 0, 2, 2)),
    ("step[IDLE bs=0]", "sglang", None, (None, None, None, None)),
    # TensorRT-LLM: _forward_step's nvtx_range, with and without the iteration counter
    ("[Executor] _forward_step 12: 1 ctx reqs, 7 gen reqs", "trtllm", "mixed", (1, None, 7, None)),
    ("[Executor] _forward_step: 0 ctx reqs, 8 gen reqs", "trtllm", "decode", (0, None, 8, None)),
])
def test_engine_step_labels(label, engine, phase, counts):
    es = engine_step(label)
    assert es is not None and es.engine == engine and es.phase == phase
    assert (es.ctx_reqs, es.ctx_tokens, es.gen_reqs, es.gen_tokens) == counts
    assert phase_of(label) == phase
    assert is_marker(label) and parse_label(label) is None     # a step annotation is never a region


@pytest.mark.parametrize("label", ["execute_model", "execute_context_x(1)_generation_1(1)", "decode_step",
                                   "step[decode bs=1]", "[Executor] _forward_step 1: many ctx reqs", "layers.3.mlp"])
def test_not_engine_steps(label):
    assert engine_step(label) is None


def test_sglang_draft_step_is_a_phase_not_a_step():
    # build_step_span_name(fb, is_draft=True): "draft step[...]", the draft model's forward of a speculative step
    assert engine_step("draft step[DECODE bs=32]") is None
    assert phase_of("draft step[DECODE bs=32]") == "decode" and is_marker("draft step[DECODE bs=32]")
    assert step_values(["step[DECODE bs=32]", "draft step[DECODE bs=32]"], [0, 5]) == [0, -1]


def test_step_values_engine_steps_win():
    # ProfilerStep#N (vLLM calls profiler.step() under a torch.profiler schedule) would number the same work twice
    names = ["ProfilerStep#7", "execute_context_0(0)_generation_8(8)", "x", "execute_context_1(5)_generation_0(0)"]
    assert step_values(names, [0, 30, 1, 10]) == [-1, 1, -1, 0]
    assert step_values(["ProfilerStep#7", "x"], [0, 1]) == [7, -1]


# --- the real vLLM traces ------------------------------------------------------------------------------------

def _ns(us) -> int:
    return int(round(float(us) * 1000))


def _raw_steps(path):
    """Independent count from the raw JSON: per CPU step annotation (in start order) its name, CPU range and the
    GPU events (kernels, copies) whose launch call (same correlation id) starts inside it; plus every GPU event."""
    ev = json.loads(open_data(path).read())["traceEvents"]
    ann = sorted((e for e in ev if e.get("cat") == "user_annotation" and e.get("ph") == "X"
                  and engine_step(e["name"]) is not None), key=lambda e: e["ts"])
    launch = {e["args"]["correlation"]: _ns(e["ts"]) for e in ev
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X"]
    starts = [_ns(a["ts"]) for a in ann]
    steps = [{"name": a["name"], "cs": _ns(a["ts"]), "ce": _ns(a["ts"]) + _ns(a["dur"]), "ev": []} for a in ann]
    for g in gpu:
        t = launch.get((g.get("args") or {}).get("correlation"))
        if t is None:
            continue
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and t <= steps[i]["ce"]:
            steps[i]["ev"].append((_ns(g["ts"]), _ns(g["ts"]) + _ns(g["dur"])))
    return steps, [(_ns(g["ts"]), _ns(g["ts"]) + _ns(g["dur"])) for g in gpu]


def _union_len(iv, lo, hi) -> int:
    """Length of the union of intervals clipped to [lo, hi)."""
    tot, cur_s, cur_e = 0, None, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in iv if e > lo and s < hi):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                tot += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return tot + ((cur_e - cur_s) if cur_e is not None else 0)


# engine steps the excerpts keep (tests/data/samples/vllm/derive.py: the first N of the run's 34): the prefill step
# execute_context_1(64)_generation_0(0), the mixed step execute_context_7(448)_generation_1(1) (7 prompts' prefill
# beside the first request's first decode), then decode steps execute_context_0(0)_generation_8(8)
KEPT = {EAGER[-1]: 3, GRAPHS[-1]: 4}


@pytest.fixture(scope="module", params=[EAGER, GRAPHS], ids=["eager_b8", "graphs_b8"])
def vllm(request):
    path = data_file(*request.param)
    return request.param[-1], path, import_paths([path])


def test_vllm_engine_steps_are_the_steps(vllm):
    # README of the samples: 8 prompts x 64 tokens, 32 output tokens = 33 engine steps (+ one with nothing
    # scheduled); the excerpts keep the first KEPT of them: prefill, mixed, then KEPT - 2 decode steps of 8
    name, path, prof = vllm
    raw, _ = _raw_steps(path)
    es = engine_steps(prof)
    n = KEPT[name]
    assert es["name"].tolist() == [s["name"] for s in raw] and len(es) == n
    assert es["phase"].tolist() == ["prefill", "mixed"] + ["decode"] * (n - 2)
    assert es.loc[es["phase"] == "decode", "gen_reqs"].unique().tolist() == [8]
    assert es.loc[0, ["ctx_reqs", "ctx_tokens"]].tolist() == [1, 64]
    assert es.loc[1, ["ctx_reqs", "ctx_tokens", "gen_reqs"]].tolist() == [7, 448, 1]
    # every kernel / copy launched inside step k's CPU range carries step k and the step's phase
    k_step = np.concatenate([prof.col("kernels", "step"), prof.col("memcpy", "step")])
    got = np.bincount(k_step[k_step >= 0], minlength=len(raw))
    assert got.tolist() == [len(s["ev"]) for s in raw] and min(got) > 0
    ph = prof.col("kernels", "phase", decode=True)
    st = prof.col("kernels", "step")
    for k in range(n):
        assert set(ph[st == k]) == {es.loc[k, "phase"]}


def test_vllm_decode_steps_add_up(vllm):
    # each engine step owns its time from its preparation (its CPU range's start, or the previous step's last GPU
    # event when that ends later) to the next step's: busy (the union of every GPU event in it, the sampler's
    # kernels launched after execute_model included) + idle inside + host time = that period; host-between is
    # the GPU idle from the step's last event to the next step's CPU start. Tolerance: each time was rounded to
    # a whole ns once (<= 0.5 ns) and a period sums a few hundred of them
    name, path, prof = vllm
    raw, gpu = _raw_steps(path)
    tl = timeline(prof)
    assert tl.engine
    w = tl.windows[tl.windows["step"] >= 0].set_index("step")
    ks = [k for k, r in enumerate(raw) if r["ev"]]
    first = {k: min(s for s, _ in raw[k]["ev"]) for k in ks}
    last = {k: max(e for _, e in raw[k]["ev"]) for k in ks}
    begin = {k: min(max(raw[k]["cs"], last[p]) if i else raw[k]["cs"], first[k])
             for i, (p, k) in enumerate(zip([None] + ks[:-1], ks))}
    tol = 1000
    checked = 0
    for p, k in zip(ks[:-1], ks[1:]):
        row = w.loc[p]
        lo, hi = begin[p], begin[k]
        assert abs(int(row["start_ns"]) - lo) <= tol and abs(int(row["end_ns"]) - hi) <= tol
        assert int(row[list(CATEGORIES)].sum()) == int(row["span_ns"])
        assert abs(int(row[list(BUSY)].sum()) - _union_len(gpu, lo, hi)) <= tol
        between = (hi - last[p]) - _union_len(gpu, last[p], hi) if hi > last[p] else 0
        assert abs(int(row["idle_between"]) - between) <= tol
        checked += row["phase"] == "decode"
    assert checked == KEPT[name] - 3         # every decode step but the last (its period ends with the trace)
    assert len(ks) == KEPT[name]             # prefill and mixed periods checked in both, a decode one in graphs
    # the windows tile the rank's timeline from the first step's preparation
    assert int(w["span_ns"].sum()) == int(w["end_ns"].max() - w["start_ns"].min())


def test_vllm_report_names_host_not_launch():
    # graph mode (vLLM's default, captured before the window): the GPU runs each decode step's graphs in well under
    # a millisecond and waits for the host the rest of the ~6 ms period; the launch calls are few (one graph launch
    # per piece), so the run is host-bound, not launch-bound (the seed's report said "launch-bound: 91%")
    rep = build_report(import_paths([data_file(*GRAPHS)]))
    dec = next(p for p in rep.phases if p.phase == "decode")
    assert dec.bottleneck.startswith("decode is host-bound") and "not launch-bound" in dec.bottleneck
    assert "graphs replay" in dec.bottleneck
    b = dec.breakdown
    assert b.share("idle_between") + b.share("idle_prep") > 0.5 and b.share("idle_host") < 0.25
    assert dec.step.steps == KEPT[GRAPHS[-1]] - 2 and dec.launch.verdict == "not launch-bound"   # 2 kept
    assert "launch-bound:" not in " ".join(p.bottleneck for p in rep.phases)
    parts = dec.engine_steps
    assert parts["steps"] == 2 and parts["period"]["median_ns"] == dec.step.median_ns
    assert parts["GPU busy"]["median_ns"] < 0.25 * parts["period"]["median_ns"]


def test_vllm_diff_compares_decode_steps():
    # eager -> graphs on the same workload: the decode engine step shrinks (CUDA graphs remove the per-op Python
    # and launch calls inside the step); the step annotations never become regions
    before, after = import_paths([data_file(*EAGER)]), import_paths([data_file(*GRAPHS)])
    d = diff_profiles(before, after)
    assert d.phase == "decode" and d.engine is not None
    # issue 31: the verdict names the faster side and the reason: the host time per step, not the GPU work
    assert d.verdict.startswith("decode engine step ") and "after is faster; why: GPU idle (host) time per step" \
        in d.verdict
    s = d.step()
    # the excerpts keep 1 (eager) and 2 (graphs) decode steps of the run's 31
    assert (s.before_steps, s.after_steps) == (KEPT[EAGER[-1]] - 2, KEPT[GRAPHS[-1]] - 2) and s.after_ns < s.before_ns
    assert [p.phase for p in d.steps] == ["prefill", "mixed", "decode"]       # no `other` row
    moved = {m.category: m for m in d.moves}
    assert moved["idle_prep"].after_ns < moved["idle_prep"].before_ns
    assert all("execute_context" not in p.region for p in d.path_changes)
    assert all("execute_context" not in x.key for x in d.by_scope + d.matched)


# --- synthetic: prefill-only, mixed, decode-only steps, exact times -------------------------------------------

def _trace(tmp_path, names, extra_before: bool = False):
    """Three engine steps (CPU ranges at 0, 150, 300 us) with kernels launched inside them, and sampler kernels
    launched between them; every number below follows from these times."""
    ev = []

    def ann(name, ts, dur):
        ev.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                   "args": {}})

    def kernel(corr, t_launch, ts, dur, name="k"):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t_launch,
                   "dur": 2, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                   "args": {"correlation": corr, "stream": 7, "device": 0}})

    if extra_before:  # set-up work before the first step: in no phase
        kernel(9, -60, -50, 20, "setup")
    ann(names[0], 0, 100)
    kernel(1, 10, 20, 30)
    kernel(2, 110, 115, 5, "sampler")          # between steps 0 and 1
    ann(names[1], 150, 100)
    kernel(3, 200, 210, 40)
    ann(names[2], 300, 50)
    kernel(4, 305, 306, 10)
    kernel(5, 330, 331, 10)                    # launched 14 us after the previous kernel ended
    kernel(6, 360, 365, 5, "sampler")          # after the last step
    p = tmp_path / "synthetic.pt.trace.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    return import_paths([p])


@pytest.mark.parametrize("names", [
    ["execute_context_1(5)_generation_0(0)", "execute_context_1(3)_generation_2(2)", "execute_context_0(0)_generation_3(3)"],
    ["step[EXTEND bs=1 toks=5]", "step[MIXED bs=3 toks=5]", "step[DECODE bs=3]"],
    ["[Executor] _forward_step 1: 1 ctx reqs, 0 gen reqs", "[Executor] _forward_step 2: 1 ctx reqs, 2 gen reqs",
     "[Executor] _forward_step 3: 0 ctx reqs, 3 gen reqs"],
], ids=["vllm", "sglang", "trtllm"])
def test_synthetic_steps(tmp_path, names):
    prof = _trace(tmp_path, names)
    assert prof.col("kernels", "step").tolist() == [0, -1, 1, 2, 2, -1]
    assert prof.col("kernels", "phase", decode=True).tolist()[:5] == ["prefill", None, "mixed", "decode", "decode"]
    w = timeline(prof).windows
    w = w[w["step"] >= 0].set_index("step")
    us = 1000
    # step 0: prep from its CPU start (0) to its kernel (20), the kernel (30), then up to step 1's CPU start (150):
    # the sampler (5) busy, 95 idle between the steps
    assert w.loc[0, "idle_prep"] == 20 * us and int(w.loc[0, list(BUSY)].sum()) == 35 * us
    assert w.loc[0, "idle_between"] == 95 * us and w.loc[0, "span_ns"] == 150 * us
    # step 1: prep 150 -> 210, kernel 40, between 250 -> 300
    assert (w.loc[1, "idle_prep"], w.loc[1, "idle_between"], w.loc[1, "span_ns"]) == (60 * us, 50 * us, 150 * us)
    # step 2: prep 300 -> 306; gap 316 -> 331: the host worked until the launch call at 330 (prep), 1 us
    # launch/queue; then the trailing sampler 341 -> 370 (5 busy, 24 idle between)
    assert w.loc[2, "idle_prep"] == (6 + 14) * us and w.loc[2, "idle_host"] == 1 * us
    assert w.loc[2, "idle_between"] == 24 * us and w.loc[2, "span_ns"] == 70 * us
    assert (w[list(CATEGORIES)].sum(axis=1) == w["span_ns"]).all()
    assert set(w["phase"]) == {"prefill", "mixed", "decode"}


def test_export_and_verify_carry_engine_steps(tmp_path, capsys):
    # mmprof export: one slice per engine step on an "engine steps" track (the excerpt's 4 steps all launched GPU
    # work; in the full run the empty execute_context_0(0)_generation_0(0) did not and got none); verify-fastpath
    # says which engine steps it judged
    from mmprof.cli import main
    out = tmp_path / "t.json"
    with pytest.raises(SystemExit) as ex:
        main(["export", str(data_file(*GRAPHS)), "-o", str(out)])
    assert ex.value.code == 0
    slices = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "engine_step"]
    assert len(slices) == 4 and slices[0]["args"]["phase"] == "prefill" and slices[0]["args"]["ctx_tokens"] == 64
    assert [e["args"]["phase"] for e in slices] == ["prefill", "mixed", "decode", "decode"]
    # the counter tracks name the host time between the steps as the breakdown does, not as launch-bound idle
    from mmprof.analysis.timeline.events import events_of
    from mmprof.analysis.timeline.breakdown import category_segments
    prof = import_paths([data_file(*GRAPHS)])
    ev, tl = events_of(prof), timeline(prof)
    seg = category_segments(ev, tl.pieces)
    got = (seg["end_ns"] - seg["start_ns"]).groupby(seg["category"]).sum()
    assert got["idle_between"] == int(tl.windows["idle_between"].sum())
    assert abs(got["idle_host"] - int(tl.windows["idle_host"].sum())) <= 1000 * 30   # ns rounding per step
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["verify-fastpath", str(data_file(*GRAPHS)), "--json"])
    assert "4 engine steps: 1 prefill (1 request), 1 mixed, 2 decode (8 requests each)" in json.loads(
        capsys.readouterr().out)["engine_steps"]
    # decode steps of several batch sizes (the full run's last decode step had 7 requests: "31 decode (30 of 8, 1
    # of 7 requests)"): a synthetic trace with decode steps of 3 and 2 requests
    _trace(tmp_path, ["execute_context_1(5)_generation_0(0)", "execute_context_0(0)_generation_3(3)",
                      "execute_context_0(0)_generation_2(2)"])
    with pytest.raises(SystemExit):
        main(["verify-fastpath", str(tmp_path / "synthetic.pt.trace.json"), "--json"])
    assert "2 decode (1 of 3, 1 of 2 requests)" in json.loads(capsys.readouterr().out)["engine_steps"]


def test_ranks_use_engine_steps(tmp_path):
    # two TP ranks of one engine: each worker annotates every execute_model call (vllm/v1/worker/gpu_worker.py),
    # so step N is the N-th engine step of each rank; ranks compares them step by step
    from mmprof.analysis.ranks.imbalance import rank_analysis
    names = ["execute_context_1(5)_generation_0(0)", "execute_context_1(3)_generation_2(2)",
             "execute_context_0(0)_generation_3(3)"]
    paths = []
    for r in (0, 1):
        d = tmp_path / f"r{r}"
        d.mkdir()
        prof = _trace(d, names)
        assert prof.col("kernels", "step").tolist() == [0, -1, 1, 2, 2, -1]
        src = d / "synthetic.pt.trace.json"
        dst = tmp_path / f"trace_rank{r}.pt.trace.json"
        dst.write_text(src.read_text())
        paths.append(dst)
    both = import_paths(paths)
    res = rank_analysis(both)
    assert any("steps are the engine's own step annotations (vllm)" in n for n in res.notes)
    dec = [p for p in res.per_rank if p.phase == "decode"]
    assert len(dec) == 2 and all(p.steps == 1 for p in dec)


def test_nvtx_engine_steps_number_the_steps():
    # vLLM under profiler="cuda" (CudaProfilerWrapper.annotate_context_manager: torch.cuda.nvtx.range) and
    # TensorRT-LLM (nvtx_range) write the step as an NVTX range: the nsys / rocpd importers' nesting numbers it
    # like the Kineto importer (0.. in start order), and a launch on another thread takes the step that holds it
    from mmprof.importers._timeline import ScopeNest, attribute
    names = ["ProfilerStep#9", "[Executor] _forward_step 40: 0 ctx reqs, 4 gen reqs", "layers.0.mlp",
             "[Executor] _forward_step 39: 2 ctx reqs, 2 gen reqs"]
    nest = ScopeNest([1, 1, 1, 1], [0, 200, 210, 100], [1000, 300, 250, 190], names)
    scope, path, phase, step = attribute(nest, [1, 1, 2, 1], [150, 220, 260, 950])
    assert step == [0, 1, 1, -1] and phase == ["mixed", "decode", "decode", None]
    assert scope[1] == "layers.0.mlp"


def test_diff_other_phase_is_no_step_row(tmp_path):
    # issue 25: the `other` phase (events outside every phase) showed a step time change of +23649%: it has no
    # steps, so it gets no step-time row, and a note gives its busy time instead
    names = ["execute_context_1(5)_generation_0(0)", "execute_context_1(3)_generation_2(2)",
             "execute_context_0(0)_generation_3(3)"]
    a = _trace(tmp_path, names, extra_before=True)
    (tmp_path / "b").mkdir()
    b = _trace(tmp_path / "b", names, extra_before=True)
    assert "other" in timeline(a).phases                      # 20 us of set-up before the first step
    d = diff_profiles(a, b, force=True)      # the same synthetic trace twice: refused unless forced (issue 31)
    assert [s.phase for s in d.steps] == ["prefill", "mixed", "decode"]
    assert any(n.startswith("events outside every phase") and "20.0 us busy before" in n for n in d.notes)
    assert d.verdict.startswith("decode engine step 70.0 us -> 70.0 us (+0.0%)")
