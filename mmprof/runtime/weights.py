"""Weights: deterministic random init and Hugging Face safetensors loading, both sharded per rank.

Names are the checkpoint's. Two layouts are accepted and normalised to the transformers 5.17 in-memory
names (`layers.{i}.self_attn.q_proj.weight`, `layers.{i}.mlp.experts.gate_up_proj` [E, 2I, H], ...):
- what transformers' `save_pretrained` writes (prefix `model.` or `model.language_model.`), and
- the released MiniMaxAI checkpoint (prefix `language_model.model.`, `block_sparse_moe`, per-expert
  `experts.{e}.w1/w3/w2.weight`, `index_q_proj`/`index_k_proj`/`index_q_norm`/`index_k_norm`,
  `gate_proj`/`up_proj` split MLPs), the renames in transformers' conversion_mapping.py.
Each local parameter is filled from full tensors through the ShardPlan slices (one expert at a time).
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import torch

from mmprof.errors import BadInput

from .moe import MoE

_PREFIXES = ("model.language_model.", "language_model.model.", "model.")


def normalise_name(name: str) -> str | None:
    """Checkpoint name -> canonical name (no prefix), or None for tensors we do not use (vision, mtp)."""
    if name.startswith("language_model.lm_head.") or name.startswith("lm_head."):
        return "lm_head." + name.split("lm_head.", 1)[1]
    for p in _PREFIXES:
        if name.startswith(p):
            name = name[len(p):]
            break
    else:
        return None
    if not (name.startswith("layers.") or name.startswith("embed_tokens.") or name.startswith("norm.")):
        return None
    name = name.replace(".block_sparse_moe.", ".mlp.")
    name = re.sub(r"\.mlp\.e_score_correction_bias$", ".mlp.gate.e_score_correction_bias", name)
    name = re.sub(r"\.self_attn\.index_([qk])_(proj|norm)\.", r".self_attn.indexer.\1_\2.", name)
    return name


class TensorSource:
    """Read-only view of a checkpoint by canonical name; merges split tensors on demand."""

    def __init__(self, tensors: dict[str, tuple[Path, str]]):
        self._where = tensors  # canonical -> (file, original name)
        self._handles: dict[Path, object] = {}

    @classmethod
    def open(cls, path: str | Path) -> "TensorSource":
        from safetensors import safe_open

        p = Path(path)
        files = sorted(p.glob("*.safetensors")) if p.is_dir() else [p]
        if not files or not all(f.exists() for f in files):
            raise BadInput(f"{path}: no .safetensors files found")
        where: dict[str, tuple[Path, str]] = {}
        for f in files:
            try:
                with safe_open(str(f), framework="pt") as h:
                    for n in h.keys():
                        c = normalise_name(n)
                        if c is not None:
                            where[c] = (f, n)
            except Exception as e:  # noqa: BLE001
                raise BadInput(f"{f}: not a readable safetensors file ({e})") from None
        if not where:
            raise BadInput(f"{path}: no MiniMax M3 text-backbone tensors found (expected model.layers.* names)")
        return cls(where)

    def has(self, name: str) -> bool:
        return name in self._where

    def get(self, name: str) -> torch.Tensor:
        from safetensors import safe_open

        if name not in self._where:
            raise BadInput(f"checkpoint is missing tensor {name}")
        f, orig = self._where[name]
        with safe_open(str(f), framework="pt") as h:
            return h.get_tensor(orig)

    # composite getters ----------------------------------------------------------------------------------
    def mlp_gate_up(self, prefix: str) -> torch.Tensor:
        """[2I, H] for a dense MLP / shared expert at `prefix` (e.g. layers.0.mlp)."""
        if self.has(f"{prefix}.gate_up_proj.weight"):
            return self.get(f"{prefix}.gate_up_proj.weight")
        return torch.cat([self.get(f"{prefix}.gate_proj.weight"), self.get(f"{prefix}.up_proj.weight")], 0)

    def mlp_down(self, prefix: str) -> torch.Tensor:
        return self.get(f"{prefix}.down_proj.weight")

    def expert(self, layer: int, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(w13 [2I, H], w2 [H, I]) of routed expert e."""
        p = f"layers.{layer}.mlp.experts"
        if self.has(f"{p}.gate_up_proj"):
            return self.get(f"{p}.gate_up_proj")[e], self.get(f"{p}.down_proj")[e]
        w1, w3 = self.get(f"{p}.{e}.w1.weight"), self.get(f"{p}.{e}.w3.weight")
        return torch.cat([w1, w3], 0), self.get(f"{p}.{e}.w2.weight")


