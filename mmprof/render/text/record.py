"""Terminal rendering of `mmprof record` (a RecordResult)."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table


def render_record(result, con) -> None:
    """A short table (on stderr, where the CLI puts it): one row per rank with its state, plus warnings."""
    t = Table(title=f"mmprof record: {result.backend}, {result.mode} capture", title_justify="left")
    for col in ("rank", "pid", "status", "file"):
        t.add_column(col)
    for r in result.ranks:
        status = r.get("status") or ("partial" if r.get("partial") else "complete")
        style = {"complete": "green", "partial": "yellow"}.get(status, "red")
        t.add_row(str(r.get("rank")), str(r.get("pid") or ""), f"[{style}]{status}[/]", escape(str(r.get("file") or "-")))
    listed = {r.get("rank") for r in result.ranks}
    for m in result.missing_ranks:
        if m in listed:
            continue
        t.add_row(str(m), "", "[red]missing[/]", "-")
    con.print(t)
    for w in result.warnings:
        con.print(f"[yellow]warning:[/] {escape(w)}")
    con.print(f"wrote {result.out} (command exit code {result.exit_code})")
