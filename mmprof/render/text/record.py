"""Terminal rendering of `mmprof record` (a RecordResult)."""

from __future__ import annotations

from rich.text import Text

from mmprof.render.safe import markup
from mmprof.render.text.layout import Col, fit_table


def render_record(result, con) -> None:
    """A short table (on stderr, where the CLI puts it): one row per rank with its state, plus warnings."""
    cols = [Col("rank", "right", keep=10), Col("pid", "right", keep=3), Col("status", keep=9),
            Col("file", keep=8, fold=True, min=16)]
    rows = []
    for r in result.ranks:
        status = str(r.get("status") or ("partial" if r.get("partial") else "complete"))
        style = {"complete": "green", "partial": "yellow"}.get(status, "red")
        rows.append([str(r.get("rank")), str(r.get("pid") or ""), Text(status, style=style), str(r.get("file") or "-")])
    listed = {r.get("rank") for r in result.ranks}
    for m in result.missing_ranks:
        if m not in listed:
            rows.append([str(m), "", Text("missing", style="red"), "-"])
    con.print(fit_table(con, cols, rows, title=f"mmprof record: {result.backend}, {result.mode} capture"))
    for w in result.warnings:
        con.print(f"[yellow]warning:[/] {markup(w)}")
    log = getattr(result, "log", None)
    if log:
        parts = [f"{s['stream']} {s['lines']:,} lines" + (f" ({s['dropped']:,} dropped by the size bound)"
                                                           if s.get("dropped") else "") for s in log["streams"]]
        con.print(f"log: kept {log['kept']:,} lines of the command's output ({markup(', '.join(parts) or 'none')})")
    con.print(f"wrote {markup(result.out)} (command exit code {result.exit_code})")
