"""`mmprof history`: step time, top regions and dispatched variants of every run in a store, in date order, and a
CI gate on the newest run against the one before it in its series.

A series is the runs of one (model, engine, TP, batch): only those are compared. The gate fails (exit 1) when
- the dominant kernel variant of a watched region changed ("the routed-experts variant changed: grouped_gemm /
  grouped_mm (CUTLASS) -> gemm / nvjet_tst_64x8 (cuBLAS)") to one that did not run there before (under MIN_SHARE
  of the region's time), or away from one that no longer runs there; two variants that both ran and traded
  places are not a dispatch change, or
- a phase's step time grew by more than the threshold AND beyond the noise: the noise band is the sum of both
  runs' interquartile spreads of their step times ((q75 - q25) / median), so a change the steps' own scatter
  explains never fails the gate ("decode step +7.1% beyond noise (band 2.3%, threshold 5%)").
A phase with fewer than MIN_STEPS steps in either run is not judged (a note says so: one step has no spread).
Without an earlier run in the series, or without step times to compare, the gate has no evidence: exit 2.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from mmprof.errors import BadInput, NoEvidence
from mmprof.store.query import STEP_TIMES, VARIANT_CHANGES, connect, run_sql

# regions whose dominant variant the gate watches, with the name a finding uses
WATCHED = {"layers.*.moe.routed": "routed-experts", "layers.*.moe.shared": "shared-expert",
           "layers.*.attn.core": "attention-core", "layers.*.attn.indexer": "indexer",
           "layers.*.moe.router": "router"}
SERIES = ("model", "engine", "tp", "batch")
# a variant "ran" in a region when it took at least this share of the region's time: a change of the dominant
# variant between two that both ran (two kernels of similar time trading places) is not a dispatch change
MIN_SHARE = 0.10
# a phase's step time is judged only with at least this many steps in both runs (fewer give no spread to tell noise)
MIN_STEPS = 3


@dataclass
class RunPoint:
    run: str
    date: str
    model: str | None
    engine: str | None
    tp: int | None
    batch: int | None
    git_rev: str | None
    label: str | None
    steps: dict[str, dict[str, float]] = field(default_factory=dict)   # phase -> steps, median_ns, q25_ns, q75_ns
    regions: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # phase -> [(pattern, share)]
    variants: dict[str, dict[str, str]] = field(default_factory=dict)  # phase -> pattern -> dominant variant
    ran: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # phase -> pattern -> variants >= MIN_SHARE

    @property
    def series(self) -> tuple:
        return (self.model, self.engine, self.tp, self.batch)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Finding:
    kind: str       # variant | step
    phase: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class History:
    store: str
    phase: str | None
    runs: list[RunPoint]
    checked: bool = False
    baseline: str | None = None
    candidate: str | None = None
    findings: list[Finding] = field(default_factory=list)
    threshold: float = 0.05
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if self.findings else 0

    def to_dict(self) -> dict[str, Any]:
        return {"store": self.store, "phase": self.phase, "runs": [r.to_dict() for r in self.runs],
                "checked": self.checked, "baseline": self.baseline, "candidate": self.candidate,
                "threshold": self.threshold, "findings": [f.to_dict() for f in self.findings],
                "exit_code": self.exit_code, "notes": self.notes}


def _where(filters: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    parts, params = [], {}
    for k, v in filters.items():
        if v is not None:
            parts.append(f"{k} = ${k}")
            params[k] = v
    return (" WHERE " + " AND ".join(parts)) if parts else "", params


def load_history(store: str | os.PathLike, phase: str | None = None, last: int | None = None,
                 filters: dict[str, Any] | None = None, top: int = 3) -> History:
    """The runs (oldest first; the newest `last` of them) with their step times, top regions and variants."""
    con = connect(store)
    try:
        where, params = _where(filters or {})
        runs = run_sql(con, "SELECT run, CAST(date AS VARCHAR), model, engine, tp, batch, git_rev, label FROM runs"
                       f"{where} ORDER BY date, run", params).rows
        if last:
            runs = runs[-last:]
        points = {r[0]: RunPoint(*r) for r in runs}
        if not points:
            raise NoEvidence(f"{store}: no run matches the filters" if where else f"{store}: the store holds no runs")
        ids = list(points)
        con.execute("CREATE TEMP TABLE chosen AS SELECT unnest($ids) AS run", {"ids": ids})
        for run, ph, n, med, q25, q75 in run_sql(
                con, f"SELECT * FROM ({STEP_TIMES}) WHERE run IN (SELECT run FROM chosen)").rows:
            if phase is None or ph == phase:
                points[run].steps[ph] = {"steps": int(n), "median_ns": float(med), "q25_ns": float(q25),
                                         "q75_ns": float(q75)}
        regions = run_sql(con, """
            WITH g AS (SELECT run, phase, regexp_replace(region, '^layers\\.[0-9]+\\.', 'layers.*.') AS pattern,
                              sum(time_ns) AS t FROM regions WHERE region IS NOT NULL
                              AND run IN (SELECT run FROM chosen) GROUP BY ALL),
                 s AS (SELECT *, t / sum(t) OVER (PARTITION BY run, phase) AS share,
                              row_number() OVER (PARTITION BY run, phase ORDER BY t DESC, pattern) AS k FROM g)
            SELECT run, phase, pattern, share FROM s WHERE k <= $top ORDER BY run, phase, k""", {"top": top}).rows
        for run, ph, pat, share in regions:
            if phase is None or ph == phase:
                points[run].regions.setdefault(ph, []).append((pat, float(share)))
        for run, ph, pat, fam, var, lib, dom in run_sql(con, """
                SELECT run, phase, pattern, family, variant, library, dominant FROM variants
                WHERE (dominant OR share >= $min) AND run IN (SELECT run FROM chosen)
                ORDER BY run, phase, pattern, time_ns DESC, family, variant""", {"min": MIN_SHARE}).rows:
            if pat in WATCHED and (phase is None or ph == phase):
                what = f"{fam} / {var} ({lib})"
                if dom:
                    points[run].variants.setdefault(ph, {})[pat] = what
                points[run].ran.setdefault(ph, {}).setdefault(pat, []).append(what)
    finally:
        con.close()
    return History(store=str(store), phase=phase, runs=list(points.values()))


def _spread(s: dict[str, float]) -> float:
    return (s["q75_ns"] - s["q25_ns"]) / s["median_ns"] if s["median_ns"] > 0 else 0.0


def gate(h: History, threshold: float = 0.05, baseline: str | None = None, candidate: str | None = None) -> History:
    """Judge the newest run (or `candidate`) against the run before it in its series (or `baseline`)."""
    if threshold != threshold or threshold < 0:
        raise BadInput(f"--threshold must be a fraction >= 0, not {threshold}")
    by_id = {r.run: r for r in h.runs}
    for name, rid in (("--baseline", baseline), ("--candidate", candidate)):
        if rid is not None and rid not in by_id:
            raise BadInput(f"{name} {rid}: no such run among the {len(h.runs)} listed (see mmprof history)")
    cand = by_id[candidate] if candidate else h.runs[-1]
    if baseline:
        base = by_id[baseline]
    else:
        earlier = [r for r in h.runs if r.series == cand.series and (r.date, r.run) < (cand.date, cand.run)]
        if not earlier:
            raise NoEvidence(f"run {cand.run} has no earlier run in its series (model {cand.model}, engine "
                             f"{cand.engine}, TP {cand.tp}, batch {cand.batch}): nothing to compare it with")
        base = earlier[-1]
    h.checked, h.baseline, h.candidate, h.threshold = True, base.run, cand.run, threshold
    for ph in sorted(set(base.variants) & set(cand.variants)):
        for pat, label in WATCHED.items():
            a, b = base.variants[ph].get(pat), cand.variants[ph].get(pat)
            ran_a = base.ran.get(ph, {}).get(pat, [])
            ran_b = cand.ran.get(ph, {}).get(pat, [])
            if a and b and a != b and (b not in ran_a or a not in ran_b):
                h.findings.append(Finding("variant", ph, f"the {label} variant changed ({ph}): {a} -> {b}"))
    compared = 0
    for ph in sorted(set(base.steps) & set(cand.steps)):
        a, b = base.steps[ph], cand.steps[ph]
        if a["median_ns"] <= 0:
            continue
        change = b["median_ns"] / a["median_ns"] - 1.0
        if min(a["steps"], b["steps"]) < MIN_STEPS:
            h.notes.append(f"{ph} step {change:+.1%} not judged: {min(a['steps'], b['steps'])} step(s) in a run, no "
                           f"spread to tell noise by (at least {MIN_STEPS} needed)")
            continue
        compared += 1
        band = _spread(a) + _spread(b)
        if change > threshold and change > band:
            h.findings.append(Finding("step", ph, f"{ph} step {change:+.1%} beyond noise ({a['median_ns'] / 1e6:.3f} "
                                      f"-> {b['median_ns'] / 1e6:.3f} ms; noise band {band:.1%} from the steps' "
                                      f"interquartile spread of both runs; threshold {threshold:.0%})"))
        elif change > threshold:
            h.notes.append(f"{ph} step {change:+.1%}, within the noise band {band:.1%}: not a regression")
    if not compared and not h.findings:
        why = "; ".join(h.notes) or "they share no phase with step times"
        raise NoEvidence(f"runs {base.run} and {cand.run}: nothing to judge ({why})")
    return h


def variant_changes(store: str | os.PathLike, pattern: str = "layers.*.moe.routed") -> list[tuple]:
    """(run, date, model, engine, tp, batch, phase, run before, variant before, variant) of every run whose dominant
    variant in `pattern` differs from the run before it in its series."""
    con = connect(store)
    try:
        return run_sql(con, VARIANT_CHANGES, {"pattern": pattern}).rows
    finally:
        con.close()
