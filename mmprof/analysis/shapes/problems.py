"""The GEMM problems (N x K per weight, and groups) each rank should see, per layer, from a model config.

`rank_problems(spec, tp, ep)` lists, for every layer, the weights a runtime multiplies by and their per-rank
shapes, in the layouts runtimes use:

- attention: separate q/k/v (transformers) or one fused qkv (vLLM / SGLang; M3 sparse layers also fuse the
  indexer's q and k), MLA's q_a / q_b / kv_a(_with_mqa) / kv_b (or the fused q_a + kv_a), o_proj;
- the indexer's own projections (M3: q, k; DeepSeek V3.2 DSA: wq_b, wk, weights_proj);
- dense MLP and shared expert: fused gate_up or separate gate and up, then down;
- the router; routed experts as one grouped GEMM over the local experts, or one GEMM per expert;
- the LM head (vocab-parallel, padded to a multiple of 64 or not).

Each problem comes in its tensor-parallel form (vLLM's layout: column-parallel q/k/v/gate/up/experts, row-parallel
o/down, KV heads replicated when tp > kv heads, vocab-parallel head) and, under TP, also in its full form, marked
`sharded=False`: a runtime that replicates a weight on every rank (transformers' TP plan leaves the indexer, the
shared expert, the dense MLP and the router whole) shows the full shape, and the matching says so. Pure
arithmetic on a `ModelSpec`; for MiniMax M3 a test checks it against the reference runtime's meta-device build.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmprof.errors import BadInput
from mmprof.modelspec import ModelSpec

ATTN_ROLES = ("attn.qkv", "attn.indexer", "attn.o_proj")


@dataclass(frozen=True)
class Problem:
    role: str       # attn.qkv, attn.indexer, attn.o_proj, mlp, moe.router, moe.routed, moe.shared, lm_head
    name: str       # e.g. q_proj, qkv, experts.gate_up, shared.down
    n: int
    k: int
    groups: int = 1         # > 1: a grouped GEMM over this many local experts
    sharded: bool = True    # the TP layout's per-rank shape (for weights that layout replicates, e.g. the router,
    #                         the full one); False: the full shape of a weight the layout shards, seen when a
    #                         runtime replicates it on every rank
    loop: bool = False      # one GEMM per expert (the routed experts' loop form)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class AttentionHeads:
    q: int          # query heads per rank
    kv: int         # KV heads per rank
    head_dim: int   # q.k dim
    q_full: int
    kv_full: int
    index_heads: int = 0
    index_head_dim: int = 0


@dataclass
class LayerProblems:
    layer: int
    mlp: str        # dense | moe
    attn: str       # full | sparse
    problems: list[Problem]
    heads: AttentionHeads


def _div(a: int, b: int, what: str) -> int:
    if a % b:
        raise BadInput(f"{what} ({a}) does not split evenly over TP {b}")
    return a // b


def _mlp(prefix: str, role: str, inter: int, hidden: int, tp: int, replicated_too: bool) -> list[Problem]:
    out = []
    forms = [(True, _div(inter, tp, f"{prefix} intermediate size"))]
    if tp > 1 and replicated_too:
        forms.append((False, inter))
    for sharded, i in forms:
        out += [Problem(role, f"{prefix}gate_up", 2 * i, hidden, sharded=sharded),
                Problem(role, f"{prefix}gate", i, hidden, sharded=sharded),
                Problem(role, f"{prefix}up", i, hidden, sharded=sharded),
                Problem(role, f"{prefix}down", hidden, i, sharded=sharded)]
    return out


def _attention(s: ModelSpec, layer_sparse: bool, tp: int) -> tuple[list[Problem], AttentionHeads]:
    h = s.hidden_size
    out: list[Problem] = []
    nh = _div(s.n_heads, tp, "attention heads")
    nkv = max(1, s.n_kv_heads // tp) if s.n_kv_heads < tp else _div(s.n_kv_heads, tp, "KV heads")
    forms = [(True, nh, nkv)] + ([(False, s.n_heads, s.n_kv_heads)] if tp > 1 else [])
    if s.attention == "mla":
        qk = s.qk_nope_head_dim + s.qk_rope_head_dim
        for sharded, q, _ in forms:
            if s.q_lora_rank:
                out.append(Problem("attn.qkv", "q_b_proj", q * qk, s.q_lora_rank, sharded=sharded))
            else:
                out.append(Problem("attn.qkv", "q_proj", q * qk, h, sharded=sharded))
            out.append(Problem("attn.qkv", "kv_b_proj", q * (s.qk_nope_head_dim + s.v_head_dim), s.kv_lora_rank,
                               sharded=sharded))
            out.append(Problem("attn.o_proj", "o_proj", h, q * s.v_head_dim, sharded=sharded))
        if s.q_lora_rank:
            out.append(Problem("attn.qkv", "q_a_proj", s.q_lora_rank, h))
            out.append(Problem("attn.qkv", "fused_qkv_a_proj", s.q_lora_rank + s.kv_lora_rank + s.qk_rope_head_dim, h))
        out.append(Problem("attn.qkv", "kv_a_proj_with_mqa", s.kv_lora_rank + s.qk_rope_head_dim, h))
        heads = AttentionHeads(nh, nh, qk, s.n_heads, s.n_heads)
    else:
        hd = s.head_dim
        for sharded, q, kv in forms:
            out += [Problem("attn.qkv", "q_proj", q * hd, h, sharded=sharded),
                    Problem("attn.qkv", "k_proj", kv * hd, h, sharded=sharded),
                    Problem("attn.qkv", "v_proj", kv * hd, h, sharded=sharded),
                    Problem("attn.qkv", "qkv", (q + 2 * kv) * hd, h, sharded=sharded),
                    Problem("attn.o_proj", "o_proj", h, q * hd, sharded=sharded)]
        heads = AttentionHeads(nh, nkv, hd, s.n_heads, s.n_kv_heads)
    if layer_sparse and s.indexer == "m3":
        ih, ihd = s.index_n_heads, s.index_head_dim
        ihl = max(1, ih // tp) if ih < tp else _div(ih, tp, "index heads")
        for sharded, i in [(True, ihl)] + ([(False, ih)] if tp > 1 else []):
            out += [Problem("attn.indexer", "index_q_proj", i * ihd, h, sharded=sharded),
                    Problem("attn.qkv", "qkv+index", (nh + 2 * nkv) * s.head_dim + i * ihd + ihd, h, sharded=sharded)]
        out.append(Problem("attn.indexer", "index_k_proj", ihd, h))  # one key head, on every rank by design
        heads = AttentionHeads(heads.q, heads.kv, heads.head_dim, heads.q_full, heads.kv_full, ih, ihd)
    elif layer_sparse and s.indexer == "dsa":
        ih, ihd = s.index_n_heads, s.index_head_dim
        out += [Problem("attn.indexer", "wq_b", ih * ihd, s.q_lora_rank or h),  # replicated by vLLM / SGLang
                Problem("attn.indexer", "wk", ihd, h),
                Problem("attn.indexer", "weights_proj", ih, h),
                Problem("attn.indexer", "wk_weights_proj", ihd + ih, h)]
        heads = AttentionHeads(heads.q, heads.kv, heads.head_dim, heads.q_full, heads.kv_full, ih, ihd)
    return out, heads


def _moe(s: ModelSpec, tp: int, ep: int) -> list[Problem]:
    h = s.hidden_size
    out = [Problem("moe.router", "router", s.n_experts, h)]  # replicated by every TP layout
    if ep > 1:
        e_local, i_local = _div(s.n_experts, ep, "experts"), s.moe_intermediate
    else:
        e_local, i_local = s.n_experts, _div(s.moe_intermediate, tp, "expert intermediate size")
    forms = [(True, e_local, i_local)] + ([(False, s.n_experts, s.moe_intermediate)] if tp > 1 else [])
    for sharded, e, i in forms:
        for g in sorted({e, e + 1}):  # +1: the shared expert fused as an extra slot
            out += [Problem("moe.routed", "experts.gate_up", 2 * i, h, groups=g, sharded=sharded),
                    Problem("moe.routed", "experts.down", h, i, groups=g, sharded=sharded)]
        out += [Problem("moe.routed", "expert.gate_up", 2 * i, h, sharded=sharded, loop=True),
                Problem("moe.routed", "expert.gate", i, h, sharded=sharded, loop=True),
                Problem("moe.routed", "expert.up", i, h, sharded=sharded, loop=True),
                Problem("moe.routed", "expert.down", h, i, sharded=sharded, loop=True)]
    if s.n_shared_experts:
        out += _mlp("shared.", "moe.shared", s.shared_intermediate * s.n_shared_experts, h, tp, True)
        if s.shared_expert_gate:  # N = 1: no TP layout shards it
            out.append(Problem("moe.shared", "shared.expert_gate", 1, h))
    return out


def rank_problems(spec: ModelSpec, tp: int = 1, ep: int = 1) -> list[LayerProblems]:
    """Per layer: every GEMM problem a rank of a TP `tp` (EP `ep`) deployment of `spec` should see."""
    if tp < 1 or ep < 1 or (ep > 1 and ep != tp):
        raise BadInput(f"--tp {tp} --ep {ep}: tp >= 1, and ep either 1 or equal to tp")
    out = []
    for i in range(spec.n_layers):
        probs, heads = _attention(spec, spec.attn_types[i] == "sparse", tp)
        if spec.mlp_types[i] == "moe":
            probs += _moe(spec, tp, ep)
        else:
            probs += _mlp("", "mlp", spec.dense_intermediate, spec.hidden_size, tp, True)
        out.append(LayerProblems(i, spec.mlp_types[i], spec.attn_types[i], _unique(probs), heads))
    return out


def head_problems(spec: ModelSpec, tp: int = 1) -> list[Problem]:
    """The LM head (vocab-parallel; vLLM pads the vocab to a multiple of 64 first) and its full form."""
    v, h = spec.vocab_size, spec.hidden_size
    padded = -(-v // 64) * 64
    out = [Problem("lm_head", "lm_head", padded // tp, h), Problem("lm_head", "lm_head", -(-v // tp), h)]
    if tp > 1:
        out.append(Problem("lm_head", "lm_head", v, h, sharded=False))
    return _unique(out)


def _unique(probs: list[Problem]) -> list[Problem]:
    """Drop exact duplicates (at TP 1 the sharded and full forms coincide), keeping the sharded one."""
    seen: dict[tuple, Problem] = {}
    for p in probs:
        key = (p.role, p.name, p.n, p.k, p.groups, p.loop)
        if key not in seen or (p.sharded and not seen[key].sharded):
            seen[key] = p
    return list(seen.values())
