"""Rich rendering of `mmprof report` (Report) and `mmprof diff` (DiffResult) for the terminal.

Every string taken from a trace goes through `mmprof.render.safe` (markup escaped, control characters shown), so a
kernel named like markup or like a terminal escape cannot restyle, hide or fake output. Tables fit the console's
width (`mmprof.render.text.layout`).
"""

from __future__ import annotations

from typing import Any

from rich.padding import Padding
from rich.text import Text

from mmprof.analysis.timeline.breakdown import CATEGORIES, ENGINE_CATEGORIES, LABELS
from mmprof.render.safe import cell, markup
from mmprof.render.text.layout import Col, fit_table
from mmprof.render.text.logs import render_log
from mmprof.render.text.ranks import render_verdicts
from mmprof.units import fmt_ns, fmt_pct, fmt_si

TOP_ROWS = 12


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


def render_diff(d, console) -> None:
    """Print a DiffResult: verdict, step times, categories, path changes, top deltas."""
    console.print(f"[bold]mmprof diff[/bold]  {markup(d.before)} -> {markup(d.after)}  phase: {markup(d.phase)}"
                  + (f"  rank: {d.rank}" if d.rank is not None else ""))
    preface = list(getattr(d, "preface", []) or [])
    for w in preface:  # what is compared comes before the verdict about it
        console.print(f"[yellow]warning:[/yellow] {markup(w)}")
    if getattr(d, "engine", None):
        console.print(f"engine steps: {markup(d.engine[0])} -> {markup(d.engine[1])}")
    console.print(f"[bold]verdict:[/bold] {markup(d.verdict)}")
    for n in d.notes:
        console.print(f"[dim]note: {markup(n)}[/dim]")
    cols = [Col("phase", keep=10), Col("before", "right", keep=10), Col("after", "right", keep=10),
            Col("change", "right", keep=9), Col("steps before", "right", keep=3, wrap=True),
            Col("steps after", "right", keep=3, wrap=True)]
    rows = [[s.phase, fmt_ns(s.before_ns), fmt_ns(s.after_ns), fmt_pct(s.change, True), str(s.before_steps),
             str(s.after_steps)] for s in d.steps]
    console.print(fit_table(console, cols, rows, title="step time"))
    cols = [Col("category", keep=10, wrap=True), Col("before", "right", keep=10), Col("after", "right", keep=10),
            Col("delta", "right", keep=9)]
    rows = []
    for c in d.categories:
        if c.category in ENGINE_CATEGORIES and not (c.before_ns or c.after_ns):
            continue
        style = "bold" if c.category in d.dominant else ""
        rows.append([Text(x, style=style) for x in (c.label, fmt_pct(c.before_share), fmt_pct(c.after_share),
                                                     f"{c.delta_pp:+.1f} pp")])
    console.print(fit_table(console, cols, rows, title=f"{d.phase}: share of wall time"))
    if getattr(d, "moves", None):
        cols = [Col("per step", keep=10, wrap=True), Col("before", "right", keep=10), Col("after", "right", keep=10),
                Col("delta", "right", keep=9)]
        rows = [[m.label, fmt_ns(m.before_ns), fmt_ns(m.after_ns), fmt_ns(m.delta_ns)] for m in d.moves]
        console.print(fit_table(console, cols, rows, title=f"{d.phase}: time per step by category"))
    if d.path_changes:
        console.print("[bold]path changes[/bold] (kernel variants that vanished / appeared, per region):")
        for p in d.path_changes[:TOP_ROWS]:
            console.print(Padding(cell(p.summary), (0, 0, 0, 2)))  # wrapped lines keep the indent
        if len(d.path_changes) > TOP_ROWS:
            console.print(f"  ... {len(d.path_changes) - TOP_ROWS} more (see --json)")
    else:
        console.print("path changes: none (the same kernel variants ran in every region)")
    unit = "per step" if d.per_step else "total"
    _delta_table(console, f"matched work (region / family), time {unit}", d.matched, detail=True)
    _delta_table(console, f"by scope, time {unit}", d.by_scope)
    _delta_table(console, f"by layer, time {unit}", d.by_layer)
    _delta_table(console, "by rank: median step time", d.by_rank)
    if d.ranks:
        console.print("[bold]across ranks[/bold] (mmprof ranks has the details):")
        for side in ("before", "after"):
            for v in (d.ranks.get(side) or {}).get("phases", []):
                console.print(f"  {side}: {markup(v['verdict'])}")
    for w in d.warnings:
        if w not in preface:
            console.print(f"[yellow]warning:[/yellow] {markup(w)}")


def _delta_table(console, title: str, rows: list[Any], detail: bool = False) -> None:
    if not rows:
        return
    cols = [Col("key", keep=10, wrap=True, max=40), Col("before", "right", keep=8), Col("after", "right", keep=8),
            Col("delta", "right", keep=9), Col("change", "right", keep=5)]
    if detail:
        cols.append(Col("variants before -> after", keep=7, fold=True, min=18, max=60))
    cells = []
    for r in rows[:TOP_ROWS]:
        c = [r.key, fmt_ns(r.before_ns), fmt_ns(r.after_ns), fmt_ns(r.delta_ns), fmt_pct(r.change, True)]
        if detail:
            c.append(f"{r.before_detail or '-'} -> {r.after_detail or '-'}")
        cells.append(c)
    console.print(fit_table(console, cols, cells, title=title))
