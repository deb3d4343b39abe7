"""Rich rendering of `mmprof report` (Report) for the terminal (`mmprof diff`: `mmprof.render.text.diff`).

Every string taken from a trace goes through `mmprof.render.safe` (markup escaped, control characters shown), so a
kernel named like markup or like a terminal escape cannot restyle, hide or fake output. Tables fit the console's
width (`mmprof.render.text.layout`).
"""

from __future__ import annotations

from mmprof.analysis.timeline.breakdown import CATEGORIES, ENGINE_CATEGORIES, LABELS
from mmprof.render.safe import markup
from mmprof.render.text.layout import Col, fit_table
from mmprof.render.text.logs import render_log
from mmprof.render.text.ranks import render_verdicts
from mmprof.units import fmt_ns, fmt_pct, fmt_si


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def render_report(report, console) -> None:
    """Print a Report: per phase a breakdown by rank, the bottleneck line, top kernels, launch verdict."""
    devs = ", ".join(f"rank {r}: {markup(n) if n else 'no peak (no roofline)'}"
                     for r, n in sorted(report.devices.items()))
    console.print(f"[bold]mmprof report[/bold]  events: {markup(report.source)}  devices: {devs or '-'}")
    for n in report.notes:
        console.print(f"[dim]note: {markup(n)}[/dim]")
    if report.graphs is not None:
        console.print(markup(report.graphs.line()))
    for ph in report.phases:
        console.print()
        console.print(f"[bold]{markup(ph.bottleneck)}[/bold]")
        st = ph.step
        console.print(f"  step time {fmt_ns(st.median_ns)} (median of {st.steps}; {markup(st.method)})")
        if ph.phase in getattr(report, "engine", {}):
            console.print(f"  {markup(report.engine[ph.phase])} (the engine's own step annotations)")
        parts = getattr(ph, "engine_steps", None)
        if parts:
            console.print("  per engine step, median (p90): " + ", ".join(
                f"{k} {fmt_ns(v['median_ns'])} ({fmt_ns(v['p90_ns'])})" for k, v in parts.items() if k != "steps"))
        _breakdown(console, ph, [p for p in report.per_rank if p.phase == ph.phase])
        cols = [Col("kernel" if report.source == "kernels" else "op", name=True, keep=10, min=22), Col("family", keep=7),
                Col("calls", "right", keep=4),
                Col("time", "right", keep=9), Col("share", "right", keep=8), Col("bound, % of peak", keep=6, wrap=True),
                Col("FLOP/B", "right", keep=1), Col("FLOP/s", "right", keep=2), Col("B/s", "right", keep=2)]
        rows = [[r.name, r.family, f"{r.count:,}", fmt_ns(r.time_ns), fmt_pct(r.share),
                 r.bound + ("" if r.efficiency is None else f" {fmt_pct(r.efficiency)}"),
                 _f(r.intensity, "{:,.1f}"), fmt_si(None if r.tflops is None else r.tflops * 1e12),
                 fmt_si(None if r.tbs is None else r.tbs * 1e12)]
                for r in ph.top_kernels]
        console.print(fit_table(console, cols, rows, title=f"{ph.phase}: top kernels"))
        if ph.launch:
            L = ph.launch
            console.print(f"  launch: {markup(L.verdict)} ({markup(L.reason)}); launch-to-start p50 "
                          f"{fmt_ns(L.delay_p50_ns)}, p90 {fmt_ns(L.delay_p90_ns)}, p99 {fmt_ns(L.delay_p99_ns)}; "
                          f"{L.short_kernels} kernels shorter than their launch call; launches per step "
                          f"{'-' if L.launches_per_step is None else f'{L.launches_per_step:.0f}'}")
    if report.ranks is not None:
        console.print()
        console.print("[bold]across ranks[/bold] (mmprof ranks has the details):")
        render_verdicts(report.ranks, console)
    if getattr(report, "log", None) is not None and report.log.present:
        console.print()
        render_log(report.log, console, "engine log (what the engine said it chose; the kernels and time each concerns)")
    console.print()
    console.print(markup(report.checks.get("summary", "checks: not available")))
    for w in report.warnings:
        console.print(f"[yellow]warning:[/yellow] {markup(w)}")


def _breakdown(console, ph, per_rank: list) -> None:
    """Categories as rows, all ranks and each rank as columns (later ranks drop first when the table is too wide)."""
    sides = [("all ranks", ph.breakdown)] + [(f"rank {p.rank}", p.breakdown) for p in per_rank]
    cols = [Col("share of wall time", keep=10, wrap=True)] + [
        Col(label, "right", keep=10 if i == 0 else max(8 - i, 1), wrap=True) for i, (label, _) in enumerate(sides)]
    rows = [["wall time"] + [fmt_ns(b.span_ns) for _, b in sides]]
    rows += [[LABELS[c]] + [fmt_pct(b.share(c)) for _, b in sides] for c in CATEGORIES
             if c not in ENGINE_CATEGORIES or any(b.time_ns.get(c, 0) for _, b in sides)]
    rows.append(["communication overlapped with compute"]
                + [fmt_pct(b.comm_overlapped_ns / b.comm_total_ns if b.comm_total_ns else None) for _, b in sides])
    console.print(fit_table(console, cols, rows, title=f"{ph.phase}: where the wall time went",
                            sections=(0,)))
