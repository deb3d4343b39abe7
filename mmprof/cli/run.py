"""`mmprof run`: the reference MiniMax M3 runtime under capture -> a Profile, with the profiler's dilation."""

from __future__ import annotations

import os

import click

from mmprof.analysis.timeline.runinfo import RunSummary
from mmprof.capture.workflows.run_options import validate
from mmprof.cli._common import add_to_store, console, echo_json, json_option, store_option
from mmprof.cli._options import run_options, workload_options
from mmprof.render.text.progress import progress_bar
from mmprof.render.text.run import render_run


@click.command("run")
@workload_options
@click.option("--capture", type=click.Choice(["full", "light", "kernels", "none"]), default="full", show_default=True,
              help="full: shapes for every op; light: kernels and scopes, shapes for the prefill step only; kernels: "
                   "device activity only (no CPU ops, scopes or shapes; GPU only); none: timings and dispatch log only.")
@click.option("--measure-dilation", is_flag=True,
              help="Capture in every mode (full, light, and kernels on a GPU) and report how much each stretched the "
                   "run (keeps --capture's trace).")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="Runs without the profiler; their median is the plain timing.")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Tensor-parallel ranks, started here (gloo on cpu, nccl on cuda); under torchrun, the job's ranks.")
@click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True, help="Expert parallel: 1 or equal to --tp.")
@click.option("-o", "--output", default="mmprof-run.json.gz", show_default=True, help="Where to write the Profile.")
@store_option
@json_option
def run(capture, measure_dilation, repeats, tp, ep, output, store, as_json, **workload) -> None:
    """Run the reference MiniMax M3 runtime under capture and write a Profile.

    The same workload runs first without the profiler (the plain timing) and then under torch.profiler, so the
    Profile holds both and the dilation (profiled / plain time) says how much the capture distorted it.
    """
    opts = run_options(**workload, capture=capture, measure_dilation=measure_dilation, tp=tp, ep=ep, repeats=repeats)
    profile = execute(opts, output, show_progress=not as_json)
    if profile is None:  # a non-zero torchrun rank: rank 0 writes and reports
        return
    result = RunSummary.of(profile, output)
    if store:
        run_id = add_to_store(store, profile, output).run
        console(stderr=True).print(f"added to the store {store} as run {run_id}")
    if as_json:
        echo_json(result.to_dict())
    else:
        render_run(result, console())


def execute(opts, output: str, show_progress: bool = True):
    """Run with a progress bar on stderr (rank 0 only under torchrun) and save the Profile to `output`."""
    from mmprof.capture.workflows.run import (
        run_to_file,  # imports the runtime (torch): only when a run starts
    )

    validate(opts)  # refuse bad combinations before the progress bar appears
    show_progress = show_progress and os.environ.get("RANK", "0") in ("", "0")
    with progress_bar(show_progress) as cb:
        return run_to_file(opts, output, progress=cb)
