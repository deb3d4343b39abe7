"""`mmprof diff BEFORE AFTER` (or `BEFORE... -- AFTER...` for repeated runs): what is compared, which is faster and
why, and where the time went before and after."""

from __future__ import annotations

import re
from pathlib import Path

import click
import orjson

from mmprof.analysis.compare.diff import diff_profiles
from mmprof.analysis.compare.plain import PlainTiming, from_document, from_value
from mmprof.cli._common import RANK, console, echo_json, json_option, load_any, write_text
from mmprof.cli._options import model_options, shape_regions
from mmprof.errors import BadInput
from mmprof.fileio import check_output, read_bytes
from mmprof.render.html import diff_html
from mmprof.render.markdown import diff_markdown
from mmprof.render.text.diff import render_diff

SEPARATOR = "\0--"     # what `--` among the runs becomes, so click keeps it among the arguments (argv has no NUL)
_TRACE_SUFFIX = re.compile(r"(\.pt\.trace)?\.json(\.gz|\.xz)?$|\.(sqlite|db|rocpd)$")
SIDECAR_BYTES = 4 << 20


class _RunsCommand(click.Command):
    """Keeps a `--` between the before and the after runs as an argument (click would drop it)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, [SEPARATOR if a == "--" else a for a in args])


def split_runs(runs: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(before runs, after runs) from `A B` or `A1 A2 ... -- B1 B2 ...`."""
    if SEPARATOR in runs:
        i = runs.index(SEPARATOR)
        before, after = list(runs[:i]), list(runs[i + 1:])
        if SEPARATOR in after or not before or not after:
            raise click.UsageError("give repeated runs as BEFORE... -- AFTER... (one '--', runs on both sides)")
        return before, after
    if len(runs) != 2:
        raise click.UsageError(f"diff takes BEFORE AFTER, or BEFORE... -- AFTER... for repeated runs (got "
                               f"{len(runs)} input{'s' if len(runs) != 1 else ''} and no '--')")
    return [runs[0]], [runs[1]]


def sidecar(path: str) -> tuple[PlainTiming | None, str | None]:
    """The plain timing of a trace from the summary beside it: `NAME.summary.json` for `NAME.pt.trace.json.gz`, a
    `summary*.json` in the same folder whose `trace_file` names it (the vllm-kit's record.py writes both forms), or
    the `summary.json` of a folder that holds this one trace (benchmarks/h200/vllm_families.py).
    A summary that cannot be read gives a note, never an error (the user did not name it)."""
    p = Path(path)
    if not p.is_file():
        return None, None
    stem = _TRACE_SUFFIX.sub("", p.name)
    cands = [p.with_name(stem + ".summary.json")]
    cands += sorted(x for x in p.parent.glob("summary*.json") if x not in cands)
    traces = [x for x in p.parent.iterdir() if ".pt.trace.json" in x.name]
    alone = len(traces) == 1 and traces[0].name == p.name   # vllm_families.py: CASE/{trace..., summary.json}
    for c in cands:
        if not c.is_file() or c.stat().st_size > SIDECAR_BYTES:
            continue
        try:
            doc = orjson.loads(read_bytes(c))
        except (OSError, ValueError, BadInput) as e:
            return None, f"{c.name} beside {p.name} could not be read as a plain-timing summary: {e}"
        if c != cands[0] and not (alone and c.name == "summary.json"):
            names = {str((doc or {}).get("trace_file") or "")} | {
                str(r.get("trace_file") or "") for r in (doc or {}).get("results") or [] if isinstance(r, dict)}
            if p.name not in names:
                continue
        timing = from_document(doc, c.name)
        if timing is not None:
            return timing, None
    return None, None


def plain_option(value: str | None, option: str) -> PlainTiming | None:
    """--plain-before / --plain-after: '4.3ms', '230tok/s' or a JSON file (vllm-kit summary, benchmark line)."""
    if value is None:
        return None
    if Path(value).is_file():
        try:
            doc = orjson.loads(read_bytes(value))
        except ValueError as e:
            raise BadInput(f"{option} {value}: not JSON ({e})") from None
        timing = from_document(doc, Path(value).name)
        if timing is None:
            raise BadInput(f"{option} {value}: no plain timing in it (a vllm-kit summary or a JSON object with "
                           "decode_ms_per_step)")
        return timing
    return from_value(value, option)


@click.command("diff", cls=_RunsCommand)
@click.argument("runs", nargs=-1, required=True, metavar="BEFORE AFTER | BEFORE... -- AFTER...")
@json_option
@click.option("--markdown", "markdown_file", metavar="FILE", help="Also write a Markdown summary (for a PR comment); '-' for stdout.")
@click.option("--html", "html_file", metavar="FILE", help="Also write one self-contained HTML file with plots.")
@click.option("--phase", metavar="PHASE", help="Phase to compare (prefill, decode); default decode when both have it.")
@click.option("--rank", type=RANK, metavar="R", help="Compare one rank only.")
@click.option("--plain-before", metavar="TIME", help="The before run's time without the profiler: '4.3ms' (per decode "
              "step), '230tok/s', or a JSON file (a vllm-kit summary, a benchmark line with decode_ms_per_step). "
              "Default: the profile's own (mmprof run) or a NAME.summary.json beside the trace.")
@click.option("--plain-after", metavar="TIME", help="The same for the after run.")
@click.option("--force", is_flag=True, help="Compare even what is refused: the same trace twice, two different models.")
@model_options
def diff(runs: tuple[str, ...], as_json: bool, markdown_file: str | None, html_file: str | None, phase: str | None,
         rank: int | None, plain_before: str | None, plain_after: str | None, force: bool, model: str | None,
         tp: int | None, ep: int) -> None:
    """Compare two profiles (saved Profiles or raw traces): what is compared, which is faster and why (GPU work,
    host time, overlap, regions, with the noise band and the time without the profiler), category shares, kernel
    variants that appeared or vanished, and deltas by region, layer and rank. Repeated runs of each side
    (BEFORE... -- AFTER...) give the noise band from run to run."""
    before, after = split_runs(runs)
    plain = [plain_option(plain_before, "--plain-before"), plain_option(plain_after, "--plain-after")]
    notes = []
    for i, first in enumerate((before[0], after[0])):
        if plain[i] is None:
            plain[i], note = sidecar(first)
            if note:
                notes.append(note)
    pb, pa = load_any(before[0]), load_any(after[0])
    regions = (shape_regions(pb, model, tp, ep), shape_regions(pa, model, tp, ep))
    repeats = ([load_any(x) for x in before[1:]], [load_any(x) for x in after[1:]])
    for out in (markdown_file, html_file):   # an output that is an input is refused before any work
        if out and out != "-":
            check_output(out)
    result = diff_profiles(pb, pa, phase=phase, rank=rank, labels=(Path(before[0]).name, Path(after[0]).name),
                           shape_regions=regions, plain=tuple(plain), repeats=repeats, force=force)
    result.notes[:0] = notes
    if markdown_file:
        write_text(markdown_file, diff_markdown(result))
    if html_file:
        write_text(html_file, diff_html(result))
    if as_json:
        echo_json(result.to_dict())
    elif markdown_file != "-":
        render_diff(result, console())
