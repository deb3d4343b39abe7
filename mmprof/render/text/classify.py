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
    n_events = cov.kernels if cov.source == "kernels" else cov.events
    n_unknown = sum(1 for r in cov.unclassified if not r.get("op_family"))
    con.print(f"{n_events:,} {what}, {cov.total_ns / 1e6:,.3f} ms; unclassified: "
              f"[{'red' if cov.unclassified_share > 0.01 else 'green'}]{100 * cov.unclassified_share:.2f}%[/] of time "
              f"({n_unknown} names)")
    if cov.by_evidence:
        ev = ", ".join(f"{r['evidence']} {100 * r['share']:.1f}%" for r in cov.by_evidence)
        con.print(cell(f"decided by (share of time): {ev}"))
    if cov.disagreements:
        n = sum(d["events"] for d in cov.disagreements)
        con.print(f"[yellow]name and launching op disagree[/] on {n:,} kernels ({len(cov.disagreements)} pairs; "
                  "the name decided):")
        cols = [Col("kernel", name=True, keep=10, min=20), Col("name says", keep=8, min=8),
                Col("op", keep=6, fold=True, min=10), Col("op says", keep=8, min=8), Col("ms", "right", keep=9)]
        cells = [[d["name"] or "", d["name_family"], d["op"] or "", d["op_family"], f"{d['time_ns'] / 1e6:,.3f}"]
                 for d in cov.disagreements[:top]]
        con.print(fit_table(con, cols, cells, title="disagreements"))
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
        cols = [Col("name", name=True, keep=10, min=24), Col("count", "right", keep=6), Col("ms", "right", keep=9),
                Col("op says", keep=5, min=8)]
        cells = [[r["name"], f"{r['count']:,}", f"{r['time_ns'] / 1e6:,.3f}", r.get("op_family") or "-"]
                 for r in cov.unclassified[:top]]
        con.print(fit_table(con, cols, cells, title="names no rule or word places (display names; --json has the "
                                                    "full ones; `op says`: the launching op decided)"))


def render_lookups(rows: list[dict[str, Any]], con) -> None:
    for r in rows:
        con.print(cell(r["name"]))
        if r.get("display_name") and r["display_name"] != r["name"]:
            con.print(Padding(cell(f"display name: {r['display_name']}"), (0, 0, 0, 2)))
        con.print(Padding(cell(f"-> family={r['family']} variant={r['variant']} library={r['library']} "
                               f"path={r['path']} rule={r['rule'] or '(unclassified)'}"), (0, 0, 0, 2)))
        why = f"evidence={r.get('evidence') or 'none'}: {r.get('reason') or ''}"
        if r.get("path_reason"):
            why += f"; path: {r['path_reason']}"
        con.print(Padding(cell(why), (0, 0, 0, 2)))


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
