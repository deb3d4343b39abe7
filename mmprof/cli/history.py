"""`mmprof history --store DIR`: step time, top regions and dispatched variants over runs; `--check` gates CI."""

from __future__ import annotations

import click

from mmprof.cli._common import Real, console, count, echo_json, json_option, required_store_option
from mmprof.render.text.history import render_history


@click.command("history")
@required_store_option
@click.option("--phase", default=None, help="Only this phase (prefill, decode, mixed) [default: all].")
@click.option("--model", default=None, help="Only runs of this model.")
@click.option("--engine", default=None, help="Only runs of this engine.")
@click.option("--tp", type=count(1), default=None, help="Only runs of this tensor-parallel size.")
@click.option("--label", default=None, help="Only runs with this label.")
@click.option("--last", type=click.IntRange(min=1), default=None, help="Only the newest N runs.")
@click.option("--check", is_flag=True,
              help="Gate: exit 1 when the newest run's dominant variant of a watched region changed or a step time "
                   "grew beyond the threshold and the noise, against the run before it in its series.")
@click.option("--threshold", type=Real(0, 10), default=0.05, show_default=True,
              help="With --check: a step time growth (fraction) that fails when also beyond the noise band.")
@click.option("--baseline", default=None, metavar="RUN", help="With --check: compare with this run instead.")
@click.option("--candidate", default=None, metavar="RUN", help="With --check: judge this run instead of the newest.")
@json_option
def history(store: str, phase: str | None, model: str | None, engine: str | None, tp: int | None,
            label: str | None, last: int | None, check: bool, threshold: float, baseline: str | None,
            candidate: str | None, as_json: bool) -> None:
    """Show every run of the store (oldest first); with --check, judge the newest against the one before it."""
    from mmprof.store.history import gate, load_history

    h = load_history(store, phase=phase, last=last,
                     filters={"model": model, "engine": engine, "tp": tp, "label": label})
    if check:
        gate(h, threshold=threshold, baseline=baseline, candidate=candidate)
    if as_json:
        echo_json(h.to_dict())
    else:
        render_history(h, console())
    raise SystemExit(h.exit_code)
