"""The graphs rung (`Switches(graphs=True)`, runtime/graph_runner.py) on CPU: the static-shape decode step gives the eager
path's tokens, and the GraphRunner's bookkeeping (one capture per batch and cache, replays, dispatch rows per decode
step, the `mmprof.graph.capture` range) driven by a fake capture; the refusals. The real CUDA graph is in
test_gpu.py (marked gpu)."""

from __future__ import annotations

import dataclasses

import pytest

from mmprof.errors import BadInput
from mmprof.runtime import get_preset

torch = pytest.importorskip("torch")

from mmprof.runtime import Switches, Workload, build_model, generate  # noqa: E402
from mmprof.runtime.attention import attend_sparse_gather  # noqa: E402
from mmprof.runtime.graph_runner import CAPTURE_SCOPE, GRAPHS_NEED_NCCL, GraphRunner  # noqa: E402
from mmprof.runtime.indexer import select_blocks  # noqa: E402
from mmprof.runtime.kvcache import make_cache  # noqa: E402
from tests.runtime.tolerance import assert_same_tokens_unless_near_tie, reorder_tolerance, ulp  # noqa: E402

LONG = Workload(batch=2, prompt_len=256, decode_steps=4, seed=7)  # 16 blocks, top-4 kept: sparse drops keys
SHORT = Workload(batch=3, prompt_len=20, decode_steps=6, seed=1)  # 2-3 blocks < top-4: -1 slots in the selection


class FakeGraph:
    """A capture for CPU: warms up, 'captures' by running the step once, and returns the step as the replay
    (GraphRunner mutes the dispatch log and the scopes around a replay, as a real graph replay runs no Python)."""

    def __init__(self):
        self.captures = 0
        self.replays = 0

    def __call__(self, step, warmup_step):
        self.captures += 1
        warmup_step()
        step()

        def replay():
            self.replays += 1
            step()

        return replay


@pytest.fixture(scope="module")
def tiny():
    return build_model(get_preset("tiny"), seed=0)


@pytest.fixture(scope="module")
def tiny_bf16():
    return build_model(get_preset("tiny"), seed=0, dtype=torch.bfloat16)


def _pair(model, wl, **sw):
    """(eager run, graphs run with a FakeGraph, the fake, eager dispatch rows, graphs dispatch rows)."""
    model.set_switches(Switches(**sw))
    model.dispatch.clear()
    eager = generate(model, wl, keep_logits=True)
    eager_rows = model.dispatch.rows()
    model.set_switches(Switches(graphs=True, **sw))
    model.dispatch.clear()
    fake = FakeGraph()
    static = generate(model, wl, keep_logits=True, graph_capture=fake)
    return eager, static, fake, eager_rows, model.dispatch.rows()


def _maxdiff(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a.logits, b.logits))


# -- the static step gives the eager path's tokens ------------------------------------------------------------
@pytest.mark.parametrize("sw", [{}, {"block_reuse": 1}, {"attention": "dense"}, {"shared_expert": "separate"}],
                         ids=["fast", "reuse1", "dense", "separate"])
@pytest.mark.parametrize("wl", [LONG, SHORT], ids=["long", "short"])
def test_static_step_equals_eager_fp32(tiny, sw, wl):
    eager, static, fake, eager_rows, static_rows = _pair(tiny, wl, **sw)
    tol = reorder_tolerance(torch.float32, eager.logits, tiny.args.n_layers, wl.prompt_len + wl.decode_steps + 1)
    assert_same_tokens_unless_near_tie(eager, static, tol)
    assert _maxdiff(eager, static) <= tol  # seen: 4e-7 (attention over the whole capacity sums differently)
    assert _maxdiff(eager, static) > 0 or wl is LONG  # SHORT really runs other kernels (masked capacity)
    assert static.graphs == {"captured_before_step": 1, "captures": 1,
                             "replayed_steps": list(range(1, wl.decode_steps + 1))}
    assert fake.captures == 1 and fake.replays == wl.decode_steps
    assert static_rows == eager_rows  # one set of rows per decode step, the same as eager mode


