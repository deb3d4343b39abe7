"""Option stacks shared by commands: the runtime's switches and workload (`mmprof run`, `verify-fastpath --run`)."""

from __future__ import annotations

import sys

import click

from mmprof.analysis.shape_match import match_profile
from mmprof.capture.run_options import PRESET_NAMES, RunOptions
from mmprof.errors import BadInput
from mmprof.modelspec import ModelSpec


def switch_options(f):
    """The runtime switches as options (shared with `mmprof demo`'s documentation)."""
    opts = [
        click.option("--fast", "base", flag_value="fast", default=True,
                     help="Start from the fast paths: grouped experts, fused shared expert, block reuse K=4, sparse."),
        click.option("--baseline", "base", flag_value="baseline",
                     help="Start from the baseline: loop experts, separate shared expert, selection per layer."),
        click.option("--moe-impl", type=click.Choice(["loop", "grouped"]),
                     help="Routed experts: per-expert loop or one grouped GEMM."),
        click.option("--shared-expert", type=click.Choice(["separate", "fused"]),
                     help="Shared expert as its own MLP or fused into the routed GEMM."),
        click.option("--block-reuse", type=click.IntRange(min=1), metavar="K",
                     help="One sparse layer computes the block selection, the next K-1 reuse it "
                          "(1 = every layer computes)."),
        click.option("--attention", type=click.Choice(["sparse", "dense"]),
                     help="Sparse (MSA) or dense attention in the sparse layers."),
        click.option("--graphs/--no-graphs", default=None,
                     help="Replay decode steps as a CUDA/HIP graph (captured at step 2; --device cuda, grouped "
                          "experts). Off in both bases."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def workload_options(f):
    """Model, device and workload options (shared with `mmprof verify-fastpath --run`)."""
    opts = [
        click.option("--preset", default="tiny", show_default=True,
                     type=click.Choice(list(PRESET_NAMES)),
                     help="Model size: tiny (CPU, seconds), small (one GPU), m3-rank-slice (one TP=8 rank of M3), m3."),
        click.option("--config", "config", type=click.Path(), default=None,
                     help="A Hugging Face config.json (or checkpoint directory) instead of a preset."),
        click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True),
        click.option("--dtype", type=click.Choice(["float32", "bfloat16"]), default=None,
                     help="Weights and activations [default: float32 on cpu, bfloat16 on cuda]."),
        click.option("--batch", type=int, default=1, show_default=True, help="Sequences decoded together (concurrency)."),
        click.option("--prompt-len", type=int, default=128, show_default=True, help="Prompt tokens per sequence."),
        click.option("--decode-steps", type=int, default=8, show_default=True,
                     help="Greedy decode steps after the prefill."),
        click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True, help="Seed for the weights and the random prompt."),
    ]
    for o in reversed(opts):
        f = o(f)
    return switch_options(f)


def run_options(preset, config, device, dtype, batch, prompt_len, decode_steps, seed, base, moe_impl, shared_expert,
                block_reuse, attention, graphs=None, **rest):
    """RunOptions from the values of `workload_options` (+ capture/tp/... in `rest`)."""
    dtype = dtype or ("bfloat16" if device == "cuda" else "float32")
    return RunOptions(preset=preset, config=config, device=device, dtype=dtype, batch=batch, prompt_len=prompt_len,
                      decode_steps=decode_steps, seed=seed, base=base, moe_impl=moe_impl, shared_expert=shared_expert,
                      block_reuse=block_reuse, attention=attention, graphs=graphs,
                      command=["mmprof", *sys.argv[1:]] if sys.argv and sys.argv[0].endswith("mmprof") else None,
                      **rest)


def model_options(f):
    """--model / --tp / --ep: a model config whose per-rank GEMM shapes label the trace's ops (for traces with
    shapes but no annotations or module events)."""
    opts = [
        click.option("--model", "model", type=click.Path(), default=None,
                     help="A Hugging Face config.json (or checkpoint dir): label ops by matching their shapes with "
                          "the model's per-rank GEMMs (traces with shapes but no annotations or module events)."),
        click.option("--tp", type=click.IntRange(min=1), default=None,
                     help="Tensor-parallel size of the traced run (default: the trace's world size)."),
        click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Expert-parallel size: 1 or equal to --tp."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def shape_regions(profile, model: str | None, tp: int | None, ep: int):
    """Regions from --model (None without it)."""
    if model is None:
        if tp is not None or ep != 1:
            raise BadInput("--tp/--ep describe the traced run for --model; give --model CONFIG too")
        return None
    return match_profile(profile, ModelSpec.load(model), tp, ep).regions
