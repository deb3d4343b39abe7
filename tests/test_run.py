"""`mmprof run`: the reference runtime under capture -> a Profile with timings, dilation and the dispatch log."""

from __future__ import annotations

import json

import pytest

from mmprof.cli import main
from mmprof.profiles import load_profile

SWITCHABLE = {"moe.experts", "moe.shared", "attn.indexer", "attn.core"}
TINY_MOE_LAYERS = 4  # tiny preset: layers 2-5 are MoE + sparse
SMALL = ["--prompt-len", "32", "--decode-steps", "3", "--repeats", "1"]


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


@pytest.fixture(scope="module")
def fast_light(tmp_path_factory):
    """Fast switches, light capture kept, full capture run too (--measure-dilation)."""
    out = tmp_path_factory.mktemp("run") / "fast.json.gz"
    with pytest.raises(SystemExit) as e:
        main(["run", *SMALL, "--capture", "light", "--measure-dilation", "-o", str(out), "--json"])
    assert e.value.code == 0
    return load_profile(out)


@pytest.fixture(scope="module")
def baseline_full(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "base.json.gz"
    with pytest.raises(SystemExit) as e:
        main(["run", *SMALL, "--baseline", "-o", str(out)])
    assert e.value.code == 0
    return load_profile(out)


def _ops(p):
    d = p.df("ops")
    return d.assign(scope=d.scope.astype(object), phase=d.phase.astype(object), input_dims=d.input_dims.astype(object))


def test_profile_has_ops_with_shapes_under_layer_scopes(baseline_full):
    ops = _ops(baseline_full)
    layered = ops[ops.scope.fillna("").str.match(r"^layers\.\d+\.")]
    assert len(layered) > 100
    shaped = layered[layered.input_dims.notna() & (layered.input_dims != "[]")]
    assert len(shaped) > 0.9 * len(layered)  # full capture: shapes on (almost) every op
    # a decode-step GEMM of the tiny model: batch 1 x hidden 128 activations reach aten::mm / aten::linear
    dec = shaped[(shaped.phase == "decode") & shaped.name.astype(object).isin(["aten::linear", "aten::mm"])]
    assert any("128]" in d and ("[1, 1, 128]" in d or "[1, 128]" in d) for d in dec.input_dims)


def test_cpu_peaks_measured_per_level_and_efficiencies_believable(baseline_full):
    """A CPU run measures its peaks alone, per dtype, for its thread count and per cache level; no op of the run
    then lands far above them."""
    import numpy as np

    from mmprof.analysis.timeline.events import events_of

    pk = baseline_full.device_info(0)["peaks"]
    assert pk["alone"] is True and pk["threads"] >= 1 and pk["fp32_tflops"] > 0
    sizes = [b for b, _ in pk["mem_levels"]]
    assert sizes == sorted(sizes) and len(sizes) == 5 and pk["hbm_tbs"] == pk["mem_levels"][-1][1]
    for k in ("threads", "one_thread"):  # the raw figures behind the peak stay in the profile
        assert pk["measured"][k]["fp32_tflops"] > 0 and len(pk["measured"][k]["mem_tbs"]) == 5
    e = events_of(baseline_full).roof.efficiency
    assert np.isfinite(e).sum() > 100
    assert np.nanmax(e) < 1.5, np.nanmax(e)


def test_phases_and_steps_are_set(baseline_full):
    ops = _ops(baseline_full)
    assert set(ops.phase.dropna()) == {"prefill", "decode"}
    assert set(ops.step[ops.phase == "prefill"]) == {0}
    assert set(ops.step[ops.phase == "decode"]) == {1, 2, 3}
    assert (ops.phase.notna()).mean() > 0.95


def test_dispatch_rows_cover_every_switchable_op(fast_light, baseline_full):
    for prof, experts, shared in ((fast_light, {"grouped_mm", "grouped_bmm"}, "fused"), (baseline_full, {"loop"}, "separate")):
        d = prof.df("dispatch")
        d = d.assign(**{c: d[c].astype(object) for c in ("op", "impl", "requested", "reason", "phase")})
        assert set(d.op) == SWITCHABLE
        steps = 1 + 3
        assert (d.op == "moe.experts").sum() == TINY_MOE_LAYERS * steps
        assert set(d.impl[d.op == "moe.experts"]) <= experts
        assert set(d.impl[d.op == "moe.shared"]) == {shared}
        # honest fallbacks: whenever impl differs from what was requested, the row says why
        diff = d[d.impl != d.requested]
        assert diff.reason.notna().all()
        assert set(d.phase) == {"prefill", "decode"}
        assert set(d["rank"]) == {0}


def test_baseline_has_separate_shared_expert_and_loop_rows_fast_has_neither(fast_light, baseline_full):
    b, f = _ops(baseline_full), _ops(fast_light)
    assert b.scope.fillna("").str.endswith("moe.shared").sum() > 0
    assert f.scope.fillna("").str.endswith("moe.shared").sum() == 0
    bd, fd = baseline_full.df("dispatch"), fast_light.df("dispatch")
    assert (bd.impl.astype(object) == "loop").sum() == TINY_MOE_LAYERS * 4
    assert (fd.impl.astype(object) == "loop").sum() == 0
    # fast: K=4 reuse -> one sparse layer in four computes the selection, the others reuse it
    idx = fd[fd.op.astype(object) == "attn.indexer"].impl.astype(object)
    assert set(idx) == {"computed", "reused"}
    bidx = bd[bd.op.astype(object) == "attn.indexer"].impl.astype(object)
    assert set(bidx) == {"computed"}


def test_meta_run_timings_and_dilation(fast_light):
    m = fast_light.meta
    assert m["source"]["format"] == "mmprof-run"
    assert m["parallel"] == {"tp": 1, "ep": 1, "world_size": 1}
    assert m["model"]["hidden_size"] == 128 and m["model"]["n_layers"] == 6
    r = m["run"]
    assert r["preset"] == "tiny" and r["device"] == "cpu" and r["dtype"] == "float32"
    assert r["switches"] == {"moe_impl": "grouped", "shared_expert": "fused", "block_reuse": 4, "attention": "sparse",
                             "graphs": False, "compile": False, "compile_prefill": False, "triton_norm_rope": False,
                             "triton_attention": False, "triton_moe": False}
    assert r["graphs"] is None  # no --graphs: no graph runner
    assert r["workload"] == {"batch": 1, "prompt_len": 32, "decode_steps": 3, "seed": 0}
    for kind in ("plain", "full", "light", "profiled"):
        assert r["tokens_per_s"][kind]["prefill"] > 0 and r["tokens_per_s"][kind]["decode"] > 0
    assert r["tokens_per_s"]["profiled"] == r["tokens_per_s"]["light"]  # --capture light is the kept one
    assert r["dilation"]["full"] > 0 and r["dilation"]["light"] > 0
    t = r["timings"]
    ratio = (t["full"]["prefill_ms"] + t["full"]["decode_ms"]) / (t["plain"]["prefill_ms"] + t["plain"]["decode_ms"])
    assert r["dilation"]["full"] == pytest.approx(ratio)
    assert len(t["plain"]["decode_step_ms"]) == 3
    assert m["capture"]["mode"] == "light" and m["capture"]["modes_run"] == ["light", "full"]
    assert len(r["generated_tokens"][0]) == 4  # the prefill's token + 3 decode steps


def test_light_capture_keeps_shapes_for_the_prefill_step_only(fast_light, baseline_full):
    ops = _ops(fast_light)
    has = ops.input_dims.notna()
    assert has[ops.phase == "prefill"].mean() > 0.9
    assert has[ops.phase == "decode"].sum() == 0
    assert (ops.phase == "decode").sum() > 100  # the decode ops are there, just without shapes
    full = _ops(baseline_full)
    assert full.input_dims.notna()[full.phase == "decode"].mean() > 0.9


def test_capture_none_keeps_timings_and_dispatch(tmp_path, capsys):
    out = tmp_path / "none.json.gz"
    rc, stdout, _ = _cli(["run", *SMALL, "--capture", "none", "-o", str(out), "--json"], capsys)
    assert rc == 0
    doc = json.loads(stdout)
    assert doc["capture"] == "none" and doc["rows"]["ops"] == 0 and doc["rows"]["dispatch"] > 0
    p = load_profile(out)
    assert p.n("ops") == 0 and p.n("dispatch") == doc["rows"]["dispatch"]
    assert p.meta["run"]["dilation"] == {"full": None, "light": None, "kernels": None}
    assert p.meta["run"]["tokens_per_s"]["plain"]["decode"] > 0


def test_human_output_names_tokens_and_dilation(tmp_path, capsys):
    out = tmp_path / "h.json.gz"
    rc, stdout, _ = _cli(["run", *SMALL, "--moe-impl", "loop", "-o", str(out)], capsys)
    assert rc == 0
    assert "plain (no profiler)" in stdout and "full capture (kept)" in stdout
    assert "experts=loop" in stdout and "shared expert=fused" in stdout
    assert str(out) in stdout.replace("\n", "")


@pytest.mark.parametrize("args, words", [
    (["--preset", "m3"], ["GB"]),
    (["--prompt-len", "600"], ["exceeds", "512"]),
    (["--ep", "2"], ["--ep 2"]),
    (["--tp", "3"], ["divisible"]),
    (["--capture", "none", "--measure-dilation"], ["--measure-dilation"]),
    (["--preset", "m3-rank-slice", "--tp", "2"], ["one rank"]),
    (["--decode-steps", "0"], ["--decode-steps"]),
    (["--config", "/nonexistent/config.json"], ["config.json"]),
])
def test_bad_options_exit_2_with_one_line(args, words, capsys, tmp_path):
    rc, stdout, err = _cli(["run", *args, "-o", str(tmp_path / "x.json.gz")], capsys)
    assert rc == 2
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("USDT")]
    assert len(lines) == 1 and lines[0].startswith("mmprof: error:")
    for w in words:
        assert w in lines[0]
    assert not (tmp_path / "x.json.gz").exists()