@pytest.mark.parametrize("wl", [LONG, dataclasses.replace(SHORT, decode_steps=4)], ids=["long", "short"])
def test_static_step_equals_eager_bf16(tiny_bf16, wl):
    """bf16: the masked full-capacity attention sums in another order (SDPA over the masked capacity vs the
    filled keys), which rounds differently by CPU (seen 0 on one x86 CPU, 0.063 = 16 ulps on an AMD EPYC), so
    the bound is derived from bf16 and the ops (_bf16_tolerance), and tokens must agree except at a near-tie.
    Outside any bound: a wrong static step (a stale cache position, a wrong mask) moves logits by O(1)."""
    eager, static, *_ = _pair(tiny_bf16, wl)
    keys = wl.prompt_len + wl.decode_steps + 1  # the op that differs: attention over the filled keys
    tol = reorder_tolerance(torch.bfloat16, eager.logits, tiny_bf16.args.n_layers, keys)
    assert tol < min(float(x.abs().max()) for x in eager.logits)  # the bound stays below the logits' own size
    assert_same_tokens_unless_near_tie(eager, static, tol)
    assert _maxdiff(eager, static) <= tol


def test_tolerance_is_derived_not_fitted():
    """The helper itself (tests/runtime/tolerance.py): a bf16 ulp is 2**-7 at 1.0 and 2**-8 in [0.5, 1) (8
    significand bits), fp32's 2**-23 at 1.0, equal to torch.finfo(dtype).eps; a logit shift of O(1) (what a
    wrong static step gives) is far outside the bound for the tiny model."""
    assert ulp(torch.bfloat16, 1.0) == 2 ** -7 == torch.finfo(torch.bfloat16).eps
    assert ulp(torch.bfloat16, 0.8) == 2 ** -8 and ulp(torch.bfloat16, -3.0) == 2 ** -6
    assert ulp(torch.float32, 1.0) == torch.finfo(torch.float32).eps
    tol = reorder_tolerance(torch.bfloat16, [torch.tensor([0.8, -0.3])], n_layers=6, k=25)
    assert tol == 6 * 5 * 2 ** -8  # 0.117
    assert not 1.0 <= tol
    bad = torch.tensor([[0.5, 0.1]]), torch.tensor([[0.1, 0.5]])  # a near-tie is 2 tol; 0.4 is not
    run = type("R", (), {})
    a, b = run(), run()
    a.logits, a.tokens, b.tokens = [bad[0]], torch.tensor([[0]]), torch.tensor([[1]])
    with pytest.raises(AssertionError, match="top-2 margin"):
        assert_same_tokens_unless_near_tie(a, b, 0.1)
    assert_same_tokens_unless_near_tie(a, b, 0.3)


def test_static_indexer_never_selects_an_empty_block():
    torch.manual_seed(0)
    q, k = torch.randn(2, 2, 1, 8), torch.randn(2, 1, 100, 8)  # a cache of capacity 100
    for pos in (19, 70, 99):
        eager = select_blocks(q, k[:, :, :pos + 1], pos, block=16, topk=4, local=1)
        static = select_blocks(q, k, torch.tensor([pos]), block=16, topk=4, local=1)
        assert static.shape[-1] == 4
        assert torch.equal(static[..., :eager.shape[-1]], eager)  # the same blocks, in the same order
        assert bool((static[..., eager.shape[-1]:] == -1).all())  # early positions: the extra slots are empty
        assert int(static.max()) <= pos // 16  # never a block past the query
    # pos 19: only blocks 0 and 1 hold keys -> exactly those two, two -1 slots
    early = select_blocks(q, k, torch.tensor([19]), block=16, topk=4, local=1)
    assert sorted(early[0, 0, 0].tolist()) == [-1, -1, 0, 1]


