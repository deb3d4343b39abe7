"""The Triton decode kernels (mmprof/runtime/kernels/) against the runtime's own PyTorch region functions, which the
transformers oracle checks (test_oracle.py): the truth each test expects is what that eager function computes.

On the CPU the kernels run under Triton's interpreter (tests/runtime/conftest.py sets TRITON_INTERPRET=1; CI
installs triton with the test extras), at the tiny preset's dimensions. With MMPROF_GPU_TESTS=1 on a GPU the same
tests compile the kernels for the GPU and run them at the `small` preset's dimensions (benchmarks/h200/
decode_kernels.py runs them on the H200).

Tolerances come from the dtype, not from one machine: in float32 the kernels sum in another order than the eager
path (a few ulp of the result times sqrt of the reduction length); in bfloat16 the kernels keep fp32 where the eager
path rounds to bf16 in between, so the test computes the exact result (the eager function in float64 on the same
bf16 inputs) and requires the kernel to be no further from it than the eager bf16 path is, plus 2 bf16 ulp.
"""

from __future__ import annotations

import math
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from mmprof.runtime.attention import attend_dense, attend_sparse_gather, qk_norm_rope_insert  # noqa: E402
from mmprof.runtime.indexer import select_blocks  # noqa: E402
from mmprof.runtime.layers import rope_table  # noqa: E402
from mmprof.runtime.moe import route, routed_grouped  # noqa: E402
from tests.runtime.tolerance import ulp  # noqa: E402

GPU = bool(os.environ.get("MMPROF_GPU_TESTS")) and torch.cuda.is_available()
DEV = torch.device("cuda" if GPU else "cpu")
if not GPU and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
    pytest.skip("the Triton kernels need a GPU or TRITON_INTERPRET=1 (tests/runtime/conftest.py sets it)",
                allow_module_level=True)

from mmprof.runtime.kernels.decode_attention import (dense_attention_decode, index_block_scores,  # noqa: E402
                                                     sparse_attention_decode)
from mmprof.runtime.kernels.fused_moe import fused_experts, moe_route, pair_major  # noqa: E402
from mmprof.runtime.kernels.norm_rope_insert import qk_norm_rope_kv_insert  # noqa: E402

# (heads, kv heads, head dim, rotary dim, block, top-k blocks, hidden, experts, expert intermediate, top-k)
DIMS = (dict(nh=16, nkv=4, hd=128, rot=64, block=128, topk=16, h=2048, e=128, i=768, k=4, cap=2100) if GPU else
        dict(nh=8, nkv=2, hd=32, rot=16, block=16, topk=4, h=128, e=8, i=64, k=4, cap=100))
DTYPES = (torch.float32, torch.bfloat16)
# tokens for the expert tests: the last one has more (token, k) pairs than expert slots (the slot-per-program layout)
TOKENS = (1, 2, 33) if GPU else (1, 2, 9)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rand(*shape, g, scale=1.0, dtype=torch.float32):
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(DEV)


def _exact(fn, *args):
    """fn on float64 copies of its tensor arguments (the exact result of the same bf16-valued inputs)."""
    conv = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    return fn(*conv)


def assert_as_accurate_as_eager(kernel, eager, exact, dtype, k_len: int, what: str) -> None:
    """float32: within sqrt(K) * 8 ulp of the exact result. bf16: no further from it than the eager path, + 2 ulp."""
    kernel, eager, exact = kernel.double().cpu(), eager.double().cpu(), exact.double().cpu()
    mag = float(exact.abs().max())
    err_k = float((kernel - exact).abs().max())
    if dtype == torch.float32:
        tol = 8 * math.sqrt(k_len) * ulp(torch.float32, mag)
        assert err_k <= tol, f"{what}: {err_k} > {tol} (fp32)"
    else:
        err_e = float((eager - exact).abs().max())
        tol = err_e + 2 * ulp(torch.bfloat16, mag)
        assert err_k <= tol, f"{what}: kernel {err_k} vs eager {err_e} (+2 ulp = {tol})"