def test_cuda_without_gpu_exits_2(monkeypatch, capsys, tmp_path):
    import mmprof.capture.session as session

    monkeypatch.setattr(session, "gpu_available", lambda: False)
    rc, _, err = _cli(["run", "--device", "cuda", "-o", str(tmp_path / "x.json.gz")], capsys)
    assert rc == 2 and "no CUDA/ROCm GPU" in err


def test_unknown_preset_is_a_usage_error(capsys):
    rc, _, err = _cli(["run", "--preset", "huge"], capsys)
    assert rc == 2 and "huge" in err


# -- units --------------------------------------------------------------------------------------------
def test_dilation_math():
    from mmprof.capture.workflows.run import dilation

    d = dilation({"prefill_ms": 10.0, "decode_ms": 30.0}, {"prefill_ms": 15.0, "decode_ms": 90.0})
    assert d == {"prefill": 1.5, "decode": 3.0, "total": pytest.approx(105 / 40)}
    assert dilation({"prefill_ms": 0.0, "decode_ms": 1.0}, {"prefill_ms": 1.0, "decode_ms": 1.0})["prefill"] is None


def test_generate_calls_back_after_each_step_outside_its_regions():
    """The light-mode switch point: generate() calls on_step_end(step) once per step, after the step's
    `mmprof.prefill`/`mmprof.decode` and `mmprof.step.N` ranges have closed (no mmprof range encloses it)."""
    import torch
    from torch.profiler import profile, record_function

    from mmprof.runtime import Workload, build_model, generate, get_preset

    model = build_model(get_preset("tiny"))
    seen = []

    def cb(step):
        seen.append((step, model.dispatch.phase))
        with record_function(f"cb.{step}"):
            torch.zeros(1)

    with profile() as prof:
        generate(model, Workload(prompt_len=16, decode_steps=2), on_step_end=cb)
    assert seen == [(0, "prefill"), (1, "decode"), (2, "decode")]
    evs = prof.events()
    spans = [(e.name, e.time_range.start, e.time_range.end) for e in evs if e.name.startswith("mmprof.")]
    cbs = [(e.time_range.start, e.time_range.end) for e in evs if e.name.startswith("cb.")]
    assert len(cbs) == 3 and spans
    for a, b in cbs:
        assert not [n for n, s0, s1 in spans if s0 <= a and b <= s1], "callback ran inside an mmprof range"


