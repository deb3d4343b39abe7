"""Attention: fused QKV(+index) projection, per-head Gemma QK norm + partial RoPE, indexer, core, o_proj.

Sparse layers use one column-parallel GEMM emitting [q | k | v | index_q | index_k] (vLLM's
MinimaxM3QKVParallelLinearWithIndexer); full layers a plain fused qkv. A layer that reuses another layer's
block selection (block_reuse K > 1) multiplies only the [q | k | v] rows of the same weight (a view).
Written for one device; parallel.py shards the heads and all-reduces o_proj's output under TP.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .compiled import call
from .indexer import select_blocks
from .kvcache import positions
from .layers import GemmaRMSNorm, apply_rope, rms_norm
from .scopes import scope

GATHER_MAX_T = 16  # queries per forward up to which the sparse core gathers the selected blocks


def attend_dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: int | torch.Tensor,
                 scale: float) -> torch.Tensor:
    """q: [B, H, T, D]; k, v: [B, KV, L, D] (L = pos+T, or the capacity with a device-tensor pos); causal GQA
    attention -> [B, H, T, D]."""
    t, length = q.shape[2], k.shape[2]
    mask = None
    if t > 1 or isinstance(pos, torch.Tensor):
        qpos = positions(pos, t, q.device)
        mask = torch.arange(length, device=q.device)[None, :] <= qpos[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)


def attend_sparse_masked(q, k, v, pos: int | torch.Tensor, scale: float, sel: torch.Tensor, block: int) -> torch.Tensor:
    """Sparse attention as a mask over dense scores (same math as transformers' eager path).

    sel: [B, KV, T, topk] block ids (-1 = none)."""
    b, h, t, _ = q.shape
    kvh, length = k.shape[1], k.shape[2]
    g = h // kvh
    nb = -(-length // block)
    safe = sel.masked_fill(sel < 0, nb)
    keep = torch.zeros(b, kvh, t, nb + 1, dtype=torch.bool, device=q.device)
    keep.scatter_(-1, safe, True)
    keep = keep[..., :nb].repeat_interleave(block, dim=-1)[..., :length]  # [B, KV, T, L]
    qpos = positions(pos, t, q.device)
    keep = keep & (torch.arange(length, device=q.device)[None, :] <= qpos[:, None])
    keep = keep.repeat_interleave(g, dim=1)  # [B, H, T, L]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=scale, enable_gqa=True)


def attend_sparse_gather(q, k, v, pos: int | torch.Tensor, scale: float, sel: torch.Tensor, block: int) -> torch.Tensor:
    """Sparse attention that reads only the selected blocks: O(topk*block) keys per query, not O(L)."""
    b, h, t, d = q.shape
    kvh, length = k.shape[1], k.shape[2]
    g = h // kvh
    offs = torch.arange(block, device=q.device)
    tok = (sel.clamp(min=0)[..., None] * block + offs).flatten(-2)  # [B, KV, T, S'] token ids
    qpos = positions(pos, t, q.device)[None, None, :, None]
    valid = (sel >= 0).repeat_interleave(block, dim=-1) & (tok <= qpos) & (tok < length)
    tok = tok.clamp(max=length - 1)
    s = tok.shape[-1]
    idx = tok[..., None].expand(b, kvh, t, s, d)
    ks = torch.gather(k[:, :, None].expand(b, kvh, t, length, d), 3, idx)  # [B, KV, T, S', D]
    vs = torch.gather(v[:, :, None].expand(b, kvh, t, length, d), 3, idx)
    qg = q.view(b, kvh, g, t, d)
    att = torch.einsum("bkgtd,bktsd->bkgts", qg, ks).float() * scale
    att = att.masked_fill(~valid[:, :, None], float("-inf")).softmax(dim=-1)
    out = torch.einsum("bkgts,bktsd->bkgtd", att.to(vs.dtype), vs)
    return out.reshape(b, h, t, d).to(q.dtype)


def qk_norm_rope(fused: torch.Tensor, qw: torch.Tensor, kw: torch.Tensor, iqw: torch.Tensor | None,
                 ikw: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor, nh: int, nkv: int, hd: int,
                 nih: int, ihd: int, eps: float):
    """The `norm_rope` region: fused [B, T, (nh + 2 nkv) hd (+ (nih + 1) ihd)] -> q [B, nh, T, hd], k and v
    [B, nkv, T, hd] (per-head Gemma norm and partial RoPE on q and k), and with index weights the index
    queries [B, nih, T, ihd] and keys [B, 1, T, ihd] (normed and rotated too); else None, None."""
    b, t, _ = fused.shape
    q_end, k_end, v_end = nh * hd, (nh + nkv) * hd, (nh + 2 * nkv) * hd
    q = rms_norm(fused[..., :q_end].view(b, t, nh, hd), qw, eps)
    k = rms_norm(fused[..., q_end:k_end].view(b, t, nkv, hd), kw, eps)
    v = fused[..., k_end:v_end].view(b, t, nkv, hd)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    iq = ik = None
    if iqw is not None:
        iq_end = v_end + nih * ihd
        iq = rms_norm(fused[..., v_end:iq_end].view(b, t, nih, ihd), iqw, eps)
        ik = rms_norm(fused[..., iq_end:].view(b, t, 1, ihd), ikw, eps)
        iq, ik = apply_rope(iq, cos, sin).transpose(1, 2), apply_rope(ik, cos, sin).transpose(1, 2)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), iq, ik


def qk_norm_rope_insert(fused: torch.Tensor, qw: torch.Tensor, kw: torch.Tensor, iqw: torch.Tensor | None,
                        ikw: torch.Tensor | None, cos_t: torch.Tensor, sin_t: torch.Tensor, pos: torch.Tensor,
                        k_cache: torch.Tensor, v_cache: torch.Tensor, ik_cache: torch.Tensor | None, nh: int, nkv: int,
                        hd: int, nih: int, ihd: int, eps: float):
    """The compile rung's `norm_rope` region (vLLM's fused_minimax_m3_qknorm_rope_kv_insert): the RoPE rows at the
    device-tensor position `pos` gathered from the fp32 tables cos_t / sin_t [S, R], `qk_norm_rope`, and k, v
    (and the index keys) written into the caches at `pos` in place (k_cache, v_cache [B, KV, S, D], ik_cache
    [B, 1, S, Di]). Returns q [B, nh, T, hd] and the index queries [B, nih, T, ihd] (or None)."""
    idx = positions(pos, fused.shape[1])  # [T]
    cos, sin = cos_t.index_select(0, idx).to(fused.dtype), sin_t.index_select(0, idx).to(fused.dtype)
    q, k, v, iq, ik = qk_norm_rope(fused, qw, kw, iqw, ikw, cos, sin, nh, nkv, hd, nih, ihd, eps)
    k_cache[:, :, idx] = k
    v_cache[:, :, idx] = v
    if ik is not None:
        ik_cache[:, :, idx] = ik
    return q, iq


class Attention(nn.Module):
    """Full or MSA-sparse attention with all heads on one device (parallel.apply shards the heads)."""

    def __init__(self, args, layer_id: int, sparse: bool):
        super().__init__()
        self.layer_id, self.sparse = layer_id, sparse
        self.hd, self.ihd = args.head_dim, args.index_head_dim
        self.nh, self.nkv, self.nih = args.n_heads, args.n_kv_heads, args.index_n_heads
        self.block, self.topk, self.local = args.index_block_size, args.index_topk_blocks, args.index_local_blocks
        self.qkv_n = (self.nh + 2 * self.nkv) * self.hd  # width of [q | k | v]
        self.scale = args.head_dim ** -0.5
        n = self.qkv_n + ((self.nih + 1) * self.ihd if sparse else 0)
        self.qkv = nn.Linear(args.hidden_size, n, bias=False)  # [H] -> [q | k | v (| index_q | index_k)]
        self.o_proj = nn.Linear(self.nh * self.hd, args.hidden_size, bias=False)  # [heads * D] -> [H]
        self.q_norm = GemmaRMSNorm(args.head_dim, args.norm_eps)
        self.k_norm = GemmaRMSNorm(args.head_dim, args.norm_eps)
        if sparse:
            self.index_q_norm = GemmaRMSNorm(args.index_head_dim, args.norm_eps)
            self.index_k_norm = GemmaRMSNorm(args.index_head_dim, args.norm_eps)

    def forward(self, x: torch.Tensor, pos: int | torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache,
                state) -> torch.Tensor:
        """x: [B, T, H] -> [B, T, H]."""
        b, t, _ = x.shape
        p = f"layers.{self.layer_id}.attn"
        sw = state.switches
        want_dense = sw.attention == "dense"
        compute_sel = self.sparse and not want_dense and state.should_compute_selection(self.layer_id)
        with scope(f"{p}.qkv"):
            w = self.qkv.weight if compute_sel else self.qkv.weight[: self.qkv_n]
            fused = F.linear(x, w)  # [B, T, N]
        with scope(f"{p}.norm_rope"):
            q, iq, ik, keys, vals = self._norm_rope(fused, pos, cos, sin, cache, state, compute_sel)
        kernels = state.kernel("triton_attention")
        if "triton_attention" in state.kernels:
            state.dispatch.log(layer=self.layer_id, op="attn.decode", impl="triton" if kernels else _torch_impl(state),
                               requested="triton", scope=f"{p}.core", reason=state.kernels["triton_attention"])
        if kernels:
            o = self._attend_triton(q, iq, ik, pos, cache, state, compute_sel, want_dense)
        else:
            o = self._attend(q, iq, ik, keys, vals, pos, cache, state, compute_sel, want_dense)
        with scope(f"{p}.o_proj"):
            return self.o_proj(o.transpose(1, 2).reshape(b, t, self.nh * self.hd))  # [B, T, H]

    def _norm_rope(self, fused, pos, cos, sin, cache, state, compute_sel):
        """The `norm_rope` region: q [B, nh, T, hd], the index queries and keys (None when not computed; the keys
        also None when already in the cache; else the indexer's scope writes them), and the keys and values
        attention reads (the whole cache in the static step and after an in-place insert, else the valid prefix)."""
        iqw, ikw = (self.index_q_norm.weight, self.index_k_norm.weight) if compute_sel else (None, None)
        norm_args = (self.nh, self.nkv, self.hd, self.nih, self.ihd, self.q_norm.eps)
        ik_cache = cache.idx_k if compute_sel else None
        if "triton_norm_rope" in state.kernels:
            run = state.kernel("triton_norm_rope")
            state.dispatch.log(layer=self.layer_id, op="attn.norm_rope", impl="triton" if run else _torch_impl(state),
                               requested="triton", scope=f"layers.{self.layer_id}.attn.norm_rope",
                               reason=state.kernels["triton_norm_rope"])
            if run:
                from .kernels.norm_rope_insert import qk_norm_rope_kv_insert  # imports Triton: only where it runs

                q, iq = qk_norm_rope_kv_insert(fused, self.q_norm.weight, self.k_norm.weight, iqw, ikw, cos, sin,
                                               state.pos_t, cache.k, cache.v, ik_cache, *norm_args)
                return q, iq, None, *cache.valid(pos, 1)
        if state.compiled and state.static:  # the whole fp32 tables; the KV insert joins the norm and RoPE kernel
            q, iq = call(True, qk_norm_rope_insert, fused, self.q_norm.weight, self.k_norm.weight, iqw, ikw, cos, sin,
                         pos, cache.k, cache.v, ik_cache, *norm_args)
            return q, iq, None, cache.k, cache.v  # the whole capacity, as cache.write returns it in the static step
        q, k, v, iq, ik = call(state.compiled, qk_norm_rope, fused, self.q_norm.weight, self.k_norm.weight, iqw, ikw,
                               cos, sin, *norm_args)
        return q, iq, ik, *cache.write(pos, k, v)  # [B, KV, L, D] (L: pos+T, or the capacity in the static step)

    def _attend(self, q, iq, ik, keys, vals, pos, cache, state, compute_sel, want_dense):
        """The indexer and the attention core through the region functions (eager, or compiled)."""
        p = f"layers.{self.layer_id}.attn"
        log, t = state.dispatch, q.shape[2]
        sel = None
        if self.sparse and not want_dense:
            if compute_sel:
                with scope(f"{p}.indexer"):
                    if ik is not None:
                        cache.write_index(pos, ik)
                    ik_all = cache.valid_index(pos, t)  # [B, 1, L, Di]
                    sel = call(state.compiled, select_blocks, iq, ik_all, pos, self.block, self.topk, self.local)
                state.set_selection(self.layer_id, sel)
                log.log(layer=self.layer_id, op="attn.indexer", impl="computed", requested="computed",
                        scope=f"{p}.indexer")
            else:
                sel = state.selection
                log.log(layer=self.layer_id, op="attn.indexer", impl="reused", requested="reused",
                        scope=f"{p}.indexer")
        with scope(f"{p}.core"):
            if sel is None:
                o = call(state.compiled, attend_dense, q, keys, vals, pos, self.scale)
                if self.sparse:
                    log.log(layer=self.layer_id, op="attn.core", impl="dense", requested=state.switches.attention,
                            scope=f"{p}.core")
            elif t <= GATHER_MAX_T:
                o = call(state.compiled, attend_sparse_gather, q, keys, vals, pos, self.scale, sel, self.block)
                log.log(layer=self.layer_id, op="attn.core", impl="sparse", requested="sparse", scope=f"{p}.core")
            else:
                o = call(state.compiled, attend_sparse_masked, q, keys, vals, pos, self.scale, sel, self.block)
                log.log(layer=self.layer_id, op="attn.core", impl="sparse_masked", requested="sparse",
                        scope=f"{p}.core",
                        reason=f"{t}-token prefill: block mask over dense scores (no gather kernel for long query runs)")
        return o

    def _attend_triton(self, q, iq, ik, pos, cache, state, compute_sel, want_dense):
        """Decode: the indexer's block scores, then the top-k and the attention over the selected blocks (or every
        block) as Triton kernels over the whole cache, masked at the device position (kernels/decode_attention.py).
        The top-k runs inside the attention kernel (in `attn.core`), which also returns the selection."""
        from .kernels.decode_attention import (dense_attention_decode, index_block_scores,  # imports Triton
                                               sparse_attention_decode)

        p = f"layers.{self.layer_id}.attn"
        log, pos_t = state.dispatch, state.pos_t
        if not self.sparse or want_dense:
            with scope(f"{p}.core"):
                o = dense_attention_decode(q.contiguous(), cache.k, cache.v, pos_t, self.scale, self.block)
            if self.sparse:
                log.log(layer=self.layer_id, op="attn.core", impl="dense", requested=state.switches.attention,
                        scope=f"{p}.core")
            return o
        scores = None
        if compute_sel:
            with scope(f"{p}.indexer"):
                if ik is not None:
                    cache.write_index(pos, ik)
                scores = index_block_scores(iq.contiguous(), cache.idx_k, pos_t, self.block, self.local)
            log.log(layer=self.layer_id, op="attn.indexer", impl="computed", requested="computed",
                    scope=f"{p}.indexer")
        else:
            log.log(layer=self.layer_id, op="attn.indexer", impl="reused", requested="reused", scope=f"{p}.indexer")
        with scope(f"{p}.core"):
            o, sel = sparse_attention_decode(q.contiguous(), cache.k, cache.v, pos_t, self.scale, self.block,
                                             self.topk, scores=scores, sel=None if compute_sel else state.selection)
        if compute_sel:
            state.set_selection(self.layer_id, sel)
        log.log(layer=self.layer_id, op="attn.core", impl="sparse", requested="sparse", scope=f"{p}.core")
        return o


def _torch_impl(state) -> str:
    """The name of the PyTorch path a kernel switch fell back to."""
    return "inductor" if state.compiled else "eager"
