"""Shapes for graph-replayed kernels, from their captured or eager twin.

A replayed kernel launched no op of its own (docs/graphs.md): no input shapes, so no FLOPs, no roofline bound (the
timeline counts it as "unattributed compute"), no row of its own in `report --by-shape`. Its twin has them: the
captured op that created its node (the capture rule of importers/graph_replays.py: the same call, the shapes as
they are), or the eager kernel the alignment paired it with (analysis/attribution/graph_align.py: the same op of
the same layer, run by an eager step with another token count). vLLM's decode graph replays the same projections
as its prefill, on the step's tokens instead of the prompt's: an op's activations carry the token count as their
first dimension (`aten::mm` [T, K] x [K, N], `aten::linear` [T, K], the fused-MoE op's hidden states and top-k
[T, ...]), its weights do not.

`twin_shapes(profile, twin)` gives, per kernel, the op row whose name and dtypes stand for it and its input dims
at the replay's token count: every top-level tensor argument whose first dimension is the twin's step token count
T_eager gets the replay's step token count T_replay instead (the counts come from the engine-step annotations:
vLLM's `execute_context_N(T)_generation_M(G)` holds T + G tokens; `mmprof.labels.engine_step`). Where a count is
not known (no engine steps) the twin's shapes are used only when its op ran in a replay-sized call, never
guessed: no shapes. vLLM pads a decode batch to the captured graph size (1, 2, 4, 8, 16, ...); at a batch that is
not one of them the replay computes the padded rows too, which the step's token count does not say: the FLOPs are
then those of the real tokens (docs/graphs.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from mmprof.labels import engine_step

_SCALED = ("eager",)   # op sources whose ops come from another step (the importer's eager rule)


def step_tokens(profile: Any) -> dict[tuple[int, int], int]:
    """(rank, step) -> the engine step's token count (context + generation tokens), numbered as the importers
    number engine steps (`mmprof.labels.step_values`: per rank, 0.. in CPU start order)."""
    if not profile.n("scopes"):
        return {}
    S = profile.tables["scopes"]
    cpu = (S["tid"] >= 0) | (S["device"] < 0) if "device" in S else S["tid"] >= 0
    uniq, inv = np.unique(S["name"], return_inverse=True)
    parsed = [engine_step(profile.string(int(u))) if u >= 0 else None for u in uniq.tolist()]
    is_step = np.array([p is not None for p in parsed], dtype=bool)[inv.reshape(-1)] & cpu
    rows = np.flatnonzero(is_step)
    out: dict[tuple[int, int], int] = {}
    by_rank: dict[int, list[int]] = {}
    for r in rows[np.lexsort((rows, S["start_ns"][rows]))].tolist():
        by_rank.setdefault(int(S["rank"][r]), []).append(r)
    for rank, rs in by_rank.items():
        for k, r in enumerate(rs):
            es = parsed[int(inv.reshape(-1)[r])]
            if es.ctx_tokens is None or es.gen_tokens is None:
                continue
            out[(rank, k)] = int(es.ctx_tokens) + int(es.gen_tokens)
    return out


def scale_dims(dims: str, t_from: int, t_to: int) -> str | None:
    """`dims` (an input_dims JSON list) with every top-level tensor argument's first dimension t_from set to t_to;
    None when no argument has it (nothing says which dimension is the token count)."""
    try:
        args = orjson.loads(dims)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(args, list):
        return None
    hit = False
    out = []
    for a in args:
        if isinstance(a, list) and a and isinstance(a[0], int) and a[0] == t_from:
            a = [t_to, *a[1:]]
            hit = True
        out.append(a)
    return orjson.dumps(out).decode() if hit else None


def twin_shapes(profile: Any, twin: np.ndarray | None) -> dict[int, tuple[int, str]]:
    """Kernel row -> (the op row standing for it, its input dims at the kernel's token count), for replayed kernels
    whose shapes come from a twin of another step (see the module docstring)."""
    K = profile.tables["kernels"]
    n = profile.n("kernels")
    if not n or not profile.n("ops") or not (K["graph"] >= 0).any():
        return {}
    O = profile.tables["ops"]
    src_ids = {profile.strings.index(s) for s in _SCALED if s in profile.strings}
    tw = twin if twin is not None and len(twin) == n else np.full(n, -1, np.int64)
    rep = np.flatnonzero(K["graph"] >= 0)
    own = K["op"][rep]
    from_eager = np.isin(K["op_source"][rep], list(src_ids)) if src_ids else np.zeros(len(rep), bool)
    t_op = np.where(own >= 0, np.where(from_eager, own, -1), K["op"][np.maximum(tw[rep], 0)])
    t_op = np.where((own < 0) & (tw[rep] < 0), -1, t_op)
    keep = t_op >= 0
    rep, t_op = rep[keep], t_op[keep]
    if not len(rep):
        return {}
    tokens = step_tokens(profile)
    out: dict[int, tuple[int, str]] = {}
    cache: dict[tuple[int, int, int], str | None] = {}
    for r, o in zip(rep.tolist(), t_op.tolist()):
        d = int(O["input_dims"][o])
        if d < 0:
            continue
        t_r = tokens.get((int(K["rank"][r]), int(K["step"][r])))
        t_e = tokens.get((int(O["rank"][o]), int(O["step"][o])))
        if t_r is None or t_e is None:
            continue
        key = (d, t_e, t_r)
        if key not in cache:
            txt = profile.string(d) or ""
            cache[key] = txt if t_e == t_r else scale_dims(txt, t_e, t_r)
        if cache[key] is not None:
            out[r] = (o, cache[key])
    return out