def test_progress_reaches_the_end():
    from mmprof.capture.workflows.run import RunOptions, run_workload

    calls = []
    p = run_workload(RunOptions(prompt_len=16, decode_steps=1, repeats=1, capture="none"),
                     progress=lambda s, d, t: calls.append((s, d, t)))
    done = [c for c in calls if c[0] == "done"]
    assert done and done[-1][1] == done[-1][2]
    assert [c[1] for c in calls if c[0] != "importing the trace"] == sorted(c[1] for c in calls if c[0] != "importing the trace")
    assert p.n("dispatch") > 0


@pytest.mark.slow
def test_tp2_on_cpu_gives_two_ranks_with_gloo_allreduce(tmp_path, capsys):
    out = tmp_path / "tp2.json.gz"
    rc, stdout, err = _cli(["run", "--tp", "2", "--prompt-len", "32", "--decode-steps", "2", "--repeats", "1",
                            "-o", str(out), "--json"], capsys)
    assert rc == 0, err
    p = load_profile(out)
    assert p.ranks == [0, 1]
    assert p.meta["parallel"] == {"tp": 2, "ep": 1, "world_size": 2}
    c = p.df("collectives")
    assert set(c["rank"]) == {0, 1}
    names = set(c.name.astype(object))
    assert "allreduce" in names
    ar = c[c.name.astype(object) == "allreduce"]
    # every attention o_proj and MLP/MoE down projection all-reduces [B, T, hidden] activations
    assert (ar.bytes_in == 1 * 32 * 128 * 4).sum() >= 2 * 6
    assert set(ar.phase.astype(object)) == {"prefill", "decode"}
    d = p.df("dispatch")
    assert set(d["rank"]) == {0, 1}
    assert (d["rank"] == 0).sum() == (d["rank"] == 1).sum()
    ops = p.df("ops")
    assert set(ops["rank"]) == {0, 1}
    assert set(p.meta["run"]["timings_by_rank"]) == {"0", "1"}
    assert all(p.device_info(r)["peaks"]["alone"] for r in (0, 1))  # measured one rank at a time