# -- norm + RoPE + KV insert ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index", [True, False])
def test_norm_rope_insert_matches_the_compiled_region_function(dtype, index):
    """attention.qk_norm_rope_insert is the compile rung's norm_rope region (per-head Gemma norm, partial NeoX RoPE at
    the device position, the KV and index-key insert): the kernel gives the same q / index q, writes the same rows
    into the caches at the position and leaves every other position as it was (the caches start at 7.0)."""
    d = DIMS
    nih, b, cap, pos = d["nkv"], 3, d["cap"], d["cap"] - 9
    g = _gen(1)
    n = (d["nh"] + 2 * d["nkv"]) * d["hd"] + ((nih + 1) * d["hd"] if index else 0)
    fused = _rand(b, 1, n, g=g, scale=2.0, dtype=dtype)
    qw, kw, iqw, ikw = (_rand(d["hd"], g=g, scale=0.3, dtype=dtype) for _ in range(4))
    if not index:
        iqw = ikw = None
    cos, sin = (t.to(DEV) for t in rope_table(d["rot"], 5e6, cap))
    p = torch.tensor([pos], device=DEV)
    caches = [torch.full((b, d["nkv"], cap, d["hd"]), 7.0, dtype=dtype, device=DEV) for _ in range(2)]
    caches.append(torch.full((b, 1, cap, d["hd"]), 7.0, dtype=dtype, device=DEV) if index else None)
    mine = [c.clone() if c is not None else None for c in caches]
    args = (d["nh"], d["nkv"], d["hd"], nih, d["hd"], 1e-6)
    q_ref, iq_ref = qk_norm_rope_insert(fused, qw, kw, iqw, ikw, cos, sin, p, *caches, *args)
    q, iq = qk_norm_rope_kv_insert(fused, qw, kw, iqw, ikw, cos, sin, p, *mine, *args)
    ex = [c.double() if c is not None else None for c in caches]
    q_ex, iq_ex = _exact(qk_norm_rope_insert, fused, qw, kw, iqw, ikw, cos, sin, p, *ex, *args)
    assert q.shape == q_ref.shape and q.dtype == dtype
    assert_as_accurate_as_eager(q, q_ref, q_ex, dtype, d["hd"], "q")
    if index:
        assert iq.shape == iq_ref.shape
        assert_as_accurate_as_eager(iq, iq_ref, iq_ex, dtype, d["hd"], "index q")
    else:
        assert iq is None
    for name, c_ref, c, c_ex in zip(("k", "v", "index k"), caches, mine, ex):
        if c is None:
            continue
        others = torch.ones(cap, dtype=torch.bool, device=DEV)
        others[pos] = False
        assert bool((c[:, :, others] == 7.0).all()), f"{name} cache written outside the position"
        assert_as_accurate_as_eager(c[:, :, pos], c_ref[:, :, pos], c_ex[:, :, pos], dtype, d["hd"], name)


# -- indexer scores, top-k, sparse and dense decode attention --------------------------------------------------------

def _attention_inputs(dtype, b: int, seed: int):
    d = DIMS
    g = _gen(seed)
    q = _rand(b, d["nh"], 1, d["hd"], g=g, dtype=dtype)
    k = _rand(b, d["nkv"], d["cap"], d["hd"], g=g, dtype=dtype)
    v = _rand(b, d["nkv"], d["cap"], d["hd"], g=g, dtype=dtype)
    iq = _rand(b, d["nkv"], 1, d["hd"], g=g, dtype=dtype)
    ik = _rand(b, 1, d["cap"], d["hd"], g=g, dtype=dtype)
    return q, k, v, iq, ik


