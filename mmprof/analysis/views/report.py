"""`mmprof report`: the bottleneck breakdown of one profile, per phase and rank, plus the built-in checks.

Per phase (prefill, decode; "all" when the profile has no phases), for all ranks together and for each rank:
the timeline category breakdown, the step time, the top kernels with their bound and efficiency, the launch
analysis, and a one-line bottleneck statement such as
"decode is memory-bound: 61% of the wall time in memory-bound kernels at 48% of peak bandwidth".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.checks.verify import verify
from mmprof.analysis.compare.comparability import CLEANER, trace_caveats
from mmprof.analysis.compare.runfacts import profiler_settings
from mmprof.analysis.timeline.engine_steps import describe, engine_steps
from mmprof.analysis.timeline.columns import CAT_COMM, CAT_MEMCPY
from mmprof.analysis.timeline.events import EventFrame, events_of
from mmprof.analysis.views.graph_summary import GraphSummary, graph_summary
from mmprof.analysis.timeline.launch_queue import LAUNCH_BOUND_SHARE, LaunchStats, launch_analysis
from mmprof.analysis.ranks.imbalance import rank_analysis
from mmprof.analysis.attribution.roofline import BOUND_COMPUTE, BOUND_MEMORY, BoundSummary, summarise_bounds
from mmprof.analysis.timeline.breakdown import Breakdown, StepStats, timeline
from mmprof.analysis.timeline.phases import NO_PHASE, phase_labels
from mmprof.analysis.timeline.window import serving
from mmprof.errors import MmprofError, NoEvidence
from mmprof.names import display_name
from mmprof.units import fmt_ns

TOP_KERNELS = 10


@dataclass
class KernelRow:
    name: str
    family: str
    variant: str
    count: int
    time_ns: int
    share: float                  # of the phase's summed event time
    bound: str                    # compute, memory, communication, memcpy, unknown
    efficiency: float | None      # of the bounding peak, time-weighted
    tflops: float | None          # achieved TFLOP/s
    tbs: float | None             # achieved TB/s
    intensity: float | None = None  # FLOP per byte of the ops' shapes
    display_name: str = ""          # mmprof.names.display_name: derived on load, never stored

    def __post_init__(self) -> None:
        self.display_name = self.display_name or display_name(self.name)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class PhaseReport:
    phase: str
    rank: int | None              # None: all ranks together
    breakdown: Breakdown
    step: StepStats
    bounds: BoundSummary
    bottleneck: str
    top_kernels: list[KernelRow]
    launch: LaunchStats | None
    engine_steps: dict[str, Any] | None = None  # per engine step of the phase: median and p90 of each part (ns)

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "rank": self.rank, "breakdown": self.breakdown.to_dict(),
                "step": self.step.to_dict(), "bounds": self.bounds.to_dict(), "bottleneck": self.bottleneck,
                "top_kernels": [k.to_dict() for k in self.top_kernels],
                "launch": self.launch.to_dict() if self.launch else None, "engine_steps": self.engine_steps}


STEP_PARTS = {"period": None, "GPU busy": ("compute_bound", "memory_bound", "unattributed", "communication", "memcpy"),
              "idle in the step (launch/queue, sync)": ("idle_host", "idle_other"), "host inside the step": ("idle_prep",),
              "host between steps": ("idle_between",)}


def engine_step_parts(tl, phase: str, rank: int | None = None) -> dict[str, Any] | None:
    """Per engine step of a phase (rank: that rank's; else the slowest rank's step), its period split into GPU busy,
    launch / queue (and other idle), host inside and host between: the median and p90 over the steps, in ns, and
    the steps' count. The parts of one step add up to its period. None when the phase has no engine steps."""
    if not tl.engine:
        return None
    w = tl.windows[(tl.windows["phase"] == phase) & (tl.windows["step"] >= 0)]
    if rank is not None:
        w = w[w["rank"] == rank]
    if w.empty or not (w["idle_between"].sum() + w["idle_prep"].sum()):
        return None
    w = w.loc[w.groupby("step")["span_ns"].idxmax()]  # per step the slowest rank
    out: dict[str, Any] = {"steps": int(len(w))}
    for part, cats in STEP_PARTS.items():
        v = w["span_ns"] if cats is None else w[list(cats)].sum(axis=1)
        out[part] = {"median_ns": float(np.median(v)), "p90_ns": float(np.percentile(v, 90))}
    return out


