"""`mmprof shapes`: the tensor shapes that land on each rank after TP/EP sharding, with findings.

Three sources, one result object (`mmprof.capture.workflows.shapes`): analytic (meta-device build per rank, the
default), `--live` (real ranks of the reference runtime) and `--profile P` (GEMM-like ops recorded with shapes in
per-rank traces). `--check` exits 1 on an error-level finding.
"""

from __future__ import annotations

import click

from mmprof.capture.workflows.shapes import analytic_shapes, live_shapes, profile_shapes
from mmprof.cli._common import console, echo_json, json_option, verdict
from mmprof.errors import BadInput
from mmprof.render.text.shapes import render_shapes


@click.command("shapes")
@click.option("--tp", type=click.IntRange(min=1), default=None,
              help="Tensor-parallel size (default 8 analytic, 2 live; from the profile's meta with --profile).")
@click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True,
              help="Expert-parallel size: 1 (TP-MoE) or equal to --tp.")
@click.option("--model", "model", default=None, help="m3 (default), another runtime preset, or a config.json / checkpoint dir.")
@click.option("--batch", type=click.IntRange(1), default=None, help="Sequences (default 1 analytic, 2 live).")
@click.option("--seq", type=click.IntRange(1), default=None, help="Context / prompt length (default 1024 analytic, 64 live).")
@click.option("--phase", type=click.Choice(["prefill", "decode"]), default="decode", show_default=True,
              help="Which phase's GEMM M to show (analytic).")
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp32"]), default="bf16", show_default=True,
              help="Weight / KV dtype for byte counts.")
@click.option("--live", is_flag=True, help="Start real ranks of the runtime and compare what they receive.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Live ranks on CPU (gloo) or one GPU each (NCCL).")
@click.option("--decode-steps", type=click.IntRange(1, 64), default=2, show_default=True, help="Live decode steps.")
@click.option("--profile", "profiles", multiple=True, type=click.Path(),
              help="A saved Profile or raw per-rank traces recorded with shapes (repeatable).")
@click.option("--check", is_flag=True, help="Exit 1 when any finding is an error (e.g. SH005 shapes, SH006).")
@json_option
@click.pass_context
def shapes(ctx: click.Context, tp, ep, model, batch, seq, phase, dtype, live, device, decode_steps, profiles,
           check, as_json) -> None:
    """Per-rank weight shapes, GEMM problems (M x N x K), KV/index cache bytes per token and findings.

    \b
    mmprof shapes --tp 8                      # the real M3, analytic (meta device)
    mmprof shapes --tp 8 --ep 8 --phase prefill --batch 4 --seq 8192
    mmprof shapes --tp 2 --live --model tiny   # real gloo ranks on CPU, compared with analytic
    mmprof shapes --profile run.json.gz        # traced shapes: compare ranks (and config if known)
    """
    if live and profiles:
        raise BadInput("--live and --profile are separate modes; pick one")
    if profiles:
        res = profile_shapes(list(profiles), tp, ep, model, dtype)
    elif live:
        res = live_shapes(model or "tiny", 2 if tp is None else tp, ep, device, batch or 2, seq or 64, decode_steps,
                          dtype)
    else:
        res = analytic_shapes(model or "m3", 8 if tp is None else tp, ep, batch or 1, seq or 1024, phase, dtype)
    verdict(1 if check and res.has_errors else 0)  # kept if stdout's reader goes away
    if as_json:
        echo_json(res.to_dict())
    else:
        render_shapes(res, console())
    if check and res.has_errors:
        ctx.exit(1)
