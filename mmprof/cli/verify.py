"""`mmprof verify-fastpath [PROFILE] [--spec FILE] [--junit out.xml] [--json]`: the fast-path CI gate.

Exit codes: 0 every assertion passed; 1 a violation; 2 no evidence (no kernels, a region that matches
nothing) or bad input. The JUnit file is written in every one of those cases, so CI always has a report.
"""

from __future__ import annotations

import click

from mmprof.analysis.checks.spec import load_spec
from mmprof.analysis.checks.verify import verify
from mmprof.analysis.classify import load_rules
from mmprof.capture.run_options import validate
from mmprof.cli._common import console, echo_json, graph_ref_option, json_option, junit_on_error, load_any
from mmprof.cli._options import model_options, run_options, shape_regions, workload_options
from mmprof.errors import BadInput
from mmprof.render.junit import write_junit
from mmprof.render.text.progress import progress_bar
from mmprof.render.text.verify import render_verify


@click.command("verify-fastpath")
@click.argument("profile", type=click.Path(), required=False)
@click.option("--spec", "spec_path", type=click.Path(), default=None,
              help="Fast-path spec (TOML). Default: the built-in spec for the reference runtime's fast configuration.")
@click.option("--rules", "rules_paths", type=click.Path(), multiple=True,
              help="Extra kernel-classification rules (TOML); repeatable. They extend / override the built-ins.")
@click.option("--junit", "junit_path", type=click.Path(), default=None, help="Also write a JUnit XML report here.")
@click.option("--sparse-layers", type=click.IntRange(min=1), default=None,
              help="Number of sparse-attention layers (for FP002 on traces without scopes or model config).")
@click.option("--verbose", "-v", is_flag=True, help="Show evidence for passing assertions too.")
@click.option("--run", "do_run", is_flag=True,
              help="Run the reference runtime first (with the run options below, full capture) and verify that run.")
@model_options
@graph_ref_option
@workload_options
@click.option("-o", "--output", default=None, help="With --run: also save the run's Profile here.")
@json_option
@click.pass_context
def verify_fastpath(ctx: click.Context, profile: str | None, spec_path: str | None, rules_paths: tuple[str, ...],
                    junit_path: str | None, sparse_layers: int | None, verbose: bool, do_run: bool, output: str | None,
                    model: str | None, tp: int | None, ep: int, graph_ref: str | None, as_json: bool,
                    **run_opts) -> None:
    """Check which kernel variants dispatched in each op region against a spec (CI gate).

    PROFILE is an mmprof profile or a raw trace (Kineto, rocprofv3, nsys), imported on the fly. With --run
    and no PROFILE, the reference runtime runs first (e.g. `mmprof verify-fastpath --run --preset tiny
    --shared-expert separate` exits 1 with FP001). With --model CONFIG, a trace that has shapes but no
    annotations or module events is labelled by matching its GEMMs with the model's per-rank shapes.
    """
    junit_on_error(junit_path, profile, (profile, spec_path, *rules_paths))  # --junit on every exit path
    if (profile is None) == (not do_run):
        raise BadInput("give a PROFILE (an mmprof profile or a trace) or --run (run the reference runtime first), "
                       "not both" if do_run else
                       "give a PROFILE (an mmprof profile or a trace) or --run to run the reference runtime first")
    spec = load_spec(spec_path) if spec_path else None  # None: the built-in spec that fits the profile
    rules = load_rules(rules_paths) if rules_paths else None
    if do_run:
        prof = _run_reference(run_opts, output, quiet=as_json)
        profile = output or f"mmprof run ({run_opts['preset']})"
    else:
        prof = load_any(profile, graph_ref)
    result = verify(prof, spec, rules=rules, sparse_layers=sparse_layers, profile_name=str(profile),
                    shape_regions=shape_regions(prof, model, tp, ep))
    if junit_path:
        write_junit(result, junit_path)
    if as_json:
        echo_json(result.to_dict())
    else:
        render_verify(result, console(), verbose=verbose, junit_path=junit_path)
    ctx.exit(result.exit_code)


def _run_reference(run_opts: dict, output: str | None, quiet: bool):
    """`mmprof run` with full capture and one plain timing run; the Profile is kept only with -o."""
    import tempfile
    from pathlib import Path

    from mmprof.capture.runtime_run import run_to_file  # imports the runtime (torch): only with --run

    opts = run_options(**run_opts, capture="full", repeats=1)
    validate(opts)
    with progress_bar(not quiet) as cb:
        if output:
            return run_to_file(opts, output, progress=cb)
        with tempfile.TemporaryDirectory(prefix="mmprof-verify-") as d:
            return run_to_file(opts, str(Path(d) / "run.json.gz"), progress=cb)
