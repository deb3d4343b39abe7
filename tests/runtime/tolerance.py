"""Numeric tolerances derived from the dtype and the op, not fitted to a machine (issue 25: a bound that held on
one CPU failed on an AMD EPYC, whose vector units round bf16 sums in another order).

Two runs of the same model that sum in a different order (a grouped GEMM vs a loop over experts, attention over
the masked capacity vs the filled keys, another CPU's SIMD width) round differently. A reordered sum of K terms
differs by about sqrt(K) units in the last place of its result (the rounding errors have random signs), and
each layer adds its own (the residual stream carries them to the logits). So

    tol = n_layers * sqrt(K) * ulp(dtype, max |logit|)

with K the longest reduction of the ops that differ. A real bug (a stale cache slot, a wrong mask, a wrong
expert) moves logits by O(1), far outside it.
"""

from __future__ import annotations

import math

import torch

# significand bits after the leading one (torch.finfo(dtype).eps == 2**-MANT)
_MANT = {torch.float32: 23, torch.bfloat16: 7, torch.float16: 10, torch.float64: 52}


def ulp(dtype, x: float) -> float:
    """The spacing of `dtype` numbers at magnitude x: 2**(floor(log2 |x|) - mantissa bits)."""
    m = _MANT[dtype]
    return 2.0 ** (math.floor(math.log2(max(abs(float(x)), float(torch.finfo(dtype).tiny)))) - m)


def reorder_tolerance(dtype, logits, n_layers: int, k: int) -> float:
    """How far two runs that sum the same terms in another order may part (module docstring)."""
    mag = max(float(x.abs().max()) for x in logits)
    return n_layers * math.sqrt(k) * ulp(dtype, mag)


def longest_reduction(args, keys: int) -> int:
    """The longest sum in a forward of the model: a GEMM's K (hidden, MLP widths) or attention over `keys`."""
    return max(args.hidden_size, args.dense_intermediate, args.moe_intermediate, args.shared_intermediate, keys)


def assert_same_tokens_unless_near_tie(a, b, tol: float) -> None:
    """Greedy tokens agree step by step; where they part, a's top-2 logits must be a near-tie (within 2 tol:
    each run may be off by tol); later steps legitimately diverge (they decode other text)."""
    for i, lg in enumerate(a.logits):
        differ = a.tokens[:, i] != b.tokens[:, i]
        if not bool(differ.any()):
            continue
        top2 = lg.float()[differ].topk(2, dim=-1).values
        margin = float((top2[:, 0] - top2[:, 1]).max())
        assert margin <= 2 * tol, f"step {i}: tokens differ with a top-2 margin {margin} > 2 x {tol}"
        return
