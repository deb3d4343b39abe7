"""`mmprof record [-o OUT] [--backend torch|rocprofv3|nsys] [--steps N --skip M] [--light] -- CMD ARGS...`"""

from __future__ import annotations

import click

from mmprof.capture.record import RecordOptions
from mmprof.capture.record import record as do_record
from mmprof.capture.session import DEFAULT_STEP_MARKERS
from mmprof.cli._common import Real, add_to_store, console, count, echo_json, store_option
from mmprof.errors import BadInput
from mmprof.fileio import parse_size
from mmprof.render.text.progress import progress_bar
from mmprof.render.text.record import render_record


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", "out", default="mmprof-record.json.gz", show_default=True,
              help="Profile to write (.json, .json.gz or .json.xz).")
@click.option("--backend", type=click.Choice(["torch", "rocprofv3", "nsys"]), default="torch", show_default=True,
              help="torch: torch.profiler in every process (no code changes); rocprofv3 / nsys: run under the tool.")
@click.option("--steps", type=count(1), default=None, help="Capture N steps (default: the whole run).")
@click.option("--skip", type=count(0), default=0, show_default=True, help="Skip the first M steps before capturing.")
@click.option("--step-marker", "markers", multiple=True, metavar="PATTERN",
              help="Annotation name (glob) that delimits a step; repeatable. Default: mmprof.step.*, "
                   "ProfilerStep#*, 'gpu_model_runner: forward' (vLLM).")
@click.option("--flush-every", type=count(1), default=None, metavar="N",
              help="Write each process's trace every N steps, so a process that dies keeps all but its last N.")
@click.option("--light", is_flag=True, help="Light capture: shapes for the first step only (launch-bound runs).")
@click.option("--kernels-only", is_flag=True,
              help="Lightest capture: device activity only (kernels, copies, their launch calls); no CPU ops, "
                   "annotations or shapes, so no steps, phases or regions. GPU programs only.")
@click.option("--cpu-only", is_flag=True, help="Capture CPU ops and annotations only, no GPU activity.")
@click.option("--no-modules", is_flag=True,
              help="No range per nn.Module call (by default each is named by the module's path, e.g. "
                   "`model.layers.12.mlp.shared_experts`, so any model's layers and regions are known).")
@click.option("--start", type=click.Choice(["auto", "import", "gpu"]), default="auto", show_default=True,
              help="When each process starts capturing: at `import torch`, or when it first initialises the GPU "
                   "(auto: gpu on GPU builds of torch, import otherwise).")
@click.option("--no-log", is_flag=True,
              help="Do not keep the command's stdout / stderr as the Profile's log (by default they pass through "
                   "unchanged, on a pseudo-terminal where mmprof's own are terminals, and are kept, size-bounded, "
                   "timestamped, per process: docs/logs.md); with it the command inherits mmprof's stdio as is.")
@click.option("--log-limit", default="4MiB", show_default=True, metavar="SIZE",
              help="Size bound of the kept log: its head and tail, plus the lines the log rules recognise in between.")
@click.option("--trace-dir", default=None, help="Where per-process traces go (default: OUT's name + .traces).")
@click.option("--grace", type=Real(0), default=10.0, show_default=True,
              help="Seconds to wait for workers that outlive the command to finish writing.")
@click.option("--stop-grace", type=Real(0), default=15.0, show_default=True, metavar="SECONDS",
              help="After Ctrl-C or SIGTERM: how long the command gets to stop before mmprof sends it SIGTERM, "
                   "and as long again before SIGKILL (a second Ctrl-C skips the wait); what was captured is kept.")
@click.option("--json", "as_json", is_flag=True, help="Print the record result as JSON on stdout at the end.")
@store_option
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def record(ctx, out, backend, steps, skip, markers, flush_every, light, kernels_only, cpu_only, no_modules, start,
           no_log, log_limit, trace_dir, grace, stop_grace, as_json, store, cmd):
    """Run CMD unchanged and capture every Python process it starts (torchrun ranks, spawn workers).

    Its output and exit code pass through; the per-rank traces are merged into one Profile at OUT, with the
    command's stdout / stderr kept as the run's log, and ranks that are missing or did not finish are reported
    on stderr.

    Example: mmprof record -o m3.json.gz -- torchrun --nproc-per-node 8 serve_bench.py
    """

    if light and kernels_only or kernels_only and cpu_only:
        raise BadInput("--kernels-only excludes --light and --cpu-only")
    opts = RecordOptions(mode="kernels" if kernels_only else "light" if light else "full", steps=steps, skip=skip,
                         step_markers=tuple(markers) or DEFAULT_STEP_MARKERS,
                         activities="cpu" if cpu_only else "auto", start=start, grace_s=grace,
                         stop_grace_s=stop_grace, flush_every=flush_every, modules=not no_modules, log=not no_log,
                         log_limit=parse_size(log_limit, "--log-limit"))
    # a failure raises an MmprofError: the command (if it ran) already printed its output; main() prints one line
    with progress_bar() as cb:  # starts after the command: only the import and merge show a bar
        result, profile = do_record(list(cmd), out, backend=backend, opts=opts, trace_dir=trace_dir, progress=cb,
                                    say=lambda text: console(stderr=True).print(f"mmprof: {text}", markup=False,
                                                                                highlight=False))
    render_record(result, console(stderr=True))
    if store and profile is not None:
        console(stderr=True).print(f"added to the store {store} as run {add_to_store(store, profile, out).run}")
    if as_json:
        echo_json(result.to_dict())
    ctx.exit(result.exit_code)
