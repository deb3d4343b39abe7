"""Findings about the analytic per-rank shapes of a model (SH001-SH004, SH007), registered by code.

Each takes an analytic `ShapesResult` (built by the runtime on the meta device, `mmprof.runtime.analytic`) and
returns a list of `Finding`s. SH007 compares with the same model at TP 1, which the caller passes in.
"""

from __future__ import annotations

import math
from typing import Any

from mmprof.analysis.checks.registry import check, implementation
from mmprof.shapes_model import Finding, ShapesResult
from mmprof.units import dtype_bytes, fmt_ranges

# A per-rank GEMM dimension below this is "thin". Why 512: the matrix-core GEMMs that serve these models
# (hipBLASLt / CK / AITER on MI355X MFMA, CUTLASS / cuBLAS wgmma on H200) use output tiles 128-256 wide, so a
# 384-wide N gives only ceil(384/128) = 3 tiles per expert (2 at 256) - too few to fill 256 CUs / 132 SMs at
# decode - and a 384-deep K gives 3-6 K-iterations, too few to hide the prologue/epilogue of a pipelined
# mainloop. 512 is the smallest width that still yields >= 4 tiles of 128.
THIN_DIM = 512
N_TILE = 128  # typical output tile width used for the tile counts in SH007's cost
M_TILES = (16, 64)  # smallest MFMA / wgmma row tiles: routed rows per expert are padded up to these
DEVICE_UNITS = {"MI355X CUs": 256, "H200 SMs": 132}


ANALYTIC = ("SH001", "SH002", "SH003", "SH004", "SH007")


def analytic_findings(res, unsharded: ShapesResult | None = None) -> list[Finding]:
    """SH001-SH004 and SH007 from an analytic ShapesResult. `unsharded` is the same model at TP 1 (for SH007's
    "did sharding make this dimension thin"); without it SH007 treats every thin dimension as a sharding effect."""
    out: list[Finding] = []
    for code in ANALYTIC:
        out.extend(implementation(code)(res, unsharded))
    return out


def _sizes(res) -> tuple[dict, int, Any, int]:
    return res.config, res.tp, res.ranks[0], dtype_bytes(res.dtype)


@check("SH001")
def replicated_kv_heads(res, unsharded=None) -> list[Finding]:
    cfg, tp, r0, eb = _sizes(res)
    all_layers = list(range(cfg["n_layers"]))
    out = []
    rep = r0.plan["kv_replicas"]
    if rep > 1:
        unique = 2 * cfg["n_kv_heads"] * cfg["head_dim"] * eb * cfg["n_layers"]
        held = r0.kv_bytes_per_token * tp
        out.append(Finding(
            "SH001", "warning", "replicated KV heads",
            f"TP {tp} > {cfg['n_kv_heads']} KV heads: each KV head (and its index-q head) is held by {rep} ranks; "
            f"KV-cache memory and decode read bandwidth are {rep}x the unique KV "
            f"({held:,} B/token over all ranks vs {unique:,} unique)",
            all_layers, list(range(tp)),
            {"replication_factor": rep, "kv_bytes_per_token_all_ranks": held, "kv_bytes_per_token_unique": unique,
             "extra_bytes_per_token": held - unique}))
    return out


@check("SH002")
def replicated_index_key_head(res, unsharded=None) -> list[Finding]:
    cfg, tp, r0, eb = _sizes(res)
    sparse = [i for i, t in enumerate(cfg["attn_types"]) if t == "sparse"]
    out = []
    if sparse and tp > 1:
        ihd = cfg["index_head_dim"]
        extra_tok = (tp - 1) * ihd * eb * len(sparse)
        extra_w = (tp - 1) * ihd * cfg["hidden_size"] * eb * len(sparse)
        out.append(Finding(
            "SH002", "info", "replicated index key head",
            f"the lightning indexer's single key head ({ihd} dims) is computed and cached on all {tp} ranks: "
            f"+{ihd} columns in every rank's fused qkv GEMM, {extra_tok:,} extra index-cache B/token over all ranks",
            sparse, list(range(tp)),
            {"replication_factor": tp, "extra_index_bytes_per_token": extra_tok, "extra_weight_bytes": extra_w,
             "qkv_n_share": ihd / max(1, r0.kind(_kind_of(r0, sparse[0])).gemms[0].n)}))
    return out


@check("SH003")
def vocab_padding(res, unsharded=None) -> list[Finding]:
    cfg, tp, r0, eb = _sizes(res)
    out = []
    padded, vocab = r0.plan["vocab_padded"], cfg["vocab_size"]
    if padded != vocab:
        out.append(Finding(
            "SH003", "info", "vocab padding",
            f"vocab {vocab:,} padded to {padded:,} (multiple of 64) before the vocab-parallel split: "
            f"{padded - vocab} unused rows in the embedding and LM head",
            [], list(range(tp)),
            {"padded_rows": padded - vocab, "waste_pct": 100.0 * (padded - vocab) / padded,
             "wasted_bytes": 2 * (padded - vocab) * cfg["hidden_size"] * eb}))
    return out


