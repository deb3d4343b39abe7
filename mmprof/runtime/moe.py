"""MoE block: replicated sigmoid router, routed experts (loop | grouped GEMM), shared expert (separate | fused).

Expert weights are stacked: w13 [slots, 2*I, H] (gate rows then up rows, not interleaved) and
w2 [slots, H, I]. When the shared expert has the same local intermediate size as a routed expert (M3: 3072,
and not under EP) it is stored as the extra slot `n_local_experts`, so `shared_expert=fused` appends it to
every token's top-k with weight 1/routed_scaling_factor (contributes 1.0x after the 2.0x scale, as vLLM's
fused shared expert), and `separate` runs the same weights as its own two GEMMs. Both switch at run time.
Written for one device; parallel.py narrows the experts per rank and hooks the all-reduce onto `reduce`.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .compiled import call
from .layers import swiglu_oai
from .scopes import scope

_GROUPED_OK: dict[tuple, str | None] = {}  # (device type, dtype) -> None if torch grouped GEMM works, else why


def grouped_mm_unavailable(device: torch.device, dtype: torch.dtype) -> str | None:
    """None when torch's grouped GEMM runs here for `dtype`; otherwise a one-line reason (probed once)."""
    key = (device.type, dtype)
    if key not in _GROUPED_OK:
        fn = getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
        if fn is None:
            _GROUPED_OK[key] = f"torch {torch.__version__} has no grouped_mm"
        else:
            try:
                a = torch.ones(4, 16, device=device, dtype=dtype)
                bm = torch.ones(2, 16, 16, device=device, dtype=dtype).transpose(1, 2)  # layout we use
                fn(a, bm, offs=torch.tensor([2, 4], device=device, dtype=torch.int32))
                _GROUPED_OK[key] = None
            except Exception as e:  # noqa: BLE001 - any failure means "not here"
                msg = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
                _GROUPED_OK[key] = f"torch grouped_mm unavailable on {device.type} for {dtype}: {msg}"
    return _GROUPED_OK[key]


def _grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    fn = getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm")
    return fn(a, b, offs=offs)