@dataclass
class Report:
    source: str
    devices: dict[int, str | None]     # rank -> peak table entry used (None: no roofline)
    phases: list[PhaseReport]          # all ranks together
    per_rank: list[PhaseReport]
    checks: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    graphs: GraphSummary | None = None
    ranks: Any = None                  # RanksResult on a multi-rank profile (`mmprof ranks`), else None
    engine: dict[str, str] = field(default_factory=dict)  # phase -> its engine steps, in words (serving traces)
    log: Any = None                    # mmprof.analysis.logs.join.LogReport: the engine log's facts (None: no log)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "devices": self.devices, "phases": [p.to_dict() for p in self.phases],
                "per_rank": [p.to_dict() for p in self.per_rank], "checks": self.checks, "notes": self.notes,
                "warnings": self.warnings, "graphs": self.graphs.to_dict() if self.graphs else None,
                "ranks": self.ranks.summary() if self.ranks else None, "engine_steps": self.engine,
                "log": self.log.to_dict() if self.log is not None else None}


def engine_statement(phase: str, br: Breakdown, steps: int = 0, graph_share: float | None = None,
                     launches: float | None = None) -> str | None:
    """The bottleneck of a serving engine's phase (engine steps: the windows have idle_between / idle_prep), or
    None when the phase has no engine-step time. Host time (between the steps and inside them before the launches)
    is named as host time, never as launch-bound: the launch / queue share is said beside it."""
    between, prep = br.time_ns.get("idle_between", 0), br.time_ns.get("idle_prep", 0)
    if not br.span_ns or between + prep == 0:
        return None
    host = between + prep
    busy = sum(br.time_ns.get(c, 0) for c in ("compute_bound", "memory_bound", "unattributed", "communication",
                                               "memcpy"))
    n = max(steps, 1)
    per = (f"; per step on average {fmt_ns(br.span_ns / n)}: GPU busy {fmt_ns(busy / n)}, launch/queue "
           f"{fmt_ns(br.time_ns.get('idle_host', 0) / n)}, host {fmt_ns(host / n)}") if steps else ""
    graphs = f"; CUDA/HIP graphs replay {graph_share:.0%} of the kernel time" if graph_share else ""
    ph = "the run" if phase == NO_PHASE else phase
    rest = {c: v for c, v in br.time_ns.items() if c not in ("idle_between", "idle_prep")}
    if host >= max(rest.values(), default=0):
        lq = br.share("idle_host")
        inside = (f"input preparation and the Python between its {launches:.0f} launches" if launches
                  else "input preparation, Python before the launches")
        lb = f"not launch-bound (launch/queue {lq:.0%})" if lq < LAUNCH_BOUND_SHARE else f"launch/queue {lq:.0%}"
        return (f"{ph} is host-bound: the GPU waits for the host {host / br.span_ns:.0%} of each engine step, "
                f"{br.share('idle_prep'):.0%} inside the step ({inside}) and "
                f"{br.share('idle_between'):.0%} between the steps (scheduler, sampler, the engine's Python); "
                f"{lb}{per}{graphs}")
    return None


def bottleneck_statement(phase: str, br: Breakdown, bounds: BoundSummary, source: str = "kernels",
                         steps: int = 0, graph_share: float | None = None, launches: float | None = None) -> str:
    """One line naming the dominant category of a phase, with the efficiency of the bound where known."""
    eng = engine_statement(phase, br, steps, graph_share, launches) if source == "kernels" else None
    if eng is not None:
        return eng
    host = br.time_ns.get("idle_between", 0) + br.time_ns.get("idle_prep", 0)
    tail = (f" (engine steps: the GPU waits for the host {host / br.span_ns:.0%} of each step)"
            if host and br.span_ns else "")
    return _dominant_statement(phase, br, bounds, source) + tail


