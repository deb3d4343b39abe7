"""Model configuration: one `ModelArgs` dataclass, named presets, and the Hugging Face config loader.

The field names are ours (short, gpt-fast style); `from_hf_config` maps the checkpoint's `text_config`
(both the flat transformers 5.17 keys and the legacy `sparse_attention_config` / `moe_layer_freq` keys of the
released config.json) onto them. This module does not import torch, so the CLI can read configs cheaply.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmprof.errors import BadInput
from mmprof.modelspec import ModelSpec


@dataclass
class ModelArgs:
    """Every dimension of the MiniMax M3 text backbone. Defaults are the real M3 (preset `m3`)."""

    name: str = "m3"
    vocab_size: int = 200064
    hidden_size: int = 6144
    n_layers: int = 60
    n_heads: int = 64
    n_kv_heads: int = 4
    head_dim: int = 128
    rotary_dim: int = 64  # partial NeoX RoPE on the first 64 of 128 dims
    rope_theta: float = 5_000_000.0
    norm_eps: float = 1e-6
    dense_intermediate: int = 12288  # dense MLP of layers 0-2
    moe_intermediate: int = 3072  # one routed expert
    shared_intermediate: int = 3072  # the shared expert (n_shared_experts x this)
    n_shared_experts: int = 1
    n_experts: int = 128
    top_k: int = 4
    routed_scaling_factor: float = 2.0
    swiglu_alpha: float = 1.702
    swiglu_limit: float = 7.0
    # per layer: "dense" | "moe" (MLP) and "full" | "sparse" (attention)
    mlp_types: list[str] = field(default_factory=lambda: ["dense"] * 3 + ["moe"] * 57)
    attn_types: list[str] = field(default_factory=lambda: ["full"] * 3 + ["sparse"] * 57)
    # lightning indexer (MSA)
    index_n_heads: int = 4
    index_head_dim: int = 128
    index_block_size: int = 128
    index_topk_blocks: int = 16
    index_local_blocks: int = 1
    max_seq_len: int = 8192  # KV cache capacity used by generate(); not a model property
    # `m3-rank-slice`: build rank `slice_rank` of a TP=`slice_tp` model on one device, without collectives
    slice_tp: int = 1
    slice_rank: int = 0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse inconsistent configs with one clear line (BadInput)."""
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type in ("int", int):
                lo = 0 if f.name in _MAY_BE_ZERO else 1
                if type(v) is not int or not lo <= v <= _MAX_DIM:
                    raise BadInput(f"config {self.name}: {f.name} must be an integer in {lo}..{_MAX_DIM}, not "
                                   f"{str(v)[:40]!r}")
            elif f.type in ("float", float):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                    raise BadInput(f"config {self.name}: {f.name} must be a positive number, not {str(v)[:40]!r}")
        if self.n_layers > _MAX_LAYERS:
            raise BadInput(f"config {self.name}: n_layers {self.n_layers} is more than {_MAX_LAYERS}")
        if not isinstance(self.mlp_types, list) or not isinstance(self.attn_types, list):
            raise BadInput(f"config {self.name}: mlp_types and attn_types must be lists")
        if len(self.mlp_types) != self.n_layers or len(self.attn_types) != self.n_layers:
            raise BadInput(
                f"config {self.name}: mlp_types ({len(self.mlp_types)}) and attn_types ({len(self.attn_types)}) "
                f"must each list n_layers={self.n_layers} entries"
            )
        if (not all(isinstance(t, str) for t in self.mlp_types + self.attn_types)
                or set(self.mlp_types) - {"dense", "moe"} or set(self.attn_types) - {"full", "sparse"}):
            raise BadInput(f"config {self.name}: mlp_types must be dense|moe and attn_types full|sparse")
        if self.n_heads % self.n_kv_heads:
            raise BadInput(f"config {self.name}: n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if "sparse" in self.attn_types and self.index_n_heads != self.n_kv_heads:
            raise BadInput(
                f"config {self.name}: index_n_heads ({self.index_n_heads}) must equal n_kv_heads ({self.n_kv_heads}): "
                "one index query head per KV group"
            )
        if self.rotary_dim > self.head_dim or self.rotary_dim % 2 or self.rotary_dim > self.index_head_dim:
            raise BadInput(f"config {self.name}: rotary_dim {self.rotary_dim} must be even and <= head dims")
        if not 1 <= self.top_k <= self.n_experts:
            raise BadInput(f"config {self.name}: top_k {self.top_k} must be in 1..n_experts ({self.n_experts})")

    @property
    def sparse_layers(self) -> list[int]:
        return [i for i, t in enumerate(self.attn_types) if t == "sparse"]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_MAX_DIM = 2**24        # no model dimension (hidden size, vocabulary, experts, ...) is larger
_MAX_LAYERS = 4096
_MAY_BE_ZERO = {"n_shared_experts", "index_local_blocks", "rotary_dim", "slice_rank"}


def _layers(n_dense: int, n_total: int) -> tuple[list[str], list[str]]:
    return ["dense"] * n_dense + ["moe"] * (n_total - n_dense), ["full"] * n_dense + ["sparse"] * (n_total - n_dense)


def _preset_m3(**kw: Any) -> ModelArgs:
    return ModelArgs(name="m3", **kw)


def _preset_tiny(**kw: Any) -> ModelArgs:
    # 2 dense/full + 4 MoE/sparse layers; block 16, top-4 blocks -> a 256-token prompt (16 blocks) drops 12.
    mlp, attn = _layers(2, 6)
    base = dict(
        name="tiny", vocab_size=512, hidden_size=128, n_layers=6, n_heads=8, n_kv_heads=2, head_dim=32,
        rotary_dim=16, dense_intermediate=256, moe_intermediate=64, shared_intermediate=64, n_experts=16,
        top_k=4, mlp_types=mlp, attn_types=attn, index_n_heads=2, index_head_dim=32, index_block_size=16,
        index_topk_blocks=4, index_local_blocks=1, max_seq_len=512,
    )
    base.update(kw)
    return ModelArgs(**base)


def _preset_small(**kw: Any) -> ModelArgs:
    # One H200: ~6B params in bf16 (~12 GB). Real head/indexer geometry (4 KV groups, block 128, top-16).
    mlp, attn = _layers(3, 12)
    base = dict(
        name="small", vocab_size=200064, hidden_size=2048, n_layers=12, n_heads=16, n_kv_heads=4, head_dim=128,
        rotary_dim=64, dense_intermediate=6144, moe_intermediate=768, shared_intermediate=768, n_experts=128,
        top_k=4, mlp_types=mlp, attn_types=attn, max_seq_len=8192,
    )
    base.update(kw)
    return ModelArgs(**base)


def _preset_rank_slice(tp: int = 8, layers: int = 8, rank: int = 0, **kw: Any) -> ModelArgs:
    # Real M3 dims; built as rank `rank` of TP=`tp` (per-rank GEMM shapes), `layers` layers (2 dense + rest MoE).
    n_dense = min(2, layers)
    mlp, attn = _layers(n_dense, layers)
    base = dict(name="m3-rank-slice", n_layers=layers, mlp_types=mlp, attn_types=attn, slice_tp=tp, slice_rank=rank)
    base.update(kw)
    return ModelArgs(**base)


PRESETS = {"m3": _preset_m3, "tiny": _preset_tiny, "small": _preset_small, "m3-rank-slice": _preset_rank_slice}


def get_preset(name: str, **overrides: Any) -> ModelArgs:
    """A named preset (`m3`, `tiny`, `small`, `m3-rank-slice`); keyword overrides replace fields.

    `m3-rank-slice` also takes `tp=` (default 8), `layers=` (default 8) and `rank=` (default 0).
    Changing `n_layers` without `mlp_types`/`attn_types` re-derives them (first min(3, n/4) dense/full).
    """
    if name not in PRESETS:
        raise BadInput(f"unknown runtime preset {name!r}; choose one of {', '.join(PRESETS)}")
    if "n_layers" in overrides and "mlp_types" not in overrides and name != "m3-rank-slice":
        n = overrides["n_layers"]
        n_dense = 2 if name == "tiny" else min(3, max(1, n // 4))
        overrides["mlp_types"], overrides["attn_types"] = _layers(min(n_dense, n), n)
    try:
        return PRESETS[name](**overrides)
    except TypeError as e:
        raise BadInput(f"preset {name}: bad override ({e})") from None


def from_hf_config(cfg: dict[str, Any], name: str = "hf") -> ModelArgs:
    """ModelArgs from a Hugging Face MiniMax M3 config dict (the VL config's `text_config`, legacy keys included),
    read by `mmprof.modelspec` (the one reader of such configs). Other families are refused: the reference
    runtime only builds M3."""
    return from_spec(ModelSpec.from_hf(cfg, name), name)


def from_spec(spec: ModelSpec, name: str = "hf") -> ModelArgs:
    """ModelArgs from a MiniMax M3 ModelSpec; other families are refused (one line)."""
    if spec.family != "minimax_m3":
        raise BadInput(f"{name}: a {spec.model_type or spec.family} config; the reference runtime builds MiniMax M3 "
                       "only (other families can still be read by `--model` for shape matching)")
    kw: dict[str, Any] = dict(
        name=name, vocab_size=spec.vocab_size, hidden_size=spec.hidden_size, n_layers=spec.n_layers,
        n_heads=spec.n_heads, n_kv_heads=spec.n_kv_heads, head_dim=spec.head_dim, rotary_dim=spec.rotary_dim,
        rope_theta=spec.rope_theta, norm_eps=spec.norm_eps, moe_intermediate=spec.moe_intermediate,
        n_experts=spec.n_experts, top_k=spec.top_k, n_shared_experts=spec.n_shared_experts,
        routed_scaling_factor=spec.routed_scaling_factor, mlp_types=spec.mlp_types, attn_types=spec.attn_types)
    if spec.dense_intermediate:
        kw["dense_intermediate"] = spec.dense_intermediate
    if spec.shared_intermediate:
        kw["shared_intermediate"] = spec.shared_intermediate
    if spec.swiglu_alpha is not None:
        kw["swiglu_alpha"] = spec.swiglu_alpha
    if spec.swiglu_limit is not None:
        kw["swiglu_limit"] = spec.swiglu_limit
    if spec.indexer == "m3":
        kw.update(index_n_heads=spec.index_n_heads, index_head_dim=spec.index_head_dim,
                  index_block_size=spec.index_block_size, index_topk_blocks=spec.index_topk,
                  index_local_blocks=spec.index_local_blocks)
    if spec.max_position_embeddings:
        kw["max_seq_len"] = min(8192, spec.max_position_embeddings)
    return ModelArgs(**kw)


def to_spec(args: ModelArgs) -> ModelSpec:
    """The family-neutral description of a runtime config (what shape matching of traces reads)."""
    sparse = "sparse" in args.attn_types
    return ModelSpec(
        family="minimax_m3", model_type="minimax_m3", vocab_size=args.vocab_size, hidden_size=args.hidden_size,
        n_layers=args.n_layers, n_heads=args.n_heads, n_kv_heads=args.n_kv_heads, head_dim=args.head_dim,
        mlp_types=list(args.mlp_types), attn_types=list(args.attn_types), dense_intermediate=args.dense_intermediate,
        moe_intermediate=args.moe_intermediate, shared_intermediate=args.shared_intermediate,
        n_shared_experts=args.n_shared_experts, n_experts=args.n_experts, top_k=args.top_k,
        indexer="m3" if sparse else "none", index_n_heads=args.index_n_heads if sparse else 0,
        index_head_dim=args.index_head_dim if sparse else 0, index_block_size=args.index_block_size,
        index_topk=args.index_topk_blocks, index_local_blocks=args.index_local_blocks, rotary_dim=args.rotary_dim,
        rope_theta=args.rope_theta, norm_eps=args.norm_eps, routed_scaling_factor=args.routed_scaling_factor,
        swiglu_alpha=args.swiglu_alpha, swiglu_limit=args.swiglu_limit, max_position_embeddings=args.max_seq_len)


def load_config(path_or_preset: str | Path, **overrides: Any) -> ModelArgs:
    """A preset name, a config.json path, or a checkpoint directory holding config.json."""
    s = str(path_or_preset)
    if s in PRESETS:
        return get_preset(s, **overrides)
    p = Path(s)
    if p.is_dir():
        p = p / "config.json"
    if not p.exists():
        raise BadInput(f"{s}: neither a preset ({', '.join(PRESETS)}) nor an existing config.json")
    spec = ModelSpec.load(p)  # reads and checks the JSON; its errors name the file
    try:
        args = from_spec(spec, name=(p.parent.name if p.name == "config.json" else p.stem) or "hf")
    except BadInput as e:
        raise BadInput(f"{p}: {e}") from None
    return dataclasses.replace(args, **overrides) if overrides else args


GRAPHS_NEED_GROUPED = "graphs need moe_impl=grouped: the loop path syncs with the host"
COMPILE_NEEDS_GRAPHS = ("compile needs graphs: the compile rung compiles the static decode step that the graph "
                        "captures (--graphs, --device cuda)")


@dataclass(frozen=True)
class SwitchSpec:
    """One runtime switch, as `Switches` declares it: everything else (validation, `Switches.baseline()`, the
    `mmprof run` / `verify-fastpath --run` options, `RunOptions` overrides) is derived from these."""

    name: str  # the Switches field; the CLI option is --name-with-dashes (a bool: --name/--no-name)
    default: Any  # the fast configuration (`Switches()`, `mmprof run --fast`)
    baseline: Any  # `Switches.baseline()`, `mmprof run --baseline`
    help: str  # the CLI help line
    choices: tuple[str, ...] = ()  # a str switch: its values, in the order the CLI lists them
    min: int | None = None  # an int switch: its smallest value
    metavar: str | None = None  # an int switch: the CLI's name for the value
    op: str | None = None  # the dispatch-log op whose rows say what ran (None: the switch logs no op of its own)

    @property
    def kind(self) -> type:
        return type(self.default)

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> None:
        """BadInput naming the switch when `value` is not one it takes."""
        if self.kind is bool:
            if not isinstance(value, bool):
                raise BadInput(f"{self.name} must be True or False, not {value!r}")
        elif self.kind is int:
            if not isinstance(value, int) or (self.min is not None and value < self.min):
                raise BadInput(f"{self.name} must be an integer >= {self.min}, not {value!r}")
        elif value not in self.choices:
            raise BadInput(f"{self.name} must be {'|'.join(self.choices)}, not {value!r}")


def switch(default: Any, *, baseline: Any, help: str, choices: tuple[str, ...] = (), min: int | None = None,
           metavar: str | None = None, op: str | None = None) -> Any:
    """A `Switches` field and its declaration (the field's name completes the SwitchSpec)."""
    return field(default=default, metadata={"switch": dict(default=default, baseline=baseline, help=help,
                                                           choices=choices, min=min, metavar=metavar, op=op)})


@dataclass
class Switches:
    """Every optimization as a switch; the defaults are the fast paths (graphs aside: they need a GPU).

    Each field is the one declaration of its switch (`switch(...)`: default, baseline value, CLI help, values,
    dispatch op); `specs()` lists them for the CLI and RunOptions. A new switch is one field here, its code path
    (which logs a dispatch row) and a test: docs/architecture.md "Where a change goes".
    """

    moe_impl: str = switch("grouped", baseline="loop", choices=("loop", "grouped"), op="moe.experts",
                           help="Routed experts: per-expert loop or one grouped GEMM.")
    shared_expert: str = switch("fused", baseline="separate", choices=("separate", "fused"), op="moe.shared",
                                help="Shared expert as its own MLP or fused into the routed GEMM.")
    # K: one sparse layer computes the block selection, the next K-1 reuse it. The fast default is 4, as in
    # vLLM's `index_topk_freq: 4` recipe (15 producers, 42 reusers for M3's 57 sparse layers). It changes
    # numerics (the released model recomputes per layer, K=1): measure_selection_overlap says whether it is safe.
    block_reuse: int = switch(4, baseline=1, min=1, metavar="K", op="attn.indexer",
                              help="One sparse layer computes the block selection, the next K-1 reuse it "
                                   "(1 = every layer computes).")
    attention: str = switch("sparse", baseline="sparse", choices=("sparse", "dense"), op="attn.core",
                            help="Sparse (MSA) or dense attention in the sparse layers.")
    # decode steps replayed as one CUDA/HIP graph per (batch, KV cache) (runtime/graph_runner.py); needs a GPU and the
    # grouped experts. Off by default: the capture costs a step's worth of setup and holds its own memory pool.
    # A replay runs no Python: it repeats the dispatch rows of its capture (no op of its own).
    graphs: bool = switch(False, baseline=False,
                          help="Replay decode steps as a CUDA/HIP graph (captured at step 2; --device cuda, grouped "
                               "experts). Off in both bases.")
    # the static decode step's region math through torch.compile (Inductor), replayed by the graph above
    # (runtime/compiled.py); scopes, dispatch rows, KV writes and collectives stay in Python around it
    compile: bool = switch(False, baseline=False, op="decode.compile",
                           help="Compile the graph-captured decode step with torch.compile (Inductor); needs "
                                "--graphs. Off in both bases.")
    # prefill's region math through the same torch.compile functions (one compilation per prompt shape)
    compile_prefill: bool = switch(False, baseline=False, op="prefill.compile",
                                   help="Compile the prefill's region math with torch.compile (Inductor; one "
                                        "compilation per prompt length). Off in both bases.")
    # hand-written Triton kernels for the decode step (runtime/kernels/): one switch per kernel family. Off in both
    # bases: they need a GPU (or TRITON_INTERPRET=1 on the CPU); where they cannot run the PyTorch path runs and the
    # dispatch row says why.
    triton_norm_rope: bool = switch(False, baseline=False, op="attn.norm_rope",
                                    help="Decode: Q/K norm, RoPE and the KV-cache insert as one Triton kernel. Off in "
                                         "both bases.")
    triton_attention: bool = switch(False, baseline=False, op="attn.decode",
                                    help="Decode: the indexer's block scores, top-k and attention over the selected "
                                         "blocks as Triton kernels. Off in both bases.")
    triton_moe: bool = switch(False, baseline=False, op="moe.experts",
                              help="Decode: the router and the routed experts (gate_up + SwiGLU + down, top-k "
                                   "weights applied; only the experts the batch touches) as Triton kernels. Off in "
                                   "both bases.")

    def __post_init__(self) -> None:
        for spec in self.specs():
            spec.check(getattr(self, spec.name))
        if self.graphs and self.moe_impl == "loop":
            raise BadInput(GRAPHS_NEED_GROUPED)
        if self.compile and not self.graphs:
            raise BadInput(COMPILE_NEEDS_GRAPHS)

    @classmethod
    def specs(cls) -> tuple[SwitchSpec, ...]:
        """The declarations of the switches, in field order (the order of the CLI options)."""
        return tuple(SwitchSpec(name=f.name, **f.metadata["switch"]) for f in dataclasses.fields(cls)
                     if "switch" in f.metadata)

    @classmethod
    def baseline(cls) -> "Switches":
        return cls(**{s.name: s.baseline for s in cls.specs()})
