"""Steps and phases of the events a check judges, when the profile does not carry them.

A profile's own step and phase columns win (step annotations, `ProfilerStep#N`, a serving engine's steps). A trace
with neither (a `generate()` loop profiled without a schedule, a hand-made trace) still shows its forwards in its
shapes: every forward starts by embedding its input ids (`aten::embedding`, input `[batch, tokens]`), and a
forward that embeds one token per sequence is a decode step (sequence length 1 = decode), more than one a prefill.

- `infer_steps`: forwards as steps, split at each `aten::embedding` call per rank (consecutive embeddings with no
  weight GEMM between them, e.g. token and position embeddings, open one forward);
- `infer_phases`: a phase per step from the token ids of the step's embedding;

each says what it inferred from, and the checks print it beside their verdicts.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from mmprof.analysis.shapes.gemm_calls import GEMM_OPS

PHASE_FROM_EMBEDDING = "inferred per step from aten::embedding's token ids (prefill: more than one token per sequence)"
STEPS_FROM_FORWARDS = "forwards split at each aten::embedding call (the profile has no step markers)"
_EMBED = ("aten::embedding", "aten::embedding_bag")


def embedding_tokens(dims_text: Any) -> int | None:
    """Tokens per sequence of one aten::embedding call: input_dims [[vocab, hidden], [batch, tokens], ...]."""
    if not isinstance(dims_text, str):
        return None
    try:
        dims = json.loads(dims_text)
    except ValueError:
        return None
    if isinstance(dims, list) and len(dims) > 1 and isinstance(dims[1], list) and len(dims[1]) == 2 \
            and all(isinstance(x, int) for x in dims[1]):
        return int(dims[1][1])
    return None


def _forward_starts(profile: Any) -> dict[int, list[tuple[int, int]]]:
    """Per rank: (CPU start, embedding op row) of each forward's first embedding call, in time order."""
    names = np.asarray(profile.col("ops", "name", decode=True), dtype=object)
    emb = np.isin(names, _EMBED)
    if not emb.any():
        return {}
    gemm = np.array([isinstance(n, str) and bool(GEMM_OPS.search(n)) for n in names], dtype=bool)
    rank, start = profile.col("ops", "rank"), profile.col("ops", "start_ns")
    out: dict[int, list[tuple[int, int]]] = {}
    for r in np.unique(rank[emb]).tolist():
        on = np.flatnonzero(rank == r)
        on = on[np.argsort(start[on], kind="stable")]
        starts: list[tuple[int, int]] = []
        gemm_since = True  # a weight GEMM ran since the last embedding: the next embedding opens a forward
        for i in on.tolist():
            if emb[i]:
                if gemm_since:
                    starts.append((int(start[i]), i))
                gemm_since = False
            elif gemm[i]:
                gemm_since = True
        out[int(r)] = starts
    return out


def infer_steps(profile: Any, events: Any) -> tuple[Any, str | None, dict[tuple[int, int], int]]:
    """(events with a step each, what the steps came from, (rank, step) -> embedding op row). The profile's steps
    where any event has one ("markers"); else its forwards (module docstring) when some rank has two or more; else
    the events as they are (None: no steps known, the run counts as one)."""
    if not len(events):
        return events, None, {}
    if (events["step"] >= 0).any():
        return events, "markers", {}
    if not profile.n("ops"):
        return events, None, {}
    starts = _forward_starts(profile)
    if not any(len(s) > 1 for s in starts.values()):
        return events, None, {}
    t = events["cpu_ns"].to_numpy() if "cpu_ns" in events else events["start_ns"].to_numpy()
    ranks = events["rank"].to_numpy()
    step = np.full(len(events), -1, dtype=np.int64)
    emb_of: dict[tuple[int, int], int] = {}
    for r, lst in starts.items():
        sel = ranks == r
        bounds = np.array([s for s, _ in lst], dtype=np.int64)
        step[sel] = np.searchsorted(bounds, t[sel], side="right") - 1
        emb_of.update({(r, k): row for k, (_, row) in enumerate(lst)})
    out = events.copy()
    out["step"] = step
    return out, STEPS_FROM_FORWARDS, emb_of


def infer_phases(profile: Any, events: Any, emb_of: dict[tuple[int, int], int] | None = None) -> tuple[Any, str | None]:
    """Events with a phase per step: the Profile's `phase` column where any event has one (annotations, engine
    steps; values other than prefill/decode are kept as they are), else inferred from the token ids of the step's
    aten::embedding (a generate() loop: prefill embeds the prompt, decode one token per sequence), else none.
    `emb_of` maps inferred steps to their embedding op (infer_steps); without it the ops' own steps are used."""
    if not len(events):
        return events, None
    if events["phase"].notna().any():
        return events, "annotations"
    if not (events["step"] >= 0).any() or not profile.n("ops"):
        return events, None
    dims = profile.col("ops", "input_dims", decode=True)
    per: dict[tuple[int, int], str] = {}
    if emb_of:
        pairs = [(key, dims[row]) for key, row in emb_of.items()]
    else:
        names = profile.col("ops", "name", decode=True)
        rank, step = profile.col("ops", "rank"), profile.col("ops", "step")
        pairs = [((int(rank[i]), int(step[i])), dims[i]) for i in np.flatnonzero(np.isin(names, _EMBED))
                 if step[i] >= 0]
    for key, d in pairs:
        t = embedding_tokens(d)
        if t is None:
            continue
        ph = "prefill" if t > 1 else "decode"
        per[key] = "mixed" if per.get(key, ph) != ph else ph  # two forwards of different kinds in one step
    if not per or set(per.values()) == {"mixed"}:
        return events, None
    keys = list(zip(events["rank"].astype(int), events["step"].astype(int)))
    out = events.copy()
    out["phase"] = [per.get(k) for k in keys]
    return out, PHASE_FROM_EMBEDDING