def _dominant_statement(phase: str, br: Breakdown, bounds: BoundSummary, source: str = "kernels") -> str:
    dom = br.dominant
    phase = "the run" if phase == NO_PHASE else phase
    if dom is None:
        return f"{phase}: no wall time"
    s = br.share(dom)
    dev = "GPU" if source == "kernels" else "CPU"
    if dom == "compute_bound":
        eff = f" at {bounds.compute_eff:.0%} of peak FLOP/s" if bounds.compute_eff is not None else ""
        return f"{phase} is compute-bound: {s:.0%} of the wall time in compute-bound kernels{eff}"
    if dom == "memory_bound":
        eff = f" at {bounds.memory_eff:.0%} of peak bandwidth" if bounds.memory_eff is not None else ""
        return f"{phase} is memory-bound: {s:.0%} of the wall time in memory-bound kernels{eff}"
    if dom == "communication":
        ov = br.comm_overlapped_ns / br.comm_total_ns if br.comm_total_ns else 0.0
        return (f"{phase} is communication-bound: {s:.0%} of the wall time in exposed communication "
                f"({ov:.0%} of all communication overlapped with compute)")
    if dom == "memcpy":
        return f"{phase} is copy-bound: {s:.0%} of the wall time in memory copies"
    if dom == "idle_host":
        if source != "kernels":
            return f"{phase} is host-overhead-bound: {s:.0%} of the wall time between ops (Python / framework)"
        return f"{phase} is launch-bound: the {dev} idles {s:.0%} of the wall time waiting for kernel launches"
    if dom == "idle_other":
        return (f"{phase} is idle-bound: the {dev} idles {s:.0%} of the wall time with work already launched "
                "(synchronisation or dependencies)")
    return (f"{phase}: {s:.0%} of the wall time is in work with no roofline (no shapes or no device peak), "
            "so no bound can be named")


def _top_kernels(profile, ev: EventFrame, m: np.ndarray, n: int = TOP_KERNELS) -> list[KernelRow]:
    idx = np.flatnonzero(m)
    if not len(idx):
        return []
    roof = ev.roof
    dur = ev.dur[idx].astype(np.float64)
    b = roof.bound[idx]
    cat = ev.cat[idx]
    e = roof.efficiency[idx]
    eff = np.nan_to_num(e) * dur
    df = pd.DataFrame({"name": ev.name[idx], "dur": dur, "fl": np.nan_to_num(roof.flops[idx]),
                       "by": np.nan_to_num(roof.bytes[idx]), "c": (b == BOUND_COMPUTE) * dur,
                       "mem": (b == BOUND_MEMORY) * dur, "comm": (cat == CAT_COMM) * dur,
                       "cp": (cat == CAT_MEMCPY) * dur, "eff": eff, "has": (b >= 0) * dur,
                       "has_eff": np.isfinite(e) * dur, "has_fl": np.isfinite(roof.flops[idx]) * dur,
                       "has_by": np.isfinite(roof.bytes[idx]) * dur, "i": idx})
    g = df.groupby("name").agg(dur=("dur", "sum"), n=("dur", "size"), fl=("fl", "sum"), by=("by", "sum"),
                               c=("c", "sum"), mem=("mem", "sum"), comm=("comm", "sum"), cp=("cp", "sum"),
                               eff=("eff", "sum"), has=("has", "sum"), has_eff=("has_eff", "sum"),
                               has_fl=("has_fl", "sum"), has_by=("has_by", "sum"), i=("i", "first"))
    total = float(dur.sum())
    out = []
    for name, r in g.sort_values("dur", ascending=False).head(n).iterrows():
        shares = {"compute": r["c"], "memory": r["mem"], "communication": r["comm"], "memcpy": r["cp"]}
        bound = max(shares, key=shares.get) if max(shares.values()) > 0 else "unknown"
        secs = r["dur"] * 1e-9
        # a bound may come without a FLOP count (Inductor's kernels: memory-bound by kind) or bytes: say "-", not 0
        fl_ok, by_ok = r["has"] > 0 and r["has_fl"] > 0, r["has"] > 0 and r["has_by"] > 0
        out.append(KernelRow(profile.string(int(name)) or "?", str(ev.family[int(r["i"])]),
                             str(ev.variant[int(r["i"])]), int(r["n"]), int(r["dur"]),
                             float(r["dur"] / total) if total else 0.0, bound,
                             float(r["eff"] / r["has_eff"]) if r["has_eff"] > 0 else None,
                             float(r["fl"] / secs / 1e12) if fl_ok and secs else None,
                             float(r["by"] / secs / 1e12) if by_ok and secs else None,
                             float(r["fl"] / r["by"]) if fl_ok and by_ok and r["by"] > 0 else None))
    return out


