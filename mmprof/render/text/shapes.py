"""Terminal rendering of `mmprof shapes` (a ShapesResult)."""

from __future__ import annotations

from rich.padding import Padding
from rich.text import Text

from mmprof.render.safe import cell, markup
from mmprof.render.text.layout import Col, fit_table
from mmprof.shapes_model import ShapesResult
from mmprof.units import fmt_ranges, gib, rank_label

_COLOR = {"error": "red", "warning": "yellow", "info": "cyan"}


def _m(x: float) -> str:
    return f"{x:g}" if x == int(x) else f"{x:.3f}"


def _cols(labels: list[str]) -> list[Col]:
    """The item column and one column per rank group (later groups drop first when the table is too wide)."""
    return [Col("item", keep=10, fold=True, min=16)] + [
        Col(lab, "right", keep=10 if i == 0 else max(8 - i, 1), wrap=True) for i, lab in enumerate(labels)]


def render_shapes(res: ShapesResult, con) -> None:
    """Print a ShapesResult: per layer kind a table of heads, GEMMs, weights and cache bytes per rank group; the
    whole-model table; the comparison with live / traced calls; the findings; the notes."""
    wl = res.workload
    if res.ranks:
        groups = res.rank_groups()
        con.print(f"[bold]{markup(res.model)}[/] TP {res.tp} EP {res.ep}, {markup(res.dtype)}; {markup(wl.phase)} "
                  f"batch {wl.batch} seq {wl.seq} (M = {wl.tokens} tokens); "
                  + ("all ranks identical" if len(groups) == 1 else f"{len(groups)} rank groups"))
        reps = [res.ranks[g[0]] for g in groups]
        labels = [rank_label(g) for g in groups]
        for i, k0 in enumerate(reps[0].kinds):
            kinds = [r.kinds[i] for r in reps]
            a = [k.attention for k in kinds]
            rows = [["q / KV / index-q / index-k heads",
                     *[f"{x.q_heads} / {x.kv_heads}" + (f" (x{x.kv_replicas} repl.)" if x.kv_replicas > 1 else "")
                       + (f" / {x.index_q_heads} / {x.index_k_heads} (all ranks)" if x.sparse else "") for x in a]]]
            for g_i, g in enumerate(k0.gemms):
                cells = []
                for k in kinds:
                    gg = k.gemms[g_i]
                    s = f"{_m(gg.m)} x {gg.n} x {gg.k}"
                    if gg.groups > 1:
                        s = f"{gg.groups}x [{s}]" + (f" + {gg.extra_rows} shared rows" if gg.extra_rows else "") + " (est.)"
                    cells.append(s + f" {gg.dtype}")
                rows.append([f"GEMM {g.name} (M x N x K)", *cells])
            for w in k0.weights:
                if len(k0.weights[w]) > 1:
                    rows.append([f"  weight {w}", *[str(tuple(k.weights[w])) for k in kinds]])
            rows.append(["weight bytes / layer", *[gib(k.weight_bytes) for k in kinds]])
            rows.append(["KV + index cache B/token/layer",
                         *[f"{k.kv_bytes_per_token:,} + {k.index_bytes_per_token:,}" for k in kinds]])
            con.print(fit_table(con, _cols(labels), rows,
                                title=f"{k0.kind} layers {fmt_ranges(k0.layers)} ({len(k0.layers)})"))
        rows = [["GEMM lm_head (M x N x K)",
                 *[f"{r.model_gemms[0].m} x {r.model_gemms[0].n} x {r.model_gemms[0].k}" for r in reps]],
                ["embed rows (vocab shard)", *[str(r.model_weights.get("embed.weight", ["?"])[0]) for r in reps]],
                ["weight bytes", *[gib(r.weight_bytes) for r in reps]],
                ["KV cache B/token", *[f"{r.kv_bytes_per_token:,}" for r in reps]],
                ["index cache B/token", *[f"{r.index_bytes_per_token:,}" for r in reps]]]
        con.print(fit_table(con, _cols(labels), rows, title="per rank (whole model)"))
    c = res.comparison
    if c is not None:
        if not c.compared:
            why = c.why or "no model config and TP size to compare them with; pass --model and --tp"
            con.print(f"[bold]{markup(c.source)}[/]: {c.calls} calls, compared across ranks only ({markup(why)})")
        else:  # the four counts add up to the calls (compare_calls asserts it)
            miss = f"; {c.missing} expected GEMMs not observed" if c.missing else ""
            con.print(f"[bold]{markup(c.source)}[/]: {c.calls} calls: {c.matched} match the analytic shapes, "
                      f"{c.differ} differ, {c.unjudged} unjudged, {c.unscoped} outside known regions{miss} (the analytic "
                      "shapes are mmprof's per-rank layout: fused qkv, sharded MLP and experts)")
        for u in c.unmatched[:8]:
            con.print(f"  rank {u['rank']} {markup(u['scope'])} ({markup(u['phase'])} step {u['step']}): "
                      f"{markup(u['why'])}")
    if res.findings:
        con.print("[bold]findings[/]")
        for f in res.findings:
            head = Text.assemble((f.code, "bold"), " ", (f.severity, _COLOR.get(f.severity, "")), " ", cell(f.title))
            where = [f"layers {fmt_ranges(f.layers)}" if f.layers else "",
                     f"ranks {fmt_ranges(f.ranks)}" if f.ranks else ""]
            if any(where):
                head.append(f" ({'; '.join(x for x in where if x)})", style="dim")
            con.print(head)
            con.print(Padding(cell(f.message), (0, 0, 0, 2)))
    else:
        con.print("no findings")
    for n in res.notes:
        con.print(f"[dim]note: {markup(n)}[/]")
