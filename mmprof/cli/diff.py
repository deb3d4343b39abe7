"""`mmprof diff BEFORE AFTER`: where the time went before and after, and where the bottleneck moved."""

from __future__ import annotations

from pathlib import Path

import click

from mmprof.analysis.compare.diff import diff_profiles
from mmprof.cli._common import RANK, console, echo_json, json_option, load_any, write_text
from mmprof.cli._options import model_options, shape_regions
from mmprof.render.html import diff_html
from mmprof.render.markdown import diff_markdown
from mmprof.render.text.report import render_diff


@click.command("diff")
@click.argument("before", type=click.Path(dir_okay=True))
@click.argument("after", type=click.Path(dir_okay=True))
@json_option
@click.option("--markdown", "markdown_file", metavar="FILE", help="Also write a Markdown summary (for a PR comment); '-' for stdout.")
@click.option("--html", "html_file", metavar="FILE", help="Also write one self-contained HTML file with plots.")
@click.option("--phase", metavar="PHASE", help="Phase to compare (prefill, decode); default decode when both have it.")
@click.option("--rank", type=RANK, metavar="R", help="Compare one rank only.")
@model_options
def diff(before: str, after: str, as_json: bool, markdown_file: str | None, html_file: str | None,
         phase: str | None, rank: int | None, model: str | None, tp: int | None, ep: int) -> None:
    """Compare two profiles (saved Profiles or raw traces): step time, category shares, the verdict of where the
    bottleneck moved, kernel variants that appeared or vanished, and top deltas by scope, layer and rank."""
    pb, pa = load_any(before), load_any(after)
    regions = (shape_regions(pb, model, tp, ep), shape_regions(pa, model, tp, ep))
    result = diff_profiles(pb, pa, phase=phase, rank=rank, labels=(Path(before).name, Path(after).name),
                           shape_regions=regions)
    if markdown_file:
        write_text(markdown_file, diff_markdown(result))
    if html_file:
        write_text(html_file, diff_html(result))
    if as_json:
        echo_json(result.to_dict())
    elif markdown_file != "-":
        render_diff(result, console())
