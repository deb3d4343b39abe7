"""Observed GEMM-like and attention calls (live from the runtime's ranks, or traced with shapes) judged against
the analytic per-rank shapes (SH006) and across ranks (SH005), registered by code.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any

import numpy as np

from mmprof.analysis.checks.registry import check
from mmprof.analysis.shapes.gemm_calls import ATTN_OPS, GEMM_OPS, canonical, expert_pair  # noqa: F401
from mmprof.analysis.attribution.structure import regions
from mmprof.labels import parse_path
from mmprof.shapes_model import Call, Comparison, Finding

JUDGED_ROLES = ("attn.qkv", "attn.o_proj", "attn.core", "attn.indexer", "mlp", "moe.router", "moe.routed",
                "moe.shared", "lm_head")


def role_of(scope: str) -> tuple[int, str] | None:
    """(layer, role) of a call's label when it names a region whose GEMMs can be judged; None otherwise."""
    r = parse_path(scope) if scope else None
    return (r.layer, r.role) if r is not None and r.role in JUDGED_ROLES else None


UNJUDGED = "unjudged"  # a GEMM-like op whose input shapes do not give M, N, K: neither a match nor a mismatch


def _judge(call: Call, role: str, rs, kind: str, tokens: dict[str, int] | None, top_k: int, batch: int | None,
           layout: str = "runtime") -> str | None:
    """None when the call fits the expectation, else why not. `layout` is the engine layout of `rs`: only the
    runtime's lets a separate shared expert match its fused slot (its `--shared-expert separate` runs the slot's
    weights); in an engine's layout a separate shared expert where it fuses one is a mismatch."""
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
    pair = expert_pair(call.op, call.shapes)
    if pair is not None and role == "moe.routed" and kind:
        return _judge_pair(pair, rs.kind(kind).gemms)
    c = canonical(call.op, call.shapes)
    if c is None:
        return UNJUDGED
    m, n, k, g = c
    a = rs.kind(kind).attention if kind else None
    core = [x for x in rs.kind(kind).gemms if x.scope == "attn.core"] if kind else []
    if role == "attn.core" and core:  # the layout's own attention GEMMs (MLA's absorbed W_UK / W_UV bmm)
        if any(g == e.groups and n == e.n and k == e.k for e in core):
            return None
    idx_gemms = [x for x in rs.kind(kind).gemms if x.scope == "attn.indexer"] if kind else []
    if role == "attn.indexer" and idx_gemms and g == 1 and any(n == e.n and k == e.k for e in idx_gemms):
        return None  # one of the layout's indexer projections (separate index_q / index_k, DSA wq_b / wk)
    if role == "attn.indexer" and layout != "runtime" and (g > 1 or not _weight_op(call.op)):
        return UNJUDGED  # an engine's scoring products of activations: no weight shape to judge
    if role == "attn.core":
        # the sparse gather (einsum -> bmm over [B*KV*T] with M = q heads per KV head) or SDPA's math fallback
        # (bmm over [B*H] heads); either way one of N/K is head_dim
        grp = a.q_heads // max(1, a.kv_heads)
        dims = {a.head_dim, getattr(a, "v_head_dim", 0) or a.head_dim}
        ok = bool(dims & {k, n}) and (m == grp or g % a.q_heads == 0)
        return None if ok else (f"attention bmm M={m} N={n} K={k} groups={g}: expected head_dim {a.head_dim} and "
                                f"M={grp} (q heads per KV head) or groups a multiple of {a.q_heads} q heads")
    if role == "attn.indexer":
        ok = k == a.index_head_dim and (batch is None or g == batch * a.index_q_heads)
        return None if ok else (f"indexer matmul groups={g} K={k}: expected K={a.index_head_dim}"
                                + (f", groups={batch * a.index_q_heads}" if batch else ""))
    gemms = rs.model_gemms if role == "lm_head" else [x for x in rs.kind(kind).gemms if x.scope == role]
    if not gemms and role == "moe.shared" and layout == "runtime":
        # the layout the shapes were built for fuses the shared expert as one more slot of the routed weight
        # (extra_rows); an engine that runs it as its own MLP (vLLM's SharedExperts) multiplies that slot's shape
        slot = [x for x in rs.kind(kind).gemms if x.scope == "moe.routed" and x.extra_rows]
        if any(g == 1 and n == e.n and k == e.k for e in slot):
            return None
        if slot:
            return (f"shared expert M={m} N={n} K={k}: expected one expert's shape "
                    + ", ".join(f"N={e.n} K={e.k}" for e in slot))
    if not gemms:
        if role == "moe.shared" and layout != "runtime":
            return (f"no moe.shared GEMM in the {layout} layout on a {kind} layer (it fuses the shared expert into the "
                    f"routed experts); the trace ran it as its own GEMM M={m} N={n} K={k}")
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


