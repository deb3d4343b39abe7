"""`mmprof query "SQL" --store DIR`: SQL over a profile store with DuckDB (views in docs/scale.md)."""

from __future__ import annotations

import click

from mmprof.cli._common import console, echo_json, json_option, required_store_option
from mmprof.render.text.query import render_query


@click.command("query")
@click.argument("sql")
@required_store_option
@json_option
def query(sql: str, store: str, as_json: bool) -> None:
    """Run one SQL statement over the store's views: runs, kernels, ops, launches, memcpy, collectives, scopes,
    dispatch, steps, regions, variants, checks."""
    from mmprof.store.query import query as run_query

    result = run_query(store, sql)
    if as_json:
        echo_json(result.to_dict())
        return
    render_query(result, console())