def test_static_gather_masks_past_the_position():
    """Stale values after the position (a cache from an earlier, longer run) must not reach the output."""
    torch.manual_seed(1)
    q = torch.randn(1, 4, 1, 16)
    k, v = torch.randn(1, 2, 80, 16), torch.randn(1, 2, 80, 16)
    pos = 40
    sel = torch.tensor([2, 0, -1, -1]).expand(1, 2, 1, 4)  # block 2 holds pos 32..47: 41..47 are stale
    ref = attend_sparse_gather(q, k[:, :, :pos + 1], v[:, :, :pos + 1], pos, 0.25, sel[..., :2], 16)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, pos + 1:], v2[:, :, pos + 1:] = 50.0, 1e4
    out = attend_sparse_gather(q, k2, v2, torch.tensor([pos]), 0.25, sel, 16)
    assert float((out - ref).abs().max()) < 1e-5


# -- the runner: capture once per (batch, cache), replay per step ---------------------------------------------
def test_runner_captures_once_per_batch_and_cache(tiny):
    tiny.set_switches(Switches(graphs=True))
    tiny.dispatch.clear()
    fake = FakeGraph()
    runners = {}
    for b in (1, 3):
        caches = make_cache(tiny, b, 64)
        r = runners[b] = GraphRunner(tiny, caches, b, capture=fake)
        tok = torch.zeros(b, 1, dtype=torch.long)
        for s in range(1, 6):
            tiny.dispatch.set_step(s, "decode")
            r.decode(s, tok, 30 + s)
            tok = r.static.next[:, None].clone()
    assert fake.captures == 2 and fake.replays == 2 * 5
    for r in runners.values():
        assert r.stats.to_dict() == {"captured_before_step": 1, "replayed_steps": [1, 2, 3, 4, 5], "captures": 1}
        assert r.rows and {x.step for x in r.rows} == {1}
    rows = tiny.dispatch.records
    per_step = {s: [(x.layer, x.op, x.impl) for x in rows if x.step == s] for s in range(1, 6)}
    assert all(per_step[s] == per_step[1] for s in range(2, 6)), per_step  # twice each: batch 1 and batch 3
    assert len(per_step[1]) == len(runners[1].rows) + len(runners[3].rows)
    assert {x.phase for x in rows} == {"decode"}


def test_capture_range_once_in_trace(tiny):
    """Layer scopes are recorded at prefill, the eager static step and the capture only; every decode step keeps its
    mmprof.decode / mmprof.step.N range; mmprof.graph.capture opens once, between the prefill and decode step 1,
    in no phase."""
    from torch.profiler import ProfilerActivity, profile

    tiny.set_switches(Switches(graphs=True))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        generate(tiny, Workload(batch=1, prompt_len=32, decode_steps=4), graph_capture=FakeGraph())
    ev = list(prof.events())
    count = {}
    for e in ev:
        count[e.name] = count.get(e.name, 0) + 1
    assert count[CAPTURE_SCOPE] == 1
    assert count["mmprof.decode"] == 4 and all(count[f"mmprof.step.{s}"] == 1 for s in range(5))
    assert count["layers.0.mlp"] == 3 and count["layers.3.moe.routed"] == 3  # prefill, step 1, capture
    cap = next(e for e in ev if e.name == CAPTURE_SCOPE)
    step0 = next(e for e in ev if e.name == "mmprof.step.0")
    step1 = next(e for e in ev if e.name == "mmprof.step.1")
    assert step0.time_range.end <= cap.time_range.start and cap.time_range.end <= step1.time_range.start
    assert not any(e.name in ("mmprof.decode", "mmprof.prefill") and e.time_range.start <= cap.time_range.start
                   <= e.time_range.end for e in ev)
    for s in (1, 3):
        st = next(e for e in ev if e.name == f"mmprof.step.{s}")
        inside = [e.name for e in ev if e.name.startswith("layers.")
                  and st.time_range.start <= e.time_range.start <= st.time_range.end]
        assert inside == []  # a replay opens no layer scope


