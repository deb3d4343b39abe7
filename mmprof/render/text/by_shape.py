"""Terminal rendering of `mmprof report --by-shape` (a ByShape): the per-shape roofline table and GPU time per op.
Strings from a trace go through `mmprof.render.safe.markup` (controls and newlines shown, markup literal)."""

from __future__ import annotations

from mmprof.render.safe import markup as escape  # visible() + markup escaping: the one sanitiser
from mmprof.render.text.ranks import table
from mmprof.units import fmt_pct

SHAPE_ROWS = 30
OP_ROWS = 20
BOUND = {"compute": "comp", "memory": "mem", "unknown": "-"}


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def render_by_shape(result, console, rows: int = SHAPE_ROWS) -> None:
    devs = ", ".join(f"rank {r}: {n or 'no peak'}" for r, n in sorted(result.devices.items()))
    sel = " ".join(x for x in (f"phase {result.phase}" if result.phase else "",
                               f"rank {result.rank}" if result.rank is not None else "") if x)
    console.print(f"[bold]mmprof report --by-shape[/bold]  events: {escape(result.source)}  {escape(sel)}  "
                  f"devices: {escape(devs or '-')}")
    for n in result.notes:
        console.print(f"[dim]note: {escape(n)}[/dim]")
    shown = result.rows[:rows]
    t = table(f"roofline per (region, op, input shapes, dtype): {len(shown)} of {len(result.rows)} rows, "
              f"{result.compute_ns / 1e6:.2f} ms of compute",
              [("region  op\n  shapes dtype -> kernels", "w"), ("calls", "r"), ("ms", "r"), ("TFLOP\n/s", "r"),
               ("TB/s", "r"), ("bound", "l"), ("of\nroof", "r")])
    for r in shown:
        layers = f" L{r.layers}" if r.layers != "-" else ""
        kern = ", ".join(dict.fromkeys(_short(k.variant, 24) for k in r.kernels))
        t.add_row(f"{escape(r.region)}{layers}  [bold]{escape(r.op)}[/bold]\n  {escape(r.shapes)} {escape(r.dtype)}"
                  f"\n  [dim]-> {escape(kern)}[/dim]", str(r.calls), f"{r.time_ns / 1e6:.3f}", _num(r.tflops),
                  _num(r.tbs, 2), BOUND[r.bound], fmt_pct(r.of_roofline))
    console.print(t)
    o = table(f"time per op (all events, {result.total_ns / 1e6:.2f} ms): {min(OP_ROWS, len(result.ops))} of "
              f"{len(result.ops)} ops", [("op", "w"), ("family", "l"), ("calls", "r"), ("ms", "r"), ("share", "r"),
                                          ("kernels (calls)", "w")])
    for op in result.ops[:OP_ROWS]:
        by_variant: dict[str, int] = {}
        for k in op.kernels:
            by_variant[k.variant] = by_variant.get(k.variant, 0) + k.calls
        kern = ", ".join(f"{_short(v, 24)} ({n})" for v, n in by_variant.items())
        o.add_row(escape(op.op), escape(op.family), str(op.calls), f"{op.time_ns / 1e6:.3f}", fmt_pct(op.share),
                  f"[dim]{escape(kern)}[/dim]")
    console.print(o)
    console.print("[dim]FLOPs and bytes from each op's input shapes (mmprof.analysis.attribution.flops), shared among its kernels "
                  "by duration; 'of roof': achieved / the device peak of the bound, time-weighted; --json has every "
                  "row and kernel[/dim]")
    for w in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")
