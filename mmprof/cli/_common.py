"""Helpers shared by the commands: consoles, JSON output, common options."""

from __future__ import annotations

import sys
from typing import Any

import click
import orjson
from rich.console import Console

from mmprof.fileio import atomic_write
from mmprof.importers import import_paths
from mmprof.render.safe import SafeConsole, json_text


def console(stderr: bool = False) -> Console:
    """The console every command prints through: mmprof.render.safe.SafeConsole makes names inert at the sink."""
    return SafeConsole(stderr=stderr, highlight=False, soft_wrap=False)


def echo_json(obj: Any) -> None:
    """Print one JSON document on stdout (numpy values allowed; terminal control characters escaped)."""
    text = orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
                        | orjson.OPT_NON_STR_KEYS, default=_default).decode()
    sys.stdout.write(json_text(text))  # DEL, C1, bidi controls, U+2028/2029 as \\uXXXX (mmprof.render.safe)
    sys.stdout.write("\n")


def _default(o: Any) -> Any:
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"cannot serialise {type(o).__name__}")


json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of tables.")


graph_ref_option = click.option(
    "--graph-ref", "graph_ref", metavar="PROFILE",
    help="A profile (or trace) of the same work run without CUDA/HIP graphs: replayed kernels that no capture in "
         "the input explains take the ops of the same kernel sequence there (docs/graphs.md).")


def load_ref(graph_ref: str | None):
    """The --graph-ref profile (or trace), or None."""
    return import_paths([graph_ref]) if graph_ref else None


def load_any(path: str, graph_ref: str | None = None):
    """A saved Profile or raw traces (a file or a directory), imported on the fly; `graph_ref` as the option."""
    return import_paths([path], graph_ref=load_ref(graph_ref))


def write_text(path: str, text: str) -> None:
    """Write a report file atomically; '-' writes to stdout."""
    if path == "-":
        click.echo(text, nl=False)
        return
    atomic_write(path, text.encode("utf-8"), compress=False)
