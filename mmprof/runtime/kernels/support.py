"""Where the Triton kernels can run, and the launch configurations they use.

The kernels run on a CUDA or ROCm GPU, and on the CPU under Triton's interpreter (`TRITON_INTERPRET=1`, read by
Triton when a kernel is defined: the tests set it before the kernel modules are imported). The interpreter runs
each program with numpy; its `tl.dot` mis-reads bfloat16 operands (seen with Triton 3.6), so the kernels cast the
operands of a dot to float32 there (`F32DOT`), which multiplies the same bf16 values exactly.

Launch configurations are fixed, chosen by reasoning about the H200 (132 SMs, 4.8 TB/s HBM, 228 KB shared memory
per SM) rather than autotuned at run time (a graph replays whatever the capture launched, and autotuning inside a
capture is not possible). `CONFIGS` holds a few alternatives per kernel; `set_config(kernel, i)` picks one for the
process (benchmarks/h200/decode_kernels.py sweeps them and reports the best), `config(kernel)` is what a launcher
reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MIN_TRITON = (3, 0)


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


_TRITON: str | None | bool = False  # False: not probed yet; None: usable; str: why not


def _probe_triton() -> str | None:
    try:
        import triton
    except ImportError:
        return "triton is not installed"
    try:
        version = tuple(int(x) for x in triton.__version__.split(".")[:2])
    except ValueError:
        version = MIN_TRITON
    if version < MIN_TRITON:
        return f"triton {triton.__version__} is older than {'.'.join(map(str, MIN_TRITON))}"
    return None


def triton_unavailable(device) -> str | None:
    """None when the Triton kernels run on `device` (a torch.device); otherwise a one-line reason."""
    global _TRITON
    if _TRITON is False:
        _TRITON = _probe_triton()
    if _TRITON is not None:
        return _TRITON
    if device.type == "cuda":
        return None
    if device.type == "cpu" and interpreting():
        return None
    return f"the Triton kernels need a CUDA/ROCm GPU (or TRITON_INTERPRET=1 on the CPU), not {device.type}"


@dataclass(frozen=True)
class Config:
    """One launch configuration: tile sizes (kernel-specific meaning, see the kernel) and the Triton launch knobs."""

    block_n: int = 0
    block_k: int = 0
    block_m: int = 16
    num_warps: int = 4
    num_stages: int = 3

    def label(self) -> str:
        return f"n{self.block_n}_k{self.block_k}_m{self.block_m}_w{self.num_warps}_s{self.num_stages}"


# Per kernel: the default first, then the alternatives the H200 sweep tries. Reasoning (batch 1, `small`): an SM
# keeps the HBM busy when ~30 KB of loads are in flight (4.8 TB/s / 132 SMs at ~1 us of latency), i.e. per CTA
# stages x bytes per stage, times the CTAs resident on it.
# - gate_up: 5 experts x 1536 rows x 2048 (31.5 MB). block_n=16 rows of gate and of up per program gives
#   5 * 768/16 = 240 programs (~2 per SM), each streaming 2 x 16 x 256 bf16 (16 KB) per step through 3 stages
#   (48 KB of shared memory per CTA, ~96 KB in flight per SM). 32 rows halve the programs (120 < 132 SMs) but halve
#   the per-step overhead; 64 is for large batches (more tokens per expert, fewer re-reads of the weights).
# - down: per token the K1 experts' [H, I] slices (15.7 MB); block_n = rows of H per program: 16 -> 128 programs
#   per token (one per SM at batch 1), so each must keep more in flight: block_k=512 -> 16 KB per stage, 3 stages.
# - attention and the indexer read at most 16 blocks of 128 keys per KV head: one block per program step.
# - the router reads 1 MB of fp32 weights: 4 experts x 512 of H per program (32 x 4 programs).
CONFIGS: dict[str, tuple[Config, ...]] = {
    "gate_up": (Config(block_n=16, block_k=256, num_warps=4, num_stages=3),
                Config(block_n=16, block_k=512, num_warps=4, num_stages=3),
                Config(block_n=32, block_k=128, num_warps=4, num_stages=4),
                Config(block_n=64, block_k=128, num_warps=8, num_stages=3)),
    "down": (Config(block_n=16, block_k=512, num_warps=4, num_stages=3),
             Config(block_n=16, block_k=256, num_warps=4, num_stages=4),
             Config(block_n=32, block_k=256, num_warps=4, num_stages=3),
             Config(block_n=64, block_k=128, num_warps=8, num_stages=3)),
    "router": (Config(block_n=4, block_k=512, num_warps=4, num_stages=1),
               Config(block_n=8, block_k=256, num_warps=4, num_stages=1),
               Config(block_n=2, block_k=1024, num_warps=8, num_stages=1)),
    "attention": (Config(num_warps=4, num_stages=2), Config(num_warps=8, num_stages=2),
                  Config(num_warps=4, num_stages=1)),
    "index_score": (Config(num_warps=4, num_stages=1), Config(num_warps=8, num_stages=1)),
    "norm_rope": (Config(num_warps=1, num_stages=1), Config(num_warps=2, num_stages=1),
                  Config(num_warps=4, num_stages=1)),
}

_CHOSEN: dict[str, int] = {}


def config(kernel: str) -> Config:
    """The configuration a launcher of `kernel` uses now."""
    return CONFIGS[kernel][_CHOSEN.get(kernel, 0)]


def set_config(kernel: str, index: int) -> Config:
    """Use alternative `index` of `kernel` from now on (the benchmark's sweep); returns it."""
    if not 0 <= index < len(CONFIGS[kernel]):
        raise IndexError(f"{kernel} has {len(CONFIGS[kernel])} configurations, not {index + 1}")
    _CHOSEN[kernel] = index
    return CONFIGS[kernel][index]


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


KERNEL_SWITCHES = ("triton_norm_rope", "triton_attention", "triton_moe")


def _pow2(n: int) -> bool:
    return n >= 16 and n & (n - 1) == 0


def shape_unsupported(switch: str, args, moe_intermediate: int) -> str | None:
    """Why `switch`'s kernels cannot take this model's shapes (ModelArgs; the rank's local expert intermediate),
    or None."""
    if switch == "triton_attention":
        sparse = "sparse" in args.attn_types
        dims = {"head_dim": args.head_dim, "index_block_size": args.index_block_size}
        if sparse:
            dims["index_head_dim"] = args.index_head_dim
        bad = [f"{k} {v}" for k, v in dims.items() if not _pow2(v)]
        if bad:
            return f"the Triton attention kernels need powers of two >= 16 ({', '.join(bad)})"
    if switch == "triton_moe" and "moe" in args.mlp_types and moe_intermediate % 16:
        return f"the Triton MoE kernels need an expert intermediate that is a multiple of 16, not {moe_intermediate}"
    return None
