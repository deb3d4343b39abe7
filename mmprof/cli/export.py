"""`mmprof export PROFILE -o trace.json[.gz]`: the profile as a Chrome trace / Perfetto timeline (render/perfetto.py)."""

from __future__ import annotations

import click

from mmprof.cli._common import console, echo_json, json_option, load_any
from mmprof.render.perfetto import export_trace
from mmprof.render.safe import markup
from mmprof.render.text.progress import progress_bar


@click.command("export")
@click.argument("profile", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Trace file to write: .json, or .json.gz to compress.")
@click.option("--full-names", type=click.Choice(["auto", "every", "first"]), default="auto", show_default=True,
              help="Which kernel slices carry the full (often 1,000-character) name: every one, or the first of each "
                   "name per rank (auto: every one up to 200,000 device events).")
@click.option("--no-cpu", is_flag=True,
              help="Leave out CPU ops, launch calls (and their arrows) and CPU-side scopes: device tracks and counters "
                   "only, about half the size (for profiles of a million kernels or more).")
@json_option
def export(profile: str, output: str, full_names: str, no_cpu: bool, as_json: bool) -> None:
    """Write PROFILE (a saved Profile or raw traces) as a Chrome trace / Perfetto JSON timeline.

    \b
    Open it in https://ui.perfetto.dev or chrome://tracing: per rank a process, per CPU thread and GPU stream a
    track; kernels named by their display name, with family, variant, library, fast/fallback path, region,
    layer, bound and efficiency as args; CPU ops, launch calls and scopes as slices; the timeline categories
    (compute-, memory-bound, communication, idle host-bound, ...) as counter tracks; flow arrows from each
    launch call to its kernel.
    """
    prof = load_any(profile)
    with progress_bar(not as_json) as cb:
        stats = export_trace(prof, output, full_names=full_names, progress=cb, cpu=not no_cpu)
    if as_json:
        echo_json(stats.to_dict())
        return
    con = console()
    con.print(f"wrote {markup(stats.path)}: {stats.events:,} trace events ({stats.device_events:,} device events, "
              f"{stats.ops:,} CPU ops, {stats.launches:,} launch calls, {stats.flows:,} launch -> kernel arrows, "
              f"{stats.scopes:,} scopes, {stats.counters:,} counter points) for {stats.ranks} rank(s), "
              f"{stats.bytes / 2**20:,.1f} MiB in {stats.seconds:.1f} s")
    con.print("open it in https://ui.perfetto.dev (or chrome://tracing)")
