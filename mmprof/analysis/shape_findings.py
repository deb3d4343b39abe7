"""Findings about per-rank shapes, and the comparison of observed (live or traced) GEMM calls with the
analytic expectation and across ranks.

Stable codes:
- SH001 replicated KV heads (tp > KV heads): KV-cache memory and read bandwidth x the replication factor.
- SH002 replicated index key head: the lightning indexer's single K head sits on every rank.
- SH003 padding: vocab padded to a multiple of 64 before the vocab-parallel split (rows that are never used).
- SH004 uneven split: ranks hold different shapes of one layer kind.
- SH005 cross-rank imbalance: observed shapes (error) or token counts (warning) differ between ranks.
- SH006 config-vs-runtime mismatch: an observed call's shape differs from the analytic expectation (error).
- SH007 GEMM too thin for efficient tiles: a per-rank N or K below THIN_DIM (see its comment).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

# A per-rank GEMM dimension below this is "thin". Why 512: the matrix-core GEMMs that serve these models
# (hipBLASLt / CK / AITER on MI355X MFMA, CUTLASS / cuBLAS wgmma on H200) use output tiles 128-256 wide, so a
# 384-wide N gives only ceil(384/128) = 3 tiles per expert (2 at 256) - too few to fill 256 CUs / 132 SMs at
# decode - and a 384-deep K gives 3-6 K-iterations, too few to hide the prologue/epilogue of a pipelined
# mainloop. 512 is the smallest width that still yields >= 4 tiles of 128.
THIN_DIM = 512
N_TILE = 128  # typical output tile width used for the tile counts in SH007's cost
M_TILES = (16, 64)  # smallest MFMA / wgmma row tiles: routed rows per expert are padded up to these
DEVICE_UNITS = {"MI355X CUs": 256, "H200 SMs": 132}

GEMM_OPS = re.compile(r"(^|::|\.)(mm|addmm|bmm|baddbmm|matmul|linear|_grouped_mm|grouped_mm|_scaled_mm|"
                      r"_scaled_grouped_mm)(\.default|\.out|\.Tensor)?$|gemm|GroupedMM|fused_moe|fused_experts", re.I)
ATTN_OPS = re.compile(r"scaled_dot_product|flash_attention|efficient_attention|cudnn_attention|flash_attn", re.I)
_LABEL = re.compile(r"(?:^|\.|\s)layers\.(\d+)\.(attn\.(?:qkv|o_proj|core|indexer)|mlp|moe\.(?:router|routed|shared))"
                    r"(?=$|\s|>)")
_VLLM = [  # vLLM / HF module path fragments -> our roles
    (re.compile(r"self_attn\.(qkv_proj|qkv|q_proj|k_proj|v_proj)"), "attn.qkv"),
    (re.compile(r"self_attn\.o_proj"), "attn.o_proj"), (re.compile(r"self_attn\.(attn|indexer)"), "attn.core"),
    (re.compile(r"(mlp|block_sparse_moe)\.gate$|(mlp|block_sparse_moe)\.gate\b(?!_)"), "moe.router"),
    (re.compile(r"(mlp|block_sparse_moe)\.experts"), "moe.routed"),
    (re.compile(r"(mlp|block_sparse_moe)\.shared_expert"), "moe.shared"), (re.compile(r"\.mlp\b"), "mlp"),
]
_LAYER = re.compile(r"layers\.(\d+)\.")


@dataclass
class Finding:
    code: str
    severity: str  # info | warning | error
    title: str
    message: str
    layers: list[int] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    cost: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ranges(xs: list[int]) -> str:
    xs = sorted(set(xs))
    if not xs:
        return "-"
    out, a, b = [], xs[0], xs[0]
    for x in xs[1:] + [None]:
        if x is not None and x == b + 1:
            b = x
            continue
        out.append(f"{a}-{b}" if b > a else str(a))
        if x is not None:
            a = b = x
    return ",".join(out)


# --------------------------------------------------------------------------------------- analytic findings
def analytic_findings(res) -> list[Finding]:
    """SH001-SH004 and SH007 from an analytic ShapesResult."""
    cfg, tp = res.config, res.tp
    r0 = res.ranks[0]
    all_layers = list(range(cfg["n_layers"]))
    sparse = [i for i, t in enumerate(cfg["attn_types"]) if t == "sparse"]
    eb = {"bf16": 2, "fp16": 2, "fp32": 4}[res.dtype]
    out: list[Finding] = []
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
    padded, vocab = r0.plan["vocab_padded"], cfg["vocab_size"]
    if padded != vocab:
        out.append(Finding(
            "SH003", "info", "vocab padding",
            f"vocab {vocab:,} padded to {padded:,} (multiple of 64) before the vocab-parallel split: "
            f"{padded - vocab} unused rows in the embedding and LM head",
            [], list(range(tp)),
            {"padded_rows": padded - vocab, "waste_pct": 100.0 * (padded - vocab) / padded,
             "wasted_bytes": 2 * (padded - vocab) * cfg["hidden_size"] * eb}))
    groups = res.rank_groups()
    if len(groups) > 1:
        out.append(_uneven(res, groups))
    out.extend(_thin(res))
    return out


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
                    diffs.append(f"{g.name} on ranks {_ranges(grp)}: N={g.n} K={g.k} vs {base.get(k.kind, {}).get(g.name)}")
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


def _unsharded(res) -> dict[tuple[str, str], tuple[int, int]]:
    """(layer kind, GEMM name) -> (N, K) of the same model at TP 1 (one more meta build, milliseconds)."""
    if res.tp == 1:
        return {(k.kind, g.name): (g.n, g.k) for k in res.ranks[0].kinds for g in k.gemms}
    from mmprof.runtime import ModelArgs

    from .shapes import analytic

    one = analytic(ModelArgs(**res.config), 1, 1, res.workload.batch, res.workload.seq, res.workload.phase, res.dtype)
    return {(k.kind, g.name): (g.n, g.k) for k in one.ranks[0].kinds for g in k.gemms}


def _thin(res) -> list[Finding]:
    """SH007: thin N/K (< THIN_DIM) on sharded GEMMs; routed experts whose rows per expert under-fill M tiles."""
    out = []
    wl = res.workload
    ref = _unsharded(res)
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


# --------------------------------------------------------------------------------------- observed calls
@dataclass
class Call:
    """One observed GEMM-like or attention call on one rank."""

    rank: int
    op: str
    shapes: list[list[int]]
    scope: str = ""  # full innermost label, e.g. layers.3.attn.qkv
    phase: str = ""
    step: int = -1
    dtype: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def role_of(scope: str) -> tuple[int, str] | None:
    """(layer, role) from a runtime label or a vLLM/HF module path; (-1, 'lm_head') for the LM head."""
    m = None
    for m in _LABEL.finditer(scope):
        pass
    if m is not None:
        return int(m.group(1)), m.group(2)
    lay = _LAYER.findall(scope)
    if lay:
        tail = scope[scope.rfind(f"layers.{lay[-1]}."):]
        for rx, role in _VLLM:
            if rx.search(tail):
                return int(lay[-1]), role
    if re.search(r"(^|[.>\s])lm_head\b", scope):
        return -1, "lm_head"
    return None


def _base(op: str) -> str:
    """'aten::_grouped_mm', 'aten._grouped_mm.default', 'mm' -> 'grouped_mm', 'mm'."""
    name = op.split("::")[-1]
    if name.startswith(("aten.", "torch.")):
        name = name.split(".", 1)[1]
    return name.split(".")[0].lstrip("_")


def canonical(op: str, shapes: list[list[int]]) -> tuple[int, int, int, int] | None:
    """(M, N, K, groups) of a GEMM-like call from its input shapes; None when they do not say."""
    s = [x for x in shapes if isinstance(x, list)]
    base = _base(op)
    try:
        if base in ("mm",) and len(s) >= 2 and len(s[0]) == 2:
            return s[0][0], s[1][1], s[0][1], 1
        if base == "addmm" and len(s) >= 3:
            return s[1][0], s[2][1], s[1][1], 1
        if base in ("bmm", "baddbmm"):
            a, b = (s[1], s[2]) if base == "baddbmm" else (s[0], s[1])
            return a[1], b[2], a[2], a[0]
        if base == "linear" and len(s) >= 2:
            return math.prod(s[0][:-1]), s[1][0], s[1][1], 1
        if base in ("grouped_mm", "scaled_grouped_mm") and len(s) >= 2 and len(s[1]) == 3:
            return s[0][0], s[1][2], s[1][1], s[1][0]
        if base == "matmul" and len(s) >= 2 and len(s[0]) >= 2 and len(s[1]) >= 2:
            lead = s[0][:-2] or s[1][:-2]
            return s[0][-2], s[1][-1], s[0][-1], math.prod(lead) if lead else 1
    except (IndexError, TypeError):
        return None
    return None


@dataclass
class Comparison:
    """Observed calls judged against the analytic expectation (SH006) and across ranks (SH005)."""

    source: str  # live | profile
    calls: int
    matched: int
    unmatched: list[dict[str, Any]]
    unscoped: int  # GEMM-like calls outside any known scope (not judged)
    unjudged: int  # calls in a known scope whose shapes do not give M, N, K (not judged)
    per_rank: dict[int, dict[str, int]]  # rank -> role -> calls
    findings: list[Finding]

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "calls": self.calls, "matched": self.matched, "unmatched": self.unmatched,
                "unscoped": self.unscoped, "unjudged": self.unjudged, "per_rank": self.per_rank, "findings": [f.to_dict() for f in self.findings]}


UNJUDGED = "unjudged"  # a GEMM-like op whose input shapes do not give M, N, K: neither a match nor a mismatch


def _judge(call: Call, role: str, rs, kind: str, tokens: dict[str, int] | None, top_k: int, batch: int | None) -> str | None:
    """None when the call fits the expectation, else why not."""
    if ATTN_OPS.search(call.op):
        if not kind or len(call.shapes) < 2 or len(call.shapes[0]) not in (3, 4) or \
                len(call.shapes[1]) != len(call.shapes[0]):
            return UNJUDGED
        a = rs.kind(kind).attention
        q, kv = call.shapes[0], call.shapes[1]
        hx = 1 if len(q) == 4 else -2  # [B, H, T, D] (SDPA) or [T, H, D] (varlen flash-attention)
        got = (q[hx], kv[hx], q[-1])
        want = (a.q_heads, a.kv_heads, a.head_dim)
        return None if got == want else f"attention q/kv heads, head_dim {got} != expected {want}"
    c = canonical(call.op, call.shapes)
    if c is None:
        return UNJUDGED
    m, n, k, g = c
    a = rs.kind(kind).attention if kind else None
    if role == "attn.core":
        # the sparse gather (einsum -> bmm over [B*KV*T] with M = q heads per KV head) or SDPA's math fallback
        # (bmm over [B*H] heads); either way one of N/K is head_dim
        grp = a.q_heads // max(1, a.kv_heads)
        ok = a.head_dim in (k, n) and (m == grp or g % a.q_heads == 0)
        return None if ok else (f"attention bmm M={m} N={n} K={k} groups={g}: expected head_dim {a.head_dim} and "
                                f"M={grp} (q heads per KV head) or groups a multiple of {a.q_heads} q heads")
    if role == "attn.indexer":
        ok = k == a.index_head_dim and (batch is None or g == batch * a.index_q_heads)
        return None if ok else (f"indexer matmul groups={g} K={k}: expected K={a.index_head_dim}"
                                + (f", groups={batch * a.index_q_heads}" if batch else ""))
    gemms = rs.model_gemms if role == "lm_head" else [x for x in rs.kind(kind).gemms if x.scope == role]
    if not gemms:
        return f"no {role} GEMM expected on a {kind} layer"
    phase_tokens = (tokens or {}).get(call.phase)
    for e in gemms:
        ns = {e.n}
        if role == "attn.qkv" and a is not None and a.sparse:
            ns.add(rs.plan["qkv_n"])  # a layer reusing the block selection multiplies only [q | k | v]
        if e.groups > 1:  # routed experts: grouped GEMM, per-expert loop, or the bmm fallback
            if g == e.weight_groups and n == e.n and k == e.k:
                want_rows = (phase_tokens * top_k + (phase_tokens if e.extra_rows else 0)) if phase_tokens else None
                if want_rows is None or m == want_rows:
                    return None
                return f"{e.name}: {m} rows, expected tokens*(top_k{'+1' if e.extra_rows else ''}) = {want_rows}"
            if g == 1 and n == e.n and k == e.k:
                return None
            if n == 1 and m == e.n and k == e.k:  # bmm fallback: per-row weights [rows, N, K] @ x[rows, K, 1]
                return None
            continue
        if n in ns and k == e.k and g == 1:
            want_m = batch if role == "lm_head" else phase_tokens
            if want_m is None or m == want_m or (role == "lm_head" and m % max(1, want_m) == 0):
                return None
            return f"{e.name}: M={m}, expected {want_m} tokens"
    exp = ", ".join(f"{e.name} N={e.n} K={e.k}" + (f" x{e.weight_groups}" if e.groups > 1 else "") for e in gemms)
    return f"{call.op} M={m} N={n} K={k} groups={g}; expected {exp}"


def compare_calls(calls: list[Call], res, source: str, tokens: dict[str, int] | None = None,
                  batch: int | None = None) -> Comparison:
    """Judge observed calls against `res` (an analytic ShapesResult) and across ranks."""
    cfg = res.config
    kinds = {i: f"{a}/{m}" for i, (a, m) in enumerate(zip(cfg["attn_types"], cfg["mlp_types"]))}
    by_rank = {r.rank: r for r in res.ranks}
    unmatched: list[dict[str, Any]] = []
    matched = unscoped = unjudged = 0
    per_rank: dict[int, Counter] = defaultdict(Counter)
    findings: list[Finding] = []
    bad_layers: set[int] = set()
    bad_ranks: set[int] = set()
    seen: dict[tuple, set] = defaultdict(set)
    for c in calls:
        ro = role_of(c.scope)
        if ro is None:
            unscoped += 1
            continue
        layer, role = ro
        per_rank[c.rank][role] += 1
        rs = by_rank.get(c.rank)
        if rs is None:
            why = f"rank {c.rank} is outside the expected TP {res.tp}"
        elif layer >= 0 and layer not in kinds:
            why = f"layer {layer} is outside the config's {cfg['n_layers']} layers"
        else:
            why = _judge(c, role, rs, kinds.get(layer, ""), tokens, cfg["top_k"], batch)
        if why == UNJUDGED:
            unjudged += 1
        elif why is None:
            matched += 1
            cc = canonical(c.op, c.shapes)
            if cc is not None and not ATTN_OPS.search(c.op):
                m, n, k, g = cc
                seen[(c.rank, c.phase, c.step, layer, role)].add((m, k) if n == 1 and g > 1 else (n, k))
        else:
            unmatched.append({**c.to_dict(), "layer": layer, "role": role, "why": why})
            bad_layers.add(layer)
            bad_ranks.add(c.rank)
    for (rank, phase, step, layer, role), pairs in seen.items():  # every expected GEMM of the group ran
        rs = by_rank[rank]
        if role in ("attn.core", "attn.indexer"):
            continue
        gemms = rs.model_gemms if role == "lm_head" else [x for x in rs.kind(kinds[layer]).gemms if x.scope == role]
        for e in gemms:
            ok = {(e.n, e.k)} | ({(rs.plan["qkv_n"], e.k)} if e.name == "attn.qkv" else set())
            if not pairs & ok:
                unmatched.append({"rank": rank, "op": "", "shapes": [], "scope": f"layers.{layer}.{role}",
                                  "phase": phase, "step": step, "dtype": "", "layer": layer, "role": role,
                                  "why": f"expected {e.name} N={e.n} K={e.k} was not observed "
                                         f"(saw N,K {sorted(pairs)})"})
                bad_layers.add(layer)
                bad_ranks.add(rank)
    if unmatched:
        findings.append(Finding(
            "SH006", "error", "config-vs-runtime mismatch",
            f"{len(unmatched)} of {len(calls)} {source} calls differ from the analytic shapes; first: "
            f"rank {unmatched[0]['rank']} {unmatched[0]['scope']}: {unmatched[0]['why']}",
            sorted(x for x in bad_layers if x >= 0), sorted(bad_ranks),
            {"mismatched_calls": len(unmatched), "calls": len(calls)}))
    findings.extend(cross_rank(calls))
    return Comparison(source, len(calls), matched, unmatched[:200], unscoped, unjudged,
                      {r: dict(v) for r, v in sorted(per_rank.items())}, findings)


def cross_rank(calls: list[Call]) -> list[Finding]:
    """SH005: per (phase, step, scope, op), the multiset of shapes on each rank; ranks that differ."""
    ranks = sorted({c.rank for c in calls})
    if len(ranks) < 2:
        return []
    groups: dict[tuple, dict[int, Counter]] = defaultdict(lambda: defaultdict(Counter))
    for c in calls:
        groups[(c.phase, c.step, c.scope, c.op)][c.rank][json.dumps(c.shapes)] += 1
    shape_diff, token_diff = [], []
    for key, per in groups.items():
        sigs = {r: per.get(r, Counter()) for r in ranks}
        if len({json.dumps(sorted(s.items())) for s in sigs.values()}) == 1:
            continue
        nk = {r: sorted(_token_free(key[3], json.loads(s)) for s in v.elements()) for r, v in sigs.items()}
        ro = role_of(key[2])
        entry = {"phase": key[0], "step": key[1], "scope": key[2], "op": key[3], "layer": ro[0] if ro else -1,
                 "per_rank": {r: dict(v) for r, v in sigs.items()}}
        only_m = len({json.dumps(sorted(set(v))) for v in nk.values() if v}) <= 1 and \
            all(sigs[r] for r in ranks) and not ATTN_OPS.search(key[3])
        (token_diff if only_m else shape_diff).append(entry)
    out = []
    for lst, sev, what in ((shape_diff, "error", "shapes"), (token_diff, "warning", "token counts (M)")):
        if lst:
            e = lst[0]
            out.append(Finding(
                "SH005", sev, "cross-rank imbalance",
                f"{what} differ between ranks in {len(lst)} scope/op groups; first: {e['scope'] or '(no scope)'} "
                f"{e['op']} ({e['phase']} step {e['step']})",
                sorted({x["layer"] for x in lst if x["layer"] >= 0}), ranks,
                {"groups": len(lst), "examples": lst[:3]}))
    return out


def _token_free(op: str, shapes: list[list[int]]) -> str:
    """A call's shape signature without its token count: (N, K, groups) for a GEMM; for other ops every input's
    shape minus its leading dim (tokens usually lead, e.g. a fused-MoE op's [tokens, hidden])."""
    c = canonical(op, shapes)
    return json.dumps(c[1:] if c else [x[1:] for x in shapes if isinstance(x, list)])


def calls_from_profile(profile) -> list[Call]:
    """GEMM-like and attention ops with input shapes from a Profile's ops table."""
    if profile.n("ops") == 0:
        return []
    ranks = profile.col("ops", "rank")
    names = profile.col("ops", "name", decode=True)
    dims = profile.col("ops", "input_dims", decode=True)
    scopes = profile.col("ops", "scope", decode=True)
    paths = profile.col("ops", "scope_path", decode=True)
    phases = profile.col("ops", "phase", decode=True)
    steps = profile.col("ops", "step")
    parents = profile.col("ops", "parent")
    is_gemm = [bool(GEMM_OPS.search(nm or "") or ATTN_OPS.search(nm or "")) for nm in names]
    out = []
    for i in range(len(names)):
        nm = names[i] or ""
        if not is_gemm[i] or not dims[i] or _inside_gemm(i, parents, is_gemm):
            continue
        try:
            shp = json.loads(dims[i])
        except ValueError:
            continue
        if not isinstance(shp, list) or not any(isinstance(x, list) and x for x in shp):
            continue
        label = _innermost_label(paths[i] or "", scopes[i] or "")
        out.append(Call(int(ranks[i]), nm, [x if isinstance(x, list) else [] for x in shp], label,
                        phases[i] or "", int(steps[i])))
    return out


def _inside_gemm(i: int, parents, is_gemm: list[bool]) -> bool:
    """True when an enclosing op is itself GEMM-like (aten::linear > aten::matmul > aten::mm counts once,
    as the outermost call: the problem the model asked for)."""
    p, hops = int(parents[i]), 0
    while 0 <= p < len(is_gemm) and hops < 64:
        if is_gemm[p]:
            return True
        p, hops = int(parents[p]), hops + 1
    return False


def _innermost_label(path: str, scope: str) -> str:
    for part in reversed([p.strip() for p in path.split(" > ")] + [scope]):
        if part and role_of(part):
            return part
    return scope
