"""GPU checks (run with MMPROF_GPU_TESTS=1 on a CUDA/ROCm machine): the fast paths really run there and
agree with the baselines in bf16; the CPU equivalents of these checks are in test_runtime.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from mmprof.errors import CaptureUnavailable  # noqa: E402
from mmprof.runtime import Switches, Workload, build_model, generate, get_preset  # noqa: E402


@pytest.mark.gpu
def test_grouped_mm_runs_on_gpu_and_matches_loop():
    """fp32: torch._grouped_mm and the loop agree to rounding (2e-7 relative on the H200). bf16: grouped_mm
    runs, but the loop baseline accumulates the experts' outputs in bf16 (index_add_ into a bf16 tensor) and
    a near-tied block selection can then flip, so the two differ by a few % (6.5% seen): no tight bound there."""
    outs = {}
    for dtype in (torch.float32, torch.bfloat16):
        m = build_model(get_preset("tiny"), device="cuda", dtype=dtype, seed=0)
        for sw in (Switches.baseline(), Switches(block_reuse=1)):  # reuse changes numerics: compare at K=1
            m.set_switches(sw)
            m.dispatch.clear()
            outs[dtype, sw.moe_impl] = generate(m, Workload(batch=4, prompt_len=256, decode_steps=2), keep_logits=True)
            impls = {(r.op, r.impl) for r in m.dispatch.records}
            assert ("moe.experts", "grouped_mm" if sw.moe_impl == "grouped" else "loop") in impls, impls

    def rel(dtype):
        a, b = outs[dtype, "loop"].logits[0].float(), outs[dtype, "grouped"].logits[0].float()
        return float((a - b).norm() / b.norm())

    assert rel(torch.float32) < 1e-4, rel(torch.float32)
    assert rel(torch.bfloat16) < 0.15, rel(torch.bfloat16)


@pytest.mark.gpu
def test_sparse_gather_decode_matches_masked_on_gpu():
    from mmprof.runtime.attention import attend_sparse_gather, attend_sparse_masked

    torch.manual_seed(0)
    q = torch.randn(2, 8, 1, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 2, 1000, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    sel = torch.tensor([0, 3, 62, -1], device="cuda").expand(2, 2, 1, 4).contiguous()
    a = attend_sparse_gather(q, k, v, 999, 0.125, sel, 16)
    b = attend_sparse_masked(q, k, v, 999, 0.125, sel, 16)
    assert float((a.float() - b.float()).abs().max()) < 2e-2


def _fake_capture(step, warmup_step):  # the static step run eagerly: the reference a replay must reproduce
    warmup_step()
    step()
    return step


@pytest.mark.gpu
def test_cuda_graph_decode_matches_eager():
    """The graphs rung on the GPU (bf16): one capture (at step 2), replays for steps 2..N, the dispatch table as in
    eager mode. The static step's own kernels, run eagerly, are what the replays reproduce (tokens equal, logits to
    1e-2 relative: index_add_ accumulates with atomics); against the eager path the masked full-capacity attention
    may round a bf16 ulp apart (logits to 5e-2). fp32 cannot be captured with torch 2.11's grouped GEMM (it copies
    from the host, seen on the H200): one clear error, no crash."""
    wl = Workload(batch=2, prompt_len=256, decode_steps=6, seed=3)
    m = build_model(get_preset("tiny"), device="cuda", dtype=torch.bfloat16, seed=0)
    m.dispatch.clear()
    eager = generate(m, wl, keep_logits=True)
    eager_rows = m.dispatch.rows()
    m.set_switches(Switches(graphs=True))
    m.dispatch.clear()
    graph = generate(m, wl, keep_logits=True)
    assert graph.graphs == {"captured_before_step": 1, "replayed_steps": [1, 2, 3, 4, 5, 6], "captures": 1}
    assert graph.graph_capture_ms > 0 and all(ms > 0 for ms in graph.decode_ms)
    assert m.dispatch.rows() == eager_rows
    static = generate(m, wl, keep_logits=True, graph_capture=_fake_capture)

    def rel_until_apart(a, b):
        """Relative logit error per step up to the first step whose tokens differ (bf16 near-ties may flip a
        greedy token; after that the two runs decode different text, so only the steps before say anything)."""
        same = (a.tokens == b.tokens).all(0).tolist()
        last = same.index(False) if False in same else len(same) - 1
        return [float((x - y).norm() / y.norm()) for x, y in zip(a.logits[:last + 1], b.logits[:last + 1])]

    r = rel_until_apart(graph, static)
    assert len(r) >= 3 and max(r) < 1e-2, (r, graph.tokens, static.tokens)
    r = rel_until_apart(graph, eager)
    assert len(r) >= 2 and max(r) < 5e-2, (r, graph.tokens, eager.tokens)
    m32 = build_model(get_preset("tiny"), Switches(graphs=True), device="cuda", dtype=torch.float32, seed=0)
    try:
        generate(m32, wl)
    except CaptureUnavailable as e:
        assert "could not be captured" in str(e) and "\n" not in str(e)
    # (a torch whose fp32 grouped GEMM captures cleanly simply passes)


@pytest.mark.gpu
def test_cuda_graph_decode_tp2_nccl(tmp_path):
    """TP=2 over NCCL (needs 2 GPUs): the all-reduces and the logits all-gather are captured into each rank's graph;
    the graph's logits match the eager TP=2 run's (bf16)."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs (TP=2 over NCCL)")
    import torch.multiprocessing as mp

    from .tp_worker import run_rank

    mp.spawn(run_rank, args=(2, 1, str(tmp_path / "init"), str(tmp_path), {}, True, "cuda"), nprocs=2, join=True)
    for r in range(2):
        o = torch.load(tmp_path / f"rank{r}.pt")
        assert o["static_graphs"]["replayed_steps"] == [1, 2, 3, 4]
        # bf16 (fp32 grouped GEMM does not capture): the prefill token equal, logits to 5e-2 relative up to the
        # first step whose tokens differ (a bf16 near-tie; after it the two runs decode different text)
        assert torch.equal(o["tokens"][:, 0], o["static_tokens"][:, 0])
        same = (o["tokens"] == o["static_tokens"]).all(0).tolist()
        last = same.index(False) if False in same else len(same) - 1
        rel = [float((a - b).norm() / b.norm()) for a, b in zip(o["static_logits"][:last + 1], o["logits"][:last + 1])]
        # the sparse indexer's top-k block choice is a discrete decision too: on 2 H200s one step of five moved to
        # 6.4e-2 with every token equal, the others stayed under 1e-2
        assert len(rel) >= 2 and sorted(rel)[-2] < 1e-2 and max(rel) < 0.1, (rel, o["tokens"], o["static_tokens"])


