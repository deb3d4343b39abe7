"""Terminal rendering of `mmprof shapes` (a ShapesResult)."""

from __future__ import annotations

from rich.table import Table

from mmprof.shapes_model import ShapesResult
from mmprof.units import fmt_ranges, gib, rank_label


def _m(x: float) -> str:
    return f"{x:g}" if x == int(x) else f"{x:.3f}"


def render_shapes(res: ShapesResult, con) -> None:
    """Print a ShapesResult: per layer kind a table of heads, GEMMs, weights and cache bytes per rank group; the
    whole-model table; the comparison with live / traced calls; the findings; the notes."""
    wl = res.workload
    if res.ranks:
        groups = res.rank_groups()
        con.print(f"[bold]{res.model}[/] TP {res.tp} EP {res.ep}, {res.dtype}; {wl.phase} batch {wl.batch} seq {wl.seq} "
                  f"(M = {wl.tokens} tokens); " + ("all ranks identical" if len(groups) == 1 else f"{len(groups)} rank groups"))
        reps = [res.ranks[g[0]] for g in groups]
        labels = [rank_label(g) for g in groups]
        for i, k0 in enumerate(reps[0].kinds):
            t = Table(title=f"{k0.kind} layers {fmt_ranges(k0.layers)} ({len(k0.layers)})", title_justify="left")
            t.add_column("item", no_wrap=True)
            for lab in labels:
                t.add_column(lab, justify="right", no_wrap=True)
            kinds = [r.kinds[i] for r in reps]
            a = [k.attention for k in kinds]
            t.add_row("q / KV / index-q / index-k heads",
                      *[f"{x.q_heads} / {x.kv_heads}" + (f" (x{x.kv_replicas} repl.)" if x.kv_replicas > 1 else "")
                        + (f" / {x.index_q_heads} / {x.index_k_heads} (all ranks)" if x.sparse else "") for x in a])
            for g_i, g in enumerate(k0.gemms):
                cells = []
                for k in kinds:
                    gg = k.gemms[g_i]
                    s = f"{_m(gg.m)} x {gg.n} x {gg.k}"
                    if gg.groups > 1:
                        s = f"{gg.groups}x [{s}]" + (f" + {gg.extra_rows} shared rows" if gg.extra_rows else "") + " (est.)"
                    cells.append(s + f" {gg.dtype}")
                t.add_row(f"GEMM {g.name}  M x N x K", *cells)
            for w in k0.weights:
                if len(k0.weights[w]) > 1:
                    t.add_row(f"  weight {w}", *[str(tuple(k.weights[w])) for k in kinds])
            t.add_row("weight bytes / layer", *[gib(k.weight_bytes) for k in kinds])
            t.add_row("KV + index cache B/token/layer", *[f"{k.kv_bytes_per_token:,} + {k.index_bytes_per_token:,}" for k in kinds])
            con.print(t)
        t = Table(title="per rank (whole model)", title_justify="left")
        t.add_column("item", no_wrap=True)
        for lab in labels:
            t.add_column(lab, justify="right", no_wrap=True)
        t.add_row("GEMM lm_head M x N x K", *[f"{r.model_gemms[0].m} x {r.model_gemms[0].n} x {r.model_gemms[0].k}" for r in reps])
        t.add_row("embed rows (vocab shard)", *[str(r.model_weights.get("embed.weight", ["?"])[0]) for r in reps])
        t.add_row("weight bytes", *[gib(r.weight_bytes) for r in reps])
        t.add_row("KV cache B/token", *[f"{r.kv_bytes_per_token:,}" for r in reps])
        t.add_row("index cache B/token", *[f"{r.index_bytes_per_token:,}" for r in reps])
        con.print(t)
    c = res.comparison
    if c is not None:
        con.print(f"[bold]{c.source}[/]: {c.calls} calls, {c.matched} match the analytic shapes, "
                  f"{len(c.unmatched)} differ, {c.unjudged} unjudged, {c.unscoped} outside known scopes")
        for u in c.unmatched[:8]:
            con.print(f"  rank {u['rank']} {u['scope']} ({u['phase']} step {u['step']}): {u['why']}")
    if res.findings:
        t = Table(title="findings", title_justify="left")
        for col in ("code", "severity", "finding", "layers", "ranks", "detail"):
            t.add_column(col, overflow="fold")
        color = {"error": "red", "warning": "yellow", "info": "cyan"}
        for f in res.findings:
            t.add_row(f.code, f"[{color[f.severity]}]{f.severity}[/]", f.title, fmt_ranges(f.layers) if f.layers else "-",
                      fmt_ranges(f.ranks) if f.ranks else "-", f.message)
        con.print(t)
    else:
        con.print("no findings")
    for n in res.notes:
        con.print(f"[dim]note: {n}[/]")
