"""The answer of `mmprof diff`: which run is faster and why, per phase (docs/diff.md "The verdict").

For the compared phase, in this order and in the same units on both sides:

    faster      which side is faster and on what evidence: the plain timing (without the profiler) where both
                sides carry one that measures the same thing and is outside its run-to-run spread, else the
                profiled steps (median step time with its noise band); "within noise" when the band holds 0
    step        the median step time, the steps' p10-p90, the band
    plain       the plain figures side by side, and the profiler's cost per side (profiled / plain)
    GPU work    per step (mean over the steps, the slowest rank's window): busy time = kernel time - overlap
    host        per step: the time the GPU did not run (host work inside / between the steps, launch / queue)
    overlap     device time that ran beside other device work (a side stream), and in which regions
    regions     kernel time per step of the regions that moved most (matched by role across engines)
    missing     data one side lacks (op shapes -> no roofline; regions), each on its own line: a category that
                only one side can have is never read as a shift
    bottleneck  the dominant timeline category before and after ("still X" / "moved from X to Y")

"Why" is the part of the step that changed: the step's mean is its GPU busy time plus its idle time exactly, so the
larger of the two changes is the reason, and inside it the region, overlap or host category that moved most.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mmprof.analysis.timeline.breakdown import BUSY_CATEGORIES, CATEGORIES
from mmprof.analysis.timeline.phases import NO_PHASE
from mmprof.units import fmt_ns_pair

NOUNS = {"compute_bound": "compute", "memory_bound": "memory bandwidth", "unattributed": "unattributed compute",
         "communication": "communication", "memcpy": "memory copies", "idle_host": "launch/queue overhead",
         "idle_other": "idle time (sync / dependencies)", "idle_between": "the host between engine steps",
         "idle_prep": "host work inside the engine steps", "gpu_compute": "GPU compute"}
# what a move per step means, for the per-step verdict
MOVE_LABELS = {"compute_bound": "compute", "memory_bound": "memory", "unattributed": "unattributed compute",
               "communication": "communication", "memcpy": "copies", "idle_host": "launch/queue",
               "idle_other": "other idle", "idle_between": "host between steps", "idle_prep": "host inside the step"}
BUSY = BUSY_CATEGORIES
IDLE = ("idle_prep", "idle_between", "idle_host", "idle_other")
COMPUTE = ("compute_bound", "memory_bound", "unattributed")
COVERAGE_GAP = 0.10     # one side lacks shapes / regions for this much more of its time: its own line


@dataclass
class StepMove:
    """One category's time per step of the compared phase, before and after (ns per step, mean over the steps)."""

    category: str
    label: str
    before_ns: float
    after_ns: float

    @property
    def delta_ns(self) -> float:
        return self.after_ns - self.before_ns

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "delta_ns": self.delta_ns}


@dataclass
class StepMeans:
    """Per step of a phase, the mean over its steps of the slowest rank's window: span, categories, overlap."""

    steps: int
    span_ns: float
    cats: dict[str, float]
    overlap_ns: float

    @property
    def busy_ns(self) -> float:
        return sum(self.cats.get(c, 0.0) for c in BUSY)

    @property
    def idle_ns(self) -> float:
        return sum(self.cats.get(c, 0.0) for c in IDLE)

    @property
    def kernel_ns(self) -> float:
        """Summed device event time per step: busy plus what ran beside other work."""
        return self.busy_ns + self.overlap_ns

    @classmethod
    def of(cls, rows) -> "StepMeans | None":
        if rows is None or not len(rows):
            return None
        n = len(rows)
        cats = {c: float(rows[c].sum()) / n for c in CATEGORIES}
        ov = float(rows["overlap_ns"].sum()) / n if "overlap_ns" in rows else 0.0
        return cls(n, float(rows["span_ns"].sum()) / n, cats, ov)

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "span_ns": self.span_ns, "cats": self.cats, "overlap_ns": self.overlap_ns,
                "busy_ns": self.busy_ns, "idle_ns": self.idle_ns, "kernel_ns": self.kernel_ns}


