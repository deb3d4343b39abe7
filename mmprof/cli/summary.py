"""`mmprof summary PROFILE_OR_TRACE`: per-rank wall span, GPU busy/idle, top kernels, ops and streams."""

from __future__ import annotations

import click

from mmprof.cli._common import console, echo_json, json_option


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.3f}"


def _short(name: str, width: int = 70) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


@click.command("summary")
@click.argument("path", type=click.Path())
@click.option("--top", type=click.IntRange(1, 1000), default=10, show_default=True, help="Rows in the top tables.")
@click.option("--rank", type=int, default=None, help="Only this rank.")
@click.option("--ops-by", type=click.Choice(["self", "total"]), default="self", show_default=True,
              help="Rank ops by self time or total (inclusive) time.")
@json_option
def summary(path: str, top: int, rank: int | None, ops_by: str, as_json: bool) -> None:
    """Summarise a saved Profile or a raw trace (imported on the fly)."""
    from mmprof.analysis.summary import summarize
    from mmprof.importers import import_paths

    from mmprof.errors import NoEvidence
    from mmprof.profiles.schema import TABLES

    profile = import_paths([path])
    if not any(profile.n(t) for t in TABLES):
        raise NoEvidence(f"{path}: the profile holds no events at all (no kernels, ops, launches, copies or "
                         "annotations): nothing to summarise")
    result = summarize(profile, top=top, rank=rank, ops_by=ops_by)
    if as_json:
        echo_json(result.to_dict())
        return
    render(result)


def render(result) -> None:
    from rich.table import Table

    con = console()
    for w in result.warnings:
        con.print(f"[yellow]warning:[/] {w}")
    if not result.ranks:
        con.print("No ranks and no events in this profile.")
    for r in result.ranks:
        devs = ", ".join(sorted(set(r.devices))) or "device unknown"
        con.rule(f"rank {r.rank} ({devs})")
        con.print(f"wall span {_ms(r.wall_ns)} ms; ops {r.ops:,}, launches {r.launches:,}, kernels {r.kernels:,}, "
                  f"memcpy {r.memcpy:,} ({r.memcpy_bytes / 1e6:,.1f} MB), collectives {r.collectives:,}")
        if not r.has_gpu:
            con.print(f"[bold]{r.note}[/]")
        else:
            con.print(f"GPU span {_ms(r.gpu_span_ns)} ms: busy {_ms(r.gpu_busy_ns)} ms "
                      f"({100 * (r.gpu_busy_share or 0):.1f}%), idle {_ms(r.gpu_idle_ns)} ms")
            t = Table(title=f"top kernels by total time (of {_ms(r.kernel_time_ns)} ms)", title_justify="left")
            t.add_column("kernel", no_wrap=True, overflow="ellipsis", max_width=30)
            for col in ("count", "total ms", "mean µs", "share"):
                t.add_column(col, justify="right", no_wrap=True, min_width=8)
            for k in r.top_kernels:
                t.add_row(_short(k.name), f"{k.count:,}", _ms(k.total_ns), f"{k.mean_ns / 1e3:,.2f}", f"{100 * k.share:.1f}%")
            con.print(t)
            s = Table(title="streams", title_justify="left")
            for col in ("device", "stream", "kernels", "busy ms", "busy share of GPU span"):
                s.add_column(col, justify="right")
            for st in r.streams:
                s.add_row(str(st.device), str(st.stream), f"{st.kernels:,}", _ms(st.busy_ns), f"{100 * st.busy_share:.1f}%")
            con.print(s)
        if r.top_ops:
            o = Table(title=f"top ops by {result.ops_by} time", title_justify="left")
            o.add_column("op", no_wrap=True, overflow="ellipsis", max_width=30)
            for col in ("count", "self ms", "total ms"):
                o.add_column(col, justify="right", no_wrap=True, min_width=8)
            for op in r.top_ops:
                o.add_row(_short(op.name), f"{op.count:,}", _ms(op.self_ns), _ms(op.total_ns))
            con.print(o)
