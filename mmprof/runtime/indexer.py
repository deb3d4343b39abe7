"""The lightning indexer: block scores and top-k block selection, per KV group and query token.

Matches transformers 5.17 `MiniMaxM3VLIndexer` (the oracle): score[h, q, key] = idx_q[h, q] . idx_k[key]
(no scale; only the order matters), future keys masked to -inf, block score = max over the block's keys,
the query's own block (and `local-1` before it) forced to +inf, top-k of the blocks, -1 for slots that
land on empty/future blocks. Also the adjacent-layer selection-overlap measure used to judge block reuse.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mmprof.errors import NoEvidence

from .kvcache import positions


def select_blocks(idx_q: torch.Tensor, idx_k: torch.Tensor, pos: int | torch.Tensor, block: int, topk: int,
                  local: int) -> torch.Tensor:
    """idx_q: [B, Hi, T, Di] (queries at positions pos..pos+T-1); idx_k: [B, 1, L, Di] with L = pos+T.

    Returns block ids [B, Hi, T, min(topk, ceil(L/block))] int64, -1 where no valid block. With a device-tensor
    `pos` (the static decode step) L is the cache capacity: keys past the query are masked, so a block that
    holds no valid key scores -inf and comes back as -1, never as a selected block."""
    b, hi, t, _ = idx_q.shape
    length = idx_k.shape[2]
    nb = -(-length // block)
    scores = torch.matmul(idx_q.float(), idx_k.float().transpose(-1, -2))  # [B, Hi, T, L]
    qpos = positions(pos, t, idx_q.device)
    kpos = torch.arange(length, device=idx_q.device)
    if t > 1 or isinstance(pos, torch.Tensor):
        scores = scores.masked_fill(kpos[None, :] > qpos[:, None], float("-inf"))
    pad = nb * block - length
    if pad:
        scores = F.pad(scores, (0, pad), value=float("-inf"))
    bscores = scores.view(b, hi, t, nb, block).amax(dim=-1)  # [B, Hi, T, nb]
    if local > 0:
        qblk = qpos // block
        loc = (qblk[:, None] - torch.arange(local, device=idx_q.device)[None, :]).clamp(min=0)  # [T, local]
        bscores.scatter_(-1, loc[None, None].expand(b, hi, t, local), float("inf"))
    k = min(topk, nb)
    vals, idx = bscores.topk(k, dim=-1)
    return idx.masked_fill(vals == float("-inf"), -1)


@dataclass
class OverlapResult:
    """How much the block selections of adjacent sparse layers agree (1.0 = identical, reuse is exact)."""

    pairs: list[tuple[int, int]]  # (layer l, next sparse layer)
    jaccard: list[float]  # mean over batch, KV group, query of |A & B| / |A | B| per pair
    shared_fraction: list[float]  # mean of |A & B| / |A| (the fraction of l's blocks that l+1 also picks)
    mean_jaccard: float
    mean_shared_fraction: float
    n_blocks_total: int  # key blocks at the last query
    n_selected: int  # blocks selected per (group, query) at most

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _set_overlap(a: torch.Tensor, b: torch.Tensor, nb: int) -> tuple[float, float]:
    """a, b: [..., k] block ids (-1 = none). Mean Jaccard and mean |a&b|/|a| over the leading dims."""
    def onehot(x: torch.Tensor) -> torch.Tensor:
        safe = x.masked_fill(x < 0, nb)
        m = torch.zeros(*x.shape[:-1], nb + 1, dtype=torch.bool, device=x.device)
        m.scatter_(-1, safe, True)
        return m[..., :nb]
    ma, mb = onehot(a), onehot(b)
    inter = (ma & mb).sum(-1).float()
    union = (ma | mb).sum(-1).float().clamp(min=1)
    na = ma.sum(-1).float().clamp(min=1)
    return float((inter / union).mean()), float((inter / na).mean())


def selection_overlap(selections: dict[int, torch.Tensor], block: int, length: int) -> OverlapResult:
    """selections: layer -> [B, Hi, T, k] from one forward where every sparse layer computed its own."""
    layers = sorted(selections)
    if len(layers) < 2:
        raise NoEvidence("selection overlap needs at least two sparse layers that computed a selection")
    nb = -(-length // block)
    pairs, jac, frac = [], [], []
    for a, b in zip(layers, layers[1:]):
        j, f = _set_overlap(selections[a], selections[b], nb)
        pairs.append((a, b)); jac.append(j); frac.append(f)
    k = selections[layers[0]].shape[-1]
    return OverlapResult(pairs, jac, frac, sum(jac) / len(jac), sum(frac) / len(frac), nb, k)
