"""Terminal rendering of `mmprof verify-fastpath` (a VerifyResult)."""

from __future__ import annotations

from rich.table import Table

from mmprof.units import fmt_ms

_STYLE = {"pass": "[green]PASS[/]", "fail": "[red]FAIL[/]", "no_evidence": "[yellow]NO EVIDENCE[/]"}


def render_verify(result, con, verbose: bool = False, junit_path: str | None = None) -> None:
    """Print a VerifyResult: what ran per region, each assertion's verdict and evidence, the gate's verdict."""
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
                          f"{v['count']:,}", fmt_ms(v["time_ns"]), f"{100 * v['share']:.0f}%")
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
