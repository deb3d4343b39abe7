"""The verdict of `mmprof diff` (`mmprof.analysis.compare.diff`): one line saying how the step time changed, what moved per
step, and where the bottleneck went, naming every category that moved more than the ones it names.

On two serving engines' traces the compared phase is made of engine steps (`mmprof.analysis.timeline.engine_steps`) and
`step_moves` gives the time per step of every timeline category, before and after (host inside / between the steps
included), so the verdict says what moved per decode step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmprof.analysis.timeline.breakdown import CATEGORIES
from mmprof.analysis.timeline.phases import NO_PHASE
from mmprof.units import fmt_ns

NOUNS = {"compute_bound": "compute", "memory_bound": "memory bandwidth", "unattributed": "unattributed compute",
         "communication": "communication", "memcpy": "memory copies", "idle_host": "launch/queue overhead",
         "idle_other": "idle time (sync / dependencies)", "idle_between": "the host between engine steps",
         "idle_prep": "host work inside the engine steps"}
# what a move per step means, for the per-step verdict
MOVE_LABELS = {"compute_bound": "compute", "memory_bound": "memory", "unattributed": "unattributed compute",
               "communication": "communication", "memcpy": "copies", "idle_host": "launch/queue",
               "idle_other": "other idle", "idle_between": "host between steps", "idle_prep": "host inside the step"}

@dataclass
class StepMove:
    """One category's time per step of the compared phase, before and after (ns per step)."""

    category: str
    label: str
    before_ns: float
    after_ns: float

    @property
    def delta_ns(self) -> float:
        return self.after_ns - self.before_ns

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "delta_ns": self.delta_ns}


def verdict_line(phase: str, cats: list[CategoryChange], step: StepChange | None, dom: tuple,
             moves: list[StepMove] | None = None, engine: bool = False) -> str:
    parts = []
    if step and step.before_ns and step.after_ns:
        what = "step" if phase in (NO_PHASE, "whole run") else f"{phase} {'engine ' if engine else ''}step"
        parts.append(f"{what} {fmt_ns(step.before_ns)} -> {fmt_ns(step.after_ns)} ({step.change:+.1%})")
    if moves and step and step.before_ns:
        big = [m for m in sorted(moves, key=lambda m: -abs(m.delta_ns))
               if abs(m.delta_ns) >= 0.05 * max(step.before_ns, step.after_ns or 0)][:3]
        if big:
            parts.append("per step: " + ", ".join(f"{m.label} {fmt_ns(m.before_ns)} -> {fmt_ns(m.after_ns)}"
                                                  for m in big))
    by = {c.category: c for c in cats}
    b, a = dom
    if b is None or a is None:
        parts.append("no wall time to compare")
        return "; ".join(parts)
    if b != a:
        cb, ca = by[b], by[a]
        parts.append(f"{cb.label} {cb.before_share:.0%} -> {cb.after_share:.0%}, {ca.label} {ca.before_share:.0%} -> "
                     f"{ca.after_share:.0%}: the bottleneck moved from {NOUNS[b]} to {NOUNS[a]}")
        named = (b, a)
    else:
        c = by[a]
        parts.append(f"the bottleneck is still {NOUNS[a]}: {c.label} {c.before_share:.0%} -> {c.after_share:.0%} "
                     f"({c.delta_pp:+.0f} pp)")
        named = (a,)
    # every category that moved more than the ones named is named too (a verdict never hides the bigger change)
    floor = max(abs(by[n].delta_pp) for n in named)
    also = sorted((c for c in cats if c.category not in named and abs(c.delta_pp) > floor and abs(c.delta_pp) >= 1.0),
                  key=lambda c: -abs(c.delta_pp))
    if also:
        parts.append("also " + ", ".join(f"{c.label} {c.before_share:.1%} -> {c.after_share:.1%} ({c.delta_pp:+.0f} pp)"
                                         for c in also))
    return "; ".join(parts)


def step_moves(bb, ba, steps_b: int, steps_a: int) -> list[StepMove]:
    """Time per step of each category, both sides (both sides need steps)."""
    if steps_b <= 0 or steps_a <= 0:
        return []
    return [StepMove(c, MOVE_LABELS[c], bb.time_ns[c] / steps_b, ba.time_ns[c] / steps_a) for c in CATEGORIES
            if bb.time_ns[c] or ba.time_ns[c]]