# positions: inside the first block (one block only), fewer blocks than top-k, more blocks than top-k, the last slot
POSITIONS = (5, 2 * DIMS["block"] + 3, DIMS["cap"] - 30, DIMS["cap"] - 1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("splits", [None, 3])  # None: the launcher's choice (1 on the CPU, several on a GPU)
def test_indexer_topk_and_sparse_attention_match_select_blocks_and_the_gather(dtype, pos, splits):
    """indexer.select_blocks picks the blocks (per KV group: the local block forced, -1 for blocks with no valid key,
    min(top-k, blocks) slots) and attention.attend_sparse_gather attends them: the kernels give the same block set
    per (batch row, group) and the same output, for one split per group and several (the combine kernel)."""
    d = DIMS
    q, k, v, iq, ik = _attention_inputs(dtype, 2, seed=pos)
    p = torch.tensor([pos], device=DEV)
    scale = d["hd"] ** -0.5
    sel_ref = select_blocks(iq, ik, p, d["block"], d["topk"], 1)
    scores = index_block_scores(iq, ik, p, d["block"], 1)
    out, sel = sparse_attention_decode(q, k, v, p, scale, d["block"], d["topk"], scores=scores, splits=splits)
    assert sel.shape == sel_ref.shape and sel.dtype == torch.long
    assert torch.equal(sel.sort(-1).values, sel_ref.sort(-1).values)
    assert int((sel >= 0).sum()) == int((sel_ref >= 0).sum()) > 0
    ref = attend_sparse_gather(q, k, v, p, scale, sel_ref, d["block"])
    ex = _exact(attend_sparse_gather, q, k, v, p, scale, sel_ref, d["block"])
    assert_as_accurate_as_eager(out, ref, ex, dtype, d["topk"] * d["block"], "sparse attention")
    # a layer that reuses the selection passes it in: the same output
    again, sel2 = sparse_attention_decode(q, k, v, p, scale, d["block"], d["topk"], sel=sel_ref, splits=splits)
    assert sel2 is not None and torch.equal(sel2, sel_ref)
    assert_as_accurate_as_eager(again, ref, ex, dtype, d["topk"] * d["block"], "sparse attention (reused)")


def test_stale_cache_positions_never_reach_the_output():
    """Keys past the position hold whatever an earlier sequence left (1e4 here): masked in the scores, the selection
    and the attention, so the output equals the one with clean zeros there."""
    d = DIMS
    q, k, v, iq, ik = _attention_inputs(torch.float32, 1, seed=3)
    pos = d["cap"] // 2
    p = torch.tensor([pos], device=DEV)
    outs = []
    for fill in (0.0, 1e4):
        kk, vv, ii = k.clone(), v.clone(), ik.clone()
        kk[:, :, pos + 1:] = fill
        vv[:, :, pos + 1:] = fill
        ii[:, :, pos + 1:] = fill
        sc = index_block_scores(iq, ii, p, d["block"], 1)
        o, s = sparse_attention_decode(q, kk, vv, p, 0.1, d["block"], d["topk"], scores=sc)
        outs.append((o, s, dense_attention_decode(q, kk, vv, p, 0.1, d["block"])))
    assert torch.equal(outs[0][1], outs[1][1])
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][2], outs[1][2])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("splits", [None, 2])
def test_dense_decode_attention_matches_sdpa_over_the_masked_capacity(dtype, pos, splits):
    """attention.attend_dense with a device position (the static step's full-layer attention: SDPA over the whole
    capacity, positions past the query masked)."""
    d = DIMS
    q, k, v, _, _ = _attention_inputs(dtype, 2, seed=pos + 1)
    p = torch.tensor([pos], device=DEV)
    scale = d["hd"] ** -0.5
    out = dense_attention_decode(q, k, v, p, scale, d["block"], splits=splits)
    ref = attend_dense(q, k, v, p, scale)
    ex = _exact(attend_dense, q, k, v, p, scale)
    assert_as_accurate_as_eager(out, ref, ex, dtype, pos + 1, "dense attention")


# -- router and experts -------------------------------------------------------------------------------------------

def _moe_weights(dtype, seed: int, slots: int):
    d = DIMS
    g = _gen(seed)
    gate = _rand(d["e"], d["h"], g=g, scale=d["h"] ** -0.5)
    bias = _rand(d["e"], g=g, scale=0.05)
    w13 = _rand(slots, 2 * d["i"], d["h"], g=g, scale=d["h"] ** -0.5, dtype=dtype)
    w2 = _rand(slots, d["h"], d["i"], g=g, scale=d["i"] ** -0.5, dtype=dtype)
    return gate, bias, w13, w2


