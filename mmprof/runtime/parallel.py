"""Tensor and expert parallelism as a transform of the single-device model (as gpt-fast's tp.py does it).

`apply(model, plan, comm)` turns the model that transformer.py builds for one device into rank `plan.rank`'s
shard. It narrows every parameter to the rows or columns that rank holds, rewrites the head and expert
counts on the modules, and adds the collectives as forward hooks. The ShardPlan (tp.py) gives every size
and offset, so the weight loader, which fills the same shapes through the same plan, cannot disagree.

| module            | style          | what this rank keeps                                  | collective after   |
|-------------------|----------------|-------------------------------------------------------|--------------------|
| attn.qkv          | column         | its q heads, its KV heads (replicated when tp > kv),  | -                  |
|                   |                | its index-q heads, the single index-k head (all ranks)|                    |
| attn.o_proj       | row            | the columns of its q heads                            | all-reduce         |
| mlp.gate_up/down  | column / row   | its share of the dense intermediate                   | all-reduce (down)  |
| moe.w13/w2 (TP)   | column / row   | its share of every expert's intermediate (and of the  | one all-reduce on  |
|                   |                | shared expert's, fused slot or separate)              | `moe.reduce`       |
| moe.w13/w2 (EP)   | whole experts  | experts expert_start.. ; the fused shared slot moves  | (the same one)     |
|                   |                | out to shared_w13/w2, TP-split (vLLM: no fusion on EP)|                    |
| moe.gate          | replicated     | everything (router, fp32)                             | -                  |
| embed             | vocab-parallel | rows vocab_start.. of the padded vocab                | all-reduce         |
| lm_head           | vocab-parallel | the same rows                                         | all-gather (logits)|

The hooks run inside the callers' scopes: o_proj's in `layers.{i}.attn.o_proj`, dense down's in
`layers.{i}.mlp`, and the MoE layer's single all-reduce (routed + shared) in `layers.{i}.moe.routed`.

Narrowing works on meta tensors (shapes only, no memory: what `build_model` and `mmprof shapes` do before
materialising) and on real ones (the kept slice is copied). Without an active Comm (no process group: a
rank slice on one device) no hooks are added, and the embedding folds token ids into its rows.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from .moe import MoE
from .tp import ShardPlan

EP_UNFUSED = "fused shared expert is disabled under expert parallelism (as in vLLM)"


class Comm:
    """Tensor-parallel collectives; a no-op when there is no process group (tp == 1 or a simulated slice)."""

    def __init__(self, group=None, tp: int = 1):
        self.group = group
        self.tp = tp
        self.active = group is not None and tp > 1
        self.backend = dist.get_backend(group) if self.active else None  # gloo | nccl (RCCL on ROCm)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self.active:
            dist.all_reduce(x, group=self.group)
        return x

    def all_gather_last(self, x: torch.Tensor) -> torch.Tensor:
        """Concatenate each rank's x along the last dim (rank order). One all_gather_into_tensor into one buffer
        (what a CUDA graph captures cleanly), then a reshape: [tp * N, ...] -> [..., tp * last]."""
        if not self.active:
            return x
        out = x.new_empty((self.tp * x.shape[0], *x.shape[1:]))
        dist.all_gather_into_tensor(out, x.contiguous(), group=self.group)
        return out.view(self.tp, *x.shape).movedim(0, -2).reshape(*x.shape[:-1], self.tp * x.shape[-1])


class VocabParallelEmbedding(nn.Module):
    """Rows `start .. start+rows-1` of the (padded) vocab; other ranks' tokens give zeros, then all-reduce."""

    def __init__(self, weight: nn.Parameter, start: int, comm: Comm):
        super().__init__()
        self.weight = weight  # [rows, H]
        self.start, self.rows, self.comm = start, weight.shape[0], comm

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: [B, T] -> [B, T, H]."""
        if not self.comm.active:  # a rank slice without peers: fold ids into the local shard so every
            return F.embedding(tokens % self.rows, self.weight)  # token gets a real row (realistic routing)
        local = tokens - self.start
        inside = (local >= 0) & (local < self.rows)
        x = F.embedding(local.clamp(0, self.rows - 1), self.weight) * inside[..., None].to(self.weight.dtype)
        return self.comm.all_reduce(x)


# -- narrowing --------------------------------------------------------------------------------------------
def _slice(full: torch.Tensor, dim: int, spans: list[tuple[int, int]]) -> torch.Tensor:
    """The (start, length) spans of `full` along `dim`, concatenated in order (a copy)."""
    if full.is_meta:  # shapes only: torch.cat on meta would import torch._dynamo (seconds) for nothing
        shape = list(full.shape)
        shape[dim] = sum(n for _, n in spans)
        return full.new_empty(shape)
    parts = [full.narrow(dim, start, n) for start, n in spans]
    return torch.cat(parts, dim) if len(parts) > 1 else parts[0].clone()


def _keep(module: nn.Module, name: str, dim: int, spans: list[tuple[int, int]]) -> None:
    """Replace parameter `name` of `module` by the spans of dim `dim` that this rank keeps."""
    old = getattr(module, name)
    setattr(module, name, nn.Parameter(_slice(old.detach(), dim, spans), requires_grad=old.requires_grad))


def _gate_up(full: int, start: int, n: int) -> list[tuple[int, int]]:
    """Spans of a [gate | up] stack (each `full` long) that keep intermediate units start..start+n-1."""
    return [(start, n), (full + start, n)]


def _all_reduce_output(module: nn.Module, comm: Comm) -> None:
    """Row-parallel: every rank holds a partial sum of the output; add them up after the module runs."""
    module.register_forward_hook(lambda _m, _inputs, out: comm.all_reduce(out))


def _attention(attn, plan: ShardPlan) -> None:
    hd, ihd, nh, nkv = attn.hd, attn.ihd, attn.nh, attn.nkv  # the full head counts
    q = plan.q_head_start * hd, plan.n_heads * hd
    spans = [q, ((nh + plan.kv_head_start) * hd, plan.n_kv_heads * hd),  # [q | k | v]
             ((nh + nkv + plan.kv_head_start) * hd, plan.n_kv_heads * hd)]
    if attn.sparse:  # [| index_q | index_k]: index-q heads follow the KV heads; index-k is replicated
        base = (nh + 2 * nkv) * hd
        spans += [(base + plan.index_head_start * ihd, plan.n_index_heads * ihd), (base + attn.nih * ihd, ihd)]
    _keep(attn.qkv, "weight", 0, spans)
    _keep(attn.o_proj, "weight", 1, [q])
    attn.nh, attn.nkv, attn.nih, attn.qkv_n = plan.n_heads, plan.n_kv_heads, plan.n_index_heads, plan.qkv_n
    assert attn.qkv.weight.shape[0] == (plan.qkv_index_n if attn.sparse else plan.qkv_n)
    assert attn.o_proj.weight.shape[1] == plan.o_proj_k


def _dense(mlp, plan: ShardPlan) -> None:
    full, n = mlp.down.weight.shape[1], plan.dense_intermediate
    _keep(mlp.gate_up, "weight", 0, _gate_up(full, plan.rank * n, n))
    _keep(mlp.down, "weight", 1, [(plan.rank * n, n)])


def _moe(moe: MoE, plan: ShardPlan) -> None:
    if plan.ep > 1:  # whole experts; the shared expert cannot ride along as a slot
        if moe.fusable:  # slot n_local holds the shared expert: it becomes shared_w13 / shared_w2 again
            for name, stacked in (("shared_w13", moe.w13), ("shared_w2", moe.w2)):
                kept = _slice(stacked.detach(), 0, [(moe.n_local, 1)])[0]
                setattr(moe, name, nn.Parameter(kept, requires_grad=stacked.requires_grad))
            moe.fusable = False
        moe.unfused_reason = EP_UNFUSED
        _keep(moe, "w13", 0, [(plan.expert_start, plan.n_local_experts)])
        _keep(moe, "w2", 0, [(plan.expert_start, plan.n_local_experts)])
    else:  # every expert (and the fused shared slot) keeps its share of the intermediate
        full, n = moe.w2.shape[2], plan.moe_intermediate
        _keep(moe, "w13", 1, _gate_up(full, plan.rank * n, n))
        _keep(moe, "w2", 2, [(plan.rank * n, n)])
    if moe.has_shared and not moe.fusable:  # the separate shared expert is tensor-parallel in both cases
        full, n = moe.shared_w2.shape[1], plan.shared_intermediate
        _keep(moe, "shared_w13", 0, _gate_up(full, plan.rank * n, n))
        _keep(moe, "shared_w2", 1, [(plan.rank * n, n)])
    moe.e0, moe.n_local = plan.expert_start, plan.n_local_experts
    assert moe.w13.shape[0] == plan.n_local_experts + (1 if moe.fusable else 0)
    assert moe.w2.shape[2] == plan.moe_intermediate


@torch.no_grad()
def apply(model, plan: ShardPlan, comm: Comm | None = None):
    """Shard a single-device `model` (model.Transformer) in place into `plan`'s rank; returns it.

    `comm` carries the process group; without an active one (None, or no group) the model is a rank slice
    with no collectives."""
    if model.plan.tp != 1:
        raise ValueError(f"model is already sharded (tp={model.plan.tp}, rank {model.plan.rank})")
    comm = comm or Comm()
    for block in model.layers:
        _attention(block.attn, plan)
        if isinstance(block.mlp, MoE):
            _moe(block.mlp, plan)
            row_parallel = (block.attn.o_proj, block.mlp.reduce)  # the MoE's one all-reduce: routed + shared
        else:
            _dense(block.mlp, plan)
            row_parallel = (block.attn.o_proj, block.mlp.down)
        if comm.active:
            for m in row_parallel:
                _all_reduce_output(m, comm)
    span = [(plan.vocab_start, plan.vocab_rows)]
    _keep(model.embed, "weight", 0, span)
    model.embed = VocabParallelEmbedding(model.embed.weight, plan.vocab_start, comm)
    _keep(model.lm_head, "weight", 0, span)
    if comm.active:
        model.lm_head.register_forward_hook(lambda _m, _inputs, logits: comm.all_gather_last(logits))
    model.plan = plan
    model.comm = comm
    model.dispatch.rank = plan.rank
    return model