class RandomSource(TensorSource):
    """Deterministic random full tensors: each name seeded from (seed, crc32(name)); std 0.02 linears,
    small random norm weights and router bias so every term is exercised."""

    def __init__(self, args, seed: int, device="cpu"):
        super().__init__({})
        self.args, self.seed, self.device = args, seed, device

    def has(self, name: str) -> bool:
        return name.endswith("gate_up_proj.weight") or name.endswith("gate_up_proj")

    def _rand(self, name: str, shape, std: float) -> torch.Tensor:
        g = torch.Generator(device=self.device)
        g.manual_seed((self.seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63))
        return torch.randn(*shape, generator=g, device=self.device) * std

    def get(self, name: str) -> torch.Tensor:
        a = self.args
        h, hd, ihd = a.hidden_size, a.head_dim, a.index_head_dim
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            dim = h if ("layernorm" in name or name == "norm.weight") else (ihd if "indexer" in name else hd)
            return self._rand(name, (dim,), 0.1)
        if name.endswith("e_score_correction_bias"):
            return self._rand(name, (a.n_experts,), 0.01)
        shapes = {
            "embed_tokens.weight": (a.vocab_size, h), "lm_head.weight": (a.vocab_size, h),
            "q_proj": (a.n_heads * hd, h), "k_proj": (a.n_kv_heads * hd, h), "v_proj": (a.n_kv_heads * hd, h),
            "o_proj": (h, a.n_heads * hd), "gate.weight": (a.n_experts, h),
        }
        if name in shapes:
            return self._rand(name, shapes[name], 0.02)
        leaf = name.split(".")[-2]
        if ".indexer." in name:
            return self._rand(name, ((a.index_n_heads if leaf == "q_proj" else 1) * ihd, h), 0.02)
        if leaf in shapes:
            return self._rand(name, shapes[leaf], 0.02)
        if name.endswith(".mlp.gate.weight"):
            return self._rand(name, shapes["gate.weight"], 0.02)
        inter = a.shared_intermediate * a.n_shared_experts if "shared_experts" in name else a.dense_intermediate
        if name.endswith("gate_up_proj.weight"):
            return self._rand(name, (2 * inter, h), 0.02)
        if name.endswith("down_proj.weight"):
            return self._rand(name, (h, inter), 0.02)
        raise KeyError(name)

    def expert(self, layer: int, e: int):
        a = self.args
        p = f"layers.{layer}.mlp.experts.{e}"
        return (self._rand(p + ".w13", (2 * a.moe_intermediate, a.hidden_size), 0.02),
                self._rand(p + ".w2", (a.hidden_size, a.moe_intermediate), 0.02))


def _rows(t: torch.Tensor, start: int, n: int) -> torch.Tensor:
    return t[start:start + n]


def _split_gate_up(w: torch.Tensor, tp_size: int, rank: int) -> torch.Tensor:
    """[2I, ...] gate|up -> this rank's [2I/tp, ...] = gate slice | up slice."""
    gate, up = w.chunk(2, 0)
    n = gate.shape[0] // tp_size
    return torch.cat([_rows(gate, rank * n, n), _rows(up, rank * n, n)], 0)


