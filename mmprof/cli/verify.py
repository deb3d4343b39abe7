"""`mmprof verify-fastpath [PROFILE] [--spec FILE] [--junit out.xml] [--json]`: the fast-path CI gate.

Exit codes: 0 every assertion passed; 1 a violation; 2 no evidence (no kernels, a region that matches
nothing) or bad input. The JUnit file is written in every one of those cases (bad input: one <error> test
case with the message), so CI always has a report.
"""

from __future__ import annotations

import click

from mmprof.analysis.checks.spec import load_spec
from mmprof.analysis.timeline.engine_steps import describe, engine_steps
from mmprof.analysis.checks.verify import verify
from mmprof.analysis.attribution.classify import load_rules
from mmprof.capture.workflows.run_options import validate
from mmprof.analysis.shapes.engines import engine_of
from mmprof.analysis.shapes.trace_tp import check_tp
from mmprof.cli._common import (console, echo_json, graph_ref_option, json_option, junit_on_error, load_any,
                                log_option, verdict, with_log_file, write_text)
from mmprof.cli._options import model_options, run_options, shape_regions, workload_options
from mmprof.analysis.shapes.shape_match import match_profile
from mmprof.errors import BadInput
from mmprof.modelspec import ModelSpec
from mmprof.render.html import verify_html
from mmprof.render.junit import write_junit
from mmprof.render.markdown import verify_markdown
from mmprof.render.text.progress import progress_bar
from mmprof.render.safe import markup
from mmprof.render.text.verify import render_verify

MIN_MODEL_FIT = 0.5  # a --model whose shapes explain fewer of the trace's GEMMs than this is not the model that ran


@click.command("verify-fastpath")
@click.argument("profile", type=click.Path(), required=False)
@click.option("--spec", "spec_path", type=click.Path(), default=None,
              help="Fast-path spec (TOML). Default: the built-in spec for the reference runtime's fast configuration.")
@click.option("--rules", "rules_paths", type=click.Path(), multiple=True,
              help="Extra kernel-classification rules (TOML); repeatable. They extend / override the built-ins.")
@click.option("--junit", "junit_path", type=click.Path(), default=None, help="Also write a JUnit XML report here.")
@click.option("--markdown", "markdown_file", metavar="FILE", help="Also write Markdown (a PR comment); '-' for stdout.")
@click.option("--html", "html_file", metavar="FILE", help="Also write one self-contained HTML page.")
@click.option("--sparse-layers", type=click.IntRange(min=1), default=None,
              help="Number of sparse-attention layers (for FP002 on traces without scopes or model config).")
@click.option("--verbose", "-v", is_flag=True, help="Show evidence for passing assertions too.")
@click.option("--run", "do_run", is_flag=True,
              help="Run the reference runtime first (with the run options below, full capture) and verify that run.")
@model_options
@graph_ref_option
@log_option
@workload_options
@click.option("-o", "--output", default=None, help="With --run: also save the run's Profile here.")
@json_option
@click.pass_context
def verify_fastpath(ctx: click.Context, profile: str | None, spec_path: str | None, rules_paths: tuple[str, ...],
                    junit_path: str | None, markdown_file: str | None, html_file: str | None,
                    sparse_layers: int | None, verbose: bool, do_run: bool, output: str | None,
                    model: str | None, tp: int | None, ep: int, graph_ref: str | None, log_file: str | None,
                    as_json: bool, **run_opts) -> None:
    """Check which kernel variants dispatched in each op region against a spec (CI gate).

    PROFILE is an mmprof profile or a raw trace (Kineto, rocprofv3, nsys), imported on the fly. With --run
    and no PROFILE, the reference runtime runs first (e.g. `mmprof verify-fastpath --run --preset tiny
    --shared-expert separate` exits 1 with FP001). With --model CONFIG, a trace that has shapes but no
    annotations or module events is labelled by matching its GEMMs with the model's per-rank shapes.
    """
    # --junit on every exit path: the CLI's one error path writes an <error> case (bad input, internal error)
    junit_on_error(junit_path, profile, (profile, spec_path, log_file, *rules_paths))
    result, prof = _verify(profile, spec_path, rules_paths, sparse_layers, do_run, output, model, tp, ep,
                           graph_ref, as_json, run_opts, log_file)
    if junit_path:
        write_junit(result, junit_path)
    if markdown_file:
        write_text(markdown_file, verify_markdown(result, verbose))
    if html_file:
        write_text(html_file, verify_html(result))
    steps = engine_steps(prof)  # a serving engine's steps: the checks see their phases (prefill / mixed / decode)
    steps_line = f"engine steps ({', '.join(sorted(set(steps['engine'])))}): {describe(steps)}" if len(steps) else None
    verdict(result.exit_code)  # kept if stdout's reader goes away while it prints
    if as_json:
        d = result.to_dict()
        if steps_line:
            d["engine_steps"] = steps_line
        echo_json(d)
    elif markdown_file != "-":
        if steps_line:
            console().print(markup(steps_line))
        render_verify(result, console(), verbose=verbose, junit_path=junit_path)
    ctx.exit(result.exit_code)


def _verify(profile, spec_path, rules_paths, sparse_layers, do_run, output, model, tp, ep, graph_ref, as_json,
            run_opts, log_file=None):
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
    prof = with_log_file(prof, log_file)
    regions, model_spec, warnings = _model_regions(prof, model, tp, ep)
    return verify(prof, spec, rules=rules, sparse_layers=sparse_layers, profile_name=str(profile),
                  shape_regions=regions, model=model_spec, warnings=warnings, engine=engine_of(prof)), prof


def _model_regions(prof, model: str | None, tp: int | None, ep: int):
    """(shape regions, ModelSpec, warnings) for --model. A config whose shapes explain fewer than half of the
    trace's GEMMs is not the model that ran: it is said, and its regions are not used (nothing is judged from a
    wrong labelling)."""
    if model is None:
        return shape_regions(prof, None, tp, ep), None, []
    spec = ModelSpec.load(model)
    shown = check_tp(prof, spec, tp, ep)  # a --tp the trace's shapes contradict is bad input, said as such
    ss = match_profile(prof, spec, tp or shown.tp, ep)
    rep = ss.report
    name = spec.model_type or spec.family
    if not rep.gemms:
        return ss.regions, spec, [f"--model {model}: the trace has no weight GEMMs with shapes to match the config "
                                  "against (record shapes: record_shapes=True)"]
    if rep.matched < MIN_MODEL_FIT * rep.gemms:
        return None, spec, [f"--model {model} ({name}) does not fit this trace: its shapes explain {rep.matched} of "
                            f"{rep.gemms} GEMMs ({rep.matched / rep.gemms:.0%}, fewer than "
                            f"{MIN_MODEL_FIT:.0%}); its regions are not used (is it the model that ran? check --tp)"]
    return ss.regions, spec, []


def _run_reference(run_opts: dict, output: str | None, quiet: bool):
    """`mmprof run` with full capture and one plain timing run; the Profile is kept only with -o."""
    import tempfile
    from pathlib import Path

    from mmprof.capture.workflows.run import run_to_file  # imports the runtime (torch): only with --run

    opts = run_options(**run_opts, capture="full", repeats=1)
    validate(opts)
    with progress_bar(not quiet) as cb:
        if output:
            return run_to_file(opts, output, progress=cb)
        with tempfile.TemporaryDirectory(prefix="mmprof-verify-") as d:
            return run_to_file(opts, str(Path(d) / "run.json.gz"), progress=cb)