@dataclass
class Answer:
    """The verdict of one phase: the faster side (None: within noise or not decidable), on what evidence, the
    one-line headline and the detailed lines (key, text) in the module docstring's order."""

    phase: str
    faster: str | None
    basis: str
    headline: str
    lines: list[tuple[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "faster": self.faster, "basis": self.basis, "headline": self.headline,
                "lines": [{"key": k, "text": t} for k, t in self.lines]}


def pair(b: float | None, a: float | None) -> str:
    x, y = fmt_ns_pair(b, a)
    return f"{x} -> {y}"


def _range(s) -> str:
    """'32.41-33.84 ms' (p10-p90 of a side's steps), or '2 steps' with too few for a spread."""
    if s.steps < 3:
        return f"{s.steps} step{'s' if s.steps != 1 else ''}"
    lo, hi = fmt_ns_pair(s.p10_ns, s.p90_ns)
    return f"{lo.rsplit(' ', 1)[0]}-{hi}"


def _rel(b: float | None, a: float | None) -> str:
    return f"{a / b - 1.0:+.1%}; " if b and a is not None else ""


def verdict_line(phase: str, cats: list, step, dom: tuple, moves: list[StepMove] | None = None,
                 engine: bool = False) -> str:
    """The bottleneck statement: the dominant category before and after ("still X" / "moved from X to Y"), every
    category that moved more than the ones it names named too; prefixed by the step change when `step` is given."""
    parts = []
    if step and step.before_ns and step.after_ns:
        what = "step" if phase in (NO_PHASE, "whole run") else f"{phase} {'engine ' if engine else ''}step"
        parts.append(f"{what} {pair(step.before_ns, step.after_ns)} ({step.change:+.1%})")
    if moves and step and step.before_ns:
        big = [m for m in sorted(moves, key=lambda m: -abs(m.delta_ns))
               if abs(m.delta_ns) >= 0.05 * max(step.before_ns, step.after_ns or 0)][:3]
        if big:
            parts.append("per step: " + ", ".join(f"{m.label} {pair(m.before_ns, m.after_ns)}" for m in big))
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
    floor = max(abs(by[n].delta_pp) for n in named)
    also = sorted((c for c in cats if c.category not in named and abs(c.delta_pp) > floor and abs(c.delta_pp) >= 1.0),
                  key=lambda c: -abs(c.delta_pp))
    if also:
        parts.append("also " + ", ".join(f"{c.label} {c.before_share:.1%} -> {c.after_share:.1%} ({c.delta_pp:+.0f} pp)"
                                         for c in also))
    return "; ".join(parts)


def merged_compute(cats: list) -> list:
    """The categories with compute-bound, memory-bound and unattributed compute summed into one "GPU compute": what
    the bottleneck statement compares when one side lacks the shapes a roofline needs."""
    comp = [c for c in cats if c.category in COMPUTE]
    if not comp:
        return cats
    first = comp[0]
    merged = type(first)("gpu_compute", "GPU compute (kernels)", sum(c.before_share for c in comp),
                         sum(c.after_share for c in comp), sum(c.before_ns for c in comp), sum(c.after_ns for c in comp))
    return [merged] + [c for c in cats if c.category not in COMPUTE]


def step_moves(mb: StepMeans | None, ma: StepMeans | None) -> list[StepMove]:
    """Time per step of each category, both sides (means over the steps; both sides need steps)."""
    if mb is None or ma is None:
        return []
    return [StepMove(c, MOVE_LABELS[c], mb.cats[c], ma.cats[c]) for c in CATEGORIES if mb.cats[c] or ma.cats[c]]


def roofline_lost(tb, ta) -> tuple[float, float] | None:
    """Whether one side lacks the op shapes (or FLOP model) the other has for the same work, so that its compute-
    and memory-bound shares cannot be compared: `tb` / `ta` per (role, family) the compute-kernel time (`comp`) and
    the part of it with no roofline (`unattr`). Per work matched on both sides, the time that is unattributed on
    one side but attributed on the other is "lost"; when it reaches COVERAGE_GAP of a side's compute time (or,
    when too little work matches, the unattributed shares differ by 3 x COVERAGE_GAP), returns both sides'
    unattributed shares; else None."""
    if tb is None or ta is None or not len(tb) or not len(ta):
        return None
    tot_b, tot_a = float(tb["comp"].sum()), float(ta["comp"].sum())
    if not tot_b or not tot_a:
        return None
    ub, ua = float(tb["unattr"].sum()) / tot_b, float(ta["unattr"].sum()) / tot_a
    j = tb.add_suffix("_b").join(ta.add_suffix("_a"), how="inner")
    j = j[(j["comp_b"] > 0) & (j["comp_a"] > 0)]
    fb, fa = j["unattr_b"] / j["comp_b"], j["unattr_a"] / j["comp_a"]
    lost_a = float(((fa - fb).clip(lower=0) * j["comp_a"]).sum()) / tot_a
    lost_b = float(((fb - fa).clip(lower=0) * j["comp_b"]).sum()) / tot_b
    matched = min(float(j["comp_b"].sum()) / tot_b, float(j["comp_a"].sum()) / tot_a)
    if max(lost_a, lost_b) >= COVERAGE_GAP or (matched < 0.5 and abs(ua - ub) >= 3 * COVERAGE_GAP):
        return ub, ua
    return None


def _count(n: tuple[float, float] | None) -> str:
    return f"{n[0]:,.0f} -> {n[1]:,.0f} device events per step" if n and (n[0] or n[1]) else ""


def _why(mb: StepMeans, ma: StepMeans, regions: list, overlap_roles: dict, host_caveat: dict[str, str],
         counts: tuple[float, float] | None = None) -> str:
    """The part of the step that changed (module docstring); the profiler's inflation of host time after a ' (('
    when host time is the reason."""
    d_busy, d_idle = ma.busy_ns - mb.busy_ns, ma.idle_ns - mb.idle_ns
    if abs(d_busy) >= abs(d_idle):
        why = f"GPU busy per step {pair(mb.busy_ns, ma.busy_ns)}"
        d_k, d_o = ma.kernel_ns - mb.kernel_ns, ma.overlap_ns - mb.overlap_ns
        if d_busy * d_k < 0 or (abs(d_o) > 0.5 * abs(d_busy) and d_o * d_busy < 0):
            why += (f" although kernel time went {pair(mb.kernel_ns, ma.kernel_ns)}: overlap across streams "
                    f"{pair(mb.overlap_ns, ma.overlap_ns)}")
            roles = sorted(overlap_roles.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0]))[:2]
            if roles:
                why += " (" + ", ".join(f"{r} {pair(x, y)}" for r, (x, y) in roles) + " beside other work)"
        else:
            top = [d for d in regions if d.before_ns or d.after_ns][:3]
            if top:
                why += ": " + ", ".join(f"{d.key} {pair(d.before_ns, d.after_ns)}" for d in top)
    else:
        why = f"GPU idle (host) time per step {pair(mb.idle_ns, ma.idle_ns)}"
        top = max(IDLE, key=lambda c: abs(ma.cats[c] - mb.cats[c]))
        why += f" ({MOVE_LABELS[top]} {pair(mb.cats[top], ma.cats[top])}), GPU busy {pair(mb.busy_ns, ma.busy_ns)}"
        if top == "idle_host" and counts and counts[0] and abs(counts[1] / counts[0] - 1) > 0.1:
            why += f", {_count(counts)} to launch"
        inflated = [f"{s}: {host_caveat[s]}" for s in ("before", "after") if host_caveat.get(s)]
        if inflated:
            why += f" ((host time inflated by the profiler: {'; '.join(inflated)})"
    return why


