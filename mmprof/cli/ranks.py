"""`mmprof ranks PROFILE`: imbalance across ranks, the straggler and what it did instead, collective bandwidth."""

from __future__ import annotations

import click

from mmprof.analysis.ranks.imbalance import THRESHOLD, rank_analysis
from mmprof.cli._common import Real, console, echo_json, json_option, load_any
from mmprof.cli._options import model_options, shape_regions
from mmprof.render.text.ranks import STEP_ROWS, render_ranks


@click.command("ranks")
@click.argument("profile", type=click.Path(dir_okay=True))
@json_option
@click.option("--phase", metavar="PHASE", help="Only this phase (prefill, decode).")
@click.option("--threshold", type=Real(0, 1), default=THRESHOLD, show_default=True,
              help="Imbalance (spread of the ranks' waiting, as a share of the step) that makes a finding.")
@click.option("--step-rows", "step_rows", type=click.IntRange(min=0), default=STEP_ROWS, show_default=True,
              help="Rows of the straggler-per-step table.")
@click.option("--steps", "old_step_rows", type=click.IntRange(min=0), default=None, hidden=True,
              help="Deprecated name of --step-rows (record --steps captures N steps; this one only sets table rows).")
@model_options
def ranks(profile: str, as_json: bool, phase: str | None, threshold: float, step_rows: int,
          old_step_rows: int | None, model: str | None, tp: int | None, ep: int) -> None:
    """Per rank and phase: step time, busy time, time in collectives split into transfer and waiting for the
    slowest peer; the straggler of each step and the regions where it spent its extra time; bus bandwidth per
    collective and message size against the link peak; a verdict per phase. Rank clocks need not be aligned."""
    if old_step_rows is not None:  # the old spelling still works, with a word
        console(stderr=True).print("mmprof: warning: `ranks --steps` is deprecated, use --step-rows (it sets the rows "
                                   "of the straggler table; `record --steps` captures N steps)")
        step_rows = old_step_rows
    prof = load_any(profile)
    result = rank_analysis(prof, shape_regions=shape_regions(prof, model, tp, ep), threshold=threshold, phase=phase)
    if as_json:
        echo_json(result.to_dict())
    else:
        render_ranks(result, console(), step_rows)
