"""The tables of `mmprof shapes` as plain strings (a ShapesResult -> titled tables with a header and rows): one
source for the terminal (render/text/shapes.py), Markdown and HTML renderers, so the three show the same cells."""

from __future__ import annotations

from dataclasses import dataclass

from mmprof.shapes_model import ShapesResult
from mmprof.units import fmt_ranges, gib, rank_label


@dataclass
class Table:
    title: str
    header: list[str]       # "item", then one column per rank group
    rows: list[list[str]]


def _m(x: float) -> str:
    return f"{x:g}" if x == int(x) else f"{x:.3f}"


def embed_rows(r) -> int | str:
    """Rows of the rank's embedding shard, whatever the layout names the weight."""
    w = next((v for k, v in r.model_weights.items() if "embed" in k), None)
    return w[0] if w else "?"


def headline(res: ShapesResult) -> str:
    wl = res.workload
    groups = res.rank_groups()
    return (f"{res.model} in the {res.layout} layout, TP {res.tp} EP {res.ep}, {res.dtype}; {wl.phase} batch "
            f"{wl.batch} seq {wl.seq} (M = {wl.tokens} tokens); "
            + ("all ranks identical" if len(groups) == 1 else f"{len(groups)} rank groups"))


def gemm_cell(g) -> str:
    s = f"{_m(g.m)} x {g.n} x {g.k}"
    if g.groups > 1:
        s = f"{g.groups}x [{s}]" + (f" + {g.extra_rows} shared rows" if g.extra_rows else "") + \
            (" (est.)" if g.estimate else "")
    return s + f" {g.dtype}"


def shape_tables(res: ShapesResult) -> list[Table]:
    """Per layer kind: heads, GEMMs, weights and cache bytes per rank group; then the whole-model table."""
    if not res.ranks:
        return []
    groups = res.rank_groups()
    reps = [res.ranks[g[0]] for g in groups]
    header = ["item"] + [rank_label(g) for g in groups]
    out = []
    for i, k0 in enumerate(reps[0].kinds):
        kinds = [r.kinds[i] for r in reps]
        a = [k.attention for k in kinds]
        rows = [["q / KV / index-q / index-k heads",
                 *[f"{x.q_heads} / {x.kv_heads}" + (f" (x{x.kv_replicas} repl.)" if x.kv_replicas > 1 else "")
                   + (f" / {x.index_q_heads} / {x.index_k_heads} (all ranks)" if x.sparse else "") for x in a]]]
        for g_i, g in enumerate(k0.gemms):
            rows.append([f"GEMM {g.name} (M x N x K)", *[gemm_cell(k.gemms[g_i]) for k in kinds]])
        for w in k0.weights:
            if len(k0.weights[w]) > 1:
                rows.append([f"  weight {w}", *[str(tuple(k.weights[w])) for k in kinds]])
        rows.append(["weight bytes / layer", *[gib(k.weight_bytes) for k in kinds]])
        rows.append(["KV + index cache B/token/layer",
                     *[f"{k.kv_bytes_per_token:,} + {k.index_bytes_per_token:,}" for k in kinds]])
        out.append(Table(f"{k0.kind} layers {fmt_ranges(k0.layers)} ({len(k0.layers)})", header, rows))
    rows = [["GEMM lm_head (M x N x K)",
             *[f"{r.model_gemms[0].m} x {r.model_gemms[0].n} x {r.model_gemms[0].k}" for r in reps]],
            ["embed rows (vocab shard)", *[str(embed_rows(r)) for r in reps]],
            ["weight bytes", *[gib(r.weight_bytes) for r in reps]],
            ["KV cache B/token", *[f"{r.kv_bytes_per_token:,}" for r in reps]],
            ["index cache B/token", *[f"{r.index_bytes_per_token:,}" for r in reps]]]
    out.append(Table("per rank (whole model)", header, rows))
    return out


def comparison_line(res: ShapesResult) -> str | None:
    c = res.comparison
    if c is None:
        return None
    if not c.compared:
        return (f"{c.source}: {c.calls} calls, compared across ranks only (no model config to compare them with; "
                "pass --model CONFIG)")
    miss = f"; {c.missing} expected GEMMs not observed" if c.missing else ""  # the counts add up (compare_calls)
    return (f"{c.source}: {c.calls} calls: {c.matched} match the {res.layout} layout's per-rank shapes, {c.differ} "
            f"differ, {c.unjudged} unjudged, {c.unscoped} outside known regions{miss}")