def answer(phase: str, sb, sa, band, plain, mb: StepMeans | None, ma: StepMeans | None, regions: list,
           overlap_roles: dict, bottleneck: str, missing: list[str], host_caveat: dict[str, str],
           engine: bool = False, counts: tuple[float, float] | None = None) -> Answer:
    """The verdict of one phase (module docstring). `sb` / `sa` StepStats, `band` a Band or None, `plain` a
    PlainChange or None, `regions` Deltas by role (largest change first), `overlap_roles` role -> (before, after)
    overlapped ns per step, `host_caveat` side -> why its host time is inflated."""
    what = f"{phase} {'engine ' if engine else ''}step" if phase not in (NO_PHASE, "whole run") else "step"
    lines: list[tuple[str, str]] = []
    change = (sa.median_ns / sb.median_ns - 1.0) if sb.median_ns and sa.median_ns else None
    p_faster = None
    if change is not None:
        p_faster = None if (band is not None and band.within) or change == 0 else ("after" if change < 0 else "before")
    step_txt = (f"{what} {pair(sb.median_ns, sa.median_ns)} ({change:+.1%})" if change is not None
                else f"{what}: no step time on both sides")
    if band is not None:
        noise = f"noise band {band.text()}" + (": within noise" if band.within else "")
    elif change is not None:
        noise = f"no noise band ({sb.steps} / {sa.steps} steps; give repeated runs: BEFORE... -- AFTER...)"
    else:
        noise = ""
    dist = ""
    if sb.steps >= 3 or sa.steps >= 3:
        dist = "; steps p10-p90 " + " -> ".join(_range(s) for s in (sb, sa))
    lines.append(("step", f"median {step_txt}" + (f"; {noise}" if noise else "") + dist))
    faster, basis = p_faster, "the profiled steps"
    if plain is not None and plain.text:
        lines.append(("plain", plain.text))
    if plain is not None and plain.faster:
        faster, basis = plain.faster, "the plain timing (without the profiler)"
    elif plain is not None and plain.within_noise and p_faster:
        basis = "the profiled steps; the plain timing is within its run-to-run spread"
    if faster is None:
        who = ("no measurable change: within noise" if band is not None and band.within
               else "no change" if change == 0 else "not decidable")
    else:
        who = f"{faster} is faster"
    lines.insert(0, ("faster", f"{who}, by {basis}"))
    if plain is not None and plain.faster and p_faster and plain.faster != p_faster:
        cost = [f"{s} {t.cost:.2f}x" for s, t in (("before", plain.before), ("after", plain.after)) if t and t.cost]
        lines.append(("disagree", f"the profiled steps say the opposite ({step_txt}): the profiler slowed the two "
                      "runs by different amounts" + (f" ({', '.join(cost)})" if cost else "")
                      + ", so the profiled step times are not comparable here"))
    why = ""
    if mb is not None and ma is not None:
        lines.append(("GPU work", f"busy {pair(mb.busy_ns, ma.busy_ns)} per step ({_rel(mb.busy_ns, ma.busy_ns)}mean "
                      f"of {mb.steps} / {ma.steps} steps) = kernel time {pair(mb.kernel_ns, ma.kernel_ns)} - overlap "
                      f"{pair(mb.overlap_ns, ma.overlap_ns)}" + (f"; {_count(counts)}" if _count(counts) else "")))
        lines.append(("host", f"GPU idle {pair(mb.idle_ns, ma.idle_ns)} per step: " + ", ".join(
            f"{MOVE_LABELS[c]} {pair(mb.cats[c], ma.cats[c])}" for c in IDLE if mb.cats[c] or ma.cats[c])))
        if mb.overlap_ns or ma.overlap_ns:
            roles = sorted(overlap_roles.items(), key=lambda kv: -max(kv[1]))[:3]
            lines.append(("overlap", f"device time run beside other device work {pair(mb.overlap_ns, ma.overlap_ns)} "
                          "per step" + (": " + ", ".join(f"{r} {pair(x, y)}" for r, (x, y) in roles) if roles else "")))
        if faster is not None:
            why = _why(mb, ma, regions, overlap_roles, host_caveat, counts)
            lines.append(("why", why.replace(" ((", " (")))
            why = why.split(" ((")[0]
    top = [d for d in regions if d.before_ns or d.after_ns][:5]
    if top:
        lines.append(("regions", "kernel time per step that moved most: " + ", ".join(
            f"{d.key} {pair(d.before_ns, d.after_ns)}" for d in top)))
    lines += [("missing", m) for m in missing]
    if bottleneck:
        lines.append(("bottleneck", bottleneck))
    head = f"{step_txt}: {who}"
    if plain is not None and plain.faster and plain.change is not None:
        head += f" (without the profiler: time {plain.change:+.1%})"
    if why:
        head += f"; why: {why}"
    if bottleneck:
        head += f"; {bottleneck}"
    return Answer(phase, faster, basis, head, lines)


def phase_line(phase: str, sb, sa, band, mb: StepMeans | None, ma: StepMeans | None, engine: bool = False) -> str:
    """One line for a phase other than the compared one: the step change, its noise and the GPU / host split."""
    what = f"{phase} {'engine ' if engine else ''}step"
    if not sb.median_ns or not sa.median_ns:
        return f"{what}: no step time on both sides"
    ch = sa.median_ns / sb.median_ns - 1.0
    txt = f"{what} {pair(sb.median_ns, sa.median_ns)} ({ch:+.1%}"
    txt += (f"; noise band {band.text()}" + (": within noise" if band.within else "") if band is not None
            else f"; {sb.steps} / {sa.steps} steps, no noise band") + ")"
    if mb is not None and ma is not None:
        txt += f"; GPU busy {pair(mb.busy_ns, ma.busy_ns)}, GPU idle {pair(mb.idle_ns, ma.idle_ns)} per step"
    return txt
