"""`triton_moe`: the decode step's MoE layer (router and routed experts, the shared expert as a fused slot) as
Triton kernels that read only the experts the batch touches.

Router (`moe.router`), two launches:
1. `moe_fused_gate_logits_kernel`: the fp32 router GEMV, one program per (4 experts, 512 of H): the weight tile
   stays in registers while the program walks the tokens; partial logits [N, KSPLIT, E].
2. `moe_topk_sigmoid_renorm_kernel`, one program per token: the partials summed in a fixed order, sigmoid, top-k
   on score + e_score_correction_bias (k rounds of argmax), the plain scores renormalised and multiplied by
   routed_scaling_factor, expert ids mapped to this rank's weight slots (-1: another rank's expert under EP), and
   the fused shared expert appended as slot `n_local` with weight 1/scale * scale = 1. -> ids [N, K1] int32,
   weights [N, K1] fp32 (K1 = k, +1 when the shared expert is fused).

Experts (`moe.routed`), two launches:
3. `fused_moe_decode_gate_up_act_kernel`, one program per (expert slot, block_n columns of the intermediate): the
   program finds the (token, k) pairs routed to its slot by scanning the batch's ids (no sort, no host sync), and
   multiplies their tokens by the slot's gate and up rows (tl.dot over H, fp32 accumulation), then SwiGLU-OAI
   (the GEMM outputs rounded to the activation dtype first, as the grouped GEMM returns them) -> act [N*K1, I].
   A slot no pair routes to exits at once. Which slot a program takes: with at most as many pairs as slots (batch
   1-25 of `small`) program p takes pair p's slot when p is its first pair (each pair-row program then has work),
   otherwise program s takes slot s.
4. `fused_moe_decode_down_kernel`, one program per (token, block_n rows of H): the token's K1 experts as one
   reduction of length K1 * I (each block_k step inside one expert; the activations pre-scaled by the pair's
   weight), so the top-k weights are applied and the K1 outputs summed inside the GEMM -> out [N, H] in the
   activation dtype. At large batch (more pairs than slots) each expert would be read once per token: there
   `fused_moe_decode_down_expert_kernel` runs per (slot, rows of H) over the slot's pairs, writes the weighted
   outputs [N*K1, H] fp32, and `moe_decode_combine_sum_kernel` sums each token's K1 rows (in a fixed order: no
   atomics, the result does not depend on scheduling).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .support import config, interpreting, next_pow2
from .triton_helpers import dot


@triton.jit
def moe_fused_gate_logits_kernel(x_ptr, x_stride, w_ptr, out_ptr, N: tl.constexpr, E: tl.constexpr,
                                 H: tl.constexpr, BE: tl.constexpr, BK: tl.constexpr, KSPLIT: tl.constexpr):
    eb = tl.program_id(0)
    ks = tl.program_id(1)
    e = eb * BE + tl.arange(0, BE)
    k = ks * BK + tl.arange(0, BK)
    w = tl.load(w_ptr + e[:, None] * H + k[None, :], mask=(e[:, None] < E) & (k[None, :] < H), other=0.0)
    w = w.to(tl.float32)
    for t in range(N):
        x = tl.load(x_ptr + t * x_stride + k, mask=k < H, other=0.0).to(tl.float32)
        part = tl.sum(w * x[None, :], axis=1)
        tl.store(out_ptr + (t * KSPLIT + ks) * E + e, part, mask=e < E)


@triton.jit
def moe_topk_sigmoid_renorm_kernel(part_ptr, bias_ptr, ids_ptr, tw_ptr, e0, n_local, fused_slot, fused_w, scale,
                                   E: tl.constexpr, E_P: tl.constexpr, KSPLIT: tl.constexpr, TOPK: tl.constexpr,
                                   K1: tl.constexpr, K1_P: tl.constexpr, FUSED: tl.constexpr):
    t = tl.program_id(0)
    e = tl.arange(0, E_P)
    em = e < E
    logit = tl.zeros([E_P], tl.float32)
    for ks in tl.static_range(KSPLIT):
        logit += tl.load(part_ptr + (t * KSPLIT + ks) * E + e, mask=em, other=0.0)
    score = 1.0 / (1.0 + tl.exp(-logit))
    biased = tl.where(em, score + tl.load(bias_ptr + e, mask=em, other=0.0), float("-inf"))
    j = tl.arange(0, K1_P)
    ids = tl.full([K1_P], -1, tl.int32)
    wts = tl.zeros([K1_P], tl.float32)
    for r in tl.static_range(TOPK):
        a = tl.argmax(biased, axis=0)
        ids = tl.where(j == r, a, ids)
        wts = tl.where(j == r, tl.sum(tl.where(e == a, score, 0.0), axis=0), wts)
        biased = tl.where(e == a, float("-inf"), biased)
    wts = wts / tl.sum(wts, axis=0) * scale
    ids = tl.where((ids >= e0) & (ids < e0 + n_local), ids - e0, -1)  # this rank's weight slots
    if FUSED:
        ids = tl.where(j == TOPK, fused_slot, ids)
        wts = tl.where(j == TOPK, fused_w * scale, wts)
    tl.store(ids_ptr + t * K1 + j, ids, mask=j < K1)
    tl.store(tw_ptr + t * K1 + j, wts, mask=j < K1)


@triton.jit
def _slot_pairs(ids_ptr, row, P: tl.constexpr, P_P: tl.constexpr, N_SLOTS, PAIR_MAJOR: tl.constexpr):
    """The slot program `row` works on, whether it has work, and the mask / rank of the pairs routed to it."""
    pidx = tl.arange(0, P_P)
    ids = tl.load(ids_ptr + pidx, mask=pidx < P, other=-1)
    if PAIR_MAJOR:  # row = a pair: its slot, unless an earlier pair has the same slot
        slot = tl.sum(tl.where(pidx == row, ids, 0), axis=0)
        first = tl.sum(tl.where((pidx < row) & (ids == slot), 1, 0), axis=0) == 0
    else:
        slot = row
        first = row >= 0
    match = (ids == slot) & (pidx < P)
    cnt = tl.sum(match.to(tl.int32), axis=0)
    go = first & (slot >= 0) & (slot < N_SLOTS) & (cnt > 0)
    rank = tl.cumsum(match.to(tl.int32), axis=0) - 1
    return slot, go, match, rank, cnt, pidx


@triton.jit
def _chunk_pairs(match, rank, pidx, m0, cnt, BLOCK_M: tl.constexpr):
    """Pair ids [BLOCK_M] of matches m0 .. m0+BLOCK_M-1 (by rank), and which of them exist."""
    mi = m0 + tl.arange(0, BLOCK_M)
    pick = match[None, :] & (rank[None, :] == mi[:, None])
    pm = tl.sum(tl.where(pick, pidx[None, :], 0), axis=1)
    return pm, mi < cnt


@triton.jit
def fused_moe_decode_gate_up_act_kernel(x_ptr, x_stride, w13_ptr, w13_se, w13_sn, ids_ptr, act_ptr, N_SLOTS,
                                        alpha, limit, P: tl.constexpr, P_P: tl.constexpr, K1: tl.constexpr,
                                        I: tl.constexpr, H: tl.constexpr, M_CHUNKS: tl.constexpr,
                                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                        PAIR_MAJOR: tl.constexpr, F32DOT: tl.constexpr):
    row = tl.program_id(0)
    nt = tl.program_id(1)
    slot, go, match, rank, cnt, pidx = _slot_pairs(ids_ptr, row, P, P_P, N_SLOTS, PAIR_MAJOR)
    if go:
        n = nt * BLOCK_N + tl.arange(0, BLOCK_N)
        nm = n < I
        wbase = w13_ptr + slot.to(tl.int64) * w13_se
        dt = act_ptr.dtype.element_ty
        for mc in range(M_CHUNKS):
            if mc * BLOCK_M < cnt:
                pm, mv = _chunk_pairs(match, rank, pidx, mc * BLOCK_M, cnt, BLOCK_M)
                tok = pm // K1
                acc_g = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
                acc_u = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
                for k0 in range(0, H, BLOCK_K):
                    k = k0 + tl.arange(0, BLOCK_K)
                    km = k < H
                    x = tl.load(x_ptr + tok[:, None] * x_stride + k[None, :], mask=mv[:, None] & km[None, :],
                                other=0.0)
                    wg = tl.load(wbase + n[:, None] * w13_sn + k[None, :], mask=nm[:, None] & km[None, :], other=0.0)
                    wu = tl.load(wbase + (I + n[:, None]) * w13_sn + k[None, :], mask=nm[:, None] & km[None, :],
                                 other=0.0)
                    acc_g += dot(x, tl.trans(wg), F32DOT)
                    acc_u += dot(x, tl.trans(wu), F32DOT)
                g = tl.minimum(acc_g.to(dt).to(tl.float32), limit)
                u = tl.minimum(tl.maximum(acc_u.to(dt).to(tl.float32), -limit), limit)
                a = (u + 1.0) * (g / (1.0 + tl.exp(-alpha * g)))
                tl.store(act_ptr + pm[:, None] * I + n[None, :], a.to(dt), mask=mv[:, None] & nm[None, :])


@triton.jit
def fused_moe_decode_down_kernel(act_ptr, w2_ptr, w2_se, w2_sh, ids_ptr, tw_ptr, out_ptr, out_stride, N_SLOTS,
                                 H: tl.constexpr, I: tl.constexpr, K1: tl.constexpr, K1_P: tl.constexpr,
                                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, F32DOT: tl.constexpr):
    t = tl.program_id(0)
    ht = tl.program_id(1)
    j = tl.arange(0, K1_P)
    slots = tl.load(ids_ptr + t * K1 + j, mask=j < K1, other=-1)
    wts = tl.load(tw_ptr + t * K1 + j, mask=j < K1, other=0.0)
    h = ht * BLOCK_N + tl.arange(0, BLOCK_N)
    hm = h < H
    r = tl.arange(0, 16)
    dt = act_ptr.dtype.element_ty
    acc = tl.zeros([16, BLOCK_N], tl.float32)
    for kc in range(0, K1 * I, BLOCK_K):  # one reduction over the token's K1 experts (BLOCK_K divides I)
        jj = kc // I
        slot = tl.sum(tl.where(j == jj, slots, 0), axis=0)
        wt = tl.sum(tl.where(j == jj, wts, 0.0), axis=0)
        ok = (slot >= 0) & (slot < N_SLOTS)
        k = kc % I + tl.arange(0, BLOCK_K)
        a = tl.load(act_ptr + (t * K1 + jj) * I + k, mask=ok & (k < I), other=0.0).to(tl.float32) * wt
        a2 = tl.where(r[:, None] == 0, a[None, :], 0.0).to(dt)  # one token: row 0 of a 16-row dot
        w = tl.load(w2_ptr + slot.to(tl.int64) * w2_se + h[:, None] * w2_sh + k[None, :],
                    mask=ok & hm[:, None] & (k[None, :] < I), other=0.0)
        acc += dot(a2, tl.trans(w), F32DOT)
    out = tl.sum(tl.where(r[:, None] == 0, acc, 0.0), axis=0)
    tl.store(out_ptr + t * out_stride + h, out.to(out_ptr.dtype.element_ty), mask=hm)


@triton.jit
def fused_moe_decode_down_expert_kernel(act_ptr, w2_ptr, w2_se, w2_sh, ids_ptr, tw_ptr, y_ptr, N_SLOTS,
                                        P: tl.constexpr, P_P: tl.constexpr, H: tl.constexpr, I: tl.constexpr,
                                        M_CHUNKS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                        BLOCK_K: tl.constexpr, F32DOT: tl.constexpr):
    row = tl.program_id(0)
    ht = tl.program_id(1)
    slot, go, match, rank, cnt, pidx = _slot_pairs(ids_ptr, row, P, P_P, N_SLOTS, False)
    if go:
        h = ht * BLOCK_N + tl.arange(0, BLOCK_N)
        hm = h < H
        wbase = w2_ptr + slot.to(tl.int64) * w2_se
        dt = act_ptr.dtype.element_ty
        for mc in range(M_CHUNKS):
            if mc * BLOCK_M < cnt:
                pm, mv = _chunk_pairs(match, rank, pidx, mc * BLOCK_M, cnt, BLOCK_M)
                acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
                for k0 in range(0, I, BLOCK_K):
                    k = k0 + tl.arange(0, BLOCK_K)
                    km = k < I
                    a = tl.load(act_ptr + pm[:, None] * I + k[None, :], mask=mv[:, None] & km[None, :], other=0.0)
                    w = tl.load(wbase + h[:, None] * w2_sh + k[None, :], mask=hm[:, None] & km[None, :], other=0.0)
                    acc += dot(a, tl.trans(w), F32DOT)
                wt = tl.load(tw_ptr + pm, mask=mv, other=0.0)
                y = acc.to(dt).to(tl.float32) * wt[:, None]
                tl.store(y_ptr + pm[:, None] * H + h[None, :], y, mask=mv[:, None] & hm[None, :])


@triton.jit
def moe_decode_combine_sum_kernel(y_ptr, ids_ptr, out_ptr, out_stride, N_SLOTS, H: tl.constexpr, K1: tl.constexpr,
                                  BLOCK_N: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    hm = h < H
    acc = tl.zeros([BLOCK_N], tl.float32)
    for jj in tl.static_range(K1):
        slot = tl.load(ids_ptr + t * K1 + jj)
        ok = (slot >= 0) & (slot < N_SLOTS)
        acc += tl.load(y_ptr + (t * K1 + jj) * H + h, mask=hm & ok, other=0.0)
    tl.store(out_ptr + t * out_stride + h, acc.to(out_ptr.dtype.element_ty), mask=hm)


def moe_route(x: torch.Tensor, gate_w: torch.Tensor, bias: torch.Tensor, top_k: int, e0: int, n_local: int,
              fused_slot: int, fused_weight: float, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The router for x [N, H]: (this rank's weight slots [N, K1] int32 (-1: not here), their weights [N, K1] fp32
    with the routed scaling applied), K1 = top_k + (1 if fused_slot >= 0)."""
    n, h = x.shape
    e = gate_w.shape[0]
    assert x.stride(1) == 1 and gate_w.is_contiguous() and gate_w.shape[1] == h
    cfg = config("router")
    be, bk = cfg.block_n, min(cfg.block_k, next_pow2(h))
    ksplit = -(-h // bk)
    part = torch.empty(n, ksplit, e, device=x.device, dtype=torch.float32)
    moe_fused_gate_logits_kernel[(-(-e // be), ksplit)](x, x.stride(0), gate_w, part, N=n, E=e, H=h, BE=be, BK=bk,
                                                       KSPLIT=ksplit, num_warps=cfg.num_warps,
                                                       num_stages=cfg.num_stages)
    fused = fused_slot >= 0
    k1 = top_k + (1 if fused else 0)
    ids = torch.empty(n, k1, device=x.device, dtype=torch.int32)
    tw = torch.empty(n, k1, device=x.device, dtype=torch.float32)
    moe_topk_sigmoid_renorm_kernel[(n,)](part, bias, ids, tw, e0, n_local, fused_slot, fused_weight, scale, E=e,
                                         E_P=next_pow2(e), KSPLIT=ksplit, TOPK=top_k, K1=k1, K1_P=next_pow2(k1),
                                         FUSED=fused, num_warps=1)
    return ids, tw


def _divisor_block(i: int, want: int) -> int:
    """The largest power of two <= want that divides i (the down kernel's steps must not straddle two experts)."""
    b = want
    while b > 16 and i % b:
        b //= 2
    if i % b:
        raise ValueError(f"intermediate size {i} is not a multiple of 16")
    return b


def pair_major(n_pairs: int, n_slots: int) -> bool:
    """One program row per (token, k) pair when there are no more pairs than slots, else one per slot."""
    return n_pairs <= n_slots


def fused_experts(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, tw: torch.Tensor, ids: torch.Tensor,
                  alpha: float, limit: float) -> torch.Tensor:
    """The routed experts for x [N, H] with w13 [slots, 2I, H], w2 [slots, H, I], the router's weights tw and
    slots ids [N, K1] -> [N, H] in x's dtype: sum over k of tw * SwiGLU-OAI expert(x) (a slot < 0 contributes
    nothing)."""
    n, h = x.shape
    n_slots, two_i, _ = w13.shape
    i = two_i // 2
    k1 = ids.shape[1]
    p = n * k1
    assert x.stride(1) == 1 and w13.stride(2) == 1 and w2.stride(2) == 1 and ids.is_contiguous() and tw.is_contiguous()
    pm = pair_major(p, n_slots)
    rows = p if pm else n_slots
    cfg = config("gate_up")
    bm, f32 = cfg.block_m, interpreting()
    act = torch.empty(p, i, device=x.device, dtype=x.dtype)
    m_chunks = -(-n // bm)  # a slot gets at most one pair per token
    fused_moe_decode_gate_up_act_kernel[(rows, -(-i // cfg.block_n))](
        x, x.stride(0), w13, w13.stride(0), w13.stride(1), ids, act, n_slots, alpha, limit, P=p,
        P_P=max(16, next_pow2(p)), K1=k1, I=i, H=h, M_CHUNKS=m_chunks, BLOCK_M=bm, BLOCK_N=cfg.block_n,
        BLOCK_K=min(cfg.block_k, next_pow2(h)), PAIR_MAJOR=pm, F32DOT=f32, num_warps=cfg.num_warps,
        num_stages=cfg.num_stages)
    out = torch.empty(n, h, device=x.device, dtype=x.dtype)
    dcfg = config("down")
    bn = min(dcfg.block_n, next_pow2(h))
    if pm:
        fused_moe_decode_down_kernel[(n, -(-h // bn))](
            act, w2, w2.stride(0), w2.stride(1), ids, tw, out, out.stride(0), n_slots, H=h, I=i, K1=k1,
            K1_P=next_pow2(k1), BLOCK_N=bn, BLOCK_K=_divisor_block(i, dcfg.block_k), F32DOT=f32,
            num_warps=dcfg.num_warps, num_stages=dcfg.num_stages)
        return out
    y = torch.empty(p, h, device=x.device, dtype=torch.float32)
    fused_moe_decode_down_expert_kernel[(n_slots, -(-h // bn))](
        act, w2, w2.stride(0), w2.stride(1), ids, tw, y, n_slots, P=p, P_P=next_pow2(p), H=h, I=i,
        M_CHUNKS=m_chunks, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=min(dcfg.block_k, next_pow2(i)), F32DOT=f32,
        num_warps=dcfg.num_warps, num_stages=dcfg.num_stages)
    moe_decode_combine_sum_kernel[(n, -(-h // 256))](y, ids, out, out.stride(0), n_slots, H=h, K1=k1, BLOCK_N=256,
                                                     num_warps=4)
    return out
