"""The expert kernels' launcher as a torch custom op, `mmprof::fused_experts`, so that torch.profiler records the
call with its input shapes and the kernels it launches are that op's children in a trace.

The schema is the convention of vLLM's and SGLang's fused-MoE ops (`vllm::inplace_fused_experts`: hidden [T, H],
w1 [E, 2I, H], w2 [E, H, I], topk_weights [T, K], topk_ids [T, K]), which mmprof's roofline already reads
(analysis/attribution/flops.py `FUSED_MOE_OPS`): the FLOPs of both expert GEMMs of every routed pair and the bytes
of at most min(E, T*K) experts come from the shapes, with no rule written for these kernels.
"""

from __future__ import annotations

import torch

from .fused_moe import fused_experts as _launch


@torch.library.custom_op("mmprof::fused_experts", mutates_args=())
def fused_experts(hidden_states: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor, alpha: float, limit: float) -> torch.Tensor:
    """kernels/fused_moe.py `fused_experts`: [T, H] -> [T, H]."""
    return _launch(hidden_states, w1, w2, topk_weights, topk_ids, alpha, limit)


@fused_experts.register_fake
def _(hidden_states, w1, w2, topk_weights, topk_ids, alpha, limit):
    return torch.empty_like(hidden_states)
