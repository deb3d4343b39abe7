"""The engine steps of a profile: the step annotations a serving engine wrote (vLLM, SGLang, TensorRT-LLM).

`mmprof.labels.engine_step` parses a label; this module reads the CPU ranges of the `scopes` table that carry one
and numbers them per rank exactly as the importers do (`mmprof.labels.step_values`: 0.. in the order their CPU
ranges start), so that step N here is step N of the kernels, copies and ops the importers labelled.

One row per engine step: rank, step, name, engine, phase (prefill / decode / mixed / None for a step with no
scheduled work), ctx_reqs, ctx_tokens, gen_reqs, gen_tokens (-1 when the engine's label does not carry it),
cpu_start_ns, cpu_end_ns (the annotated host range: for vLLM `Worker.execute_model`'s model-runner call, which does
not include `sample_tokens`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mmprof.labels import engine_step

COLUMNS = ("rank", "step", "name", "engine", "phase", "ctx_reqs", "ctx_tokens", "gen_reqs", "gen_tokens",
           "cpu_start_ns", "cpu_end_ns")


def engine_steps(profile) -> pd.DataFrame:
    """The engine steps of a profile (see the module docstring); an empty frame when it has none. Cached."""
    hit = profile.__dict__.get("_engine_steps")
    if hit is not None:
        return hit
    out = _build(profile)
    profile.__dict__["_engine_steps"] = out
    return out


def _build(profile) -> pd.DataFrame:
    empty = pd.DataFrame({c: [] for c in COLUMNS})
    if profile.n("scopes") == 0:
        return empty
    name = profile.col("scopes", "name")
    tid = profile.col("scopes", "tid")
    dev = profile.col("scopes", "device")
    uniq, inv = np.unique(name, return_inverse=True)
    parsed = [engine_step(profile.string(int(u))) if u >= 0 else None for u in uniq]
    is_step = np.array([p is not None for p in parsed], dtype=bool)[inv]
    cpu = (tid >= 0) | (dev < 0)  # GPU-side copies of the ranges (gpu_user_annotation) do not number steps
    rows = np.flatnonzero(is_step & cpu)
    if not len(rows):
        return empty
    rank = profile.col("scopes", "rank")[rows]
    start = profile.col("scopes", "start_ns")[rows]
    dur = profile.col("scopes", "dur_ns")[rows]
    # per rank, in start order, ties in table order (the importers' order): the step number
    order = np.lexsort((rows, start, rank))
    rows, rank, start, dur = rows[order], rank[order], start[order], dur[order]
    first = np.r_[True, rank[1:] != rank[:-1]]
    grp_start = np.maximum.accumulate(np.where(first, np.arange(len(rows)), 0))
    step = np.arange(len(rows)) - grp_start
    es = [parsed[int(inv[r])] for r in rows.tolist()]

    def num(v):
        return -1 if v is None else int(v)

    return pd.DataFrame({
        "rank": rank.astype(np.int64), "step": step.astype(np.int64),
        "name": [profile.string(int(name[r])) for r in rows.tolist()],
        "engine": [e.engine for e in es], "phase": [e.phase for e in es],
        "ctx_reqs": [num(e.ctx_reqs) for e in es], "ctx_tokens": [num(e.ctx_tokens) for e in es],
        "gen_reqs": [num(e.gen_reqs) for e in es], "gen_tokens": [num(e.gen_tokens) for e in es],
        "cpu_start_ns": start.astype(np.int64), "cpu_end_ns": (start + dur).astype(np.int64)})


def describe(steps: pd.DataFrame, phase: str | None = None) -> str:
    """'34 engine steps: 1 prefill (1 request), 1 mixed, 31 decode (30 of 8 requests, 1 of 7), 1 with nothing
    scheduled' (of one phase when given)."""
    s = steps if phase is None else steps[steps["phase"] == phase]
    if s.empty:
        return "no engine steps"
    parts = []
    ph = s["phase"].fillna("")
    for name in ("prefill", "mixed", "decode", ""):
        g = s[ph == name]
        if g.empty:
            continue
        if name == "":
            parts.append(f"{len(g)} with nothing scheduled")
            continue
        col = {"decode": "gen_reqs", "prefill": "ctx_reqs"}.get(name)
        counts = g[col].value_counts() if col else None
        detail = ""
        if counts is not None and (counts.index >= 0).all():
            sub = [f"{n} of {int(k)}" for k, n in counts.items()]
            detail = f" ({', '.join(sub)} request{'s' if counts.index.max() != 1 else ''})" if len(sub) > 1 else \
                f" ({int(counts.index[0])} request{'s' if counts.index[0] != 1 else ''} each)" if len(g) > 1 else \
                f" ({int(counts.index[0])} request{'s' if counts.index[0] != 1 else ''})"
        parts.append(f"{len(g)} {name}{detail}")
    n = len(s)
    return f"{n} engine step{'s' if n != 1 else ''}: " + ", ".join(parts)
