"""`mmprof verify-fastpath [PROFILE] [--spec FILE] [--junit out.xml] [--json]`: the fast-path CI gate.

Exit codes: 0 every assertion passed; 1 a violation; 2 no evidence (no kernels, a region that matches
nothing) or bad input. The JUnit file is written in every one of those cases, so CI always has a report.
"""

from __future__ import annotations

import click

from mmprof.cli._common import console, echo_json, json_option
from mmprof.cli.run import workload_options

_STYLE = {"pass": "[green]PASS[/]", "fail": "[red]FAIL[/]", "no_evidence": "[yellow]NO EVIDENCE[/]"}


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
@workload_options
@click.option("-o", "--output", default=None, help="With --run: also save the run's Profile here.")
@json_option
@click.pass_context
def verify_fastpath(ctx: click.Context, profile: str | None, spec_path: str | None, rules_paths: tuple[str, ...],
                    junit_path: str | None, sparse_layers: int | None, verbose: bool, do_run: bool, output: str | None,
                    as_json: bool, **run_opts) -> None:
    """Check which kernel variants dispatched in each op region against a spec (CI gate).

    PROFILE is an mmprof profile or a raw trace (Kineto, rocprofv3, nsys), imported on the fly. With --run
    and no PROFILE, the reference runtime runs first (e.g. `mmprof verify-fastpath --run --preset tiny
    --shared-expert separate` exits 1 with FP001).
    """
    from mmprof.analysis.classify import load_rules
    from mmprof.analysis.checks.spec import load_spec
    from mmprof.analysis.checks.verify import verify
    from mmprof.errors import BadInput

    if (profile is None) == (not do_run):
        raise BadInput("give a PROFILE (an mmprof profile or a trace) or --run (run the reference runtime first), "
                       "not both" if do_run else
                       "give a PROFILE (an mmprof profile or a trace) or --run to run the reference runtime first")
    spec = load_spec(spec_path)
    rules = load_rules(rules_paths) if rules_paths else None
    if do_run:
        prof = _run_reference(run_opts, output, quiet=as_json)
        profile = output or f"mmprof run ({run_opts['preset']})"
    else:
        from mmprof.importers import import_paths

        prof = import_paths([profile])
    result = verify(prof, spec, rules=rules, sparse_layers=sparse_layers, profile_name=str(profile))
    if junit_path:
        from mmprof.render.junit import write_junit

        write_junit(result, junit_path)
    if as_json:
        echo_json(result.to_dict())
    else:
        render(result, verbose=verbose, junit_path=junit_path)
    ctx.exit(result.exit_code)


def _run_reference(run_opts: dict, output: str | None, quiet: bool):
    """`mmprof run` with full capture and one plain timing run; the Profile is kept only with -o."""
    import tempfile
    from pathlib import Path

    from mmprof.cli.run import execute, run_options

    opts = run_options(**run_opts, capture="full", repeats=1)
    if output:
        return execute(opts, output, show_progress=not quiet)
    with tempfile.TemporaryDirectory(prefix="mmprof-verify-") as d:
        return execute(opts, str(Path(d) / "run.json.gz"), show_progress=not quiet)


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.3f}"


def render(result, verbose: bool = False, junit_path: str | None = None) -> None:
    from rich.table import Table

    con = console()
    what = "kernels" if result.source == "kernels" else "CPU ops (no GPU kernels in this profile)"
    con.print(f"[bold]spec[/] {result.spec_id} ({result.spec_source}); {result.events:,} {what}, "
              f"{result.attributed:,} attributed to regions")
    if result.regions:
        t = Table(title="what ran per region (top variants by time)", title_justify="left")
        t.add_column("region", no_wrap=True)
        t.add_column("layers", justify="right")
        t.add_column("family / variant", overflow="fold")
        t.add_column("library", overflow="fold")
        for col in ("count", "ms", "share"):
            t.add_column(col, justify="right", no_wrap=True)
        for g in result.regions:
            for i, v in enumerate(g.variants):
                fam = f"{v['family']} / {v['variant']}" + (" [red](fallback)[/]" if v["path"] == "fallback" else "")
                t.add_row(g.region if i == 0 else "", (str(g.layers) if g.layers else "-") if i == 0 else "", fam, str(v["library"]),
                          f"{v['count']:,}", _ms(v["time_ns"]), f"{100 * v['share']:.0f}%")
            t.add_section()
        con.print(t)
    a = Table(title="assertions", title_justify="left")
    for col in ("code", "assertion", "result", "detail"):
        a.add_column(col, overflow="fold")
    for r in result.results:
        detail = r.message
        if r.evidence and (r.status != "pass" or verbose):
            detail += "\n" + "\n".join(f"  - {e}" for e in r.evidence)
        a.add_row(r.code, r.id, _STYLE[r.status], detail)
    con.print(a)
    c = result.counts()
    verdict = {0: "[green]PASS[/]", 1: "[red]FAIL[/]", 2: "[yellow]NO EVIDENCE[/] (never a pass)"}[result.exit_code]
    con.print(f"{verdict}: {c['pass']} passed, {c['fail']} failed, {c['no_evidence']} without evidence"
              + (f"; JUnit written to {junit_path}" if junit_path else ""))
