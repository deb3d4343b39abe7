"""The `mmprof` command line. Thin: parse options, call the library, render, map errors to exit codes.

Each command lives in its own module and is imported only when it runs, so `mmprof diff` on a saved
profile never imports torch.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

import click

from mmprof._version import __version__
from mmprof.errors import MmprofError
from mmprof.fileio import ENV_MAX_BYTES, ENV_MAX_EVENTS, GZIP_RATIO, track_inputs
from mmprof.fileout import remove_temporaries

# name -> (module, function, one-line help). The help lives here so `mmprof --help` imports nothing.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "demo": ("mmprof.cli.demo", "demo", "The whole story on the embedded default (tiny M3, CPU) in about a minute."),
    "run": ("mmprof.cli.run", "run", "Run the reference MiniMax M3 runtime under capture and write a Profile."),
    "record": ("mmprof.cli.record", "record", "Wrap any PyTorch command and capture every rank: mmprof record -- CMD."),
    "import": ("mmprof.cli.import_", "import_cmd", "Turn profiler output (Kineto, rocprofv3, nsys) into a Profile."),
    "summary": ("mmprof.cli.summary", "summary", "Per-rank wall span, GPU busy/idle, top kernels, ops and streams."),
    "shapes": ("mmprof.cli.shapes", "shapes", "Per-rank tensor shapes after TP/EP sharding, with findings."),
    "verify-fastpath": ("mmprof.cli.verify", "verify_fastpath", "Check which kernel variants dispatched against a spec (CI gate)."),
    "report": ("mmprof.cli.report", "report", "Bottleneck breakdown and the four checks for one profile."),
    "ranks": ("mmprof.cli.ranks", "ranks", "Imbalance across ranks: the straggler, where it is slow, waits and bus bandwidth."),
    "diff": ("mmprof.cli.diff", "diff", "Where the time went before and after, and where the bottleneck moved."),
    "export": ("mmprof.cli.export", "export", "Write a profile as a Chrome trace / Perfetto timeline with mmprof's annotations."),
    "classify": ("mmprof.cli.classify", "classify", "Kernel name -> family, variant, library and path, with coverage."),
    "rules": ("mmprof.cli.rules", "rules", "Every check code (FP, SH): what it does, why, an example, known problems."),
    "store": ("mmprof.cli.store", "store", "Keep runs in a Parquet profile store: mmprof store add PROFILE --store DIR."),
    "query": ("mmprof.cli.query", "query", "SQL over a profile store with DuckDB: kernels, steps, regions, checks."),
    "history": ("mmprof.cli.history", "history", "Step time, top regions and variants over stored runs; --check gates CI."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if _available(name)]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS or not _available(name):
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _available(name: str) -> bool:
    return importlib.util.find_spec(COMMANDS[name][0]) is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="mmprof")
@click.option("--debug", is_flag=True, envvar="MMPROF_DEBUG", help="Show tracebacks instead of one-line errors.")
@click.option("--max-input-bytes", metavar="SIZE", default=None,
              help=f"Largest input file, after gunzip (e.g. 32G; 0 = no limit) [default: 16G, and a gzip may expand "
                   f"at most {GZIP_RATIO}x; env {ENV_MAX_BYTES}].")
@click.option("--max-events", metavar="N", default=None,
              help=f"Most events / rows one input may hold (0 = no limit) [default: 50,000,000; env {ENV_MAX_EVENTS}].")
@click.pass_context
def cli(ctx: click.Context, debug: bool, max_input_bytes: str | None, max_events: str | None) -> None:
    """mmprof: profile and verify LLM inference runs of MiniMax M3 (and MoE + sparse-attention models).

    Exit codes: 0 all good, 1 a gate found violations (verify-fastpath, shapes --check, report --check),
    2 bad usage, bad input or no evidence.
    """
    global _DEBUG
    _DEBUG = bool(debug)
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    for env, value in ((ENV_MAX_BYTES, max_input_bytes), (ENV_MAX_EVENTS, max_events)):
        if value is not None:
            saved = os.environ.get(env)
            os.environ[env] = str(value)
            ctx.call_on_close(lambda env=env, saved=saved: _restore(env, saved))
    ctx.with_resource(track_inputs())  # outputs may never overwrite this command's inputs


def _restore(env: str, saved: str | None) -> None:
    if saved is None:
        os.environ.pop(env, None)
    else:
        os.environ[env] = saved


_DEBUG = False  # set by the group's --debug option (or MMPROF_DEBUG) once parsed: never from a command's arguments


class Terminated(BaseException):
    """SIGTERM / SIGHUP arrived: unwinds like Ctrl-C, so every `finally` (temporary files) runs."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum, frame):
    raise Terminated(signum)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the click app and turn every error into one line on stderr plus an exit code.

    MmprofErrors (bad input, no evidence, ...) exit with their code (2); OS errors (disk full, file too large,
    permission denied, a closed or full stdout) are one `mmprof: error:` line and exit 2; any other exception is a
    bug in mmprof but still exits 2 with one "internal error" line, never 1, which is reserved for "a check found
    violations". SIGTERM / SIGHUP / SIGINT remove the temporary files of writes in progress and exit 128+N.
    `--debug` (before the command, or MMPROF_DEBUG=1) shows the traceback instead."""
    global _DEBUG
    args = sys.argv[1:] if argv is None else argv
    _DEBUG = False
    old = {}
    for s in (signal.SIGTERM, signal.SIGHUP):
        try:
            old[s] = signal.signal(s, _on_signal)
        except (ValueError, OSError):  # not the main thread (tests calling main() from a worker)
            pass
    try:
        code = _dispatch(args)
        code = _finish_stdout(code)
    finally:
        remove_temporaries()
        for s, h in old.items():
            signal.signal(s, h)
    sys.exit(code)


def _json_error(args: list[str], message: str, kind: str, code: int) -> None:
    """A command asked for --json: its error as one JSON object on stdout too (cli/_common.echo_json_error)."""
    from mmprof.cli._common import echo_json_error, wants_json  # only on an error path: start-up stays lean

    if wants_json(args):
        try:
            echo_json_error(message, kind, code)
        except OSError:
            pass


def _dispatch(args: list[str]) -> int:
    try:
        rc = _run(args)
    except MmprofError as e:
        if _DEBUG:
            raise
        _err(f"mmprof: error: {one_line(str(e))}")
        _json_error(args, one_line(str(e)), type(e).__name__, e.exit_code)
        return e.exit_code
    except click.exceptions.Abort:
        _err("mmprof: aborted")
        return 130
    except click.UsageError as e:  # a bad option or argument: one line too, naming where the help is
        ctx = getattr(e, "ctx", None)
        where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        _err(f"mmprof: error: {one_line(e.format_message())}{where}")
        _json_error(args, one_line(e.format_message()) + where, "UsageError", 2)
        return 2
    except click.ClickException as e:
        e.show()
        return 2
    except click.exceptions.Exit as e:
        return e.exit_code
    except SystemExit as e:
        if "PacifyFlushWrapper" in type(sys.stdout).__name__:  # click's own answer to EPIPE: sys.exit(1)
            return _stdout_closed(BrokenPipeError(32, "Broken pipe"))
        raise
    except KeyboardInterrupt:
        remove_temporaries()
        _err("mmprof: interrupted")
        return 130
    except Terminated as e:
        remove_temporaries()
        _err(f"mmprof: terminated by signal {e.signum}")
        return 128 + e.signum
    except RecursionError as e:  # before OSError/Exception: input nested too deep for some parser
        if _DEBUG:
            raise
        _err(f"mmprof: error: input nested too deep to read ({one_line(str(e))})")
        return 2
    except OSError as e:
        if _DEBUG:
            raise
        return _os_error(e)
    except Exception as e:  # a bug: still one line and exit 2, never 1 (violations)
        if _DEBUG:
            raise
        _err(f"mmprof: internal error: {type(e).__name__}: {one_line(str(e))} "
             "(please report it; --debug shows the traceback)")
        _json_error(args, f"internal error: {type(e).__name__}: {one_line(str(e))}", "InternalError", 2)
        return 2
    # ctx.exit(code) inside a command comes back here as its return value.
    return rc if isinstance(rc, int) else 0


# Commands that only read and analyse profiles: numpy's huge-page hint off for the whole process (loading
# included). numpy madvises huge pages for every array of 4 MB or more; where transparent huge pages are `madvise`
# with defrag `madvise`, each first touch of such an array may compact memory synchronously, which these commands,
# allocating GBs of fresh arrays on large profiles, pay as system time (`mmprof diff` of 2 x 1M kernels: 2.10-2.13x
# -> 1.99x the load-only process, docs/benchmarks.md). Commands that start a workload (run, record, demo,
# verify-fastpath --run, shapes --live) keep the default, so the measured program's environment is untouched. A
# value the user set wins.
_READ_ONLY = frozenset({"diff", "report", "summary", "export", "ranks", "import", "classify"})


def _hugepage_hint(args: list[str]) -> None:
    cmd = next((a for a in args if not a.startswith("-")), None)
    if cmd in _READ_ONLY and "NUMPY_MADVISE_HUGEPAGE" not in os.environ and "numpy" not in sys.modules:
        os.environ["NUMPY_MADVISE_HUGEPAGE"] = "0"


def _run(args: list[str]):
    _hugepage_hint(args)
    common = sys.modules.get("mmprof.cli._common")
    if common is not None:
        common.reset_verdict()  # a fresh verdict per call (tests call main() many times in one process)
    try:
        return cli.main(args=args, prog_name="mmprof", standalone_mode=False)
    except Exception as e:  # a command that asked for a report file on failure (verify-fastpath --junit) gets it
        common = sys.modules.get("mmprof.cli._common")
        if common is not None:
            common.write_junit_for_error(e)
        raise
    finally:
        common = sys.modules.get("mmprof.cli._common")
        if common is not None:
            common._junit.clear()


def _os_error(e: OSError) -> int:
    """An OS error no module turned into a BadInput: one line naming the file (or stdout) and the reason."""
    if isinstance(e, BrokenPipeError) or _stdout_broken():
        return _stdout_closed(e)
    where = f"{one_line(str(e.filename))}: " if e.filename else ""
    _err(f"mmprof: error: {where}{one_line(e.strerror or str(e))}")
    return 2


def _stdout_broken() -> bool:
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        return True
    return False


def _stdout_closed(e: OSError) -> int:
    """stdout cannot take the output. A reader that went away (`mmprof summary X | head -1`: a closed pipe) is the
    reader's choice: the command ends quietly, no error line, with the exit code it had decided (a gate's verdict:
    `mmprof.cli._common.verdict`; else 0). A full disk or /dev/full lost the output: one error line, exit 2, never
    0 or 1. Never an 'Exception ignored' message when Python flushes stdout at exit."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):
        pass
    if isinstance(e, BrokenPipeError):
        common = sys.modules.get("mmprof.cli._common")
        return common.decided_code() if common is not None else 0
    _err(f"mmprof: error: stdout: the output could not be written ({one_line(e.strerror or str(e))})")
    return 2


def _finish_stdout(code: int) -> int:
    """Flush stdout while errors can still be reported (a full disk shows at the flush, not at the write)."""
    try:
        sys.stdout.flush()
    except OSError as e:
        return _stdout_closed(e)
    except (ValueError, AttributeError):  # stdout closed by the caller (None: closed before mmprof started)
        pass
    return code


def _err(line: str) -> None:
    try:
        click.echo(line, err=True)
    except (OSError, ValueError):  # stderr itself is gone: nothing left to tell
        pass


def one_line(msg: str, limit: int = 500) -> str:
    """An error message as one printable line: newlines, ESC, NUL, bidi overrides and other control or format
    characters from file contents are shown as escapes, never sent to the terminal raw."""
    out = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in msg)
    return out if len(out) <= limit else out[: limit - 3] + "..."
