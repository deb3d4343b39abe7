"""`mmprof import TRACE... -o OUT`: profiler output (Kineto, rocprofv3, nsys) -> one Profile file."""

from __future__ import annotations

import time

import click

from mmprof.cli._common import (RANK, add_to_store, console, echo_json, graph_ref_option, json_option, load_ref,
                                log_option, store_option, with_log_file)
from mmprof.cli._provenance import apply_provenance, provenance_option, read_provenance
from mmprof.errors import BadInput
from mmprof.importers import IMPORTERS, import_paths
from mmprof.profiles import save_profile
from mmprof.render.text.imports import render_import
from mmprof.render.text.progress import progress_bar


@click.command("import")
@click.argument("traces", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="Profile to write (.json, or .json.gz / .json.xz to compress).")
@click.option("--rank", type=RANK, default=None, help="Rank of a single trace that does not say (overrides the file).")
@click.option("--format", "fmt", default=None,
              help="Skip content detection: kineto, rocpd, rocprofv3-csv, rocprofv3-json, nsys-sqlite.")
@click.option("--one-run", is_flag=True,
              help="The files are ranks of one run even though their tools, devices, world sizes or clocks differ.")
@graph_ref_option
@provenance_option
@log_option
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Processes importing rank files side by side [default: one per 256 MB of JSON, at most one per "
                   "file and per usable core; 1 below that]; each holds one file's import at a time.")
@store_option
@json_option
def import_cmd(traces: tuple[str, ...], output: str, rank: int | None, fmt: str | None, one_run: bool,
               graph_ref: str | None, inductor_provenance: tuple[str, ...], log_file: str | None, jobs: int | None,
               store: str | None,
               as_json: bool) -> None:
    """Import TRACE files or directories (one file per rank) into one Profile written to OUT."""
    if fmt is not None and fmt not in IMPORTERS:
        raise BadInput(f"unknown --format {fmt!r}; formats are {', '.join(k for k in IMPORTERS if k != 'mmprof-profile')}")
    prov = read_provenance(inductor_provenance)  # read (a bad file refused) before the import's minutes
    with progress_bar(not as_json) as cb:
        files = [1]  # how many rank files the importer reported (the bar's last step writes the Profile)

        def per_file(stage: str, done: int, n: int) -> None:
            files[0] = n
            cb(stage, done, n + 1)

        if cb:
            cb(f"importing {len(traces)} input(s)", 0, 2)
        t0 = time.perf_counter()
        profile = import_paths(list(traces), rank=rank, fmt=fmt, graph_ref=load_ref(graph_ref), one_run=one_run,
                               jobs=jobs, progress=per_file if cb else None)
        apply_provenance(profile, prov)
        profile = with_log_file(profile, log_file)
        t1 = time.perf_counter()
        if cb:
            cb(f"writing {output}", files[0], files[0] + 1)
        path = save_profile(profile, output)
        t2 = time.perf_counter()
    counts = {t: profile.n(t) for t in profile.tables}
    result = {
        "output": str(path),
        "format": profile.meta.get("source", {}).get("format"),
        "ranks": profile.ranks,
        "world_size": profile.meta.get("parallel", {}).get("world_size"),
        "rows": counts,
        "warnings": profile.meta.get("warnings", []),
        "import_s": round(t1 - t0, 3),
        "save_s": round(t2 - t1, 3),
    }
    if store:
        result["store"] = {"dir": store, "run": add_to_store(store, profile, str(path)).run}
    if as_json:
        echo_json(result)
    else:
        render_import(result, len(traces), console())