@pytest.mark.gpu
def test_compile_rung_captures_and_matches_the_graph_rung_on_gpu():
    """The compile rung's static step (Inductor's Triton kernels) captured into a real CUDA graph: its replays give
    the graph rung's logits within the bf16 reordering bound of tolerance.py (Inductor fuses and reorders; same
    math), one `decode.compile` row per decode step, and the grouped GEMM traced by Dynamo (bf16)."""
    from .tolerance import assert_same_tokens_unless_near_tie, longest_reduction, reorder_tolerance

    args = get_preset("tiny")
    wl = Workload(batch=4, prompt_len=64, decode_steps=4, seed=2)
    m = build_model(args, Switches(graphs=True, block_reuse=1), device="cuda", dtype=torch.bfloat16, seed=0)
    graphs = generate(m, wl, keep_logits=True)
    m.set_switches(Switches(graphs=True, block_reuse=1, compile=True))
    m.dispatch.clear()
    comp = generate(m, wl, keep_logits=True)
    assert comp.graphs["replayed_steps"] == [1, 2, 3, 4]
    rows = [r for r in m.dispatch.records if r.phase == "decode"]
    assert [r.step for r in rows if r.op == "decode.compile"] == [1, 2, 3, 4]
    assert {r.impl for r in rows if r.op == "moe.experts"} == {"grouped_mm"}
    tol = reorder_tolerance(torch.bfloat16, graphs.logits, args.n_layers,
                            longest_reduction(args, wl.prompt_len + wl.decode_steps))
    assert float((graphs.logits[0].float() - comp.logits[0].float()).abs().max()) <= tol
    assert_same_tokens_unless_near_tie(graphs, comp, tol)


@pytest.mark.gpu
def test_compiled_prefill_matches_the_eager_prefill_on_gpu():
    """`compile_prefill` with Inductor's Triton kernels: the prefill's logits within the bf16 reordering bound of
    the eager prefill's (tests/runtime/tolerance.py), one `prefill.compile` row."""
    from tests.runtime.tolerance import assert_same_tokens_unless_near_tie, longest_reduction, reorder_tolerance

    args = get_preset("tiny")
    wl = Workload(batch=2, prompt_len=48, decode_steps=1, seed=2)
    model = build_model(args, Switches(block_reuse=1), device="cuda", dtype=torch.bfloat16, seed=0)
    eager = generate(model, wl, keep_logits=True)
    model.set_switches(Switches(block_reuse=1, compile_prefill=True))
    model.dispatch.clear()
    comp = generate(model, wl, keep_logits=True)
    tol = reorder_tolerance(torch.bfloat16, eager.logits[:1], args.n_layers, longest_reduction(args, wl.prompt_len))
    assert float((eager.logits[0].float() - comp.logits[0].float()).abs().max()) <= tol
    assert_same_tokens_unless_near_tie(eager, comp, tol)
    assert [r.op for r in model.dispatch.records if r.op.endswith(".compile")] == ["prefill.compile"]
