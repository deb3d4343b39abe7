"""Terminal rendering of `mmprof ranks` (a RanksResult): the verdicts, per-rank times, stragglers per step and
collective bandwidth. Strings from a trace go through `rich.markup.escape`."""

from __future__ import annotations

from rich import box
from rich.table import Table

from mmprof.render.safe import markup as escape  # visible() + markup escaping: the one sanitiser
from mmprof.units import fmt_pct, fmt_ranges

STEP_ROWS = 12
COLL_ROWS = 15


def fmt_bytes(b: int | None) -> str:
    """1536 -> '1.5 KiB'; None -> '?'."""
    if b is None or b < 0:
        return "?"
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= div:
            return f"{b / div:.1f} {unit}"
    return f"{b} B"


def _gbs(x: float | None) -> str:
    if x is None:
        return "-"
    if x < 0.01:
        return f"{x:.1e}"
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.2f}"


def _ms3(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def table(title: str, cols: list[tuple[str, str]]) -> Table:
    """A compact table (fits 80 columns with short cells): cols are (header, 'l' | 'r')."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    for head, just in cols:
        t.add_column(head, justify="right" if just == "r" else "left", no_wrap=just != "w",
                     overflow="fold" if just == "w" else "ellipsis")
    return t


def render_verdicts(result, console) -> None:
    """The one-line verdict per phase (also printed by `mmprof report` on a multi-rank profile)."""
    for v in result.phases:
        style = "bold yellow" if v.finding else "bold"
        console.print(f"[{style}]{escape(v.verdict)}[/{style}]")


def render_ranks(result, console, steps: int = STEP_ROWS) -> None:
    links = {r: (f"{d['link']} {d['gbs_per_direction']:g} GB/s" if d else "no link peak")
             for r, d in result.links.items()}
    kinds = sorted(set(links.values()))
    link_txt = kinds[0] if len(kinds) == 1 else "; ".join(f"rank {r}: {t}" for r, t in sorted(links.items()))
    console.print(f"[bold]mmprof ranks[/bold]  ranks {fmt_ranges(result.ranks)}  events: {result.source}  "
                  f"links: {escape(link_txt or '-')}")
    render_verdicts(result, console)
    for n in result.notes:
        console.print(f"[dim]note: {escape(n)}[/dim]")
    if result.per_rank:
        t = table("time per rank and step (ms; medians over steps)",
                  [("phase", "l"), ("rank", "r"), ("steps", "r"), ("step", "r"), ("busy", "r"),
                   ("in\ncoll.", "r"), ("trans-\nfer", "r"), ("wait-\ning", "r"), ("strag-\ngler", "r")])
        for r in result.per_rank:
            t.add_row(escape(r.phase), str(r.rank), str(r.steps), _ms(r.step_ns), _ms(r.busy_ns), _ms(r.comm_ns),
                      _ms(r.transfer_ns), _ms(r.wait_ns), str(r.straggler_steps) if r.straggler_steps else "-")
        console.print(t)
    if result.steps:
        rows = sorted(result.steps, key=lambda s: -s.spread_ns)[:steps]
        t = table(f"straggler per step (the {len(rows)} most imbalanced of {len(result.steps)})",
                  [("phase", "l"), ("step", "r"), ("rank", "r"), ("others\nwait ms", "r"), ("wait\n% step", "r"),
                   ("spread\nms", "r"), ("spread\n% step", "r"), ("its extra time by layer (ms)", "w")])
        for s in rows:
            where = ", ".join(f"{x.region} +{_ms(x.extra_ns)}" for x in s.regions) or "-"
            t.add_row(escape(s.phase), str(s.step), str(s.rank), _ms(s.others_wait_ns),
                      fmt_pct(s.wait_share) if s.step_ns else "-", _ms(s.spread_ns), fmt_pct(s.share), escape(where))
        console.print(t)
    if result.collectives:
        t = table("collectives: bandwidth (nccl-tests conventions)",
                  [("collective", "l"), ("size", "r"), ("n", "r"), ("calls", "r"), ("time\nms", "r"),
                   ("algbw\nGB/s", "r"), ("busbw\nGB/s", "r"), ("of\npeak", "r"), ("skew\nms", "r")])
        for c in result.collectives[:COLL_ROWS]:
            t.add_row(escape(c.name) + ("*" if c.lower_bound else ""), fmt_bytes(c.bytes),
                      str(c.group_size or "?"), str(c.calls), _ms3(c.time_ns), _gbs(c.algbw_gbs),
                      _gbs(c.busbw_gbs), fmt_pct(c.of_peak), _ms3(c.skew_ns))
        console.print(t)
        more = len(result.collectives) - COLL_ROWS
        console.print("[dim]time: median over instances of the fastest rank's duration; skew: median of slowest - "
                      "fastest" + ("; * one rank only: time includes waiting, bandwidth is a lower bound" if any(
                          c.lower_bound for c in result.collectives) else "")
                      + (f"; {more} more rows in --json" if more > 0 else "") + "[/dim]")
    for f in result.findings:
        console.print(f"[yellow]finding:[/yellow] {escape(f)}")
    for w in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")
