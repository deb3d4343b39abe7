"""GEMM-like and attention calls by op name, and (M, N, K, groups) from a call's input shapes.

Shared by the shape checks (`mmprof.analysis.checks.shapes_observed`) and shape matching
(`mmprof.analysis.shapes.shape_match`); it imports neither.
"""

from __future__ import annotations

import math
import re

GEMM_OPS = re.compile(r"(^|::|\.)(mm|addmm|bmm|baddbmm|matmul|linear|_grouped_mm|grouped_mm|_scaled_mm|"
                      r"_scaled_grouped_mm)(\.default|\.out|\.Tensor)?$|gemm|GroupedMM|fused_moe|fused_experts", re.I)
# attention calls: SDPA-style ops, and engine attention ops whose inputs are q, k, v ([T, H, D], varlen): vLLM's
# `vllm::unified_attention` / `unified_attention_with_output` (vllm/model_executor/layers/attention/attention.py)
ATTN_OPS = re.compile(r"scaled_dot_product|flash_attention|efficient_attention|cudnn_attention|flash_attn|"
                      r"^vllm::unified_attention(?:_with_output)?$", re.I)


def _base(op: str) -> str:
    """'aten::_grouped_mm', 'aten._grouped_mm.default', 'mm' -> 'grouped_mm', 'mm'."""
    name = op.split("::")[-1]
    if name.startswith(("aten.", "torch.")):
        name = name.split(".", 1)[1]
    return name.split(".")[0].lstrip("_")


def canonical(op: str, shapes: list[list[int]]) -> tuple[int, int, int, int] | None:
    """(M, N, K, groups) of a GEMM-like call from its input shapes; None when they do not say."""
    s = [x for x in shapes if isinstance(x, list)]
    base = _base(op)
    try:
        if base in ("mm",) and len(s) >= 2 and len(s[0]) == 2:
            return s[0][0], s[1][1], s[0][1], 1
        if base == "addmm" and len(s) >= 3:
            return s[1][0], s[2][1], s[1][1], 1
        if base in ("bmm", "baddbmm"):
            a, b = (s[1], s[2]) if base == "baddbmm" else (s[0], s[1])
            return a[1], b[2], a[2], a[0]
        if base == "linear" and len(s) >= 2:
            return math.prod(s[0][:-1]), s[1][0], s[1][1], 1
        if base in ("grouped_mm", "scaled_grouped_mm") and len(s) >= 2 and len(s[1]) == 3:
            return s[0][0], s[1][2], s[1][1], s[1][0]
        if base == "matmul" and len(s) >= 2 and len(s[0]) >= 2 and len(s[1]) >= 2:
            lead = s[0][:-2] or s[1][:-2]
            return s[0][-2], s[1][-1], s[0][-1], math.prod(lead) if lead else 1
    except (IndexError, TypeError):
        return None
    return None


FUSED_MOE_OPS = re.compile(r"fused_moe|fused_experts|moe_forward|fmoe", re.I)


def expert_pair(op: str, shapes: list[list[int]]) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
    """((E, N, K) of w1, (E, N, K) of w2) of a fused-MoE call that takes both expert weights (vLLM's
    `outplace_fused_experts(hidden, w1, w2, ...)`, AITER's fused MoE): hidden [T, H], w1 [E, 2I, H], w2 [E, H, I]."""
    if not FUSED_MOE_OPS.search(op or ""):
        return None
    s = [x for x in shapes if isinstance(x, list)]
    if len(s) < 3 or len(s[0]) != 2 or len(s[1]) != 3 or len(s[2]) != 3:
        return None
    h = s[0][1]
    if s[1][2] != h or s[2][1] != h or s[1][0] != s[2][0]:
        return None
    return (s[1][0], s[1][1], s[1][2]), (s[2][0], s[2][1], s[2][2])
