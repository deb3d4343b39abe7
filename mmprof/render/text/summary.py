"""Terminal rendering of `mmprof summary` (a Summary)."""

from __future__ import annotations

from mmprof.render.safe import markup
from mmprof.render.text.layout import Col, fit_table
from mmprof.units import fmt_ms


def render_summary(result, con) -> None:
    """Print a Summary (mmprof.analysis.views.summary)."""
    for w in result.warnings:
        con.print(f"[yellow]warning:[/] {markup(w)}")
    if not result.ranks:
        con.print("No ranks and no events in this profile.")
    for r in result.ranks:
        devs = ", ".join(sorted(set(r.devices))) or "device unknown"
        con.rule(f"rank {r.rank} ({markup(devs)})")
        con.print(f"wall span {fmt_ms(r.wall_ns)} ms; ops {r.ops:,}, launches {r.launches:,}, kernels {r.kernels:,}, "
                  f"memcpy {r.memcpy:,} ({r.memcpy_bytes / 1e6:,.1f} MB), collectives {r.collectives:,}")
        if not r.has_gpu:
            con.print(f"[bold]{markup(r.note)}[/]")
        else:
            con.print(f"GPU span {fmt_ms(r.gpu_span_ns)} ms: busy {fmt_ms(r.gpu_busy_ns)} ms "
                      f"({100 * (r.gpu_busy_share or 0):.1f}%), idle {fmt_ms(r.gpu_idle_ns)} ms")
            cols = [Col("kernel", name=True, keep=10, min=24), Col("count", "right", keep=4),
                    Col("total ms", "right", keep=9, wrap=True), Col("mean µs", "right", keep=3, wrap=True),
                    Col("share", "right", keep=8)]
            rows = [[k.name, f"{k.count:,}", fmt_ms(k.total_ns), f"{k.mean_ns / 1e3:,.2f}", f"{100 * k.share:.1f}%"]
                    for k in r.top_kernels]
            con.print(fit_table(con, cols, rows, title=f"top kernels by total time (of {fmt_ms(r.kernel_time_ns)} ms)"))
            cols = [Col("device", "right", keep=9), Col("stream", "right", keep=9), Col("kernels", "right", keep=5),
                    Col("busy ms", "right", keep=8, wrap=True),
                    Col("busy share of GPU span", "right", keep=7, wrap=True)]
            rows = [[str(st.device), str(st.stream), f"{st.kernels:,}", fmt_ms(st.busy_ns),
                     f"{100 * st.busy_share:.1f}%"] for st in r.streams]
            con.print(fit_table(con, cols, rows, title="streams"))
        if r.top_ops:
            cols = [Col("op", name=True, keep=10, min=20), Col("count", "right", keep=4),
                    Col("self ms", "right", keep=9, wrap=True), Col("total ms", "right", keep=6, wrap=True)]
            rows = [[op.name, f"{op.count:,}", fmt_ms(op.self_ns), fmt_ms(op.total_ns)] for op in r.top_ops]
            con.print(fit_table(con, cols, rows, title=f"top ops by {result.ops_by} time"))
