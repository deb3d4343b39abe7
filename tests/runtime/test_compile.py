"""The compile rung (`Switches(graphs=True, compile=True)`, runtime/compiled.py) on CPU, where Inductor generates C++
kernels instead of Triton ones: the compiled static decode step gives the graph rung's tokens and logits within the
bf16 reordering tolerance, writes its KV cache in place (the next step reads it), logs one `decode.compile` row per
decode step, runs every compiled call inside the region scope that owns it (so a trace attributes Inductor's kernels
by scope, as in the eager rungs), and is refused without the graphs' static step. The real CUDA graph of the
compiled step is measured on the H200 (benchmarks/h200/compile_rung.py)."""

from __future__ import annotations

import re

import pytest

from mmprof.errors import BadInput

torch = pytest.importorskip("torch")

from mmprof.runtime import Switches, Workload, build_model, generate, get_preset  # noqa: E402
from mmprof.runtime.config import COMPILE_NEEDS_GRAPHS  # noqa: E402
from tests.runtime.tolerance import assert_same_tokens_unless_near_tie, longest_reduction, reorder_tolerance  # noqa: E402

WL = Workload(batch=3, prompt_len=20, decode_steps=4, seed=1)
REGION = re.compile(r"^(layers\.\d+\.(attn\.(qkv|norm_rope|indexer|core|o_proj)|norm|mlp|moe\.(router|routed|shared))|"
                    r"embed|final_norm|lm_head)$")


def _fake_capture(step, warmup_step):
    """A CPU stand-in for the CUDA graph (as tests/runtime/test_graph_runner.py): warm up, run the step, replay = run."""
    warmup_step()
    step()
    return step


@pytest.fixture(scope="module")
def runs():
    """One bf16 tiny model: the graph rung, then the compile rung under torch.profiler (one compilation for the
    module: the compiled functions are cached per process)."""
    from torch.profiler import ProfilerActivity, profile

    args = get_preset("tiny")
    model = build_model(args, Switches(graphs=True), dtype=torch.bfloat16, seed=0)
    graphs = generate(model, WL, keep_logits=True, graph_capture=_fake_capture)
    model.set_switches(Switches(graphs=True, compile=True))
    model.dispatch.clear()
    generate(model, WL, graph_capture=_fake_capture)  # compiles (outside the profile, as `mmprof run` warms up)
    model.dispatch.clear()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        compiled = generate(model, WL, keep_logits=True, graph_capture=_fake_capture)
    return args, graphs, compiled, list(model.dispatch.records), prof.events()


def test_compiled_step_matches_the_graph_rung_within_the_bf16_tolerance(runs):
    """Same math, other kernels: Inductor fuses the elementwise chains (skipping the bf16 roundings in between,
    half an ulp each) and reorders reductions, so the logits may part by the reordering bound of tolerance.py;
    the greedy tokens agree unless the top two logits are a near-tie."""
    args, graphs, compiled, _, _ = runs
    tol = reorder_tolerance(torch.bfloat16, graphs.logits, args.n_layers,
                            longest_reduction(args, WL.prompt_len + WL.decode_steps))
    for i, (a, b) in enumerate(zip(graphs.logits, compiled.logits)):
        assert float((a.float() - b.float()).abs().max()) <= tol, f"step {i}"
    assert_same_tokens_unless_near_tie(graphs, compiled, tol)
    # the KV insert is compiled in place: a step that did not write its keys would make every later step's logits
    # those of a shorter context, far outside the tolerance (checked above for all 4 decode steps)
    assert compiled.tokens.shape == (WL.batch, WL.decode_steps + 1)


def test_compile_rung_logs_its_row_and_the_same_paths_as_the_graph_rung(runs):
    _, _, _, rows, _ = runs
    decode = [r for r in rows if r.phase == "decode"]
    comp = [r for r in decode if r.op == "decode.compile"]
    assert [r.step for r in comp] == list(range(1, WL.decode_steps + 1))  # one per decode step (replays copy it)
    assert {(r.impl, r.requested, r.layer) for r in comp} == {("inductor", "inductor", -1)}
    assert not [r for r in rows if r.op == "decode.compile" and r.phase == "prefill"]  # prefill stays eager
    experts = {r.impl for r in decode if r.op == "moe.experts"}
    assert experts == {"grouped_mm"}  # bf16: torch.compile traces torch's grouped GEMM