def route(x: torch.Tensor, gate_w: torch.Tensor, bias: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The router: x [N, H] -> (weights [N, k] fp32, expert ids [N, k]); sigmoid in fp32, the correction bias
    for the selection only, renormalised over the k chosen."""
    scores = torch.sigmoid(F.linear(x.float(), gate_w))  # [N, E]
    _, ids = torch.topk(scores + bias, top_k, dim=-1, sorted=False)
    w = scores.gather(1, ids)
    return w / w.sum(dim=-1, keepdim=True), ids


def expert_mlp(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, alpha: float, limit: float) -> torch.Tensor:
    """One SwiGLU-OAI MLP: x [N, H], w13 [2I, H], w2 [H, I] -> [N, H] (the shared expert, run separately)."""
    return F.linear(swiglu_oai(F.linear(x, w13), alpha, limit), w2)


def experts_grouped(x: torch.Tensor, w: torch.Tensor, slots: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                    alpha: float, limit: float, use_mm: bool) -> torch.Tensor:
    """All (token, expert) pairs sorted by expert; one grouped GEMM per projection, no host sync.
    x [N, H], w [N, k] weights, slots [N, k] local weight slots (-1 / out of range: another rank's expert),
    w13 [slots, 2I, H], w2 [slots, H, I] -> [N, H]."""
    n, k = slots.shape
    n_slots = w13.shape[0]
    flat = slots.flatten().masked_fill((slots.flatten() < 0) | (slots.flatten() >= n_slots), n_slots)
    order = torch.argsort(flat, stable=True)
    sorted_slots = flat[order]
    tok = order // k
    xs = x[tok]  # [N*k, H]
    keep = sorted_slots < n_slots
    if use_mm:
        # counts via scatter_add (bincount would sync with the host to size its output)
        counts = torch.zeros(n_slots + 1, dtype=torch.int32, device=x.device)
        counts.scatter_add_(0, sorted_slots, torch.ones_like(sorted_slots, dtype=torch.int32))
        offs = torch.cumsum(counts[:n_slots], 0, dtype=torch.int32)
        h1 = _grouped_mm(xs, w13.transpose(1, 2), offs)  # [N*k, 2I]
        y = _grouped_mm(swiglu_oai(h1, alpha, limit), w2.transpose(1, 2), offs)  # [N*k, H]
    else:  # batched fallback: gather each pair's expert weights and bmm (memory grows with N*k)
        e = sorted_slots.clamp(max=n_slots - 1)
        h1 = torch.bmm(w13[e], xs[:, :, None])[..., 0]
        y = torch.bmm(w2[e], swiglu_oai(h1, alpha, limit)[:, :, None])[..., 0]
    wf = w.flatten()[order]
    y = torch.where(keep[:, None], y * wf[:, None].to(y.dtype), torch.zeros((), dtype=y.dtype, device=y.device))
    return torch.zeros_like(x).index_add_(0, tok, y.to(x.dtype))


def with_fused_slot(w: torch.Tensor, slots: torch.Tensor, fused_slot: int,
                    fused_weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused shared expert as an always-selected extra slot: w, slots [N, k] -> [N, k+1] (weight
    `fused_weight`, slot `fused_slot`)."""
    n = slots.shape[0]
    slots = torch.cat([slots, torch.full((n, 1), fused_slot, device=slots.device, dtype=slots.dtype)], 1)
    return torch.cat([w, torch.full((n, 1), fused_weight, device=w.device, dtype=w.dtype)], 1), slots


def routed_grouped(x: torch.Tensor, w: torch.Tensor, slots: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                   alpha: float, limit: float, use_mm: bool, fused_slot: int, fused_weight: float, scale: float,
                   shared: torch.Tensor | None) -> torch.Tensor:
    """The `moe.routed` region with grouped experts: the fused shared expert appended as slot `fused_slot` with
    weight `fused_weight` to every token's top-k (fused_slot < 0: not fused), the grouped experts, the routed
    scaling, and a separately run shared expert's output `shared` added. x [N, H] -> [N, H]."""
    if fused_slot >= 0:
        w, slots = with_fused_slot(w, slots, fused_slot, fused_weight)
    out = experts_grouped(x, w, slots, w13, w2, alpha, limit, use_mm) * scale
    return out if shared is None else out + shared


UNFUSED_SIZES = "shared expert intermediate differs from a routed expert's; cannot share the grouped GEMM"


class MoE(nn.Module):
    """All experts on one device; parallel.apply narrows them (TP: intermediate, EP: whole experts)."""

    def __init__(self, args, layer_id: int):
        super().__init__()
        self.layer_id = layer_id
        self.top_k, self.n_experts = args.top_k, args.n_experts
        self.scale = args.routed_scaling_factor
        self.alpha, self.limit = args.swiglu_alpha, args.swiglu_limit
        self.e0, self.n_local = 0, args.n_experts  # experts e0 .. e0+n_local-1 live here (EP holds a range)
        h, i, si = args.hidden_size, args.moe_intermediate, args.shared_intermediate * args.n_shared_experts
        self.has_shared = args.n_shared_experts > 0
        self.fusable = self.has_shared and si == i  # the shared expert fits an expert slot
        self.unfused_reason = None if self.fusable else UNFUSED_SIZES  # why shared_expert=fused falls back
        slots = self.n_local + (1 if self.fusable else 0)
        self.gate = nn.Linear(h, args.n_experts, bias=False, dtype=torch.float32)  # router, fp32
        self.register_buffer("e_score_correction_bias", torch.zeros(args.n_experts, dtype=torch.float32))
        self.w13 = nn.Parameter(torch.empty(slots, 2 * i, h))  # [slots, 2I, H]
        self.w2 = nn.Parameter(torch.empty(slots, h, i))  # [slots, H, I]
        if self.has_shared and not self.fusable:
            self.shared_w13 = nn.Parameter(torch.empty(2 * si, h))  # [2I_s, H]
            self.shared_w2 = nn.Parameter(torch.empty(h, si))  # [H, I_s]
        # the layer's output (routed + shared); one device: identity. Under TP/EP parallel.apply hooks the
        # layer's single all-reduce here, so it runs inside layers.{i}.moe.routed.
        self.reduce = nn.Identity()

    # -- pieces -------------------------------------------------------------------------------------------
    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [N, H] -> (weights [N, k] fp32, expert ids [N, k]) (`route`)."""
        return route(x, self.gate.weight, self.e_score_correction_bias, self.top_k)

    def _shared_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        return (self.w13[self.n_local], self.w2[self.n_local]) if self.fusable else (self.shared_w13, self.shared_w2)

    def _experts_loop(self, x, w, slots) -> torch.Tensor:
        """The baseline: one gate_up + down GEMM pair per active expert (a host sync to find them)."""
        out = torch.zeros_like(x)
        n_slots = self.w13.shape[0]
        valid = (slots >= 0) & (slots < n_slots)
        counts = torch.bincount(slots[valid], minlength=n_slots)
        for e in torch.nonzero(counts).flatten().tolist():
            tok, kk = torch.where(slots == e)
            y = F.linear(swiglu_oai(F.linear(x[tok], self.w13[e]), self.alpha, self.limit), self.w2[e])
            out.index_add_(0, tok, (y * w[tok, kk, None]).to(out.dtype))
        return out

    def _align_reason(self, x: torch.Tensor) -> str | None:
        """grouped_mm needs 16-byte aligned row strides on both operands."""
        es = x.element_size()
        dims = (self.w13.shape[2], self.w13.shape[1], self.w2.shape[2])
        if any(d * es % 16 for d in dims):
            return f"grouped_mm needs 16-byte aligned strides; expert dims {dims} in {x.dtype} are not"
        return None

    # -- forward ------------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, state) -> torch.Tensor:
        """x: [B, T, H] -> [B, T, H]."""
        b, t, h = x.shape
        x = x.view(-1, h)
        p = f"layers.{self.layer_id}.moe"
        sw, log = state.switches, state.dispatch
        fuse = sw.shared_expert == "fused" and self.fusable
        kernels = state.kernel("triton_moe")
        with scope(f"{p}.router"):
            if kernels:  # this rank's weight slots and their weights, the routed scaling and the fused slot applied
                from .kernels.fused_moe import moe_route  # imports Triton: only where its kernels run

                ids, tw = moe_route(x, self.gate.weight, self.e_score_correction_bias, self.top_k, self.e0,
                                    self.n_local, self.n_local if fuse else -1, 1.0 / self.scale, self.scale)
            else:
                w, ids = call(state.compiled, route, x, self.gate.weight, self.e_score_correction_bias, self.top_k)
        if self.has_shared:
            log.log(layer=self.layer_id, op="moe.shared", impl="fused" if fuse else "separate",
                    requested=sw.shared_expert, scope=f"{p}.routed" if fuse else f"{p}.shared",
                    reason=self.unfused_reason if sw.shared_expert == "fused" and not fuse else None)
        shared = None
        if self.has_shared and not fuse:
            with scope(f"{p}.shared"):
                shared = call(state.compiled, expert_mlp, x, *self._shared_weights(), self.alpha, self.limit)  # [N, H]
        with scope(f"{p}.routed"):  # the MoE layer's single all-reduce (TP/EP) is attributed here
            if kernels:
                from .kernels.ops import fused_experts  # imports Triton: only where its kernels run

                out = fused_experts(x, self.w13, self.w2, tw, ids, self.alpha, self.limit)  # [N, H]
                if shared is not None:
                    out = out + shared
                log.log(layer=self.layer_id, op="moe.experts", impl="triton", requested="triton", scope=f"{p}.routed")
            else:
                out = self._routed(x, w, ids, fuse, shared, state)
            return self.reduce(out).view(b, t, h)

    def _routed(self, x, w, ids, fuse: bool, shared, state) -> torch.Tensor:
        """The routed experts through PyTorch (loop or grouped GEMM) -> [N, H]; logs the `moe.experts` row (with the
        Triton switch's reason when it was requested and could not run)."""
        p = f"layers.{self.layer_id}.moe"
        sw, log = state.switches, state.dispatch
        slots = ids  # [N, k] expert id -> local weight slot
        if self.n_local < self.n_experts:  # only experts e0.. are here (EP): others' pairs get slot -1
            slots = (ids - self.e0).masked_fill((ids < self.e0) | (ids >= self.e0 + self.n_local), -1)
        wanted = state.kernels.get("triton_moe", False) is not False  # requested, could not run
        if sw.moe_impl == "loop":
            if fuse:  # the shared expert as an always-selected extra slot, weight 1/scale
                w, slots = with_fused_slot(w, slots, self.n_local, 1.0 / self.scale)
            out = self._experts_loop(x, w, slots) * self.scale  # [N, H]
            if shared is not None:
                out = out + shared
            log.log(layer=self.layer_id, op="moe.experts", impl="loop", requested="triton" if wanted else "loop",
                    scope=f"{p}.routed", reason=state.kernels.get("triton_moe") if wanted else None)
            return out
        why = self._align_reason(x) or grouped_mm_unavailable(x.device, x.dtype)
        if why is None and state.compiled and x.dtype != torch.bfloat16:
            # torch's meta function of _grouped_mm (what Dynamo traces with) takes bf16 only
            why = f"torch.compile traces grouped_mm in bfloat16 only, not {x.dtype}"
        out = call(state.compiled, routed_grouped, x, w, slots, self.w13, self.w2, self.alpha, self.limit,
                   why is None, self.n_local if fuse else -1, 1.0 / self.scale, self.scale, shared)
        impl = "grouped_mm" if why is None else "grouped_bmm"
        reason = "; ".join(filter(None, (state.kernels.get("triton_moe"), why))) if wanted else why
        log.log(layer=self.layer_id, op="moe.experts", impl=impl, requested="triton" if wanted else "grouped_mm",
                scope=f"{p}.routed", reason=reason)
        return out