def test_capture_time_is_kept_apart(tiny, monkeypatch):
    """The capture's time goes to graph_capture_ms and not into decode step 1. A fake clock (the runtime's
    perf_counter on CPU, mmprof/runtime/generate.py) that only the capture advances, by exactly 300 ms, makes this
    exact under any load: no wall-clock limit."""
    import sys

    gen = sys.modules["mmprof.runtime.generate"]  # the module (mmprof.runtime.generate is also the function)

    clock = {"t": 1000.0}
    monkeypatch.setattr(gen.time, "perf_counter", lambda: clock["t"])
    tiny.set_switches(Switches(graphs=True))

    class SlowGraph(FakeGraph):
        def __call__(self, step, warmup_step):
            clock["t"] += 0.3
            return super().__call__(step, warmup_step)

    res = generate(tiny, Workload(batch=1, prompt_len=32, decode_steps=3), graph_capture=SlowGraph())
    assert res.graph_capture_ms == pytest.approx(300.0)
    assert res.decode_ms == [0.0, 0.0, 0.0]  # step 1 is its replay only: the 300 ms are not in it
    assert res.to_dict()["graphs"]["captured_before_step"] == 1
    tiny.set_switches(Switches())
    assert generate(tiny, Workload(batch=1, prompt_len=32, decode_steps=1)).graph_capture_ms is None


# -- refusals --------------------------------------------------------------------------------------------------
def test_refusals(tiny, tmp_path):
    with pytest.raises(BadInput, match="graphs need moe_impl=grouped: the loop path syncs with the host"):
        Switches(graphs=True, moe_impl="loop")
    tiny.set_switches(Switches(graphs=True))
    with pytest.raises(BadInput, match="need a CUDA or ROCm GPU"):  # CPU and the real capture
        generate(tiny, Workload(batch=1, prompt_len=16, decode_steps=2))
    tiny.set_switches(Switches(moe_impl="loop"))
    with pytest.raises(BadInput, match="moe_impl=grouped"):  # a runner asked for directly, loop switches
        GraphRunner(tiny, make_cache(tiny, 1, 32), 1, capture=FakeGraph())

    import torch.distributed as dist

    from mmprof.runtime.parallel import Comm

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        m = build_model(get_preset("tiny"), Switches(graphs=True), seed=0)
        m.comm = Comm(dist.group.WORLD, tp=2)  # an active gloo Comm (what a TP=2 gloo build carries)
        assert m.comm.backend == "gloo"
        with pytest.raises(BadInput) as e:
            GraphRunner(m, make_cache(m, 1, 32), 1)
        assert str(e.value) == GRAPHS_NEED_NCCL
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("args,needle", [
    (["--graphs"], "--graphs needs --device cuda"),
    (["--graphs", "--moe-impl", "loop"], "graphs need moe_impl=grouped"),
    (["--baseline", "--graphs"], "graphs need moe_impl=grouped"),
])
def test_cli_graphs_refused_one_line(tmp_path, capsys, args, needle):
    from mmprof.cli import main

    with pytest.raises(SystemExit) as e:
        main(["run", *args, "--capture", "none", "-o", str(tmp_path / "r.json.gz")])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.strip().splitlines() == [err.strip()] and err.startswith("mmprof: error: ") and needle in err
    assert not (tmp_path / "r.json.gz").exists()


# -- TP=2 over gloo: the static step (fake capture) matches eager; the real capture is refused ------------------
@pytest.mark.slow
def test_tp2_gloo_static_step(tmp_path):
    import os

    import torch.multiprocessing as mp

    from .tp_worker import run_rank

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(run_rank, args=(2, 1, str(tmp_path / "init"), str(tmp_path), {}, True), nprocs=2, join=True)
    for r in range(2):
        o = torch.load(tmp_path / f"rank{r}.pt")
        assert o["refusal"] == GRAPHS_NEED_NCCL
        assert torch.equal(o["tokens"], o["static_tokens"])
        assert max(float((a - b).abs().max()) for a, b in zip(o["logits"], o["static_logits"])) < 1e-5
        assert o["static_graphs"]["replayed_steps"] == [1, 2, 3, 4]
        assert o["static_dispatch"] == o["dispatch"]
