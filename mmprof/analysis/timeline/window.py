"""The parts of a profile window: the engine's start-up, its graph capture, and the serving that follows.

A trace recorded around a whole serving-engine run (`mmprof record -- vllm ...`, or any profiler started before the
engine) holds more than serving: the engine's start-up (weights loaded or, with dummy weights, filled by random
kernels; vLLM's `profile_run` dummy forward; torch.compile and Inductor's autotuning) and its CUDA-graph capture
(vLLM's `GPUModelRunner.capture_model`: for every captured batch size a warm-up forward and the capture itself,
vllm/v1/worker/gpu_model_runner.py). Read as one serving step, that window says "launch-bound: the GPU idles 99%"
(start-up is mostly host time) and counts the warm-up forwards' GEMMs as serving ones.

`window_parts(profile)` tells the parts apart per rank from what the trace holds:

- a rank with graph captures (`*StreamBeginCapture` ... `*StreamEndCapture` runtime calls): start-up is everything
  launched before the first capture began (or before the annotation that encloses it and marks no phase or step:
  a capture's own range, with the warm-up step it runs first), the capture part runs from there to the end of the
  last capture (the warm-up forwards between the captures included), serving is what was launched after it;
- a rank with no capture: everything is serving (vLLM's own profiler starts after start-up; an eager engine's
  start-up forwards look like serving ones and nothing in the trace tells them apart: the note says so when the
  profile was recorded from the process start);
- a rank with engine steps (`execute_context_*`, ...) and captures: serving also starts no later than its first
  engine step; and an event with a phase or a step (an engine step's, `mmprof.step.N`) is serving wherever it ran:
  mmprof's own runtime runs its prefill step before it captures the decode graph (`mmprof.graph.capture`, in no
  phase: the capture part).

An event belongs to the part its launch call (its graph launch for a replay; its own start when no launch is
known) fell in. `serving(ev)` is the event frame restricted to serving, which the report and the checks read
(they say so in a note when something was left out).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from mmprof.analysis.attribution.roofline import Roofline
from mmprof.analysis.timeline.engine_steps import engine_steps
from mmprof.labels import is_marker, phase_of, step_of
from mmprof.units import fmt_ns

EventFrame = Any  # mmprof.analysis.timeline.events.EventFrame (which reads window_parts: no import back)

SERVING, STARTUP, CAPTURE = 0, 1, 2
PART_NAMES = {SERVING: "serving", STARTUP: "start-up", CAPTURE: "graph capture"}
_BEGIN = re.compile(r"streambegincapture", re.IGNORECASE)
_END = re.compile(r"streamendcapture", re.IGNORECASE)


@dataclass
class WindowParts:
    """Per rank: where the capture part begins and where serving begins (ns, CPU launch time); ranks not listed
    are serving throughout."""

    capture_from: dict[int, int] = field(default_factory=dict)
    serving_from: dict[int, int] = field(default_factory=dict)
    captures: dict[int, int] = field(default_factory=dict)   # rank -> graph captures seen

    def __bool__(self) -> bool:
        return bool(self.serving_from)

    def part(self, ev: EventFrame) -> np.ndarray:
        """int8 per event: SERVING, STARTUP or CAPTURE."""
        if not self.serving_from or not len(ev):
            return np.zeros(len(ev), dtype=np.int8)
        return self.part_at(ev.rank, _launch_time(ev), (ev.phase >= 0) | (ev.step >= 0))

    def part_at(self, rank: np.ndarray, t: np.ndarray, marked: np.ndarray | None = None) -> np.ndarray:
        """int8 per (rank, launch time): SERVING, STARTUP or CAPTURE; events `marked` with a phase or a step are
        serving wherever they ran (mmprof's runtime runs its prefill before it captures the decode graph)."""
        out = np.zeros(len(t), dtype=np.int8)
        for r, s in self.serving_from.items():
            on = rank == r
            c = self.capture_from.get(r, s)
            out[on & (t < s)] = CAPTURE
            out[on & (t < c)] = STARTUP
        if marked is not None:
            out[marked] = SERVING
        return out

    def note(self, ev: EventFrame, what: str = "the report and the checks look") -> str | None:
        """What was left out, in one sentence (None when the window is all serving)."""
        if not self:
            return None
        part = ev.memo("window_part", lambda: self.part(ev))
        if not (part != SERVING).any():
            return None
        bits = []
        for p in (STARTUP, CAPTURE):
            m = part == p
            if m.any():
                extra = f", {sum(self.captures.values())} graph captures" if p == CAPTURE and self.captures else ""
                bits.append(f"{PART_NAMES[p]} ({int(m.sum())} device events, {fmt_ns(int(ev.dur[m].sum()))} of "
                            f"device time{extra})")
        keep = int((part == SERVING).sum())
        return (f"the window holds the engine's {' and '.join(bits)}: {what} at the serving part only "
                f"({keep} device events, launched after the last graph capture)")


def _launch_time(ev: EventFrame) -> np.ndarray:
    """Per event: its launch call's start (a replayed kernel: its graph launch's), else its own start."""
    t = ev.launch_start.astype(np.int64).copy()
    if ev.profile is not None and (ev.graph >= 0).any():
        L = ev.profile.tables["launches"]
        g = ev.graph >= 0
        t[g] = L["start_ns"][ev.graph[g]]
    miss = t < 0
    t[miss] = ev.start[miss]
    return t


def window_parts(profile: Any) -> WindowParts:
    """The start-up / graph capture / serving parts of each rank (module docstring). Kept in `profile.derived`
    (stamped by the launches' and scopes' sizes)."""
    stamp = (profile.n("launches"), profile.n("scopes"), len(profile.strings))
    hit = profile.derived.get("window_parts", (), stamp)
    if hit is not None:
        return hit
    out = WindowParts()
    if profile.n("launches"):
        L = profile.tables["launches"]
        uniq, inv = np.unique(L["name"], return_inverse=True)
        names = [profile.string(int(u)) or "" for u in uniq.tolist()]
        begin = np.array([bool(_BEGIN.search(n)) for n in names], dtype=bool)[inv.reshape(-1)]
        end = np.array([bool(_END.search(n)) for n in names], dtype=bool)[inv.reshape(-1)]
        es = engine_steps(profile) if begin.any() else None
        for r in np.unique(L["rank"][begin]).tolist():
            on = L["rank"] == r
            b = np.flatnonzero(on & begin)
            e = np.flatnonzero(on & end)
            if not len(e):
                continue
            first = int(L["start_ns"][b].min())
            first = _enclosing_start(profile, int(r), int(L["tid"][b[np.argmin(L["start_ns"][b])]]), first)
            last = int((L["start_ns"][e] + np.maximum(L["dur_ns"][e], 0)).max())
            if es is not None and len(es):
                mine = es[es["rank"] == r]
                if len(mine):
                    last = min(last, int(mine["cpu_start_ns"].min()))
            out.capture_from[int(r)] = min(first, last)
            out.serving_from[int(r)] = last
            out.captures[int(r)] = len(b)
    profile.derived.put("window_parts", (), stamp, out)
    return out


def _enclosing_start(profile: Any, rank: int, tid: int, t: int) -> int:
    """The start of the outermost annotation of that thread around time t that marks no phase or step (a capture's
    own range, with the warm-up step it runs first: mmprof's `mmprof.graph.capture`), else t."""
    if not profile.n("scopes"):
        return t
    S = profile.tables["scopes"]
    on = np.flatnonzero((S["rank"] == rank) & (S["tid"] == tid) & (S["depth"] == 0) & (S["start_ns"] <= t)
                        & (S["start_ns"] + S["dur_ns"] >= t))
    for i in on.tolist():
        name = profile.string(int(S["name"][i])) or ""
        if phase_of(name) is None and step_of(name) < 0 and not is_marker(name):
            return min(t, int(S["start_ns"][i]))
    return t


def subset(ev: EventFrame, mask: np.ndarray) -> EventFrame:
    """The event frame of the events where `mask` is set (every per-event array sliced; the rest shared)."""
    n = len(ev)
    kw: dict[str, Any] = {}
    for f in fields(ev):
        if f.name in ("profile", "notes", "warnings", "graph_align", "inductor", "source"):
            continue
        if f.name in ("_frame", "_memo"):
            kw[f.name] = None if f.name == "_frame" else {}
            continue
        v = getattr(ev, f.name)
        if f.name == "roof":
            kw["roof"] = replace(v, **{g.name: getattr(v, g.name)[mask] for g in fields(Roofline)
                                      if isinstance(getattr(v, g.name), np.ndarray) and len(getattr(v, g.name)) == n})
        elif hasattr(v, "__len__") and len(v) == n:
            kw[f.name] = v[mask]
    return replace(ev, **kw, notes=list(ev.notes), warnings=list(ev.warnings))


def serving(profile: Any, ev: EventFrame) -> tuple[EventFrame, str | None]:
    """(the frame restricted to the serving part, the note saying what was left out or None)."""
    parts = window_parts(profile)
    if not parts:
        return ev, None
    part = ev.memo("window_part", lambda: parts.part(ev))
    if not (part != SERVING).any():
        return ev, None
    return ev.memo("serving_frame", lambda: subset(ev, part == SERVING)), parts.note(ev)
