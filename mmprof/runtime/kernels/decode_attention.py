"""`triton_attention`: the decode step's lightning indexer and attention as Triton kernels.

Sparse layers that compute their selection, three launches:

1. `sparse_indexer_block_score_kernel`, one program per (batch row, key block) of the cache capacity: the index
   queries of every index head (one per KV group) against the block's index keys (`q . k`, no scale), keys past the
   query's position masked, the max over the block, the query's own block (and `local - 1` before it) forced to
   +inf; blocks that start past the position score -inf without reading anything. -> scores [B, Hi, NB] fp32.
2. `sparse_attention_decode_kernel`, one program per (batch row, KV group, split): the top-k of that group's
   block scores (k = min(topk, NB) rounds of argmax in registers, -1 for a -inf block, as indexer.select_blocks
   gives them; split 0 writes the selection, which the next K-1 layers reuse), then attention of the group's q heads
   over its share of the selected blocks (flash-decoding: online softmax per split), keys past the position masked.
   A layer that reuses the selection reads it instead of the scores.
3. `sparse_attention_decode_combine_kernel` merges the splits (log-sum-exp weights). With one split the attention
   kernel writes the output itself and no combine runs.

Full (dense) layers: `decode_attention_splitk_kernel` over every block up to the position (split over the
blocks), then `decode_attention_combine_kernel`. The attention body is one jit function; the two kernel names say
which attention ran, so a trace can tell sparse from dense without the runtime's help.

Numerics follow attention.attend_sparse_gather / attend_dense: scores in fp32 (q . k accumulated in fp32 from the
bf16 operands; the eager path rounds them to bf16 first), softmax in fp32, the probabilities rounded to the value
dtype for P.V, accumulated in fp32, the output rounded once.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .support import config, interpreting, next_pow2
from .triton_helpers import dot

NEG_INF = float("-inf")


@triton.jit
def sparse_indexer_block_score_kernel(iq_ptr, ikc_ptr, ikc_sb, ikc_ss, pos_ptr, out_ptr, S, NB,
                                      NIH: tl.constexpr, NIH_P: tl.constexpr, DI: tl.constexpr,
                                      BLOCK: tl.constexpr, LOCAL: tl.constexpr, F32DOT: tl.constexpr):
    b = tl.program_id(0)
    blk = tl.program_id(1)
    pos = tl.load(pos_ptr)
    h = tl.arange(0, NIH_P)
    score = tl.full([NIH_P], float("-inf"), tl.float32)
    start = blk * BLOCK
    if start <= pos:
        d = tl.arange(0, DI)
        q = tl.load(iq_ptr + (b * NIH + h[:, None]) * DI + d[None, :], mask=h[:, None] < NIH, other=0.0)
        kk = start + tl.arange(0, BLOCK)
        kmask = (kk <= pos) & (kk < S)
        k = tl.load(ikc_ptr + b.to(tl.int64) * ikc_sb + kk[:, None] * ikc_ss + d[None, :], mask=kmask[:, None],
                    other=0.0)
        s = dot(q, tl.trans(k), F32DOT)  # [NIH_P, BLOCK]
        s = tl.where(kmask[None, :], s, float("-inf"))
        score = tl.max(s, axis=1)
    qblk = pos // BLOCK
    if (blk <= qblk) & (blk > qblk - LOCAL):  # the local window is always kept
        score = tl.full([NIH_P], float("inf"), tl.float32)
    tl.store(out_ptr + (b * NIH + h) * NB + blk, score, mask=h < NIH)


@triton.jit
def _topk_blocks(bs_ptr, NB, KSEL: tl.constexpr, KSEL_P: tl.constexpr, NB_P: tl.constexpr):
    """The KSEL best of NB block scores (descending; -1 where the score is -inf), as a [KSEL_P] int32 vector."""
    j = tl.arange(0, NB_P)
    vals = tl.load(bs_ptr + j, mask=j < NB, other=float("-inf"))
    i = tl.arange(0, KSEL_P)
    sel = tl.full([KSEL_P], -1, tl.int32)
    for r in tl.static_range(KSEL):
        m = tl.max(vals, axis=0)
        a = tl.argmax(vals, axis=0)
        pick = tl.where(m == float("-inf"), -1, a)
        sel = tl.where(i == r, pick, sel)
        vals = tl.where(j == a, float("-inf"), vals)
    return sel


@triton.jit
def _attend_block(q, acc, m_i, l_i, kc_ptr, vc_ptr, head_off, kc_ss, blk, pos, S, scale, D: tl.constexpr,
                  BLOCK: tl.constexpr, F32DOT: tl.constexpr):
    """One block of keys (`blk`, of BLOCK positions) into the running online softmax (acc [G_P, D], m_i, l_i)."""
    d = tl.arange(0, D)
    kk = blk * BLOCK + tl.arange(0, BLOCK)
    kmask = (kk <= pos) & (kk < S)
    k = tl.load(kc_ptr + head_off + kk[:, None] * kc_ss + d[None, :], mask=kmask[:, None], other=0.0)
    v = tl.load(vc_ptr + head_off + kk[:, None] * kc_ss + d[None, :], mask=kmask[:, None], other=0.0)
    s = dot(q, tl.trans(k), F32DOT) * scale
    s = tl.where(kmask[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + dot(p.to(v.dtype), v, F32DOT)
    return acc, m_new, l_i


@triton.jit
def _attention_decode(q_ptr, kc_ptr, vc_ptr, kc_sb, kc_sh, kc_ss, bs_ptr, sel_ptr, pos_ptr, S, NB, scale,
                      o_ptr, acc_ptr, ml_ptr, KV: tl.constexpr, G: tl.constexpr, G_P: tl.constexpr, D: tl.constexpr,
                      BLOCK: tl.constexpr, KSEL: tl.constexpr, KSEL_P: tl.constexpr, NB_P: tl.constexpr,
                      MODE: tl.constexpr, SPLITS: tl.constexpr, PER_SPLIT: tl.constexpr, F32DOT: tl.constexpr):
    """MODE 0: top-k of the block scores, then the selected blocks; 1: the given selection; 2: every block up to
    the position (dense). Split `s` of SPLITS takes selected slots [s*PER_SPLIT, (s+1)*PER_SPLIT) (dense: blocks
    s, s+SPLITS, ...)."""
    bg = tl.program_id(0)
    s = tl.program_id(1)
    b = bg // KV
    g = bg % KV
    pos = tl.load(pos_ptr)
    r = tl.arange(0, G_P)
    d = tl.arange(0, D)
    q = tl.load(q_ptr + ((b * KV + g) * G + r[:, None]) * D + d[None, :], mask=r[:, None] < G, other=0.0)
    head_off = b.to(tl.int64) * kc_sb + g * kc_sh
    acc = tl.zeros([G_P, D], tl.float32)
    m_i = tl.full([G_P], float("-inf"), tl.float32)
    l_i = tl.zeros([G_P], tl.float32)
    if MODE == 2:  # loops have constexpr trip counts (Triton 3.6's interpreter cannot run a range over tensors)
        for ii in range(PER_SPLIT):
            blk = s + ii * SPLITS
            if blk * BLOCK <= pos:
                acc, m_i, l_i = _attend_block(q, acc, m_i, l_i, kc_ptr, vc_ptr, head_off, kc_ss, blk, pos, S, scale,
                                              D, BLOCK, F32DOT)
    else:
        i = tl.arange(0, KSEL_P)
        if MODE == 0:
            sel = _topk_blocks(bs_ptr + bg * NB, NB, KSEL, KSEL_P, NB_P)
            if s == 0:
                tl.store(sel_ptr + bg * KSEL + i, sel.to(tl.int64), mask=i < KSEL)
        else:
            sel = tl.load(sel_ptr + bg * KSEL + i, mask=i < KSEL, other=-1).to(tl.int32)
        for ii in tl.static_range(PER_SPLIT):
            slot = s * PER_SPLIT + ii
            blk = tl.sum(tl.where(i == slot, sel, 0), axis=0)
            if (slot < KSEL) & (blk >= 0):
                if blk * BLOCK <= pos:
                    acc, m_i, l_i = _attend_block(q, acc, m_i, l_i, kc_ptr, vc_ptr, head_off, kc_ss, blk, pos, S,
                                                  scale, D, BLOCK, F32DOT)
    rows = r[:, None] < G
    if SPLITS == 1:
        out = acc / l_i[:, None]
        tl.store(o_ptr + ((b * KV + g) * G + r[:, None]) * D + d[None, :], out.to(o_ptr.dtype.element_ty), mask=rows)
    else:
        part = (bg * SPLITS + s) * G_P
        tl.store(acc_ptr + (part + r[:, None]) * D + d[None, :], acc, mask=rows)
        tl.store(ml_ptr + (part + r) * 2, m_i, mask=r < G)
        tl.store(ml_ptr + (part + r) * 2 + 1, l_i, mask=r < G)


@triton.jit
def sparse_attention_decode_kernel(q_ptr, kc_ptr, vc_ptr, kc_sb, kc_sh, kc_ss, bs_ptr, sel_ptr, pos_ptr, S, NB,
                                   scale, o_ptr, acc_ptr, ml_ptr, KV: tl.constexpr, G: tl.constexpr,
                                   G_P: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr, KSEL: tl.constexpr,
                                   KSEL_P: tl.constexpr, NB_P: tl.constexpr, MODE: tl.constexpr,
                                   SPLITS: tl.constexpr, PER_SPLIT: tl.constexpr, F32DOT: tl.constexpr):
    _attention_decode(q_ptr, kc_ptr, vc_ptr, kc_sb, kc_sh, kc_ss, bs_ptr, sel_ptr, pos_ptr, S, NB, scale, o_ptr,
                      acc_ptr, ml_ptr, KV, G, G_P, D, BLOCK, KSEL, KSEL_P, NB_P, MODE, SPLITS, PER_SPLIT, F32DOT)


@triton.jit
def decode_attention_splitk_kernel(q_ptr, kc_ptr, vc_ptr, kc_sb, kc_sh, kc_ss, pos_ptr, S, scale, o_ptr, acc_ptr,
                                   ml_ptr, KV: tl.constexpr, G: tl.constexpr, G_P: tl.constexpr, D: tl.constexpr,
                                   BLOCK: tl.constexpr, SPLITS: tl.constexpr, PER_SPLIT: tl.constexpr,
                                   F32DOT: tl.constexpr):
    _attention_decode(q_ptr, kc_ptr, vc_ptr, kc_sb, kc_sh, kc_ss, pos_ptr, pos_ptr, pos_ptr, S, 1, scale, o_ptr,
                      acc_ptr, ml_ptr, KV, G, G_P, D, BLOCK, 1, 1, 1, 2, SPLITS, PER_SPLIT, F32DOT)


@triton.jit
def _combine(acc_ptr, ml_ptr, o_ptr, KV: tl.constexpr, G: tl.constexpr, G_P: tl.constexpr, D: tl.constexpr,
             SPLITS: tl.constexpr, SPLITS_P: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    g = h // G
    r = h % G
    sp = tl.arange(0, SPLITS_P)
    d = tl.arange(0, D)
    part = ((b * KV + g) * SPLITS + sp) * G_P + r
    m = tl.load(ml_ptr + part * 2, mask=sp < SPLITS, other=float("-inf"))
    l_s = tl.load(ml_ptr + part * 2 + 1, mask=sp < SPLITS, other=0.0)
    mx = tl.max(m, axis=0)
    w = tl.where(m == float("-inf"), 0.0, tl.exp(m - mx))
    acc = tl.load(acc_ptr + part[:, None] * D + d[None, :], mask=(sp < SPLITS)[:, None], other=0.0)
    out = tl.sum(acc * w[:, None], axis=0) / tl.sum(l_s * w, axis=0)
    tl.store(o_ptr + (b * KV * G + h) * D + d, out.to(o_ptr.dtype.element_ty))


@triton.jit
def sparse_attention_decode_combine_kernel(acc_ptr, ml_ptr, o_ptr, KV: tl.constexpr, G: tl.constexpr,
                                           G_P: tl.constexpr, D: tl.constexpr, SPLITS: tl.constexpr,
                                           SPLITS_P: tl.constexpr):
    _combine(acc_ptr, ml_ptr, o_ptr, KV, G, G_P, D, SPLITS, SPLITS_P)


@triton.jit
def decode_attention_combine_kernel(acc_ptr, ml_ptr, o_ptr, KV: tl.constexpr, G: tl.constexpr, G_P: tl.constexpr,
                                    D: tl.constexpr, SPLITS: tl.constexpr, SPLITS_P: tl.constexpr):
    _combine(acc_ptr, ml_ptr, o_ptr, KV, G, G_P, D, SPLITS, SPLITS_P)


def _programs_target(device: torch.device) -> int:
    """About two programs per SM (a CPU interpreter: a handful)."""
    if device.type == "cuda":
        return 2 * torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def splits_for(batch: int, kv: int, work: int, device: torch.device) -> int:
    """How many splits each (batch row, KV group) is cut into: enough programs to fill the GPU, at most `work`
    (the selected blocks, or the cache's blocks for dense attention), a power of two."""
    want = max(1, -(-_programs_target(device) // max(1, batch * kv)))
    return max(1, min(next_pow2(want), next_pow2(work)))


def index_block_scores(iq: torch.Tensor, ik_cache: torch.Tensor, pos: torch.Tensor, block: int,
                       local: int) -> torch.Tensor:
    """iq [B, Hi, 1, Di], ik_cache [B, 1, S, Di] -> block scores [B, Hi, NB] fp32 (NB = ceil(S / block))."""
    b, nih, t, di = iq.shape
    assert t == 1 and iq.is_contiguous() and ik_cache.stride(3) == 1 and di == next_pow2(di)
    s_cap = ik_cache.shape[2]
    nb = -(-s_cap // block)
    out = torch.empty(b, nih, nb, device=iq.device, dtype=torch.float32)
    cfg = config("index_score")
    sparse_indexer_block_score_kernel[(b, nb)](
        iq, ik_cache, ik_cache.stride(0), ik_cache.stride(2), pos, out, s_cap, nb, NIH=nih,
        NIH_P=max(16, next_pow2(nih)), DI=di, BLOCK=block, LOCAL=local, F32DOT=interpreting(),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return out


def _launch_attention(kernel, combine, q, k_cache, v_cache, pos, scale, splits, extra: tuple, meta: dict):
    b, nh, t, d = q.shape
    kv = k_cache.shape[1]
    g = nh // kv
    g_p = max(16, next_pow2(g))
    assert t == 1 and q.is_contiguous() and k_cache.stride() == v_cache.stride() and k_cache.stride(3) == 1
    assert d == next_pow2(d)
    out = torch.empty_like(q)
    if splits > 1:
        acc = torch.empty(b * kv * splits * g_p, d, device=q.device, dtype=torch.float32)
        ml = torch.empty(b * kv * splits * g_p, 2, device=q.device, dtype=torch.float32)
    else:
        acc = ml = out
    cfg = config("attention")
    kernel[(b * kv, splits)](q, k_cache, v_cache, k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), *extra,
                             scale, out, acc, ml, KV=kv, G=g, G_P=g_p, D=d, SPLITS=splits, F32DOT=interpreting(),
                             num_warps=cfg.num_warps, num_stages=cfg.num_stages, **meta)
    if splits > 1:
        combine[(b, nh)](acc, ml, out, KV=kv, G=g, G_P=g_p, D=d, SPLITS=splits, SPLITS_P=next_pow2(splits),
                         num_warps=4)
    return out


def sparse_attention_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: torch.Tensor,
                            scale: float, block: int, topk: int, scores: torch.Tensor | None = None,
                            sel: torch.Tensor | None = None,
                            splits: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of q [B, H, 1, D] over the selected blocks of k_cache / v_cache [B, KV, S, D]. With `scores`
    [B, KV, NB] (index_block_scores) the kernel selects the top-k blocks itself and returns them; otherwise `sel`
    [B, KV, 1, k] (a previous layer's selection) is used. `splits` overrides splits_for (tests, the sweep).
    Returns (out [B, H, 1, D], selection [B, KV, 1, k])."""
    b, kv, s_cap = k_cache.shape[0], k_cache.shape[1], k_cache.shape[2]
    nb = -(-s_cap // block)
    ksel = min(topk, nb) if sel is None else sel.shape[-1]
    if sel is None:
        assert scores is not None and scores.shape == (b, kv, nb)
        sel = torch.empty(b, kv, 1, ksel, device=q.device, dtype=torch.long)
        mode = 0
    else:
        sel = sel.contiguous()
        scores, mode = sel, 1
    splits = min(splits or splits_for(b, kv, ksel, q.device), ksel)
    meta = dict(BLOCK=block, KSEL=ksel, KSEL_P=next_pow2(ksel), NB_P=next_pow2(nb), MODE=mode,
                PER_SPLIT=-(-ksel // splits))
    out = _launch_attention(sparse_attention_decode_kernel, sparse_attention_decode_combine_kernel, q, k_cache,
                            v_cache, pos, scale, splits, (scores, sel, pos, s_cap, nb), meta)
    return out, sel


def dense_attention_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: torch.Tensor,
                           scale: float, block: int = 128, splits: int | None = None) -> torch.Tensor:
    """Causal attention of q [B, H, 1, D] at `pos` over k_cache / v_cache [B, KV, S, D] (positions <= pos), in
    blocks of `block` keys; `splits` overrides splits_for."""
    b, kv, s_cap = k_cache.shape[0], k_cache.shape[1], k_cache.shape[2]
    nb = -(-s_cap // block)
    splits = min(splits or splits_for(b, kv, nb, q.device), nb)
    return _launch_attention(decode_attention_splitk_kernel, decode_attention_combine_kernel, q, k_cache, v_cache,
                             pos, scale, splits, (pos, s_cap), dict(BLOCK=block, PER_SPLIT=-(-nb // splits)))


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)
