"""Helpers shared by the commands: consoles, JSON output, common options."""

from __future__ import annotations

import re
import sys
from typing import Any

import click
import orjson
from rich.console import Console

from mmprof.fileio import atomic_write


def console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False, soft_wrap=False)


# characters a terminal acts on that JSON may carry raw (DEL, C1 controls, bidi marks, overrides and isolates; C0
# controls are always escaped by the encoder): written as \\uXXXX escapes, the same JSON value, inert on a
# terminal (outside strings JSON has only ASCII punctuation and whitespace, so only string contents change)
_UNSAFE_JSON = re.compile("[\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def echo_json(obj: Any) -> None:
    """Print one JSON document on stdout (numpy values allowed; terminal control characters escaped)."""
    text = orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
                        | orjson.OPT_NON_STR_KEYS, default=_default).decode()
    sys.stdout.write(_UNSAFE_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text))
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
    # imported here, not at the top: commands that read no trace (rules, --help) never load pandas/numpy
    from mmprof.importers import import_paths

    return import_paths([graph_ref]) if graph_ref else None


def load_any(path: str, graph_ref: str | None = None):
    """A saved Profile or raw traces (a file or a directory), imported on the fly; `graph_ref` as the option."""
    from mmprof.importers import import_paths  # see load_ref

    return import_paths([path], graph_ref=load_ref(graph_ref))


def write_text(path: str, text: str) -> None:
    """Write a report file atomically; '-' writes to stdout."""
    if path == "-":
        click.echo(text, nl=False)
        return
    atomic_write(path, text.encode("utf-8"), compress=False)
