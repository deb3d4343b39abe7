"""The sharding plan: per-rank local sizes of every module, as vLLM shards MiniMax M3.

`shard_plan(args, tp, ep, rank)` is a pure function (no torch, no process group). Both `parallel.apply`, which
shards the single-device model into a rank (also on the meta device, e.g. for `mmprof shapes --tp 8`), and
the weight loader use it, so the shapes we build and the slices we load can never disagree.

Layout (vLLM `vllm/models/minimax_m3`):
- fused QKV(+index) is column-parallel: q heads split by tp; KV heads per rank = max(1, kv / tp), replicated
  when tp > kv (vLLM requires tp % kv == 0 then); index-q heads shard like the KV heads; the single index-K
  head is replicated on every rank.
- o_proj, dense down, shared down, routed down are row-parallel (all-reduce after).
- routed experts: TP (ep == 1) splits every expert's intermediate dim; EP (ep == tp) gives each rank
  n_experts / ep whole experts. The router is replicated.
- embedding and LM head are vocab-parallel: vocab padded to a multiple of 64, then split evenly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from mmprof.errors import BadInput

VOCAB_PADDING = 64  # vLLM DEFAULT_VOCAB_PADDING_SIZE


class ShardRefused(BadInput):
    """A (config, tp, ep) combination vLLM refuses; the message carries vLLM's reason."""


@dataclass(frozen=True)
class ShardPlan:
    """Local sizes and global index ranges on one rank."""

    tp: int
    ep: int
    rank: int
    n_heads: int  # local query heads
    q_head_start: int
    n_kv_heads: int  # local KV heads (replicated copies count once per rank)
    kv_head_start: int
    kv_replicas: int  # how many ranks hold each KV head (1 when tp <= kv heads)
    n_index_heads: int  # local index-query heads (shard like KV heads)
    index_head_start: int
    head_dim: int
    index_head_dim: int
    qkv_n: int  # fused QKV output width on a full-attention layer
    qkv_index_n: int  # fused QKV + index_q + index_k width on a sparse layer
    o_proj_k: int
    dense_intermediate: int  # local dense-MLP intermediate
    shared_intermediate: int  # local shared-expert intermediate
    moe_intermediate: int  # local routed-expert intermediate (full when EP)
    expert_start: int  # first global expert id held here
    n_local_experts: int
    vocab_padded: int
    vocab_start: int
    vocab_rows: int

    @property
    def expert_end(self) -> int:
        return self.expert_start + self.n_local_experts

    def to_dict(self) -> dict:
        return asdict(self)


def _div(total: int, parts: int, what: str) -> int:
    if total % parts:
        raise ShardRefused(f"{what} ({total}) is not divisible by {parts} (vLLM: divide() asserts exact division)")
    return total // parts


def shard_plan(args, tp: int = 1, ep: int = 1, rank: int = 0) -> ShardPlan:
    """The plan for `rank` of a TP=`tp` model (EP=`ep`, which is 1 or equal to tp). Raises ShardRefused."""
    if tp < 1 or not 0 <= rank < tp:
        raise ShardRefused(f"rank {rank} is outside tensor-parallel size {tp}")
    if ep not in (1, tp):
        raise ShardRefused(f"expert-parallel size {ep} must be 1 or equal to tp ({tp}): experts shard over the TP group")
    if args.n_heads % tp:
        raise ShardRefused(
            f"total number of attention heads ({args.n_heads}) must be divisible by tensor parallel size ({tp})"
        )
    kv = args.n_kv_heads
    if tp > kv:
        if tp % kv:
            raise ShardRefused(
                f"tensor parallel size ({tp}) must be a multiple of the number of KV heads ({kv}) "
                "when it exceeds them (vLLM asserts tp_size % num_kv_heads == 0 to replicate KV heads)"
            )
        replicas = tp // kv
        kv_local, kv_start = 1, rank // replicas
    else:
        if kv % tp:
            raise ShardRefused(f"number of KV heads ({kv}) must be divisible by tensor parallel size ({tp})")
        replicas, kv_local = 1, kv // tp
        kv_start = rank * kv_local
    heads = args.n_heads // tp
    if "sparse" in args.attn_types:  # index-q heads follow the KV layout (index_n_heads == n_kv_heads)
        idx_local, idx_start = kv_local, kv_start
    else:
        idx_local, idx_start = 0, 0
    hd, ihd = args.head_dim, args.index_head_dim
    qkv_n = heads * hd + 2 * kv_local * hd
    qkv_index_n = qkv_n + idx_local * ihd + ihd  # index_k (1 head) replicated
    dense_i = _div(args.dense_intermediate, tp, "dense intermediate size") if "dense" in args.mlp_types else 0
    shared_i = _div(args.shared_intermediate * args.n_shared_experts, tp, "shared expert intermediate size")
    if ep > 1:
        n_local = _div(args.n_experts, ep, "number of experts")
        e_start, moe_i = rank * n_local, args.moe_intermediate
    else:
        n_local, e_start = args.n_experts, 0
        moe_i = _div(args.moe_intermediate, tp, "routed expert intermediate size")
    padded = -(-args.vocab_size // VOCAB_PADDING) * VOCAB_PADDING
    rows = _div(padded, tp, f"padded vocab size (vocab {args.vocab_size} padded to a multiple of {VOCAB_PADDING})")
    return ShardPlan(
        tp=tp, ep=ep, rank=rank, n_heads=heads, q_head_start=rank * heads, n_kv_heads=kv_local,
        kv_head_start=kv_start, kv_replicas=replicas, n_index_heads=idx_local, index_head_start=idx_start,
        head_dim=hd, index_head_dim=ihd, qkv_n=qkv_n, qkv_index_n=qkv_index_n, o_proj_k=heads * hd,
        dense_intermediate=dense_i, shared_intermediate=shared_i, moe_intermediate=moe_i, expert_start=e_start,
        n_local_experts=n_local, vocab_padded=padded, vocab_start=rank * rows, vocab_rows=rows,
    )
