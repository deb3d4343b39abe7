"""The MiniMax M3 text backbone (gpt-fast style): Switches, Transformer, build_model.

One decoder layer = Gemma RMSNorm -> Attention (full or MSA sparse) -> residual -> Gemma RMSNorm ->
dense MLP (SwiGLU-OAI) or MoE -> residual. The modules are written for one device; `build_model` with
tp > 1 hands the model to `parallel.apply`, which shards it per the `ShardPlan` (tp.py) and adds the
collectives as forward hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn

from . import parallel
from .attention import Attention
from .compiled import call
from .config import Switches
from .dispatch import DispatchLog
from .kernels.support import KERNEL_SWITCHES, shape_unsupported, triton_unavailable
from .kvcache import positions
from .layers import GemmaRMSNorm, add_rms_norm, rms_norm, rope_table, swiglu_oai
from .moe import MoE
from .scopes import scope
from .tp import ShardPlan, shard_plan
from .weights import init_random


@dataclass
class RunState:
    """Per-forward state shared by the layers: switches, dispatch log, the current block selection."""

    switches: Switches
    dispatch: DispatchLog
    sparse_ordinal: dict[int, int]  # layer -> index among sparse layers
    selection: torch.Tensor | None = None
    capture: dict[int, torch.Tensor] | None = None  # when set, every computed selection is kept (overlap)
    selected_by: dict[int, int] = field(default_factory=dict)
    compiled: bool = False  # region math through torch.compile (the static decode step, or a compiled prefill)
    static: bool = False  # the static decode step: a device-tensor position, attention over the whole capacity
    # decode (one token): per requested kernel switch (kernels/support.py KERNEL_SWITCHES) None when its Triton
    # kernels run in this forward, else why not (the PyTorch path runs and the dispatch row says so)
    kernels: dict[str, str | None] = field(default_factory=dict)
    pos_t: torch.Tensor | None = None  # the position as a [1] long device tensor, for the kernels

    def kernel(self, switch: str) -> bool:
        """True when `switch`'s Triton kernels run in this forward."""
        return switch in self.kernels and self.kernels[switch] is None

    def should_compute_selection(self, layer: int) -> bool:
        return self.selection is None or self.sparse_ordinal[layer] % self.switches.block_reuse == 0

    def set_selection(self, layer: int, sel: torch.Tensor) -> None:
        self.selection = sel
        if self.capture is not None:
            self.capture[layer] = sel


class DenseMLP(nn.Module):
    def __init__(self, args, layer_id: int):
        super().__init__()
        self.layer_id = layer_id
        self.alpha, self.limit = args.swiglu_alpha, args.swiglu_limit
        inter = args.dense_intermediate
        self.gate_up = nn.Linear(args.hidden_size, 2 * inter, bias=False)  # [H] -> [gate | up]
        self.down = nn.Linear(inter, args.hidden_size, bias=False)  # [I] -> [H]

    def forward(self, x: torch.Tensor, state) -> torch.Tensor:
        """x: [B, T, H] -> [B, T, H]."""
        with scope(f"layers.{self.layer_id}.mlp"):
            # `down` stays a module call: under TP its forward hook is the layer's all-reduce (parallel.py)
            return self.down(call(state.compiled, gate_up_act, x, self.gate_up.weight, self.alpha, self.limit))


def gate_up_act(x: torch.Tensor, gate_up: torch.Tensor, alpha: float, limit: float) -> torch.Tensor:
    """The dense MLP up to its down projection: x [B, T, H], gate_up [2I, H] -> SwiGLU-OAI [B, T, I]."""
    return swiglu_oai(torch.nn.functional.linear(x, gate_up), alpha, limit)


