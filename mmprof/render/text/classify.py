"""Terminal rendering of `mmprof classify` (Coverage, single-name lookups) and `mmprof rules` (the registries)."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from mmprof.analysis.coverage import Coverage


def render_coverage(cov: Coverage, con, top: int = 25, show_unclassified: bool = False) -> None:
    what = "kernels" if cov.source == "kernels" else "CPU ops (no GPU kernels)"
    con.print(f"{cov.events:,} {what}, {cov.total_ns / 1e6:,.3f} ms; unclassified: "
              f"[{'red' if cov.unclassified_share > 0.05 else 'green'}]{100 * cov.unclassified_share:.2f}%[/] of time "
              f"({len(cov.unclassified)} names)")
    for title, rows, key in (("by family", cov.by_family, "family"), ("by library", cov.by_library, "library")):
        t = Table(title=title, title_justify="left")
        t.add_column(key)
        for col in ("count", "ms", "share"):
            t.add_column(col, justify="right")
        for r in rows[:top]:
            t.add_row(escape(str(r[key])), f"{r['count']:,}", f"{r['time_ns'] / 1e6:,.3f}", f"{100 * r['share']:.1f}%")
        con.print(t)
    if show_unclassified:
        t = Table(title="unclassified names", title_justify="left")
        t.add_column("name", overflow="fold")
        t.add_column("count", justify="right")
        t.add_column("ms", justify="right")
        for r in cov.unclassified[:top]:
            t.add_row(escape(r["name"]), f"{r['count']:,}", f"{r['time_ns'] / 1e6:,.3f}")
        con.print(t)


def render_lookups(rows: list[dict[str, Any]], con) -> None:
    for r in rows:
        con.print(f"{escape(r['name'])}\n  -> family={r['family']} variant={escape(str(r['variant']))} "
                  f"library={r['library']} path={r['path']} rule={r['rule'] or '(unclassified)'}")


def render_kernel_rules(rules, con) -> None:
    t = Table(title=f"{len(rules)} classification rules, in priority order", title_justify="left")
    for col in ("id", "family", "variant", "library", "path", "description"):
        t.add_column(col, overflow="fold")
    for r in rules.rules:
        t.add_row(r.id, r.family, escape(r.variant or ""), r.library or "", r.path, escape(r.description))
    con.print(t)


def render_checks(checks: list, con, verbose: bool = False) -> None:
    """The check registry: one row per code (FP and SH); with `verbose`, what / why / example / known problems."""
    t = Table(title=f"{len(checks)} checks (stable codes)", title_justify="left")
    for col in ("code", "name", "severity", "summary"):
        t.add_column(col, overflow="fold", no_wrap=col in ("code",))
    for c in checks:
        t.add_row(c.code, c.name, c.severity, c.summary)
    con.print(t)
    if verbose:
        for c in checks:
            con.print(f"\n[bold]{c.code} {c.name}[/] ({c.status}, {c.severity})")
            for label, text in (("what", c.what), ("why", c.why), ("example", c.example),
                                ("known problems", c.known_problems)):
                con.print(f"  {label}: {text}")
