"""`mmprof store add PROFILE... --store DIR`: keep runs in a Parquet profile store (docs/scale.md)."""

from __future__ import annotations

import click

from mmprof.cli._common import add_to_store, console, echo_json, json_option, load_any, required_store_option
from mmprof.render.text.store import render_store_add


@click.group("store")
def store() -> None:
    """Keep every run's tables in a Parquet store that `mmprof query` and `mmprof history` read."""


@store.command("add")
@click.argument("profiles", nargs=-1, required=True, type=click.Path())
@required_store_option
@click.option("--model", default=None, help="Model name of the run [default: from the profile, else unknown].")
@click.option("--engine", default=None, help="Serving engine [default: from its step annotations or source].")
@click.option("--tp", type=click.IntRange(min=1), default=None, help="Tensor-parallel size [default: from the profile].")
@click.option("--batch", type=click.IntRange(min=1), default=None, help="Batch size [default: from the profile].")
@click.option("--git-rev", default=None, help="Revision measured [default: $MMPROF_GIT_REV, CI's commit, git HEAD].")
@click.option("--label", default=None, help="Free text kept with the run (e.g. nightly, pr-123).")
@json_option
def add(profiles: tuple[str, ...], store: str, model: str | None, engine: str | None, tp: int | None,
        batch: int | None, git_rev: str | None, label: str | None, as_json: bool) -> None:
    """Add PROFILE files (saved Profiles, or traces imported on the fly) to the store, one run each."""
    infos = [add_to_store(store, load_any(p), p, model=model, engine=engine, tp=tp, batch=batch, git_rev=git_rev,
                          label=label) for p in profiles]
    if as_json:
        echo_json({"store": store, "runs": [i.to_dict() for i in infos]})
        return
    render_store_add(infos, store, console())
