"""`mmprof shapes`: the tensor shapes that land on each rank after TP/EP sharding, with findings.

Three sources, one result object (`mmprof.capture.workflows.shapes`): analytic (meta-device build per rank of the
reference runtime, the default, or `--engine NAME`: that engine's layout from rules/layouts.toml), `--live` (real
ranks of the reference runtime) and `--profile P` (GEMM-like ops recorded with shapes in per-rank traces, compared
with the layout of the engine that wrote them). `--check` exits 1 on an error-level finding.
"""

from __future__ import annotations

import click

from mmprof.capture.workflows.shapes import analytic_shapes, live_shapes, profile_shapes
from mmprof.cli._common import DtypeType, console, echo_json, json_option, verdict, write_text
from mmprof.errors import BadInput
from mmprof.render.html import shapes_html
from mmprof.render.markdown import shapes_markdown
from mmprof.render.text.shapes import render_shapes


@click.command("shapes")
@click.option("--tp", type=click.IntRange(min=1), default=None,
              help="Tensor-parallel size (default 8 analytic, 2 live; from the profile's meta with --profile).")
@click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True,
              help="Expert-parallel size: 1 (TP-MoE) or equal to --tp.")
@click.option("--model", "model", default=None, help="m3 (default), another runtime preset, or a config.json / checkpoint dir.")
@click.option("--engine", default=None, metavar="NAME",
              help="Whose layout: runtime (default), vllm-cuda, vllm-rocm, sglang-cuda, sglang-rocm, transformers, or "
                   "an engine name (vllm: its layout on the trace's platform). With --profile: default the engine "
                   "that wrote the trace.")
@click.option("--layout", "layout_opts", multiple=True, metavar="KEY=VALUE",
              help="A switch of the engine's layout, e.g. fused_shared=on (vllm-rocm), index_topk_freq=4, "
                   "shared_fusion=off (sglang), shared_expert=separate (runtime); repeatable.")
@click.option("--batch", type=click.IntRange(1), default=None, help="Sequences (default 1 analytic, 2 live).")
@click.option("--seq", type=click.IntRange(1), default=None, help="Context / prompt length (default 1024 analytic, 64 live).")
@click.option("--phase", type=click.Choice(["prefill", "decode"]), default="decode", show_default=True,
              help="Which phase's GEMM M to show (analytic).")
@click.option("--dtype", type=DtypeType(("bf16", "fp16", "fp32"), short=True), default="bf16", show_default=True,
              help="Weight / KV dtype for byte counts (bf16 or bfloat16, fp16 or float16, fp32 or float32).")
@click.option("--live", is_flag=True, help="Start real ranks of the runtime and compare what they receive.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Live ranks on CPU (gloo) or one GPU each (NCCL).")
@click.option("--decode-steps", type=click.IntRange(1, 64), default=2, show_default=True, help="Live decode steps.")
@click.option("--profile", "profiles", multiple=True, type=click.Path(),
              help="A saved Profile or raw per-rank traces recorded with shapes (repeatable).")
@click.option("--check", is_flag=True, help="Exit 1 when any finding is an error (e.g. SH005 shapes, SH006).")
@click.option("--markdown", "markdown_file", metavar="FILE", help="Also write Markdown (a PR comment); '-' for stdout.")
@click.option("--html", "html_file", metavar="FILE", help="Also write one self-contained HTML page.")
@json_option
@click.pass_context
def shapes(ctx: click.Context, tp, ep, model, engine, layout_opts, batch, seq, phase, dtype, live, device,
           decode_steps, profiles, check, markdown_file, html_file, as_json) -> None:
    """Per-rank weight shapes, GEMM problems (M x N x K), KV/index cache bytes per token and findings.

    \b
    mmprof shapes --tp 8                      # the real M3, analytic (meta device)
    mmprof shapes --tp 8 --engine vllm-rocm --layout fused_shared=on   # vLLM's ROCm layout with FSE
    mmprof shapes --tp 8 --ep 8 --phase prefill --batch 4 --seq 8192
    mmprof shapes --tp 2 --live --model tiny   # real gloo ranks on CPU, compared with analytic
    mmprof shapes --profile run.json.gz        # traced shapes: compare ranks (and config if known)
    """
    if live and profiles:
        raise BadInput("--live and --profile are separate modes; pick one")
    if live and (engine or layout_opts):
        raise BadInput("--live runs the reference runtime's ranks: --engine / --layout do not apply")
    if profiles:
        res = profile_shapes(list(profiles), tp, ep, model, dtype, engine, tuple(layout_opts))
    elif live:
        res = live_shapes(model or "tiny", 2 if tp is None else tp, ep, device, batch or 2, seq or 64, decode_steps,
                          dtype)
    else:
        res = analytic_shapes(model or "m3", 8 if tp is None else tp, ep, batch or 1, seq or 1024, phase, dtype,
                              engine or "runtime", tuple(layout_opts))
    if markdown_file:
        write_text(markdown_file, shapes_markdown(res))
    if html_file:
        write_text(html_file, shapes_html(res))
    verdict(1 if check and res.has_errors else 0)  # kept if stdout's reader goes away
    if as_json:
        echo_json(res.to_dict())
    elif markdown_file != "-":
        render_shapes(res, console())
    if check and res.has_errors:
        ctx.exit(1)
