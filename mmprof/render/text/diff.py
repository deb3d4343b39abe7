"""Rich rendering of `mmprof diff` (a DiffResult) for the terminal, in the order a reviewer reads it: what is
compared (and what differs in meaning), the profiler's cost, the answer (which is faster and why), the other
phases in one line each, then the tables behind the answer.

Every string taken from a trace goes through `mmprof.render.safe` (markup escaped, control characters shown).
Tables fit the console's width (`mmprof.render.text.layout`); a before -> after pair is shown in one unit.
"""

from __future__ import annotations

from typing import Any

from rich.padding import Padding
from rich.text import Text

from mmprof.analysis.timeline.breakdown import ENGINE_CATEGORIES
from mmprof.render.safe import cell, markup
from mmprof.render.text.layout import Col, fit_table
from mmprof.units import fmt_ns_pair, fmt_pct

TOP_ROWS = 12
ANSWER_ORDER = ("faster", "step", "plain", "disagree", "why", "GPU work", "host", "overlap", "regions", "missing",
                "bottleneck")


def _line(console, text: str, indent: int = 0, style: str = "") -> None:
    t = cell(text)
    if style:
        t.stylize(style)
    console.print(Padding(t, (0, 0, 0, indent)))   # wrapped lines keep the indent


def render_compared(d, console) -> None:
    """The what-is-compared block: one row per fact, both sides, '≠' where they differ; then the flags."""
    comp = getattr(d, "compared", None)
    if comp is None:
        return
    cols = [Col("what is compared", keep=10, wrap=True), Col("before", keep=10, fold=True, min=10),
            Col("after", keep=10, fold=True, min=10), Col("", keep=8)]
    rows = []
    for r in comp.rows:
        if r.before == "unknown" and r.after == "unknown":
            continue
        mark = "≠" if r.same is False else ("?" if r.same is None else "")
        rows.append([r.label, r.before, r.after, Text(mark, style="bold yellow" if mark == "≠" else "")])
    console.print(fit_table(console, cols, rows))
    for w in d.preface:
        console.print(Text.assemble(("warning: ", "yellow"), cell(w)))


def render_profiler_cost(d, console) -> None:
    """Each side's plain timing and the profiler's cost (profiled / plain); what the settings did to host time."""
    comp = getattr(d, "compared", None)
    plain = d.plain or {}
    for side in ("before", "after"):
        t = plain.get(side)
        if t:
            cost = f"; profiler's cost {t['cost']:.2f}x (profiled / plain)" if t.get("cost") else ""
            _line(console, f"plain {side}: {t['text']}{cost}")
    if not (plain.get("before") or plain.get("after")):
        _line(console, f"plain timing: {plain.get('text') or 'none'}", style="dim")
    for c in (comp.caveats if comp else []):
        console.print(Text.assemble(("profiler: ", "yellow"), cell(c)))


def render_answer(d, console) -> None:
    ans = getattr(d, "answer", None)
    console.print(Text.assemble(("verdict: ", "bold"), cell(d.verdict)))
    if ans is None:
        return
    for key in ANSWER_ORDER:
        for k, text in ans.lines:
            if k == key:
                _line(console, f"{'missing data' if k == 'missing' else k}: {text}", indent=2,
                      style="yellow" if k in ("missing", "disagree") else "")
    for s in d.steps:
        if s.phase != d.phase and s.line:
            _line(console, s.line, indent=2, style="dim")


def _steps_table(d, console) -> None:
    cols = [Col("phase", keep=10), Col("before", "right", keep=10), Col("after", "right", keep=10),
            Col("change", "right", keep=9), Col("noise band", "right", keep=6, wrap=True),
            Col("steps", "right", keep=7)]
    rows = []
    for s in d.steps:
        b, a = fmt_ns_pair(s.before_ns, s.after_ns)
        band = s.band or {}
        btxt = (f"{band['lo']:+.1%}..{band['hi']:+.1%}" + (" (noise)" if band.get("within") else "")) if band else "-"
        rows.append([s.phase, b, a, fmt_pct(s.change, True), btxt, f"{s.before_steps} / {s.after_steps}"])
    console.print(fit_table(console, cols, rows, title="step time (median over steps)"))


def _categories(d, console) -> None:
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
        rows = []
        for m in d.moves:
            b, a = fmt_ns_pair(m.before_ns, m.after_ns)
            rows.append([m.label, b, a, fmt_ns_pair(m.delta_ns, m.before_ns)[0]])
        console.print(fit_table(console, cols, rows, title=f"{d.phase}: time per step by category (mean over steps)"))


def _paths(d, console) -> None:
    if d.path_changes:
        console.print("[bold]path changes[/bold] (kernel variants that vanished / appeared, per region):")
        for p in d.path_changes[:TOP_ROWS]:
            console.print(Padding(cell(p.summary), (0, 0, 0, 2)))
        if len(d.path_changes) > TOP_ROWS:
            console.print(f"  ... {len(d.path_changes) - TOP_ROWS} more (see --json)")
    else:
        console.print("path changes: none (the same kernel variants ran in every region)")


def _delta_table(console, title: str, rows: list[Any], detail: bool = False) -> None:
    if not rows:
        return
    cols = [Col("key", keep=10, wrap=True, max=40), Col("before", "right", keep=8), Col("after", "right", keep=8),
            Col("delta", "right", keep=9), Col("change", "right", keep=5)]
    if detail:
        cols.append(Col("variants before -> after", keep=7, fold=True, min=18, max=60))
    cells = []
    for r in rows[:TOP_ROWS]:
        b, a = fmt_ns_pair(r.before_ns, r.after_ns)
        c = [r.key, b, a, fmt_ns_pair(r.delta_ns, max(abs(r.before_ns), abs(r.after_ns)))[0], fmt_pct(r.change, True)]
        if detail:
            c.append(f"{r.before_detail or '-'} -> {r.after_detail or '-'}")
        cells.append(c)
    console.print(fit_table(console, cols, cells, title=title))


def render_diff(d, console) -> None:
    """Print a DiffResult (module docstring)."""
    console.print(f"[bold]mmprof diff[/bold]  {markup(d.before)} -> {markup(d.after)}  phase: {markup(d.phase)}"
                  + (f"  rank: {d.rank}" if d.rank is not None else ""))
    render_compared(d, console)
    if getattr(d, "engine", None):
        _line(console, f"engine steps: {d.engine[0]} -> {d.engine[1]}")
    render_profiler_cost(d, console)
    render_answer(d, console)
    for n in d.notes:
        _line(console, f"note: {n}", style="dim")
    _steps_table(d, console)
    _categories(d, console)
    _paths(d, console)
    unit = ("per step and rank" if getattr(d, "per_rank", False) else "per step") if d.per_step else "total"
    _delta_table(console, f"matched work (region / family), time {unit} (mean)", d.matched, detail=True)
    _delta_table(console, f"by region (matched by role across engines), time {unit} (mean)",
                 sorted(d.by_scope, key=lambda x: -max(x.before_ns, x.after_ns)))
    _delta_table(console, f"by layer, time {unit} (mean)", d.by_layer)
    _delta_table(console, "by rank: median step time", d.by_rank)
    if d.ranks:
        console.print("[bold]across ranks[/bold] (mmprof ranks has the details):")
        for side in ("before", "after"):
            for v in (d.ranks.get(side) or {}).get("phases", []):
                _line(console, f"{side}: {v['verdict']}", indent=2)
    for w in d.warnings:
        if w not in d.preface:
            console.print(Text.assemble(("warning: ", "yellow"), cell(w)))