@torch.no_grad()
def load_into(model, src: TensorSource) -> None:
    """Fill every local parameter of `model` from `src` through the model's ShardPlan."""
    args, plan = model.args, model.plan
    tp, r = plan.tp, plan.rank
    moe_tp = 1 if plan.ep > 1 else tp

    def put(param: torch.Tensor, value: torch.Tensor, what: str) -> None:
        if tuple(param.shape) != tuple(value.shape):
            raise BadInput(f"checkpoint tensor for {what} has shape {tuple(value.shape)}, expected {tuple(param.shape)}")
        param.copy_(value.to(device=param.device, dtype=param.dtype))

    def vocab(name: str) -> torch.Tensor:
        full = src.get(name)
        if full.shape[0] != args.vocab_size:
            raise BadInput(f"{name} has {full.shape[0]} rows, config vocab_size is {args.vocab_size}")
        out = torch.zeros(plan.vocab_rows, full.shape[1], dtype=full.dtype, device=full.device)
        part = full[plan.vocab_start:plan.vocab_start + plan.vocab_rows]
        out[: part.shape[0]] = part
        return out

    put(model.embed.weight, vocab("embed_tokens.weight"), "embed_tokens")
    put(model.lm_head.weight, vocab("lm_head.weight"), "lm_head")
    put(model.norm.weight, src.get("norm.weight"), "norm")
    hd, ihd = args.head_dim, args.index_head_dim
    for i, blk in enumerate(model.layers):
        p = f"layers.{i}"
        put(blk.input_norm.weight, src.get(f"{p}.input_layernorm.weight"), f"{p}.input_layernorm")
        put(blk.post_attn_norm.weight, src.get(f"{p}.post_attention_layernorm.weight"), f"{p}.post_attention_layernorm")
        a = f"{p}.self_attn"
        parts = [
            _rows(src.get(f"{a}.q_proj.weight"), plan.q_head_start * hd, plan.n_heads * hd),
            _rows(src.get(f"{a}.k_proj.weight"), plan.kv_head_start * hd, plan.n_kv_heads * hd),
            _rows(src.get(f"{a}.v_proj.weight"), plan.kv_head_start * hd, plan.n_kv_heads * hd),
        ]
        if blk.attn.sparse:
            parts.append(_rows(src.get(f"{a}.indexer.q_proj.weight"), plan.index_head_start * ihd,
                               plan.n_index_heads * ihd))
            parts.append(src.get(f"{a}.indexer.k_proj.weight"))  # replicated
            put(blk.attn.index_q_norm.weight, src.get(f"{a}.indexer.q_norm.weight"), f"{a}.indexer.q_norm")
            put(blk.attn.index_k_norm.weight, src.get(f"{a}.indexer.k_norm.weight"), f"{a}.indexer.k_norm")
        put(blk.attn.qkv.weight, torch.cat(parts, 0), f"{a}.qkv")
        o = src.get(f"{a}.o_proj.weight")
        put(blk.attn.o_proj.weight, o[:, plan.q_head_start * hd:(plan.q_head_start + plan.n_heads) * hd], f"{a}.o_proj")
        put(blk.attn.q_norm.weight, src.get(f"{a}.q_norm.weight"), f"{a}.q_norm")
        put(blk.attn.k_norm.weight, src.get(f"{a}.k_norm.weight"), f"{a}.k_norm")
        m = f"{p}.mlp"
        if isinstance(blk.mlp, MoE):
            moe = blk.mlp
            put(moe.gate.weight, src.get(f"{m}.gate.weight"), f"{m}.gate")
            moe.e_score_correction_bias.copy_(src.get(f"{m}.gate.e_score_correction_bias").float())
            il = plan.moe_intermediate
            for j in range(plan.n_local_experts):
                w13, w2 = src.expert(i, plan.expert_start + j)
                put(moe.w13[j], _split_gate_up(w13, moe_tp, 0 if moe_tp == 1 else r), f"{m}.experts.{j}.w13")
                put(moe.w2[j], w2[:, (0 if moe_tp == 1 else r) * il:][:, :il], f"{m}.experts.{j}.w2")
            if moe.has_shared:
                s = f"{m}.shared_experts"
                sw13, sw2 = src.mlp_gate_up(s), src.mlp_down(s)
                si = plan.shared_intermediate
                sw13, sw2 = _split_gate_up(sw13, tp, r), sw2[:, r * si:(r + 1) * si]
                if moe.fusable:
                    put(moe.w13[plan.n_local_experts], sw13, f"{s}.gate_up")
                    put(moe.w2[plan.n_local_experts], sw2, f"{s}.down")
                else:
                    put(moe.shared_w13, sw13, f"{s}.gate_up")
                    put(moe.shared_w2, sw2, f"{s}.down")
        else:
            di = plan.dense_intermediate
            put(blk.mlp.gate_up.weight, _split_gate_up(src.mlp_gate_up(m), tp, r), f"{m}.gate_up")
            put(blk.mlp.down.weight, src.mlp_down(m)[:, r * di:(r + 1) * di], f"{m}.down")


@torch.no_grad()
def init_random(model, seed: int, full: bool = True) -> None:
    """Deterministic init. full=True: the full tensors from `RandomSource`, sliced (TP degrees agree);
    full=False: each local tensor drawn directly (rank slices of huge models; values are arbitrary)."""
    if full:
        load_into(model, RandomSource(model.args, seed, device=model.embed.weight.device))
        return
    g = torch.Generator(device=model.embed.weight.device)
    g.manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.normal_(0.0, 0.1, generator=g)
        else:
            p.normal_(0.0, 0.02, generator=g)


def load_weights(model, path: str | Path) -> None:
    """Load a Hugging Face safetensors checkpoint (file or directory) into `model` (its rank's slice)."""
    load_into(model, TensorSource.open(path))

