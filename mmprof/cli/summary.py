"""`mmprof summary PROFILE_OR_TRACE`: per-rank wall span, GPU busy/idle, top kernels, ops and streams."""

from __future__ import annotations

import click

from mmprof.analysis.views.summary import summarize
from mmprof.cli._common import RANK, console, echo_json, json_option, load_any
from mmprof.errors import NoEvidence
from mmprof.profiles.schema import TABLES
from mmprof.render.text.summary import render_summary


@click.command("summary")
@click.argument("path", type=click.Path())
@click.option("--top", type=click.IntRange(1, 1000), default=10, show_default=True, help="Rows in the top tables.")
@click.option("--rank", type=RANK, default=None, help="Only this rank.")
@click.option("--ops-by", type=click.Choice(["self", "total"]), default="self", show_default=True,
              help="Rank ops by self time or total (inclusive) time.")
@json_option
def summary(path: str, top: int, rank: int | None, ops_by: str, as_json: bool) -> None:
    """Summarise a saved Profile or a raw trace (imported on the fly)."""
    profile = load_any(path)
    if not any(profile.n(t) for t in TABLES):
        raise NoEvidence(f"{path}: the profile holds no events at all (no kernels, ops, launches, copies or "
                         "annotations): nothing to summarise")
    result = summarize(profile, top=top, rank=rank, ops_by=ops_by)
    if as_json:
        echo_json(result.to_dict())
        return
    render_summary(result, console())
