"""Triton helpers the decode kernels share (imports Triton: only the kernel modules import this)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def dot(a, b, F32DOT: tl.constexpr):
    """a @ b accumulated in fp32; fp32 operands multiply in full precision (Triton's default would be TF32 on
    NVIDIA GPUs, which the runtime's fp32 PyTorch path does not use). F32DOT: the operands are cast to fp32 first
    (Triton 3.6's interpreter mis-reads bf16 operands of a dot; support.py)."""
    if F32DOT:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    if a.dtype == tl.float32:
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)
