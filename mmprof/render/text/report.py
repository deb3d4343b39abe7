"""Rich rendering of `mmprof report` (Report) and `mmprof diff` (DiffResult) for the terminal.

Every string taken from a trace goes through `rich.markup.escape`, so a kernel named like markup cannot restyle
or hide output.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from mmprof.analysis.timeline import CATEGORIES
from mmprof.render.text.ranks import render_verdicts
from mmprof.units import fmt_ns, fmt_pct

TOP_ROWS = 12
SHORT = {"compute_bound": "compute", "memory_bound": "memory", "unattributed": "unattrib.",
         "communication": "comm exposed", "memcpy": "memcpy", "idle_host": "idle host", "idle_other": "idle other"}


def _short(s: str, n: int = 70) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def render_report(report, console) -> None:
    """Print a Report: per phase a breakdown by rank, the bottleneck line, top kernels, launch verdict."""
    devs = ", ".join(f"rank {r}: {escape(n) if n else 'no peak (no roofline)'}" for r, n in sorted(report.devices.items()))
    console.print(f"[bold]mmprof report[/bold]  events: {report.source}  devices: {devs or '-'}")
    for n in report.notes:
        console.print(f"[dim]note: {escape(n)}[/dim]")
    for ph in report.phases:
        console.print()
        console.print(f"[bold]{escape(ph.bottleneck)}[/bold]")
        st = ph.step
        console.print(f"  step time {fmt_ns(st.median_ns)} (median of {st.steps}; {escape(st.method)})")
        rows = [ph] + [p for p in report.per_rank if p.phase == ph.phase]
        t = Table(title=f"{ph.phase}: share of wall time (host = waiting for launches)", title_justify="left")
        t.add_column("rank")
        t.add_column("wall", justify="right")
        for c in CATEGORIES:
            t.add_column(SHORT[c], justify="right")
        t.add_column("comm overlapped", justify="right")
        for p in rows:
            b = p.breakdown
            ov = b.comm_overlapped_ns / b.comm_total_ns if b.comm_total_ns else None
            t.add_row("all" if p.rank is None else str(p.rank), fmt_ns(b.span_ns),
                      *(fmt_pct(b.share(c)) for c in CATEGORIES), fmt_pct(ov))
        console.print(t)
        k = Table(title=f"{ph.phase}: top kernels", title_justify="left")
        for col, just in (("kernel", "left"), ("family", "left"), ("calls", "right"), ("time", "right"),
                          ("share", "right"), ("bound", "left"), ("FLOP/B", "right"), ("efficiency", "right"),
                          ("TFLOP/s", "right"), ("TB/s", "right")):
            k.add_column(col, justify=just, overflow="fold" if col == "kernel" else "ellipsis")
        for r in ph.top_kernels:
            k.add_row(escape(_short(r.name)), escape(r.family), str(r.count), fmt_ns(r.time_ns), fmt_pct(r.share),
                      r.bound, "-" if r.intensity is None else f"{r.intensity:.1f}", fmt_pct(r.efficiency),
                      "-" if r.tflops is None else f"{r.tflops:.1f}",
                      "-" if r.tbs is None else f"{r.tbs:.2f}")
        console.print(k)
        if ph.launch:
            L = ph.launch
            console.print(f"  launch: {L.verdict} ({escape(L.reason)}); launch-to-start p50 {fmt_ns(L.delay_p50_ns)}, "
                          f"p90 {fmt_ns(L.delay_p90_ns)}; {L.short_kernels} kernels shorter than their launch call; "
                          f"launches per step {'-' if L.launches_per_step is None else f'{L.launches_per_step:.0f}'}")
    if report.ranks is not None:
        console.print()
        console.print("[bold]across ranks[/bold] (mmprof ranks has the details):")
        render_verdicts(report.ranks, console)
    console.print()
    console.print(escape(report.checks.get("summary", "checks: not available")))
    for w in report.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")


def render_diff(d, console) -> None:
    """Print a DiffResult: verdict, step times, categories, path changes, top deltas."""
    console.print(f"[bold]mmprof diff[/bold]  {escape(d.before)} -> {escape(d.after)}  phase: {escape(d.phase)}"
                  + (f"  rank: {d.rank}" if d.rank is not None else ""))
    console.print(f"[bold]verdict:[/bold] {escape(d.verdict)}")
    for n in d.notes:
        console.print(f"[dim]note: {escape(n)}[/dim]")
    t = Table(title="step time", title_justify="left")
    for c in ("phase", "before", "after", "change", "steps before", "steps after"):
        t.add_column(c, justify="left" if c == "phase" else "right")
    for s in d.steps:
        t.add_row(escape(s.phase), fmt_ns(s.before_ns), fmt_ns(s.after_ns), fmt_pct(s.change, True),
                  str(s.before_steps), str(s.after_steps))
    console.print(t)
    t = Table(title=f"{d.phase}: share of wall time", title_justify="left")
    for c in ("category", "before", "after", "delta"):
        t.add_column(c, justify="left" if c == "category" else "right")
    for c in d.categories:
        style = "bold" if c.category in d.dominant else ""
        t.add_row(c.label, fmt_pct(c.before_share), fmt_pct(c.after_share), f"{c.delta_pp:+.1f} pp", style=style)
    console.print(t)
    if d.path_changes:
        console.print("[bold]path changes[/bold] (kernel variants that vanished / appeared, per region):")
        for p in d.path_changes[:TOP_ROWS]:
            console.print(f"  {escape(p.summary)}")
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
                console.print(f"  {side}: {escape(v['verdict'])}")
    for w in d.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")


def _delta_table(console, title: str, rows: list[Any], detail: bool = False) -> None:
    if not rows:
        return
    t = Table(title=title, title_justify="left")
    t.add_column("key")
    for c in ("before", "after", "delta", "change"):
        t.add_column(c, justify="right")
    if detail:
        t.add_column("variants before -> after", overflow="fold")
    for r in rows[:TOP_ROWS]:
        cells = [escape(_short(r.key)), fmt_ns(r.before_ns), fmt_ns(r.after_ns), fmt_ns(r.delta_ns),
                 fmt_pct(r.change, True)]
        if detail:
            cells.append(escape(f"{r.before_detail or '-'} -> {r.after_detail or '-'}"))
        t.add_row(*cells)
    console.print(t)
