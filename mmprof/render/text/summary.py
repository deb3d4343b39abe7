"""Terminal rendering of `mmprof summary` (a Summary)."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from mmprof.units import fmt_ms


def _short(name: str, width: int = 70) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def render_summary(result, con) -> None:
    """Print a Summary (mmprof.analysis.summary)."""
    for w in result.warnings:
        con.print(f"[yellow]warning:[/] {w}")
    if not result.ranks:
        con.print("No ranks and no events in this profile.")
    for r in result.ranks:
        devs = ", ".join(sorted(set(r.devices))) or "device unknown"
        con.rule(f"rank {r.rank} ({devs})")
        con.print(f"wall span {fmt_ms(r.wall_ns)} ms; ops {r.ops:,}, launches {r.launches:,}, kernels {r.kernels:,}, "
                  f"memcpy {r.memcpy:,} ({r.memcpy_bytes / 1e6:,.1f} MB), collectives {r.collectives:,}")
        if not r.has_gpu:
            con.print(f"[bold]{r.note}[/]")
        else:
            con.print(f"GPU span {fmt_ms(r.gpu_span_ns)} ms: busy {fmt_ms(r.gpu_busy_ns)} ms "
                      f"({100 * (r.gpu_busy_share or 0):.1f}%), idle {fmt_ms(r.gpu_idle_ns)} ms")
            t = Table(title=f"top kernels by total time (of {fmt_ms(r.kernel_time_ns)} ms)", title_justify="left")
            t.add_column("kernel", no_wrap=True, overflow="ellipsis", max_width=30)
            for col in ("count", "total ms", "mean µs", "share"):
                t.add_column(col, justify="right", no_wrap=True, min_width=8)
            for k in r.top_kernels:
                t.add_row(escape(_short(k.name)), f"{k.count:,}", fmt_ms(k.total_ns), f"{k.mean_ns / 1e3:,.2f}", f"{100 * k.share:.1f}%")
            con.print(t)
            s = Table(title="streams", title_justify="left")
            for col in ("device", "stream", "kernels", "busy ms", "busy share of GPU span"):
                s.add_column(col, justify="right")
            for st in r.streams:
                s.add_row(str(st.device), str(st.stream), f"{st.kernels:,}", fmt_ms(st.busy_ns), f"{100 * st.busy_share:.1f}%")
            con.print(s)
        if r.top_ops:
            o = Table(title=f"top ops by {result.ops_by} time", title_justify="left")
            o.add_column("op", no_wrap=True, overflow="ellipsis", max_width=30)
            for col in ("count", "self ms", "total ms"):
                o.add_column(col, justify="right", no_wrap=True, min_width=8)
            for op in r.top_ops:
                o.add_row(escape(_short(op.name)), f"{op.count:,}", fmt_ms(op.self_ns), fmt_ms(op.total_ns))
            con.print(o)
