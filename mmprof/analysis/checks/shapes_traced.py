"""Findings from a trace's shapes matched against a model config (`mmprof.analysis.shapes.shape_match`): attention and
GEMMs replicated across tensor-parallel ranks (SH008), GEMMs no part of the config explains (SH009)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np

from mmprof.analysis.checks.registry import check
from mmprof.analysis.shapes.problems import rank_problems
from mmprof.analysis.shapes.shape_match import MatchReport
from mmprof.shapes_model import Finding
from mmprof.units import fmt_ranges

GATHERS = ("allgather", "all_gather", "allgather_into_tensor", "_allgather_base")


def traced_findings(report: MatchReport, profile: Any) -> list[Finding]:
    """SH008 and SH009 from one match report."""
    return replicated_across_ranks(report, profile) + unexplained_gemms(report, profile)


def _gathers_per_step(profile: Any) -> dict[int, float]:
    """All-gathers per rank per step (collectives table; gloo and NCCL alike)."""
    n = profile.n("collectives")
    if not n:
        return {}
    names = profile.col("collectives", "name", decode=True)
    is_g = np.array([bool(x) and x.lower().replace("-", "_") in GATHERS for x in names], dtype=bool)
    ranks, steps = profile.col("collectives", "rank"), profile.col("collectives", "step")
    out = {}
    for r in np.unique(ranks[is_g]).tolist():
        m = is_g & (ranks == r)
        known = steps[m] >= 0
        n_steps = len(np.unique(steps[m][known])) if known.any() else 1
        out[int(r)] = float(m.sum()) / max(1, n_steps)
    return out


@check("SH008")
def replicated_across_ranks(report: MatchReport, profile: Any) -> list[Finding]:
    spec, tp = report.spec, report.tp
    if tp < 2:
        return []
    out = []
    heads = rank_problems(spec, tp, report.ep)[0].heads
    full = [a for a in report.attention if a["role"] == "attn.core" and a["heads"] == heads.q_full]
    if full and heads.q_full != heads.q:
        ranks = sorted({a["rank"] for a in full})
        layers = sorted({a["layer"] for a in full if a["layer"] >= 0})
        g = _gathers_per_step(profile)
        cause = (f"; {', '.join(f'rank {r}: {v:.0f}' for r, v in sorted(g.items()))} all-gathers per step gather the "
                 "projections back to full heads") if g else ""
        kv_factor = heads.kv_full / max(1, heads.kv)
        out.append(Finding(
            "SH008", "warning", "attention replicated across TP ranks",
            f"attention runs on all {heads.q_full} query heads on every rank (TP {tp} should give {heads.q} query / "
            f"{heads.kv} KV heads per rank){cause}: each rank does {heads.q_full / heads.q:.0f}x the attention FLOPs "
            f"and, caching what it attends to, {kv_factor:.0f}x the KV-cache bytes TP was meant to divide",
            layers, ranks,
            {"heads_seen": heads.q_full, "heads_per_rank_expected": heads.q, "kv_heads_per_rank_expected": heads.kv,
             "attention_flops_factor": heads.q_full / heads.q, "kv_bytes_factor": kv_factor,
             "calls": len(full), "allgathers_per_step": g}))
    by_role: dict[str, list[dict]] = defaultdict(list)
    for x in report.replicated:
        by_role[x["role"]].append(x)
    if by_role:
        parts, layers, ranks, cost = [], set(), set(), {}
        for role, xs in sorted(by_role.items()):
            shapes = Counter(f"{x['mnk'][1]}x{x['mnk'][2]}" for x in xs)
            parts.append(f"{role} ({', '.join(shapes)})")
            layers |= {x["layer"] for x in xs if x["layer"] >= 0}
            ranks |= {x["rank"] for x in xs}
            flops = sum(2 * x["mnk"][0] * x["mnk"][1] * x["mnk"][2] for x in xs)
            cost[role] = {"calls": len(xs), "flops": flops, "flops_if_sharded": flops / tp}
        out.append(Finding(
            "SH008", "warning", "GEMMs replicated across TP ranks",
            f"full-size weights on every rank where TP {tp} shards them: {'; '.join(parts)} - each rank does "
            f"{tp}x their FLOPs and holds {tp}x their weights (layers {fmt_ranges(layers)})",
            sorted(layers), sorted(ranks), cost))
    return out


@check("SH009")
def unexplained_gemms(report: MatchReport, profile: Any) -> list[Finding]:
    if not report.unexplained:
        return []
    shapes = Counter(f"N={x['mnk'][1]} K={x['mnk'][2]}" for x in report.unexplained)
    top = ", ".join(f"{s} x{n}" for s, n in shapes.most_common(4))
    model = report.spec.model_type or report.spec.family
    return [Finding(
        "SH009", "warning", "GEMM no part of the config explains",
        f"{len(report.unexplained)} of {report.gemms} GEMMs match no weight shape of {model} at TP {report.tp}: "
        f"{top}", [], sorted({x["rank"] for x in report.unexplained}),
        {"gemms": report.gemms, "unexplained": len(report.unexplained), "shapes": dict(shapes)})]
