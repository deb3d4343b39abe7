"""Helpers shared by the commands: consoles, JSON output, common options."""

from __future__ import annotations

import sys
from typing import Any

import click
import orjson
from rich.console import Console

from mmprof.errors import MmprofError
from mmprof.fileio import note_input, track_inputs
from mmprof.fileout import atomic_write
from mmprof.render.safe import SafeConsole, json_text


_VERDICT: list[int] = []  # the exit code a command decided before printing (a gate's verdict)


def verdict(code: int) -> int:
    """Note the exit code a command has decided before it prints its output: if the reader of stdout goes away
    meanwhile (`mmprof verify-fastpath P | head -1`), the command ends quietly with this code, so a gate keeps its
    verdict (mmprof.cli.main). Returns `code`."""
    _VERDICT[:] = [code]
    return code


def reset_verdict() -> None:
    _VERDICT.clear()


def decided_code() -> int:
    """The code noted by `verdict` (0 when the command noted none: its output was its result)."""
    return _VERDICT[-1] if _VERDICT else 0


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


json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print machine-readable JSON instead of tables (errors too: {\"error\": ...}).")


def wants_json(args: list[str]) -> bool:
    """Whether a command line asks for --json (before a `--` that starts a wrapped command): its errors then come
    as JSON too (mmprof.cli.main's error paths call `echo_json_error`)."""
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def echo_json_error(message: str, kind: str, exit_code: int) -> None:
    """The error of a --json command as one JSON object on stdout: {"error": {"type", "message", "exit_code"}}."""
    echo_json({"error": {"type": kind, "message": message, "exit_code": exit_code}, "exit_code": exit_code})


# One spelling per dtype across commands, both names accepted everywhere: `mmprof run --dtype bf16` and
# `mmprof shapes --dtype bfloat16` mean the same as the commands' own spellings.
DTYPE_ALIASES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
                 "half": "float16", "fp32": "float32", "float32": "float32", "float": "float32"}
SHORT_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


class DtypeType(click.ParamType):
    """A dtype option that accepts the short (bf16) and the torch (bfloat16) names and gives the command's own
    spelling (`short=True`: bf16 / fp16 / fp32; else bfloat16 / float16 / float32), limited to `allowed`."""

    name = "dtype"

    def __init__(self, allowed: tuple[str, ...], short: bool) -> None:
        self.allowed, self.short = allowed, short

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:  # click >= 8.2 adds ctx
        return "[" + "|".join(self.allowed) + "]"

    def convert(self, value, param, ctx):
        full = DTYPE_ALIASES.get(str(value).strip().lower())
        out = (SHORT_DTYPE.get(full, full) if self.short else full) if full else None
        if out is None or out not in self.allowed:
            names = sorted({k for k, v in DTYPE_ALIASES.items() if (SHORT_DTYPE.get(v, v) if self.short else v)
                            in self.allowed})
            self.fail(f"{str(value)[:20]!r} is not a dtype this command takes ({', '.join(names)})", param, ctx)
        return out


class Real(click.FloatRange):
    """The one type of every real-valued option: a finite number within [min, max]. click's FloatRange lets NaN
    through (every comparison with NaN is false: `ranks --threshold nan` was accepted) and inf where no max is
    set; here both are a one-line usage error, exit 2."""

    name = "number"

    def convert(self, value, param, ctx):
        import math

        v = click.types.FloatParamType.convert(self, value, param, ctx)
        if not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(v, param, ctx)


class Count(click.IntRange):
    """The one type of every integer option: a whole number within [min, max] (negative counts, sizes and ranks
    are refused in one line, never passed on)."""

    name = "integer"


def count(min: int = 0, max: int | None = None) -> Count:
    return Count(min=min, max=max)


RANK = count(0, 2**31 - 1)  # mmprof.profiles.schema.MAX_RANK (not imported: `rules`, `--help` load no numpy)


graph_ref_option = click.option(
    "--graph-ref", "graph_ref", metavar="PROFILE",
    help="A profile (or trace) of the same work run without CUDA/HIP graphs: replayed kernels that no capture in "
         "the input explains take the ops of the same kernel sequence there (docs/graphs.md).")


store_option = click.option(
    "--store", "store", metavar="DIR", envvar="MMPROF_STORE", show_envvar=True,
    help="A profile store (a folder of Parquet files, docs/scale.md): the run is added to it.")
required_store_option = click.option(
    "--store", "store", metavar="DIR", envvar="MMPROF_STORE", show_envvar=True, required=True,
    help="The profile store (a folder of Parquet files written by `mmprof store add`, docs/scale.md).")


def add_to_store(store: str, profile, name: str, **overrides):
    """Add one Profile to the store named by --store (the run's metadata from the profile, `overrides` first);
    returns the store's RunInfo."""
    from mmprof.store.catalog import add_profile  # pyarrow is imported only when a store is named

    return add_profile(store, profile, name, overrides)


log_option = click.option(
    "--log", "log_file", metavar="FILE", type=click.Path(dir_okay=False),
    help="The engine's log of this run (its stdout / stderr saved to a file; gzip or xz read too): what it says it "
         "chose (backends, tuned or default configs, graph / compile mode, fallbacks) is read as facts and judged "
         "beside the kernels (docs/logs.md). Replaces a log the profile holds; `mmprof record` keeps one itself.")


def with_log_file(profile, log_file: str | None):
    """The profile with the --log FILE's lines as its log (unchanged without --log)."""
    if log_file is None:
        return profile
    from mmprof.importers.logs import attach_log_file  # see load_ref

    return attach_log_file(profile, log_file)


def load_ref(graph_ref: str | None):
    """The --graph-ref profile (or trace), or None."""
    # imported here, not at the top: commands that read no trace (rules, --help) never load pandas/numpy
    from mmprof.importers import import_paths

    return import_paths([graph_ref]) if graph_ref else None


def load_any(path: str, graph_ref: str | None = None):
    """A saved Profile or raw traces (a file or a directory), imported on the fly; `graph_ref` as the option."""
    from mmprof.importers import import_paths  # see load_ref

    return import_paths([path], graph_ref=load_ref(graph_ref))


_junit: dict = {}


def junit_on_error(junit_path: str | None, profile: str | None, inputs) -> None:
    """`verify-fastpath --junit FILE`: FILE is written on every exit path (docs/fastpath.md). The inputs named on
    the command line are registered first (so FILE is never one of them, even when the error comes before they
    are read); `write_junit_for_error` (called by mmprof.cli.main's error path) writes one <error> test case."""
    _junit.clear()
    inputs = [str(f) for f in inputs if f]
    for f in inputs:
        note_input(f)
    if junit_path:
        _junit.update(path=junit_path, profile=profile, inputs=inputs)


def write_junit_for_error(e: BaseException) -> None:
    path = _junit.pop("path", None)
    if not path:
        return
    from mmprof.render.junit import write_error_junit

    msg = str(e) if isinstance(e, MmprofError) else f"internal error: {type(e).__name__}: {e}"
    try:
        with track_inputs():  # the command's own tracking has closed with it: the inputs again, before writing
            for f in _junit.get("inputs") or []:
                note_input(f)
            write_error_junit(msg, path, type(e).__name__, _junit.get("profile"))
    except Exception:  # the JUnit path itself is bad: the original error is the one to report
        pass


def write_text(path: str, text: str) -> None:
    """Write a report file atomically; '-' writes to stdout."""
    if path == "-":
        click.echo(text, nl=False)
        return
    atomic_write(path, text.encode("utf-8"), compress=False)