def test_every_compiled_call_runs_inside_the_region_that_owns_it(runs):
    """torch marks each call of a compiled graph with a `## Call CompiledFxGraph ... ##` range (or `Torch-Compiled
    Region`); in the eager run of the static step (inside `mmprof.graph.capture`, the reference the graph replays
    are aligned with; its warm-up and the replays run with scopes off, as no Python runs in a replay) each must lie
    inside a region scope of DEVELOPERS.md's table, so its kernels get that region."""
    _, _, _, _, events = runs
    cap = [e for e in events if e.name == "mmprof.graph.capture"]
    assert len(cap) == 1
    c0, c1 = cap[0].time_range.start, cap[0].time_range.end
    regions = [e for e in events if REGION.match(e.name) and c0 <= e.time_range.start <= c1]
    # the first scoped run of the static step: from its first region to its first final_norm (a warm-up with
    # scopes off follows it inside the capture range)
    s0 = min(r.time_range.start for r in regions)
    s1 = min(r.time_range.end for r in regions if r.name == "final_norm")
    calls = [e for e in events if (e.name.startswith("## Call CompiledFxGraph") or e.name.startswith("Torch-Compiled"))
             and s0 <= e.time_range.start <= s1]
    assert len(calls) >= 2 * get_preset("tiny").n_layers  # several compiled regions per layer
    for c in calls:
        inside = [r for r in regions if r.time_range.start <= c.time_range.start and c.time_range.end <= r.time_range.end]
        assert inside, f"compiled call {c.name[:60]} at {c.time_range.start} outside every region"


def test_compile_rung_in_fp32_falls_back_from_the_grouped_gemm_with_its_reason(monkeypatch):
    """torch's meta function of _grouped_mm (what Dynamo traces with; torch/_meta_registrations.py) takes bf16 only:
    in fp32 the compile rung runs the batched fallback and says why. Checked without compiling (the wiring)."""
    import mmprof.runtime.compiled as compiled_mod

    monkeypatch.setattr(compiled_mod, "compiled", lambda fn: fn)
    model = build_model(get_preset("tiny"), Switches(graphs=True, compile=True), seed=0)
    generate(model, Workload(batch=1, prompt_len=16, decode_steps=1), graph_capture=_fake_capture)
    rows = [r for r in model.dispatch.records if r.op == "moe.experts" and r.phase == "decode"]
    assert rows and {r.impl for r in rows} == {"grouped_bmm"}
    assert all("bfloat16" in (r.reason or "") for r in rows)


def test_compile_needs_the_graphs_static_step():
    with pytest.raises(BadInput, match="compile needs graphs"):
        Switches(compile=True)
    assert Switches(graphs=True, compile=True).compile
    assert "--graphs" in COMPILE_NEEDS_GRAPHS


def test_run_compile_without_graphs_is_one_line_exit_2(capsys):
    from mmprof.cli import main

    with pytest.raises(SystemExit) as e:
        main(["run", "--compile"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.count("\n") == 1 and "compile needs graphs" in err and "Traceback" not in err


def test_compiled_prefill_runs_every_prefill_region_through_torch_compile(monkeypatch):
    """`compile_prefill` sends the prefill's region math through the compiled functions (the valid-prefix KV layout,
    the block mask of a 24-token query run) and logs one `prefill.compile` row (layer -1) per prefill forward, none
    in decode (decode is eager here: no graphs). Checked with torch.compile replaced by a recorder (compiling ten
    region functions with Inductor's C++ backend takes minutes on the CI box; the real compilation runs in
    test_gpu.py's compiled-prefill test and on the H200): the logits are then the eager ones exactly."""
    import mmprof.runtime.compiled as compiled_mod

    seen = []

    def record(fn):
        seen.append(fn.__name__)
        return fn

    monkeypatch.setattr(compiled_mod, "compiled", record)
    args = get_preset("tiny")
    wl = Workload(batch=2, prompt_len=24, decode_steps=1, seed=2)
    model = build_model(args, Switches(block_reuse=1), dtype=torch.bfloat16, seed=0)
    eager = generate(model, wl, keep_logits=True)
    assert not seen
    model.set_switches(Switches(block_reuse=1, compile_prefill=True))
    model.dispatch.clear()
    comp = generate(model, wl, keep_logits=True)
    assert torch.equal(eager.logits[0], comp.logits[0]) and torch.equal(eager.tokens, comp.tokens)
    assert {"rms_norm", "add_rms_norm", "qk_norm_rope", "select_blocks", "attend_sparse_masked", "attend_dense",
            "route", "routed_grouped", "gate_up_act"} <= set(seen)
    rows = [r for r in model.dispatch.records if r.op in ("prefill.compile", "decode.compile")]
    assert [(r.op, r.phase, r.layer, r.impl) for r in rows] == [("prefill.compile", "prefill", -1, "inductor")]