@pytest.mark.parametrize("n", [1, 3, 9])
def test_router_kernel_picks_the_experts_route_picks(n):
    """moe.route: sigmoid of the fp32 router GEMM, top-k on score + bias, the plain scores renormalised. The kernel
    gives the same experts per token (as sets: the eager top-k is unsorted) and the same weights times the routed
    scale, the fused shared slot appended with weight 1; under EP (experts 2..5 here) other ranks' experts are -1."""
    d = DIMS
    gate, bias, _, _ = _moe_weights(torch.float32, n, 1)
    x = _rand(n, d["h"], g=_gen(100 + n), dtype=torch.bfloat16)
    w_ref, ids_ref = route(x, gate, bias, d["k"])
    ids, tw = moe_route(x, gate, bias, d["k"], 0, d["e"], d["e"], 0.5, 2.0)
    assert ids.shape == (n, d["k"] + 1) and tw.dtype == torch.float32
    order_r, order_k = ids_ref.argsort(-1), ids[:, :d["k"]].long().argsort(-1)
    assert torch.equal(ids_ref.gather(1, order_r), ids[:, :d["k"]].long().gather(1, order_k))
    torch.testing.assert_close(tw[:, :d["k"]].gather(1, order_k), 2.0 * w_ref.gather(1, order_r), rtol=1e-5, atol=0)
    assert bool((ids[:, -1] == d["e"]).all()) and bool((tw[:, -1] == 1.0).all())
    ids_ep, _ = moe_route(x, gate, bias, d["k"], 2, 4, -1, 0.5, 2.0)
    want = torch.where((ids_ref >= 2) & (ids_ref < 6), ids_ref - 2, -1)
    assert torch.equal(ids_ep.long().gather(1, order_k), want.gather(1, order_r))


def _routing(w, ids, scale: float, fused_slot: int | None):
    """The kernel's routing tensors from route()'s (the same experts, so the expert math is compared alone)."""
    tw, slots = w * scale, ids
    if fused_slot is not None:
        n = ids.shape[0]
        slots = torch.cat([ids, torch.full((n, 1), fused_slot, device=ids.device, dtype=ids.dtype)], 1)
        tw = torch.cat([tw, torch.full((n, 1), 1.0, device=w.device)], 1)
    return tw.float().contiguous(), slots.to(torch.int32).contiguous()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", TOKENS)
@pytest.mark.parametrize("fused", [True, False])
def test_fused_experts_match_the_grouped_gemm_region(dtype, n, fused):
    """moe.routed_grouped (the grouped GEMM path, the shared expert as slot E with weight 1/scale, the routed scale)
    on the same routing: the kernels give the same [N, H] output, both in the pair-per-program regime (few tokens) and
    the slot-per-program one (more (token, k) pairs than slots: the expert-major down GEMM and the token sum)."""
    d = DIMS
    slots = d["e"] + (1 if fused else 0)
    gate, bias, w13, w2 = _moe_weights(dtype, 7 + n, slots)
    x = _rand(n, d["h"], g=_gen(200 + n), dtype=dtype)
    w, ids = route(x, gate, bias, d["k"])
    fs = d["e"] if fused else -1
    ref = routed_grouped(x, w, ids, w13, w2, 1.702, 7.0, False, fs, 0.5, 2.0, None)
    ex = _exact(routed_grouped, x, w, ids, w13, w2, 1.702, 7.0, False, fs, 0.5, 2.0, None)
    tw, sl = _routing(w, ids, 2.0, d["e"] if fused else None)
    out = fused_experts(x, w13, w2, tw, sl, 1.702, 7.0)
    assert out.shape == x.shape and out.dtype == dtype
    assert_as_accurate_as_eager(out, ref, ex, dtype, d["i"] * (d["k"] + 1), "experts")


def test_both_program_layouts_are_exercised():
    """The regime switch of fused_experts: pairs <= slots -> a program per pair, else a program per slot (the
    parametrised test above must cover both at the dimensions it runs)."""
    d = DIMS
    assert pair_major(TOKENS[0] * (d["k"] + 1), d["e"] + 1) and not pair_major(TOKENS[-1] * (d["k"] + 1), d["e"] + 1)


def test_experts_of_other_ranks_contribute_nothing():
    """Under EP a pair whose expert lives on another rank has slot -1: the kernels skip it, as the grouped path
    drops it (slot >= n_slots there)."""
    d = DIMS
    gate, bias, w13, w2 = _moe_weights(torch.float32, 5, d["e"])
    x = _rand(2, d["h"], g=_gen(9))
    w, ids = route(x, gate, bias, d["k"])
    ids = ids.masked_fill(ids >= d["e"] // 2, -1)
    ref = routed_grouped(x, w, ids, w13, w2, 1.702, 7.0, False, -1, 0.5, 2.0, None)
    tw, sl = _routing(w, ids, 2.0, None)
    out = fused_experts(x, w13, w2, tw, sl, 1.702, 7.0)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
