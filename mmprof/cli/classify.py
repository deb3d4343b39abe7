"""`mmprof classify PROFILE [--rules FILE] [--unclassified] [--json]`: kernel families and libraries by time.

Also `mmprof classify --name 'KERNEL NAME'` to see which rule a single name hits, and
`mmprof classify --list-rules [--json]` for the whole registry (classification rules and FP codes).
"""

from __future__ import annotations

import click

from mmprof.cli._common import console, echo_json, json_option


@click.command("classify")
@click.argument("profile", type=click.Path(), required=False)
@click.option("--rules", "rules_paths", type=click.Path(), multiple=True,
              help="Extra classification rules (TOML); repeatable. They extend / override the built-ins.")
@click.option("--unclassified", is_flag=True, help="List the kernel names no rule matched, by time.")
@click.option("--name", "names", multiple=True, help="Classify this kernel name instead of a profile; repeatable.")
@click.option("--top", type=click.IntRange(1, 10000), default=25, show_default=True, help="Rows per table.")
@click.option("--list-rules", is_flag=True, help="List every classification rule (in priority order) and the FP rule codes.")
@json_option
def classify(profile: str | None, rules_paths: tuple[str, ...], unclassified: bool, names: tuple[str, ...],
             top: int, list_rules: bool, as_json: bool) -> None:
    """Kernel name -> family, variant, library and path, with the share of time each explains.

    On a profile with no GPU kernels (a CPU run) the outermost compute CPU ops are classified instead.
    """
    from mmprof.analysis.classify import coverage, load_rules
    from mmprof.errors import BadInput

    rules = load_rules(rules_paths)
    if list_rules:
        from mmprof.analysis.fastpath import load_checks

        if as_json:
            echo_json({"rules": [r.to_dict() for r in rules.rules], "checks": list(load_checks().values())})
            return
        from rich.table import Table

        t = Table(title=f"{len(rules)} classification rules, in priority order", title_justify="left")
        for col in ("id", "family", "variant", "library", "path", "description"):
            t.add_column(col, overflow="fold")
        for r in rules.rules:
            t.add_row(r.id, r.family, r.variant or "", r.library or "", r.path, r.description)
        console().print(t)
        return
    if names:
        rows = [dict(name=n, **rules.classify(n).to_dict()) for n in names]
        if as_json:
            echo_json(rows)
            return
        con = console()
        for r in rows:
            con.print(f"{r['name']}\n  -> family={r['family']} variant={r['variant']} library={r['library']} "
                      f"path={r['path']} rule={r['rule'] or '(unclassified)'}")
        return
    if profile is None:
        raise BadInput("give a PROFILE (a profile or a trace) or --name KERNEL")
    from mmprof.analysis.regions import device_events
    from mmprof.importers import import_paths

    prof = import_paths([profile])
    events, source = device_events(prof, rules)
    if not len(events):
        from mmprof.errors import NoEvidence

        raise NoEvidence(f"{profile}: no kernel events and no CPU ops to classify")
    cov = coverage(list(events["name"]), list(events["dur_ns"]), rules, source=source)
    if as_json:
        d = cov.to_dict()
        d["unclassified"] = d["unclassified"][: top if not unclassified else None]
        echo_json(d)
        return
    render(cov, top=top, show_unclassified=unclassified)


def render(cov, top: int = 25, show_unclassified: bool = False) -> None:
    from rich.table import Table

    con = console()
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
            t.add_row(str(r[key]), f"{r['count']:,}", f"{r['time_ns'] / 1e6:,.3f}", f"{100 * r['share']:.1f}%")
        con.print(t)
    if show_unclassified:
        t = Table(title="unclassified names", title_justify="left")
        t.add_column("name", overflow="fold")
        t.add_column("count", justify="right")
        t.add_column("ms", justify="right")
        for r in cov.unclassified[:top]:
            t.add_row(r["name"], f"{r['count']:,}", f"{r['time_ns'] / 1e6:,.3f}")
        con.print(t)
