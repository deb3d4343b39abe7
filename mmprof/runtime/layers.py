"""Small building blocks: Gemma RMSNorm (and its fused residual add), partial NeoX RoPE, SwiGLU-OAI.

Pure functions of tensors and Python scalars, so the compile rung (compiled.py) can run them through
torch.compile once for every layer."""

from __future__ import annotations

import torch
import torch.nn as nn


class GemmaRMSNorm(nn.Module):
    """RMSNorm computed in fp32 and scaled by (1 + w); the weight is stored zero-centred (init 0)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma RMSNorm of x [.., D] with the zero-centred weight [D] (fp32 math, x's dtype out)."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * (1.0 + weight.float())).type_as(x)


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual add and the next norm (vLLM's fused_add_rms_norm): (x + delta, rms_norm(x + delta))."""
    s = x + delta
    return s, rms_norm(s, weight, eps)


def rope_table(rotary_dim: int, theta: float, max_pos: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: [max_pos, rotary_dim] fp32 (NeoX layout: the two halves repeat the same frequencies)."""
    inv = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float, device=device) / rotary_dim))
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float, device=device), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, T, H, D]; cos/sin: [T, R] (already cast). Rotates x[..., :R] NeoX-style, passes the rest."""
    r = cos.shape[-1]
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    xr, xp = x[..., :r], x[..., r:]
    x1, x2 = xr[..., : r // 2], xr[..., r // 2 :]
    rot = torch.cat((-x2, x1), dim=-1)
    return torch.cat((xr * cos + rot * sin, xp), dim=-1)


def swiglu_oai(gate_up: torch.Tensor, alpha: float, limit: float) -> torch.Tensor:
    """[.., 2I] (gate | up, not interleaved) -> [.., I]: gate*sigmoid(alpha*gate)*(up+1), clamped."""
    gate, up = gate_up.chunk(2, dim=-1)
    gate = gate.clamp(max=limit)
    up = up.clamp(min=-limit, max=limit)
    return (up + 1.0) * (gate * torch.sigmoid(gate * alpha))

