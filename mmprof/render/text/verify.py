"""Terminal rendering of `mmprof verify-fastpath` (a VerifyResult)."""

from __future__ import annotations

from rich.text import Text

from mmprof.names import display_name
from mmprof.render.safe import markup, visible
from mmprof.render.text.layout import Col, fit_table
from mmprof.render.text.logs import render_log
from mmprof.units import fmt_ms

_STYLE = {"pass": ("PASS", "green"), "fail": ("FAIL", "red"), "no_evidence": ("NO EVIDENCE", "yellow"),
          "not_applicable": ("N/A", "cyan")}


def render_verify(result, con, verbose: bool = False, junit_path: str | None = None) -> None:
    """Print a VerifyResult: what ran per region, each assertion's verdict and evidence, the gate's verdict."""
    for w in getattr(result, "warnings", []):  # input that does not fit: before anything is judged
        con.print(f"[yellow]warning:[/] {markup(w)}")
    what = "kernels" if result.source == "kernels" else "CPU ops (no GPU kernels in this profile)"
    con.print(f"[bold]spec[/] {markup(result.spec_id)} ({markup(result.spec_source)}); {result.events:,} {what}, "
              f"{result.attributed:,} attributed to regions")
    if result.regions:
        cols = [Col("region (layers)", keep=10, fold=True, min=14),
                Col("family / variant", keep=10, fold=True, min=22), Col("library", keep=6, fold=True, min=8),
                Col("count", "right", keep=4), Col("ms", "right", keep=8), Col("share", "right", keep=9)]
        rows, sections = [], []
        for g in result.regions:
            for i, v in enumerate(g.variants):
                fam = Text(visible(f"{v['family']} / {display_name(str(v['variant']), 40)}"))
                if v["path"] == "fallback":
                    fam.append(" (fallback)", style="red")
                region = f"{g.region} ({g.layers})" if g.layers else g.region
                rows.append([region if i == 0 else "", fam,
                             str(v["library"]), f"{v['count']:,}", fmt_ms(v["time_ns"]), f"{100 * v['share']:.0f}%"])
            sections.append(len(rows) - 1)
        con.print(fit_table(con, cols, rows, title="what ran per region (top variants by time)", sections=sections))
    render_log(getattr(result, "log", None), con)
    cols = [Col("code", keep=10), Col("assertion", keep=8, fold=True, min=12), Col("result", keep=10),
            Col("detail", keep=10, fold=True, min=24)]
    rows = []
    for r in result.results:
        lines = [visible(part) for part in str(r.message).split("\n")]  # our own line breaks stay breaks
        if r.evidence and (r.status != "pass" or verbose):
            lines += [f"  - {visible(e)}" for e in r.evidence]
        if getattr(r, "judged_from", ""):
            lines.append(f"  judged from: {visible(r.judged_from)}")
        label, style = _STYLE[r.status]
        rows.append([r.code, r.id, Text(label, style=style), Text("\n".join(lines))])  # parts already made visible
    con.print(fit_table(con, cols, rows, title="assertions"))
    c = result.counts()
    verdict = {0: "[green]PASS[/]", 1: "[red]FAIL[/]", 2: "[yellow]NO EVIDENCE[/] (never a pass)"}[result.exit_code]
    na = f", {c['not_applicable']} not applicable" if c.get("not_applicable") else ""
    con.print(f"{verdict}: {c['pass']} passed, {c['fail']} failed, {c['no_evidence']} without evidence{na}"
              + (f"; JUnit written to {markup(junit_path)}" if junit_path else ""))