@check("SH004")
def uneven_split(res, unsharded=None) -> list[Finding]:
    groups = res.rank_groups()
    return [_uneven(res, groups)] if len(groups) > 1 else []


def _kind_of(rs, layer: int) -> str:
    for k in rs.kinds:
        if layer in k.layers:
            return k.kind
    raise KeyError(layer)


def _uneven(res, groups: list[list[int]]) -> Finding:
    base = {k.kind: {g.name: (g.n, g.k, g.groups) for g in k.gemms} for k in res.ranks[groups[0][0]].kinds}
    diffs, layers = [], set()
    for grp in groups[1:]:
        for k in res.ranks[grp[0]].kinds:
            for g in k.gemms:
                if base.get(k.kind, {}).get(g.name) != (g.n, g.k, g.groups):
                    diffs.append(f"{g.name} on ranks {fmt_ranges(grp)}: N={g.n} K={g.k} vs {base.get(k.kind, {}).get(g.name)}")
                    layers.update(k.layers)
    wb = [r.weight_bytes for r in res.ranks]
    return Finding("SH004", "warning", "uneven split",
                   f"ranks hold different shapes ({len(groups)} groups): " + ("; ".join(diffs[:4]) or "weights differ"),
                   sorted(layers), list(range(res.tp)),
                   {"weight_bytes_max": max(wb), "weight_bytes_min": min(wb),
                    "imbalance_pct": 100.0 * (max(wb) - min(wb)) / max(1, max(wb))})


def _expert_rows(res, g) -> tuple[float, float]:
    """(expected active local experts, rows per active local expert) under uniform routing."""
    cfg = res.config
    draws = res.workload.tokens * cfg["top_k"]  # routed (token, expert) pairs over all experts
    active = g.groups * (1.0 - (1.0 - 1.0 / cfg["n_experts"]) ** draws)
    return active, round(draws * g.groups / cfg["n_experts"] / max(active, 1e-9), 6)


def _dims(res: ShapesResult | None) -> dict[tuple[str, str], tuple[int, int]]:
    """(layer kind, GEMM name) -> (N, K) of one rank."""
    return {(k.kind, g.name): (g.n, g.k) for k in res.ranks[0].kinds for g in k.gemms} if res is not None else {}


@check("SH007")
def gemm_too_thin(res, unsharded: ShapesResult | None = None) -> list[Finding]:
    """Thin N/K (< THIN_DIM) on sharded GEMMs; routed experts whose rows per expert under-fill M tiles."""
    out = []
    wl = res.workload
    ref = _dims(res if res.tp == 1 else unsharded)
    for grp in res.rank_groups():
        rs = res.ranks[grp[0]]
        for k in rs.kinds:
            for g in k.gemms:
                thin = min(g.n, g.k)
                grouped = g.groups > 1
                if g.scope == "moe.router":  # replicated fp32 router: thin at every TP degree, not a sharding effect
                    continue
                cost: dict[str, Any] = {"threshold": THIN_DIM, "thin_dim": thin, "n_tile": N_TILE,
                                        "tiles_along_thin_dim": math.ceil(thin / N_TILE)}
                parts = []
                full = ref.get((k.kind, g.name))
                # only a dim that sharding made smaller counts: thin at TP 1 too (a small model) is not a TP effect
                sharded = full is None or (g.n < full[0] if g.n < g.k else g.k < full[1])
                if thin < THIN_DIM and sharded:
                    parts.append(f"{g.name}: per-rank {'N' if g.n < g.k else 'K'}={thin} < {THIN_DIM} "
                                 f"({math.ceil(thin / N_TILE)} tile(s) of {N_TILE})")
                if grouped:
                    active, rows = _expert_rows(res, g)
                    for t in M_TILES:
                        cost[f"m_tile_{t}_utilisation"] = round(rows / (math.ceil(rows / t) * t), 4)
                    tiles = round(active) * math.ceil(rows / M_TILES[1]) * math.ceil(g.n / N_TILE)
                    cost.update({"active_experts_est": round(active, 2), "rows_per_active_expert_est": round(rows, 2),
                                 "output_tiles_est": tiles, **DEVICE_UNITS})
                    m_thin = rows < M_TILES[1] and g.name.endswith("gate_up")  # report M padding once per layer
                    if parts or m_thin:
                        parts.append(
                            f"{'' if parts else g.name + ': '}{wl.phase} batch {wl.batch}: ~{active:.1f} of {g.groups} "
                            f"local experts active with ~{rows:.1f} rows each (uniform routing) -> "
                            f"{100 * cost[f'm_tile_{M_TILES[0]}_utilisation']:.0f}% of a {M_TILES[0]}-row tile, "
                            f"{100 * cost[f'm_tile_{M_TILES[1]}_utilisation']:.0f}% of a {M_TILES[1]}-row tile; "
                            f"~{tiles} output tiles vs 256 CUs (MI355X) / 132 SMs (H200)")
                if parts:
                    out.append(Finding("SH007", "warning" if thin < THIN_DIM and sharded else "info",
                                       "GEMM too thin for efficient tiles", "; ".join(parts), list(k.layers), grp, cost))
    return out