def _checks(profile, shape_regions=None) -> tuple[dict[str, Any], Any]:
    """The built-in fast-path checks (`mmprof.analysis.checks.verify` with the default spec), summarised, and the
    engine log's facts with their kernels (the verification reads them; None without a log).

    A check with nothing to judge stays "no evidence".
    """
    try:
        res = verify(profile, shape_regions=shape_regions)
    except MmprofError as e:
        return {"available": True, "summary": f"checks: could not run ({e})"}, None
    counts = res.counts()
    failing = [f"{r.code} {r.message}" for r in res.results if r.status == "fail"]
    summary = (f"checks ({res.spec_id}): {counts['pass']} pass, {counts['fail']} fail, "
               f"{counts['no_evidence']} no evidence")
    if failing:
        summary += "; failing: " + "; ".join(failing[:3]) + (" ..." if len(failing) > 3 else "")
    return ({"available": True, "summary": summary, "status": res.status, "counts": counts,
             "results": [{"code": r.code, "status": r.status, "message": r.message} for r in res.results]}, res.log)


def build_report(profile, phase: str | None = None, rank: int | None = None, top: int = TOP_KERNELS,
                 shape_regions=None) -> Report:
    """The report of one Profile; `phase`/`rank` restrict it; `shape_regions` label ops from a model config."""
    # a window recorded from the engine's start reads as serving only from its last graph capture on
    ev, part_note = serving(profile, events_of(profile, shape_regions=shape_regions))
    tl = timeline(profile, ev)
    la = launch_analysis(profile, ev, tl)
    phases = tl.phases if phase is None else [phase]
    if phase is not None and phase not in tl.phases:
        raise NoEvidence(f"the profile has no {phase!r} phase (it has: {', '.join(tl.phases)})")
    ranks = tl.ranks if rank is None else [rank]
    if rank is not None and rank not in tl.ranks:
        raise NoEvidence(f"the profile has no events on rank {rank} (ranks: {tl.ranks})")
    lab = phase_labels(profile, ev.phase)

    def one(ph: str, r: int | None) -> PhaseReport:
        m = lab == ph
        if r is not None:
            m = m & (ev.rank == r)
        br = tl.breakdown(ph, r)
        bounds = summarise_bounds(ev.roof, ev.dur, ev.rank, m)
        ls = la.phase(ph) if r is None else launch_analysis(profile, ev, tl, rank=r).phase(ph)
        st = tl.step_stats(ph, r)
        kern = m & (ev.table == 0)
        kt = float(ev.dur[kern].sum())
        gshare = float(ev.dur[kern & (ev.graph >= 0)].sum()) / kt if kt else None
        return PhaseReport(ph, r, br, st, bounds,
                           bottleneck_statement(ph, br, bounds, ev.source, st.steps if tl.engine else 0, gshare,
                                                ls.launches_per_step if ls else None),
                           _top_kernels(profile, ev, m, top), ls, engine_step_parts(tl, ph, r))

    agg = [one(ph, rank) for ph in phases]
    per_rank = [one(ph, r) for ph in phases for r in ranks] if len(ranks) > 1 else []
    devices = {r: (p.name if p else None) for r, p in (ev.roof.peaks.items() if ev.roof else [])}
    across = rank_analysis(profile, ev, phase=phase) if rank is None and len(tl.ranks) > 1 else None
    es = engine_steps(profile) if tl.engine else None
    engine = {ph: describe(es[es["rank"] == (rank if rank is not None else es["rank"].min())], ph)
              for ph in phases} if es is not None and len(es) else {}
    notes = ([part_note] if part_note else []) + list(tl.notes)
    # the profiler's own cost on what this report calls host time (docs/glossary.md "host time")
    caveats = trace_caveats(profiler_settings(profile, ev))
    caveats += [CLEANER] if caveats else []
    checks, log = _checks(profile, shape_regions)
    return Report(ev.source, devices, agg, per_rank, checks, notes,
                  list(dict.fromkeys(tl.warnings + la.warnings + caveats)), graph_summary(profile, ev, rank), across,
                  engine={k: v for k, v in engine.items() if v != "no engine steps"}, log=log)