@check("SH006")
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
            why = _judge(c, role, rs, kinds.get(layer, ""), tokens, cfg["top_k"], batch,
                         getattr(res, "layout", "runtime"))
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
    differ = sum(1 for u in unmatched if u.get("op"))  # one source of truth: every call lands in one count
    assert matched + differ + unjudged + unscoped == len(calls), (matched, differ, unjudged, unscoped, len(calls))
    return Comparison(source, len(calls), matched, unmatched[:200], unscoped, unjudged,
                      {r: dict(v) for r, v in sorted(per_rank.items())}, findings, differ=differ,
                      missing=len(unmatched) - differ)


@check("SH005")
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


def _weight_op(op: str) -> bool:
    """linear / mm / addmm: a product with a weight (matmul and bmm are often products of activations)."""
    base = op.split("::")[-1].split(".")[0].lstrip("_")
    return base in ("linear", "mm", "addmm", "grouped_mm", "scaled_mm")


def _judge_pair(pair, gemms) -> str | None:
    """A fused-MoE op's two expert weights ([E, 2I, H] and [E, H, I]) against the layout's routed GEMMs."""
    want = {e.name.rsplit(".", 1)[-1]: e for e in gemms if e.scope == "moe.routed"}
    up, down = want.get("gate_up"), want.get("down")
    if up is None or down is None:
        return "no routed-expert GEMMs expected on this layer"
    (e1, n1, k1), (e2, n2, k2) = pair
    if (e1, n1, k1) == (up.weight_groups, up.n, up.k) and (e2, n2, k2) == (down.weight_groups, down.n, down.k):
        return None
    return (f"expert weights w1 [{e1}, {n1}, {k1}], w2 [{e2}, {n2}, {k2}]; expected "
            f"[{up.weight_groups}, {up.n}, {up.k}], [{down.weight_groups}, {down.n}, {down.k}]")


def _token_free(op: str, shapes: list[list[int]]) -> str:
    """A call's shape signature without its token count: (N, K, groups) for a GEMM; for other ops every input's
    shape minus its leading dim (tokens usually lead, e.g. a fused-MoE op's [tokens, hidden])."""
    c = canonical(op, shapes)
    return json.dumps(c[1:] if c else [x[1:] for x in shapes if isinstance(x, list)])


def calls_from_profile(profile, shape_regions=None) -> list[Call]:
    """GEMM-like and attention ops with input shapes from a Profile's ops table. `regions` (per op, e.g. from
    shape matching with --model; `shape_regions`) label the calls whose own scopes and structure name no region."""
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
    keep = [i for i in range(len(names)) if is_gemm[i] and dims[i] and not _inside_gemm(i, parents, is_gemm)]
    # the region each call ran in from the profile's structure: scope labels, else the module tree of with_stack
    # traces (vLLM's QKVParallelLinear inside its attention, SharedExperts, ...) and engine ops as anchors
    reg = regions(profile, "ops", np.asarray(keep, dtype=np.int64)).region if keep else []
    region_of = {i: r for i, r in zip(keep, reg) if r is not None}
    out = []
    for i in keep:
        nm = names[i] or ""
        try:
            shp = json.loads(dims[i])
        except ValueError:
            continue
        if not isinstance(shp, list) or not any(isinstance(x, list) and x for x in shp):
            continue
        label = region_of.get(i) or _region_label(paths[i] or "", scopes[i] or "")
        if i not in region_of and shape_regions is not None and role_of(label) is None and shape_regions.region[i]:
            label = str(shape_regions.region[i])
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


def _region_label(path: str, scope: str) -> str:
    """The region a call ran in (`layers.3.attn.qkv`), or its innermost label when it names none."""
    r = parse_path(path or scope) if (path or scope) else None
    return r.name if r is not None else scope