class Block(nn.Module):
    def __init__(self, args, layer_id: int):
        super().__init__()
        self.layer_id = layer_id
        self.attn = Attention(args, layer_id, args.attn_types[layer_id] == "sparse")
        self.mlp = MoE(args, layer_id) if args.mlp_types[layer_id] == "moe" else DenseMLP(args, layer_id)
        self.input_norm = GemmaRMSNorm(args.hidden_size, args.norm_eps)
        self.post_attn_norm = GemmaRMSNorm(args.hidden_size, args.norm_eps)

    def forward(self, x, pos, cos, sin, cache, state):
        """x: [B, T, H] -> [B, T, H]."""
        with scope(f"layers.{self.layer_id}.norm"):
            h = self.input_norm(x)
        x = x + self.attn(h, pos, cos, sin, cache, state)
        with scope(f"layers.{self.layer_id}.norm"):
            h = self.post_attn_norm(x)
        return x + self.mlp(h, state)

    def forward_fused(self, x, delta, pos, cos, sin, cache, state):
        """The compile rung: x [B, T, H] and the previous layer's MLP output `delta` (None in layer 0), not yet
        added -> (x, this layer's MLP output). Each residual add runs fused with the RMSNorm after it, in the
        `layers.{i}.norm` scope (vLLM's fused_add_rms_norm)."""
        norm = f"layers.{self.layer_id}.norm"
        with scope(norm):
            if delta is None:
                h = call(True, rms_norm, x, self.input_norm.weight, self.input_norm.eps)
            else:
                x, h = call(True, add_rms_norm, x, delta, self.input_norm.weight, self.input_norm.eps)
        a = self.attn(h, pos, cos, sin, cache, state)
        with scope(norm):
            x, h = call(True, add_rms_norm, x, a, self.post_attn_norm.weight, self.post_attn_norm.eps)
        return x, self.mlp(h, state)


