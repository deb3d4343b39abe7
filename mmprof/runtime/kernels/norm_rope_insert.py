"""`triton_norm_rope`: the decode step's `attn.norm_rope` region as one Triton kernel.

One program per (batch row, head slot) reads one head of the fused QKV(+index) projection [B, 1, N] and writes it
where it goes, in place:

| head slot | math | written to |
|---|---|---|
| q heads 0..nh-1 | Gemma RMSNorm (q_norm), partial NeoX RoPE | q [B, nh, 1, hd] |
| k heads | Gemma RMSNorm (k_norm), RoPE | the K cache at the position |
| v heads | copy | the V cache at the position |
| index-q heads (sparse layers that compute the selection) | index_q_norm, RoPE | iq [B, nih, 1, ihd] |
| the index-k head | index_k_norm, RoPE | the index-key cache at the position |

The position is a [1] long device tensor (the static decode step's; eager decode passes one too), so the kernel
reads it on the device: nothing here depends on a host value and the launch can be captured into a CUDA graph. The
RoPE rows are read from the fp32 tables at the position. Rounding follows the eager path (attention.qk_norm_rope):
the normalised head and the cos / sin rows are rounded to the activation dtype, the rotation is computed in fp32
and rounded once. Inductor's compile rung needed 6 kernels for this on a full layer and 11 on a sparse one.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .support import config, next_pow2


@triton.jit
def _norm_rope_head(src_ptr, dst_ptr, w_ptr, cos_ptr, sin_ptr, pos, stride_cs, eps, D: tl.constexpr,
                    R: tl.constexpr, BLOCK_D: tl.constexpr):
    """One head vector [D] from src_ptr to dst_ptr: Gemma RMSNorm with the zero-centred weight w, then NeoX RoPE on
    the first R dims, in fp32, rounded to the destination's dtype where the eager path rounds."""
    dt = dst_ptr.dtype.element_ty
    d = tl.arange(0, BLOCK_D)
    dm = d < D
    x = tl.load(src_ptr + d, mask=dm, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / D + eps)
    w = tl.load(w_ptr + d, mask=dm, other=0.0).to(tl.float32)
    x = (x * rstd * (1.0 + w)).to(dt).to(tl.float32)
    if R > 0:
        partner = tl.where(d < R // 2, d + R // 2, d - R // 2)
        pm = dm & (d < R)
        xp = tl.load(src_ptr + partner, mask=pm, other=0.0).to(tl.float32)
        wp = tl.load(w_ptr + partner, mask=pm, other=0.0).to(tl.float32)
        xp = (xp * rstd * (1.0 + wp)).to(dt).to(tl.float32)
        rot = tl.where(d < R // 2, -xp, xp)
        c = tl.load(cos_ptr + pos * stride_cs + d, mask=pm, other=1.0).to(dt).to(tl.float32)
        s = tl.load(sin_ptr + pos * stride_cs + d, mask=pm, other=0.0).to(dt).to(tl.float32)
        x = tl.where(d < R, x * c + rot * s, x)
    tl.store(dst_ptr + d, x.to(dt), mask=dm)


@triton.jit
def qk_norm_rope_kv_insert_kernel(
        fused_ptr, stride_fb, qw_ptr, kw_ptr, iqw_ptr, ikw_ptr, cos_ptr, sin_ptr, stride_cs, pos_ptr,
        q_ptr, iq_ptr, kc_ptr, vc_ptr, kc_sb, kc_sh, kc_ss, ikc_ptr, ikc_sb, ikc_ss, eps,
        NH: tl.constexpr, NKV: tl.constexpr, HD: tl.constexpr, NIH: tl.constexpr, IHD: tl.constexpr,
        R: tl.constexpr, HAS_INDEX: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    j = tl.program_id(1)  # head slot: q | k | v | index q | index k
    pos = tl.load(pos_ptr)
    row = fused_ptr + b * stride_fb
    b = b.to(tl.int64)  # cache offsets can pass 2**31 elements
    if j < NH:
        _norm_rope_head(row + j * HD, q_ptr + (b * NH + j) * HD, qw_ptr, cos_ptr, sin_ptr, pos, stride_cs, eps,
                        HD, R, BLOCK_D)
    elif j < NH + NKV:
        h = j - NH
        _norm_rope_head(row + j * HD, kc_ptr + b * kc_sb + h * kc_sh + pos * kc_ss, kw_ptr, cos_ptr, sin_ptr, pos,
                        stride_cs, eps, HD, R, BLOCK_D)
    elif j < NH + 2 * NKV:
        h = j - NH - NKV
        d = tl.arange(0, BLOCK_D)
        x = tl.load(row + j * HD + d, mask=d < HD, other=0.0)
        tl.store(vc_ptr + b * kc_sb + h * kc_sh + pos * kc_ss + d, x, mask=d < HD)
    elif HAS_INDEX:
        base = row + (NH + 2 * NKV) * HD
        if j < NH + 2 * NKV + NIH:
            h = j - NH - 2 * NKV
            _norm_rope_head(base + h * IHD, iq_ptr + (b * NIH + h) * IHD, iqw_ptr, cos_ptr, sin_ptr, pos, stride_cs,
                            eps, IHD, R, BLOCK_D)
        else:
            _norm_rope_head(base + NIH * IHD, ikc_ptr + b * ikc_sb + pos * ikc_ss, ikw_ptr, cos_ptr, sin_ptr, pos,
                            stride_cs, eps, IHD, R, BLOCK_D)


def qk_norm_rope_kv_insert(fused: torch.Tensor, qw: torch.Tensor, kw: torch.Tensor, iqw: torch.Tensor | None,
                           ikw: torch.Tensor | None, cos_t: torch.Tensor, sin_t: torch.Tensor, pos: torch.Tensor,
                           k_cache: torch.Tensor, v_cache: torch.Tensor, ik_cache: torch.Tensor | None, nh: int,
                           nkv: int, hd: int, nih: int, ihd: int, eps: float):
    """The same contract as attention.qk_norm_rope_insert for one decode token: fused [B, 1, N] -> q [B, nh, 1, hd]
    and the index queries [B, nih, 1, ihd] (None without index weights); k, v (and the index key) written into the
    caches at `pos` ([1] long, on the device) in place."""
    b, t, n = fused.shape
    assert t == 1 and fused.stride(2) == 1 and cos_t.stride(1) == 1 and sin_t.stride() == cos_t.stride()
    assert k_cache.stride() == v_cache.stride() and k_cache.stride(3) == 1
    has_index = iqw is not None
    q = torch.empty(b, nh, 1, hd, device=fused.device, dtype=fused.dtype)
    iq = torch.empty(b, nih, 1, ihd, device=fused.device, dtype=fused.dtype) if has_index else q
    ikc = ik_cache if has_index else k_cache
    slots = nh + 2 * nkv + (nih + 1 if has_index else 0)
    cfg = config("norm_rope")
    qk_norm_rope_kv_insert_kernel[(b, slots)](
        fused, fused.stride(0), qw, kw, iqw if has_index else qw, ikw if has_index else kw, cos_t, sin_t,
        cos_t.stride(0), pos, q, iq, k_cache, v_cache, k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        ikc, ikc.stride(0), ikc.stride(2), eps, NH=nh, NKV=nkv, HD=hd, NIH=nih if has_index else 0,
        IHD=ihd if has_index else hd, R=cos_t.shape[1], HAS_INDEX=has_index,
        BLOCK_D=next_pow2(max(hd, ihd if has_index else hd)), num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return q, (iq if has_index else None)
