"""Terminal rendering of what the engine's log said (a `mmprof.analysis.logs.join.LogReport`): the facts with the
kernels and time each concerns, whether the kernels agree with a backend the log names, and every fallback with its
log line. Shared by `verify-fastpath` and `report`. Log text is data: every string goes through render/safe.py."""

from __future__ import annotations

from rich.text import Text

from mmprof.names import display_name
from mmprof.render.safe import markup, visible
from mmprof.render.text.layout import Col, fit_table
from mmprof.units import fmt_ns

_VERDICT = {"agrees": ("agrees", "green"), "partly": ("partly", "yellow"), "disagrees": ("DISAGREES", "red"),
            "no_kernels": ("not in trace", "cyan"), "unjudged": ("not judged", "cyan")}
TABLE_KINDS = ("backend", "config", "default_config", "fallback", "fusion")
MAX_TEXT = 200


def _kernels(k) -> str:
    if k.judged_by == "nothing":
        return "-"
    if not k.events:
        return "none in this trace"
    top = display_name(k.top[0].rsplit(" x", 1)[0], 32) if k.top else "?"
    ph = ", ".join(f"{p} {fmt_ns(v)}" for p, v in k.phases.items())
    return f"{top}{' +' + str(len(k.top) - 1) if len(k.top) > 1 else ''}: {k.events:,} kernels, {fmt_ns(k.time_ns)} " \
           f"({k.share:.0%}{'; ' + ph if ph else ''})"


def render_log(rep, con, title: str = "engine log") -> None:
    """The facts of the log: a table of backends, configs, fallbacks and fusions with their kernels; the other
    settings on one line; then each fallback and each disagreement with the line that said it."""
    if rep is None or not rep.present:
        return
    con.print(f"[bold]{markup(title)}[/]: {markup(rep.facts.describe())}")
    rows, other = [], []
    for k in rep.kernels:
        g = k.group
        if g.kind not in TABLE_KINDS:
            if g.first.says() not in other:
                other.append(g.first.says())
            continue
        fact = Text(visible(f"{g.subject} {g.kind}"))
        if g.fallback:
            fact.append(" (fallback)", style="yellow")
        if g.rule.forced:
            fact.append(" (forced)", style="cyan")
        label, style = _VERDICT.get(k.verdict, ("", ""))
        where = k.where.split(",")[0] if k.judged_by == "regions" else ("anywhere" if k.events else "-")
        rows.append([fact, visible(g.value), visible(where), visible(_kernels(k)), Text(label, style=style)])
    if rows:
        cols = [Col("fact", keep=10, fold=True, min=12), Col("value", keep=9, fold=True, min=10),
                Col("concerns", keep=4, fold=True, min=10), Col("kernels it concerns (time, share)", keep=8, fold=True,
                                                                min=16),
                Col("vs kernels", keep=7, min=8)]
        con.print(fit_table(con, cols, rows, title="what the log says, and the kernels it concerns"))
    if other:
        con.print(f"  also: {markup('; '.join(other))}")
    for k in rep.findings + [x for x in rep.fallbacks if not x.finding]:
        g = k.group
        what = "[red]log and kernels disagree[/]" if k.finding else "[yellow]fallback[/]"
        con.print(f"  {what}: {markup(g.first.says())} ({markup(g.origin())})")
        if k.finding:
            con.print(f"    {markup(k.verdict_text())}")
        if k.events:
            con.print(f"    concerns {markup(k.where)}: {markup(k.kernels_text())}")
        text = g.first.text if len(g.first.text) <= MAX_TEXT else g.first.text[:MAX_TEXT] + "..."
        con.print(f"    log: {markup(text)}")
