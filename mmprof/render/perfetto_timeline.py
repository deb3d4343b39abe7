"""The timeline tracks of the Perfetto export (mmprof.render.perfetto): the time categories as counter tracks and,
on a serving engine's trace, the "engine steps" track; both from `mmprof.analysis.timeline.breakdown`, whose engine-step
pieces give each step its share of the timeline."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from mmprof.analysis.timeline.engine_steps import engine_steps
from mmprof.analysis.timeline.events import EventFrame
from mmprof.analysis.timeline.breakdown import CATEGORIES, LABELS, category_segments, timeline

COUNTER = "timeline"          # counter tracks are named "timeline <category label>"
STREAM_TID0 = 10_000          # stream tracks after CPU threads within a process
CHUNK = 50_000                # events per piece of the document


def to_us(ns: np.ndarray, t0: int) -> list[float]:
    """ns on the profile's clock -> microseconds from the trace's start, rounded to the nanosecond."""
    return np.round((ns.astype(np.int64) - t0) / 1000.0, 3).tolist()


def counter_slices(d) -> Iterator[bytes]:
    """The timeline categories as counter tracks: per rank, each category's series is 1 while it holds the rank."""
    ev = d.ev
    tl = timeline(d.p, ev) if ev.source == "kernels" and len(engine_steps(d.p)) else None
    seg = category_segments(ev, tl.pieces if tl is not None else None)
    out: list[dict] = []
    prev: dict[int, tuple[str, float]] = {}  # rank -> (label of its current category, when it ends)

    def close(r: int) -> None:
        lab, end = prev.pop(r)
        out.append({"ph": "C", "name": COUNTER, "pid": r + 1, "ts": end, "args": {lab: 0}})

    for r, s, e, c in zip(seg["rank"].tolist(), to_us(seg["start_ns"].to_numpy(), d.t0),
                          to_us(seg["end_ns"].to_numpy(), d.t0), seg["category"].tolist()):
        lab = LABELS[c]
        args = {lab: 1}
        if r not in prev:  # every series starts at 0 at the rank's first event
            args = {**{LABELS[k]: 0 for k in LABELS}, lab: 1}
        elif prev[r][1] == s:  # the previous category ends where this one starts: one point for both
            args = {prev[r][0]: 0, lab: 1}
            prev.pop(r)
        else:
            close(r)
        out.append({"ph": "C", "name": COUNTER, "pid": r + 1, "ts": s, "args": args})
        prev[r] = (lab, e)
        if len(out) >= CHUNK:
            d.st["counters"] += len(out)
            yield d.piece(out)
            out = []
    for r in list(prev):
        close(r)
    d.st["counters"] += len(out)
    yield d.piece(out)


ENGINE_TID = STREAM_TID0 - 1  # the "engine steps" track of a rank, between its CPU threads and its streams


def engine_slices(p, ev: EventFrame, t0: int) -> list[dict]:
    """One slice per engine step (vLLM / SGLang / TensorRT-LLM step annotations) on an "engine steps" track per
    rank, spanning the step's share of the timeline (`mmprof.analysis.timeline.breakdown`: its preparation, its GPU work and
    the time up to the next step), with the engine's request / token counts and the split of that time as args."""
    if not len(ev) or ev.source != "kernels":
        return []
    es = engine_steps(p)
    if es.empty:
        return []
    tl = timeline(p, ev)
    w = tl.windows[tl.windows["step"] >= 0]
    info = es.set_index(["rank", "step"])
    out: list[dict] = []
    for r in sorted(set(w["rank"].tolist())):
        out.append({"ph": "M", "name": "thread_name", "pid": r + 1, "tid": ENGINE_TID, "args": {"name": "engine steps"}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": r + 1, "tid": ENGINE_TID,
                    "args": {"sort_index": ENGINE_TID}})
    busy = list(CATEGORIES[:5])
    for row in w.itertuples(index=False):
        key = (int(row.rank), int(row.step))
        if key not in info.index:
            continue
        meta = info.loc[key]
        d = row._asdict()
        args = {"step": key[1], "phase": row.phase, "annotation": meta["name"], "engine": meta["engine"],
                **{c: int(meta[c]) for c in ("ctx_reqs", "ctx_tokens", "gen_reqs", "gen_tokens") if meta[c] >= 0},
                "period ns": int(row.span_ns), "GPU busy ns": int(sum(d[c] for c in busy)),
                **{f"{LABELS[c]} ns": int(d[c]) for c in CATEGORIES[5:]}}
        out.append({"ph": "X", "name": f"{row.phase} step {key[1]}", "cat": "engine_step", "pid": key[0] + 1,
                    "tid": ENGINE_TID, "ts": to_us(np.array([row.start_ns]), t0)[0],
                    "dur": round(max(int(row.end_ns) - int(row.start_ns), 0) / 1000.0, 3), "args": args})
    return out