@pytest.mark.gpu
def test_cuda_run_has_kernels_with_phase_and_step(tmp_path, capsys):
    out = tmp_path / "gpu.json.gz"
    rc, _, err = _cli(["run", "--device", "cuda", *SMALL, "--measure-dilation", "-o", str(out)], capsys)
    assert rc == 0, err
    p = load_profile(out)
    k = p.df("kernels")
    assert len(k) > 100
    assert (k.phase.astype(object).notna()).mean() > 0.9
    assert set(k.step[k.phase.astype(object) == "decode"]) == {1, 2, 3}
    assert p.meta["run"]["dtype"] == "bfloat16" and p.meta["run"]["dilation"]["light"] > 0


def test_run_refuses_a_batch_no_host_can_hold(capsys):
    """`--batch 2**63 - 1` (issue 25's bad-input corpus: an internal error from torch's storage size overflow):
    the KV cache and activations it needs (capture/workflows/run_options.py:cache_bytes) are refused before any
    allocation, in one line, exit 2."""
    from mmprof.capture.workflows.run_options import RunOptions, cache_bytes
    from mmprof.cli import main

    opts = RunOptions(batch=2, prompt_len=32, decode_steps=3)
    args = opts.model_args()
    # the cache is linear in batch x positions: twice the batch, twice the bytes
    assert cache_bytes(args, RunOptions(batch=4, prompt_len=32, decode_steps=3)) == 2 * cache_bytes(args, opts)
    with pytest.raises(SystemExit) as e:
        main(["run", "--batch", str(2**63 - 1)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "KV cache" in err and "internal error" not in err
