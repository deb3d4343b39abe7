"""Option stacks shared by commands: the runtime's switches and workload (`mmprof run`, `verify-fastpath --run`)."""

from __future__ import annotations

import sys
from typing import Any

import click

from mmprof.analysis.shapes.shape_match import match_profile
from mmprof.capture.workflows.run_options import PRESET_NAMES, RunOptions
from mmprof.cli._common import DtypeType, count
from mmprof.errors import BadInput
from mmprof.modelspec import ModelSpec
from mmprof.runtime import Switches, SwitchSpec


def switch_options(f):
    """The runtime switches as options (shared with `mmprof demo`'s documentation): --fast / --baseline pick the
    base, then one option per switch declared in runtime/config.py:Switches, built from its SwitchSpec."""
    opts = [
        click.option("--fast", "base", flag_value="fast", default=True,
                     help="Start from the fast paths: grouped experts, fused shared expert, block reuse K=4, sparse."),
        click.option("--baseline", "base", flag_value="baseline",
                     help="Start from the baseline: loop experts, separate shared expert, selection per layer."),
        *(switch_option(s) for s in Switches.specs()),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def switch_option(spec: SwitchSpec):
    """The click option of one switch: unset (None) unless given, so the base decides."""
    if spec.kind is bool:
        return click.option(f"{spec.option}/--no-{spec.option[2:]}", spec.name, default=None, help=spec.help)
    if spec.kind is int:
        return click.option(spec.option, spec.name, type=click.IntRange(min=spec.min), metavar=spec.metavar,
                            help=spec.help)
    return click.option(spec.option, spec.name, type=click.Choice(list(spec.choices)), help=spec.help)


def workload_options(f):
    """Model, device and workload options (shared with `mmprof verify-fastpath --run`)."""
    opts = [
        click.option("--preset", default="tiny", show_default=True,
                     type=click.Choice(list(PRESET_NAMES)),
                     help="Model size: tiny (CPU, seconds), small (one GPU), m3-rank-slice (one TP=8 rank of M3), m3."),
        click.option("--config", "config", type=click.Path(), default=None,
                     help="A Hugging Face config.json (or checkpoint directory) instead of a preset."),
        click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True),
        click.option("--dtype", type=DtypeType(("float32", "bfloat16"), short=False), default=None,
                     help="Weights and activations: float32 (fp32) or bfloat16 (bf16) [default: float32 on cpu, "
                          "bfloat16 on cuda]."),
        click.option("--batch", type=count(1), default=1, show_default=True, help="Sequences decoded together (concurrency)."),
        click.option("--prompt-len", type=count(1), default=128, show_default=True, help="Prompt tokens per sequence."),
        click.option("--decode-steps", type=count(1), default=8, show_default=True,
                     help="Greedy decode steps after the prefill."),
        click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True, help="Seed for the weights and the random prompt."),
    ]
    for o in reversed(opts):
        f = o(f)
    return switch_options(f)


def run_options(**values: Any) -> RunOptions:
    """RunOptions from the values of `workload_options` (the switches by name) and the command's own
    (capture / tp / ... as RunOptions fields)."""
    overrides = {s.name: values.pop(s.name) for s in Switches.specs() if s.name in values}
    if not values.get("dtype"):
        values["dtype"] = "bfloat16" if values.get("device") == "cuda" else "float32"
    return RunOptions(**values, overrides=overrides,
                      command=["mmprof", *sys.argv[1:]] if sys.argv and sys.argv[0].endswith("mmprof") else None)


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
