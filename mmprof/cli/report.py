"""`mmprof report PROFILE`: the bottleneck breakdown per phase and rank, and the built-in checks."""

from __future__ import annotations

import click

from mmprof.analysis.views.by_shape import by_shape
from mmprof.analysis.views.report import build_report
from mmprof.cli._common import (RANK, console, echo_json, graph_ref_option, json_option, load_any, log_option,
                                verdict, with_log_file, write_text)
from mmprof.cli._options import model_options, shape_regions
from mmprof.cli._provenance import apply_provenance, provenance_option, read_provenance
from mmprof.errors import BadInput
from mmprof.render.html import report_html
from mmprof.render.markdown import report_markdown
from mmprof.render.text.by_shape import SHAPE_ROWS, render_by_shape
from mmprof.render.text.report import render_report


@click.command("report")
@click.argument("profile", type=click.Path(dir_okay=True))
@json_option
@click.option("--phase", metavar="PHASE", help="Only this phase (prefill, decode).")
@click.option("--rank", type=RANK, metavar="R", help="Only this rank.")
@click.option("--top", type=click.IntRange(1, 100_000), default=None, help="Top kernels per phase [default: 10]; rows of the --by-shape "
              f"table [default: {SHAPE_ROWS}].")
@click.option("--by-shape", "by_shape_", is_flag=True, help="Instead: a roofline row per (region, op, input shapes, dtype) and "
              "GPU time per op (op -> its kernels).")
@click.option("--markdown", "markdown_file", metavar="FILE", help="Also write Markdown; '-' for stdout.")
@click.option("--html", "html_file", metavar="FILE", help="Also write one self-contained HTML file.")
@click.option("--check", is_flag=True,
              help="Exit 1 when a built-in fast-path check fails. Without it report is a diagnostic and exits 0 "
                   "whatever its checks line says; `mmprof verify-fastpath` is the gate.")
@model_options
@provenance_option
@graph_ref_option
@log_option
@click.pass_context
def report(ctx: click.Context, profile: str, as_json: bool, phase: str | None, rank: int | None, top: int | None,
           by_shape_: bool, markdown_file: str | None, html_file: str | None, check: bool, model: str | None, tp: int | None,
           ep: int, inductor_provenance: tuple[str, ...], graph_ref: str | None, log_file: str | None) -> None:
    """Per phase and rank: where the wall time went (compute-bound, memory-bound, communication, memcpy,
    launch-bound idle), top kernels with their roofline bound and efficiency, and a one-line bottleneck; on a
    multi-rank profile the imbalance verdict per phase (see `mmprof ranks`)."""
    if by_shape_ and (markdown_file or html_file):
        raise BadInput("--by-shape writes no Markdown or HTML: use --json for the whole table")
    prov = read_provenance(inductor_provenance)
    prof = with_log_file(load_any(profile, graph_ref), log_file)
    apply_provenance(prof, prov)
    regions = shape_regions(prof, model, tp, ep)
    if by_shape_:
        shapes = by_shape(prof, phase=phase, rank=rank, shape_regions=regions)
        if as_json:
            echo_json(shapes.to_dict())
        else:
            render_by_shape(shapes, console(), SHAPE_ROWS if top is None else top)
        return
    top = 10 if top is None else top
    result = build_report(prof, phase=phase, rank=rank, top=top, shape_regions=regions)
    if markdown_file:
        write_text(markdown_file, report_markdown(result, top))
    if html_file:
        write_text(html_file, report_html(result, top))
    verdict(1 if check and result.checks.get("status") == "fail" else 0)  # kept if stdout's reader goes away
    if as_json:
        echo_json(result.to_dict())
    elif markdown_file != "-":
        render_report(result, console())
    if check and result.checks.get("status") == "fail":
        ctx.exit(1)