class Transformer(nn.Module):
    """forward(tokens [B, T], pos, caches) -> logits [B, T or 1, vocab].

    Built for one device, where `plan` is the trivial TP=1 plan; `parallel.apply` replaces it with the rank's.
    With a process group every rank's logits cover the full vocab (all-gathered); a rank slice built
    without one returns its own vocab rows."""

    def __init__(self, args, switches: Switches, dtype: torch.dtype):
        super().__init__()
        self.args, self.dtype, self.switches = args, dtype, switches
        self.plan: ShardPlan = shard_plan(args)  # what this model holds: everything (tp=1)
        self.dispatch = DispatchLog(rank=0)
        self.comm = parallel.Comm()  # the TP collectives (parallel.apply replaces it; inactive on one device)
        # vocab padded to a multiple of 64 as vLLM does (the extra rows are never looked up; logits trimmed)
        self.embed = nn.Embedding(self.plan.vocab_padded, args.hidden_size)  # [V', H]
        self.layers = nn.ModuleList(Block(args, i) for i in range(args.n_layers))
        self.norm = GemmaRMSNorm(args.hidden_size, args.norm_eps)
        self.lm_head = nn.Linear(args.hidden_size, self.plan.vocab_padded, bias=False)  # [H] -> [V']
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None
        self._sparse_ord = {l: i for i, l in enumerate(args.sparse_layers)}

    def set_switches(self, switches: Switches) -> None:
        self.switches = switches

    def rope_tables(self, need: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The fp32 cos, sin tables [S, R] on the model's device, S >= max(max_seq_len, need) (built once)."""
        need = max(self.args.max_seq_len, need)
        if self._rope is None or self._rope[0].shape[0] < need or self._rope[0].device != self.embed.weight.device:
            self._rope = rope_table(self.args.rotary_dim, self.args.rope_theta, need, self.embed.weight.device)
        return self._rope

    def rope(self, pos: int | torch.Tensor, t: int, capacity: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [T, R] for positions pos..pos+T-1. A device-tensor `pos` (the static decode step) gathers them
        from the precomputed table, which then covers `capacity` (the KV cache's) positions."""
        static = isinstance(pos, torch.Tensor)
        cos, sin = self.rope_tables(capacity if static else pos + t)
        if static:
            idx = positions(pos, t)  # [T] on the device
            return cos.index_select(0, idx).to(self.dtype), sin.index_select(0, idx).to(self.dtype)
        return cos[pos:pos + t].to(self.dtype), sin[pos:pos + t].to(self.dtype)

    def _decode_kernels(self, state: RunState, pos: int | torch.Tensor, t: int, device: torch.device) -> None:
        """A one-token forward: which requested Triton kernel switches run (or why not), and the device position
        they read (the static step's own tensor, else one made here)."""
        if t != 1:
            return
        for name in KERNEL_SWITCHES:
            if getattr(state.switches, name):
                state.kernels[name] = (triton_unavailable(device)
                                       or shape_unsupported(name, self.args, self.plan.moe_intermediate))
        if any(v is None for v in state.kernels.values()):
            state.pos_t = pos if state.static else torch.full((1,), pos, dtype=torch.long, device=device)

    def forward(self, tokens: torch.Tensor, pos: int | torch.Tensor, caches, last_only: bool = False,
                capture: dict | None = None) -> torch.Tensor:
        """tokens [B, T] at positions pos..pos+T-1. `pos` is a Python int, or a [1] long device tensor for the
        static decode step (graph_runner.py): then every shape and address is independent of the position (KV writes
        by index_copy_, attention and indexer over the whole cache capacity, masked) and nothing syncs."""
        b, t = tokens.shape
        static = isinstance(pos, torch.Tensor)
        sw = self.switches
        state = RunState(sw, self.dispatch, self._sparse_ord, capture=capture, static=static,
                         compiled=(static and sw.compile) or (t > 1 and sw.compile_prefill))
        self._decode_kernels(state, pos, t, tokens.device)
        with scope("embed"):
            x = self.embed(tokens)  # [B, T, H]
        if (state.compiled and static) or state.kernel("triton_norm_rope"):
            cos, sin = self.rope_tables(caches[0].capacity)  # the whole fp32 tables: norm_rope reads its rows
        else:
            cos, sin = self.rope(pos, t, caches[0].capacity if static else 0)
        if state.compiled:
            # model-level row (layer -1): the step's region math ran through torch.compile (compiled.py)
            op, where = ("decode.compile", "mmprof.decode") if static else ("prefill.compile", "mmprof.prefill")
            self.dispatch.log(layer=-1, op=op, impl="inductor", requested="inductor", scope=where)
            delta = None
            for layer, cache in zip(self.layers, caches):
                x, delta = layer.forward_fused(x, delta, pos, cos, sin, cache, state)
            if last_only:
                x, delta = x[:, -1:], delta[:, -1:]
            with scope("final_norm"):
                _, x = call(True, add_rms_norm, x, delta, self.norm.weight, self.norm.eps)
        else:
            for layer, cache in zip(self.layers, caches):
                x = layer(x, pos, cos, sin, cache, state)
            if last_only:
                x = x[:, -1:]
            with scope("final_norm"):
                x = self.norm(x)
        with scope("lm_head"):
            logits = self.lm_head(x)  # [B, T, V'] (V' = padded vocab, or this rank's rows in a slice)
            if logits.shape[-1] > self.args.vocab_size:
                logits = logits[..., : self.args.vocab_size]
        return logits


def build_model(args, switches: Switches | None = None, tp: int = 1, ep: int = 1, rank: int = 0,
                device: str | torch.device = "cpu", dtype: torch.dtype | None = None, group=None,
                seed: int | None = 0) -> Transformer:
    """Build one rank's model. `device='meta'` gives shapes only (no memory, no init).

    Without a process group (`group=None`) a tp > 1 build is a *slice*: rank `rank`'s local modules and no
    collectives (what `m3-rank-slice` and `mmprof shapes --tp N` use). With a group, collectives run.
    `seed` initialises weights deterministically (full tensors, then this rank's slice, so any TP degree
    holds the same model); pass seed=None to leave them uninitialised (e.g. before load_weights).
    """
    if args.slice_tp > 1 and tp == 1 and group is None:
        tp, rank = args.slice_tp, args.slice_rank
    dtype = dtype or torch.float32
    plan = shard_plan(args, tp, ep, rank)  # vLLM's refusals before anything is built
    with torch.device("meta"):  # the single-device model, shapes only
        model = Transformer(args, switches or Switches(), dtype)
    for name, p in model.named_parameters():
        if not name.endswith("mlp.gate.weight"):  # the router stays fp32 (vLLM keeps router params fp32)
            p.data = p.data.to(dtype)
    if plan.tp > 1:  # shard while still on meta, where narrowing a parameter only changes its shape
        parallel.apply(model, plan, parallel.Comm(group, tp))
    if str(device) == "meta":
        return model
    model = model.to_empty(device=device)
    for m in model.modules():
        if isinstance(m, MoE):
            m.e_score_correction_bias.zero_()
    if seed is not None:
        init_random(model, seed, full=group is not None or tp == 1)
    return model.eval()
