"""A model's dimensions from its Hugging Face config, for any of the MoE families mmprof knows.

`ModelSpec.from_hf(config)` reads a `config.json` dict (a VL config's `text_config` too) of MiniMax M3 (current
and legacy keys), DeepSeek V3 / V3.2 (MLA, DSA indexer), Qwen3-MoE / Qwen2-MoE, Mixtral, gpt-oss, and dense
Llama-style models into one normalised description: per layer whether the MLP is dense or MoE and whether the
attention has a block-selection indexer. It is the one reader of such configs: the reference runtime builds its
`ModelArgs` from it, and the shape matching of traces (`mmprof.analysis.shapes.problems`) derives per-rank GEMM
problems from it. Missing sizes are refused with one line, never defaulted to M3's.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mmprof.errors import BadInput
from mmprof.fileio import read_bytes

FAMILIES = ("minimax_m3", "deepseek_v3", "deepseek_v32", "qwen_moe", "mixtral", "gpt_oss", "dense")
MAX_DIM = 1 << 24  # no model dimension is larger than this (16M); a bigger number is a broken config


@dataclass
class ModelSpec:
    family: str
    model_type: str
    vocab_size: int
    hidden_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    mlp_types: list[str]          # per layer: dense | moe
    attn_types: list[str]         # per layer: full | sparse (has a block/token-selection indexer)
    dense_intermediate: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0  # per shared expert
    n_shared_experts: int = 0
    shared_expert_gate: bool = False  # Qwen2-MoE: a [1, hidden] sigmoid gate on the shared expert's output
    n_experts: int = 0
    top_k: int = 0
    # MLA (DeepSeek): q_lora_rank 0 means q is one projection
    attention: str = "gqa"        # gqa | mla
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # indexer (M3 lightning indexer, DeepSeek V3.2 DSA)
    indexer: str = "none"         # none | m3 | dsa
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_block_size: int = 0
    index_topk: int = 0           # blocks (M3) or tokens (DSA)
    index_local_blocks: int = 0
    # other numbers the runtime needs
    rotary_dim: int = 0
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    routed_scaling_factor: float = 1.0
    swiglu_alpha: float | None = None
    swiglu_limit: float | None = None
    max_position_embeddings: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def sparse_layers(self) -> list[int]:
        return [i for i, t in enumerate(self.attn_types) if t == "sparse"]

    @property
    def moe_layers(self) -> list[int]:
        return [i for i, t in enumerate(self.mlp_types) if t == "moe"]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_hf(cls, cfg: Any, where: str = "config") -> "ModelSpec":
        return _from_hf(cfg, where)

    @classmethod
    def load(cls, path: str | Path) -> "ModelSpec":
        """A config.json file, or a checkpoint directory holding one."""
        p = Path(path)
        if p.is_dir():
            p = p / "config.json"
        if not p.exists():  # a FIFO or a device exists: read_bytes refuses it in one line, naming what it is
            raise BadInput(f"{path}: no such config.json (give a Hugging Face config.json or a checkpoint directory)")
        try:
            doc = json.loads(read_bytes(p, json_document=True))  # the size limits of every input; a BOM is dropped there
        except (OSError, ValueError) as e:
            raise BadInput(f"{p}: cannot read config JSON ({str(e)[:120]})") from None
        except RecursionError:
            raise BadInput(f"{p}: cannot read config JSON (nested too deep)") from None
        return _from_hf(doc, str(p))


def _int(tc: dict, key: str, where: str, default: int | None = None, minimum: int = 0) -> int:
    """A non-negative integer config value (JSON ints only; `true`, `"8"` and `8.5` are refused)."""
    v = tc.get(key)
    if v is None:
        if default is None:
            raise BadInput(f"{where}: `{key}` is missing or null; it is needed to know the model's shapes")
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise BadInput(f"{where}: `{key}` must be an integer, not {v!r}")
    if not minimum <= v <= MAX_DIM:
        raise BadInput(f"{where}: `{key}` = {v} is out of range ({minimum}..{MAX_DIM})")
    return v


def _num(tc: dict, key: str, default: float | None) -> float | None:
    v = tc.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _family(tc: dict) -> str:
    mt = str(tc.get("model_type") or "").lower()
    if "minimax_m3" in mt or "index_block_size" in tc or "sparse_attention_config" in tc:
        return "minimax_m3"
    if mt in ("deepseek_v32",) or ("index_topk" in tc and "kv_lora_rank" in tc):
        return "deepseek_v32"
    if "kv_lora_rank" in tc or mt.startswith("deepseek"):
        return "deepseek_v3"
    if mt.startswith("qwen") and ("moe_intermediate_size" in tc or "num_experts" in tc):
        return "qwen_moe"
    if mt == "gpt_oss":
        return "gpt_oss"
    if mt == "mixtral" or ("num_local_experts" in tc and "moe_intermediate_size" not in tc):
        return "mixtral"
    return "dense"


_PER_LAYER_VALUES = {  # what Hugging Face configs hold per layer; anything else is refused, never read as "dense"
    "mlp_layer_types": ("dense", "sparse"),
    "moe_layer_freq": (0, 1),
    "sparse_attention_freq": (0, 1),
}


def _per_layer(tc: dict, key: str, n: int, where: str) -> list | None:
    v = tc.get(key)
    if v is None:
        return None
    if not isinstance(v, list) or len(v) != n:
        raise BadInput(f"{where}: `{key}` must list one entry per layer ({n})")
    allowed = _PER_LAYER_VALUES.get(key)
    for i, x in enumerate(v):
        ok = (isinstance(x, str) if allowed is None else
              (x in allowed and (isinstance(x, str) or type(x) in (int, bool))) if isinstance(x, (str, int)) else False)
        if not ok:
            want = "a string" if allowed is None else " or ".join(map(repr, allowed))
            raise BadInput(f"{where}: `{key}`[{i}] is {str(x)[:40]!r}, expected {want}")
    return v


def _from_hf(cfg: Any, where: str) -> ModelSpec:
    if not isinstance(cfg, dict):
        raise BadInput(f"{where}: a Hugging Face config must be a JSON object")
    tc = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    if "hidden_size" not in tc:
        raise BadInput(f"{where}: no `hidden_size` (in it or its text_config): not a transformer config.json")
    fam = _family(tc)
    hidden = _int(tc, "hidden_size", where, minimum=1)
    n_layers = _int(tc, "num_hidden_layers", where, minimum=1)
    heads = _int(tc, "num_attention_heads", where, minimum=1)
    kv = _int(tc, "num_key_value_heads", where, default=heads, minimum=1)
    if heads % kv:
        raise BadInput(f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")
    head_dim = tc.get("head_dim")
    head_dim = _int(tc, "head_dim", where, minimum=1) if head_dim is not None else hidden // heads
    vocab = _int(tc, "vocab_size", where, minimum=1)
    s = ModelSpec(family=fam, model_type=str(tc.get("model_type") or cfg.get("model_type") or ""), vocab_size=vocab,
                  hidden_size=hidden, n_layers=n_layers, n_heads=heads, n_kv_heads=kv, head_dim=head_dim,
                  mlp_types=["dense"] * n_layers, attn_types=["full"] * n_layers,
                  rope_theta=_num(tc, "rope_theta", 10000.0), norm_eps=_num(tc, "rms_norm_eps", 1e-6),
                  max_position_embeddings=tc.get("max_position_embeddings")
                  if isinstance(tc.get("max_position_embeddings"), int) else None)
    rope = tc.get("rope_parameters") or tc.get("rope_scaling") or {}
    if isinstance(rope, dict) and isinstance(rope.get("rope_theta"), (int, float)):
        s.rope_theta = float(rope["rope_theta"])
    if tc.get("rotary_dim") is not None:
        s.rotary_dim = _int(tc, "rotary_dim", where)
    elif isinstance(rope, dict) and isinstance(rope.get("partial_rotary_factor"), (int, float)):
        s.rotary_dim = int(head_dim * rope["partial_rotary_factor"])
    else:
        s.rotary_dim = head_dim
    {"minimax_m3": _m3, "deepseek_v3": _deepseek, "deepseek_v32": _deepseek, "qwen_moe": _qwen,
     "mixtral": _mixtral, "gpt_oss": _mixtral, "dense": _dense}[fam](tc, s, where)
    if s.n_experts and not 1 <= s.top_k <= s.n_experts:
        raise BadInput(f"{where}: num_experts_per_tok {s.top_k} must be in 1..{s.n_experts}")
    return s


def _experts(tc: dict, s: ModelSpec, where: str, inter_key: str) -> None:
    s.n_experts = _int(tc, next((k for k in ("num_local_experts", "n_routed_experts", "num_experts") if k in tc),
                                "num_local_experts"), where, minimum=1)
    s.top_k = _int(tc, "num_experts_per_tok", where, minimum=1)
    s.moe_intermediate = _int(tc, inter_key, where, minimum=1)


def _m3(tc: dict, s: ModelSpec, where: str) -> None:
    n = s.n_layers
    _experts(tc, s, where, "intermediate_size")
    s.dense_intermediate = _int(tc, "dense_intermediate_size", where, default=0)
    s.shared_intermediate = _int(tc, "shared_intermediate_size", where, default=0)
    s.n_shared_experts = _int(tc, "n_shared_experts", where, default=1 if s.shared_intermediate else 0)
    sparse = tc.get("sparse_attention_config") if isinstance(tc.get("sparse_attention_config"), dict) else {}
    src = dict(sparse)
    src.update({k: v for k, v in tc.items() if k.startswith("index_")})
    legacy = {"sparse_num_index_heads": "index_n_heads", "sparse_index_dim": "index_head_dim",
              "sparse_block_size": "index_block_size", "sparse_topk_blocks": "index_topk_blocks",
              "sparse_local_block": "index_local_blocks"}
    for old, new in legacy.items():
        if old in sparse and new not in src:
            src[new] = sparse[old]
    mlp = _per_layer(tc, "mlp_layer_types", n, where)
    if mlp is not None:
        s.mlp_types = ["moe" if t == "sparse" else "dense" for t in mlp]
    elif _per_layer(tc, "moe_layer_freq", n, where) is not None:
        s.mlp_types = ["moe" if f else "dense" for f in tc["moe_layer_freq"]]
    else:
        s.mlp_types = ["moe"] * n
    lt = _per_layer(tc, "layer_types", n, where)
    if lt is not None:
        s.attn_types = ["sparse" if t == "minimax_m3_sparse" else "full" for t in lt]
    elif _per_layer(sparse, "sparse_attention_freq", n, where) is not None:
        s.attn_types = ["sparse" if f else "full" for f in sparse["sparse_attention_freq"]]
    if "sparse" in s.attn_types:
        s.indexer = "m3"
        s.index_n_heads = _int(src, "index_n_heads", where, minimum=1)
        s.index_head_dim = _int(src, "index_head_dim", where, minimum=1)
        s.index_block_size = _int(src, "index_block_size", where, minimum=1)
        s.index_topk = _int(src, "index_topk_blocks", where, minimum=1)
        s.index_local_blocks = _int(src, "index_local_blocks", where, default=1)
    if "dense" in s.mlp_types and not s.dense_intermediate:
        raise BadInput(f"{where}: dense layers but no `dense_intermediate_size`")
    s.routed_scaling_factor = _num(tc, "routed_scaling_factor", 1.0)
    s.swiglu_alpha = _num(tc, "swiglu_alpha", None)
    s.swiglu_limit = _num(tc, "swiglu_limit", None)


def _deepseek(tc: dict, s: ModelSpec, where: str) -> None:
    n = s.n_layers
    _experts(tc, s, where, "moe_intermediate_size")
    s.dense_intermediate = _int(tc, "intermediate_size", where, minimum=1)
    s.n_shared_experts = _int(tc, "n_shared_experts", where, default=0)
    s.shared_intermediate = s.moe_intermediate if s.n_shared_experts else 0
    mlp = _per_layer(tc, "mlp_layer_types", n, where)
    if mlp is not None:
        s.mlp_types = ["moe" if t == "sparse" else "dense" for t in mlp]
    else:
        k = _int(tc, "first_k_dense_replace", where, default=0)
        freq = _int(tc, "moe_layer_freq", where, default=1, minimum=1)
        s.mlp_types = ["moe" if i >= k and (i - k) % freq == 0 else "dense" for i in range(n)]
    s.attention = "mla"
    s.q_lora_rank = _int(tc, "q_lora_rank", where, default=0)
    s.kv_lora_rank = _int(tc, "kv_lora_rank", where, minimum=1)
    s.qk_nope_head_dim = _int(tc, "qk_nope_head_dim", where, minimum=1)
    s.qk_rope_head_dim = _int(tc, "qk_rope_head_dim", where, minimum=1)
    s.v_head_dim = _int(tc, "v_head_dim", where, minimum=1)
    s.head_dim = s.qk_nope_head_dim + s.qk_rope_head_dim
    s.rotary_dim = s.qk_rope_head_dim
    s.routed_scaling_factor = _num(tc, "routed_scaling_factor", 1.0)
    if s.family == "deepseek_v32":
        s.indexer = "dsa"
        s.attn_types = ["sparse"] * n
        s.index_n_heads = _int(tc, "index_n_heads", where, minimum=1)
        s.index_head_dim = _int(tc, "index_head_dim", where, minimum=1)
        s.index_topk = _int(tc, "index_topk", where, minimum=1)


def _qwen(tc: dict, s: ModelSpec, where: str) -> None:
    n = s.n_layers
    _experts(tc, s, where, "moe_intermediate_size")
    s.dense_intermediate = _int(tc, "intermediate_size", where, default=0)
    dense = set(tc.get("mlp_only_layers") or [])
    step = _int(tc, "decoder_sparse_step", where, default=1, minimum=1)
    s.mlp_types = ["dense" if i in dense or (i + 1) % step else "moe" for i in range(n)]
    shared = _int(tc, "shared_expert_intermediate_size", where, default=0)
    if shared:
        # Qwen2MoeSparseMoeBlock (transformers and vllm/model_executor/models/qwen2_moe.py): shared_expert plus
        # shared_expert_gate, a Linear(hidden, 1) (Qwen3-MoE has neither)
        s.n_shared_experts, s.shared_intermediate, s.shared_expert_gate = 1, shared, True


def _mixtral(tc: dict, s: ModelSpec, where: str) -> None:
    _experts(tc, s, where, "intermediate_size")
    s.mlp_types = ["moe"] * s.n_layers


def _dense(tc: dict, s: ModelSpec, where: str) -> None:
    s.dense_intermediate = _int(tc, "intermediate_size", where, minimum=1)
