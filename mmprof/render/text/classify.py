"""Terminal rendering of `mmprof classify` (Coverage, single-name lookups) and `mmprof rules` (the registries)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.padding import Padding
from rich.text import Text

from mmprof.render.safe import cell, markup
from mmprof.render.text.layout import Col, fit_table

if TYPE_CHECKING:  # an annotation only: `mmprof rules` renders here without importing pandas
    from mmprof.analysis.views.coverage import Coverage


def render_coverage(cov: Coverage, con, top: int = 25, show_unclassified: bool = False) -> None:
    what = (f"kernels and {cov.copies:,} copies" if cov.copies else "kernels") if cov.source == "kernels" \
        else "CPU ops (no GPU kernels)"
    n = cov.kernels if cov.source == "kernels" else cov.events
    con.print(f"{n:,} {what}, {cov.total_ns / 1e6:,.3f} ms; unclassified: "
              f"[{'red' if cov.unclassified_share > 0.05 else 'green'}]{100 * cov.unclassified_share:.2f}%[/] of time "
              f"({len(cov.unclassified)} names)")
    for title, rows, key in (("by family", cov.by_family, "family"), ("by library", cov.by_library, "library")):
        cols = [Col(key, keep=10, fold=True, min=12), Col("count", "right", keep=6), Col("ms", "right", keep=9),
                Col("share", "right", keep=8)]
        cells = [[str(r[key]), f"{r['count']:,}", f"{r['time_ns'] / 1e6:,.3f}", f"{100 * r['share']:.1f}%"]
                 for r in rows[:top]]
        con.print(fit_table(con, cols, cells, title=title))
    if show_unclassified:
        if not cov.unclassified:
            con.print("unclassified names: none")
            return
        cols = [Col("name", name=True, keep=10, min=24), Col("count", "right", keep=6), Col("ms", "right", keep=9)]
        cells = [[r["name"], f"{r['count']:,}", f"{r['time_ns'] / 1e6:,.3f}"] for r in cov.unclassified[:top]]
        con.print(fit_table(con, cols, cells, title="unclassified names (display names; --json has the full ones)"))


def render_lookups(rows: list[dict[str, Any]], con) -> None:
    for r in rows:
        con.print(cell(r["name"]))
        if r.get("display_name") and r["display_name"] != r["name"]:
            con.print(Padding(cell(f"display name: {r['display_name']}"), (0, 0, 0, 2)))
        con.print(Padding(cell(f"-> family={r['family']} variant={r['variant']} library={r['library']} "
                               f"path={r['path']} rule={r['rule'] or '(unclassified)'}"), (0, 0, 0, 2)))


def render_kernel_rules(rules, con) -> None:
    cols = [Col("id", keep=10, fold=True, min=14), Col("family", keep=9, fold=True, min=10),
            Col("variant", keep=6, fold=True, min=10), Col("library", keep=5, fold=True, min=8),
            Col("path", keep=7), Col("description", keep=4, fold=True, min=24)]
    cells = [[r.id, r.family, r.variant or "", r.library or "", r.path, r.description] for r in rules.rules]
    con.print(fit_table(con, cols, cells, title=f"{len(rules)} classification rules, in priority order"))


def render_checks(checks: list, con, verbose: bool = False) -> None:
    """The check registry: one row per code (FP and SH); with `verbose`, what / why / example / known problems."""
    cols = [Col("code", keep=10), Col("name", keep=7, fold=True, min=14), Col("severity", keep=5),
            Col("summary", keep=9, fold=True, min=24)]
    cells = [[c.code, c.name, c.severity, c.summary] for c in checks]
    con.print(fit_table(con, cols, cells, title=f"{len(checks)} check{'' if len(checks) == 1 else 's'} (stable codes)"))
    if verbose:
        for c in checks:
            con.print(f"\n[bold]{markup(c.code)} {markup(c.name)}[/] ({markup(c.status)}, {markup(c.severity)})")
            for label, text in (("what", c.what), ("why", c.why), ("example", c.example),
                                ("known problems", c.known_problems)):
                con.print(Padding(Text.assemble((f"{label}: ", "bold"), cell(text)), (0, 0, 0, 2)))
