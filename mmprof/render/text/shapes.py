"""Terminal rendering of `mmprof shapes` (a ShapesResult); the cells come from mmprof.render.shapes_tables."""

from __future__ import annotations

from rich.padding import Padding
from rich.text import Text

from mmprof.render.safe import cell, markup
from mmprof.render.shapes_tables import comparison_line, headline, shape_tables
from mmprof.render.text.layout import Col, fit_table
from mmprof.shapes_model import ShapesResult
from mmprof.units import fmt_ranges

_COLOR = {"error": "red", "warning": "yellow", "info": "cyan"}


def _cols(labels: list[str]) -> list[Col]:
    """The item column and one column per rank group (later groups drop first when the table is too wide)."""
    return [Col("item", keep=10, fold=True, min=16)] + [
        Col(lab, "right", keep=10 if i == 0 else max(8 - i, 1), wrap=True) for i, lab in enumerate(labels)]


def render_shapes(res: ShapesResult, con) -> None:
    """Print a ShapesResult: per layer kind a table of heads, GEMMs, weights and cache bytes per rank group; the
    whole-model table; the comparison with live / traced calls; the findings; the notes."""
    if res.ranks:
        con.print(f"[bold]{markup(headline(res))}[/]")
        for t in shape_tables(res):
            con.print(fit_table(con, _cols(t.header[1:]), t.rows, title=t.title))
    line = comparison_line(res)
    if line is not None:
        con.print(markup(line))
        for u in res.comparison.unmatched[:8]:
            con.print(f"  rank {u['rank']} {markup(u['scope'])} ({markup(u['phase'])} step {u['step']}): "
                      f"{markup(u['why'])}")
    if res.findings:
        con.print("[bold]findings[/]")
        for f in res.findings:
            head = Text.assemble((f.code, "bold"), " ", (f.severity, _COLOR.get(f.severity, "")), " ", cell(f.title))
            where = [f"layers {fmt_ranges(f.layers)}" if f.layers else "",
                     f"ranks {fmt_ranges(f.ranks)}" if f.ranks else ""]
            if any(where):
                head.append(f" ({'; '.join(x for x in where if x)})", style="dim")
            con.print(head)
            con.print(Padding(cell(f.message), (0, 0, 0, 2)))
    else:
        con.print("no findings")
    for n in res.notes:
        con.print(f"[dim]note: {markup(n)}[/]")
