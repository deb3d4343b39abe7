"""Static KV cache per layer; sparse layers also hold the lightning indexer's keys.

Preallocated to `max_seq_len` so decode writes in place (no reallocation, static shapes). Positions are
Python ints owned by generate(), so writing never syncs with the device. The static decode step of
runtime/graph_runner.py passes the position as a device tensor instead: the write is an index_copy_ at that position
and the whole capacity comes back (the readers mask positions past it), so shapes and addresses never change.
"""

from __future__ import annotations

import torch


def positions(pos: int | torch.Tensor, t: int, device=None) -> torch.Tensor:
    """[T] long: pos, pos+1, .. pos+T-1 (on pos's device when pos is a tensor: no host value involved)."""
    if isinstance(pos, torch.Tensor):
        return pos.reshape(-1)[:1] + torch.arange(t, device=pos.device)
    return torch.arange(pos, pos + t, device=device)


class LayerCache:
    """k, v: [B, kv_heads_local, S_max, head_dim]; idx_k: [B, 1, S_max, index_head_dim] on sparse layers."""

    def __init__(self, batch: int, max_seq: int, kv_heads: int, head_dim: int, index_dim: int | None,
                 dtype: torch.dtype, device) -> None:
        self.k = torch.zeros(batch, kv_heads, max_seq, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.idx_k = (torch.zeros(batch, 1, max_seq, index_dim, dtype=dtype, device=device)
                      if index_dim else None)

    @property
    def capacity(self) -> int:
        return self.k.shape[2]

    def write(self, pos: int | torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v: [B, kvh, T, D] for positions pos..pos+T-1; returns the valid prefix [B, kvh, pos+T, D], or with
        a device-tensor `pos` ([1] long) the whole cache [B, kvh, S_max, D]."""
        t = k.shape[2]
        if isinstance(pos, torch.Tensor):
            idx = positions(pos, t)
            self.k.index_copy_(2, idx, k)
            self.v.index_copy_(2, idx, v)
            return self.k, self.v
        self.k[:, :, pos:pos + t] = k
        self.v[:, :, pos:pos + t] = v
        return self.k[:, :, :pos + t], self.v[:, :, :pos + t]

    def valid(self, pos: int | torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values attention reads after positions pos..pos+T-1 are written: the valid prefix
        [B, kvh, pos+T, D], or the whole cache with a device-tensor `pos` (readers mask past it)."""
        if isinstance(pos, torch.Tensor):
            return self.k, self.v
        return self.k[:, :, :pos + t], self.v[:, :, :pos + t]

    def valid_index(self, pos: int | torch.Tensor, t: int) -> torch.Tensor:
        """The index keys the indexer reads: [B, 1, pos+T, Di], or the whole cache with a device-tensor `pos`."""
        return self.idx_k if isinstance(pos, torch.Tensor) else self.idx_k[:, :, :pos + t]

    def write_index(self, pos: int | torch.Tensor, idx_k: torch.Tensor) -> torch.Tensor:
        """idx_k: [B, 1, T, Di]; returns the valid prefix [B, 1, pos+T, Di] (the whole [B, 1, S_max, Di] with a
        device-tensor `pos`)."""
        t = idx_k.shape[2]
        if isinstance(pos, torch.Tensor):
            self.idx_k.index_copy_(2, positions(pos, t), idx_k)
            return self.idx_k
        self.idx_k[:, :, pos:pos + t] = idx_k
        return self.idx_k[:, :, :pos + t]


def make_cache(model, batch: int, max_seq: int | None = None) -> list[LayerCache]:
    """One LayerCache per layer of `model` (a runtime Transformer), on its device and dtype."""
    args, plan = model.args, model.plan
    max_seq = max_seq or args.max_seq_len
    p = next(model.parameters())
    return [
        LayerCache(batch, max_seq, plan.n_kv_heads, args.head_dim,
                   args.index_head_dim if t == "sparse" else None, model.dtype, p.device)
        for t in args.attn_types
    ]
