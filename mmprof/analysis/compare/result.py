"""The result types of `mmprof diff` (`mmprof.analysis.compare.diff`): the step change per phase, the category
shares, the kernel paths that vanished or appeared, the deltas by region / layer / rank, and the whole result with
what is compared (`comparability`) and the answer (`verdict`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mmprof.analysis.compare.comparability import Comparability
from mmprof.analysis.compare.verdict import Answer, StepMove
from mmprof.names import display_name


@dataclass
class StepChange:
    """The step time of one phase on both sides (docs/glossary.md "step time"): medians, how each side was measured,
    the steps' distributions and the noise band of the change."""

    phase: str
    before_ns: float | None
    after_ns: float | None
    change: float | None      # relative, -0.2 = 20% faster
    before_steps: int
    after_steps: int
    method: str               # how the before side's steps were measured
    after_method: str = ""
    band: dict[str, Any] | None = None        # `bands.Band.to_dict()`: the change's noise band, None: none
    before_dist: dict[str, Any] | None = None  # StepStats: median, p10, p90, min, max, every step's value
    after_dist: dict[str, Any] | None = None
    line: str = ""            # the phase's one-line verdict

    @property
    def within_noise(self) -> bool:
        return bool(self.band and self.band.get("within"))

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "within_noise": self.within_noise}


@dataclass
class CategoryChange:
    category: str
    label: str
    before_share: float
    after_share: float
    before_ns: int
    after_ns: int

    @property
    def delta_pp(self) -> float:
        return 100.0 * (self.after_share - self.before_share)

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "delta_pp": self.delta_pp}


@dataclass
class VariantTime:
    family: str
    variant: str
    library: str | None
    time_ns: float            # per step
    count: float              # per step
    example: str              # the kernel / op name with the most time
    minor: bool = False       # under diff.MINOR_SHARE of its side's event time

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "example_display_name": display_name(self.example)}


@dataclass
class PathChange:
    region: str
    vanished: list[VariantTime]
    appeared: list[VariantTime]

    @property
    def summary(self) -> str:
        def fmt(vs: list[VariantTime], top_families: int = 3, top_names: int = 2) -> str:
            # families by time, the heaviest first: the path change is what dominates, not every view op
            by_fam: dict[str, list[VariantTime]] = {}
            for v in vs:
                by_fam.setdefault(v.family, []).append(v)
            fams = sorted(by_fam.items(), key=lambda kv: -sum(v.time_ns for v in kv[1]))
            parts = []
            for fam, items in fams[:top_families]:
                items = sorted(items, key=lambda v: -v.time_ns)
                names = ", ".join(display_name(v.variant, 60) + (f" x{v.count:.0f}" if v.count >= 1.5 else "")
                                  for v in items[:top_names])
                more = f" +{len(items) - top_names} more" if len(items) > top_names else ""
                libs = sorted({v.library for v in items if v.library})
                parts.append(f"{fam} ({names}{more}{'; ' + ', '.join(libs) if libs else ''})")
            if len(fams) > top_families:
                parts.append(f"{len(fams) - top_families} more families")
            return " + ".join(parts)

        if self.vanished and self.appeared:
            return f"{self.region}: {fmt(self.vanished)} -> {fmt(self.appeared)}"
        if self.appeared:
            return f"{self.region}: appeared {fmt(self.appeared)}"
        return f"{self.region}: vanished {fmt(self.vanished)}"

    @property
    def weight(self) -> float:
        return sum(v.time_ns for v in self.vanished) + sum(v.time_ns for v in self.appeared)

    def to_dict(self) -> dict[str, Any]:
        return {"region": self.region, "summary": self.summary, "vanished": [v.to_dict() for v in self.vanished],
                "appeared": [v.to_dict() for v in self.appeared]}


@dataclass
class Delta:
    key: str
    before_ns: float
    after_ns: float
    before_detail: str = ""
    after_detail: str = ""
    before_count: float = 0.0     # events (kernels / ops) per step
    after_count: float = 0.0

    @property
    def delta_ns(self) -> float:
        return self.after_ns - self.before_ns

    @property
    def change(self) -> float | None:
        return self.delta_ns / self.before_ns if self.before_ns else None

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "delta_ns": self.delta_ns, "change": self.change}


@dataclass
class DiffResult:
    before: str
    after: str
    phase: str
    rank: int | None
    source: tuple[str, str]
    steps: list[StepChange]
    categories: list[CategoryChange]
    dominant: tuple[str | None, str | None]
    verdict: str
    path_changes: list[PathChange]
    matched: list[Delta]       # (region, family)
    by_scope: list[Delta]
    by_layer: list[Delta]
    by_rank: list[Delta]       # median step span per rank
    per_step: bool
    layers: list[Delta] = field(default_factory=list)   # every layer, in order, for plots
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    plain: dict[str, Any] | None = None  # `plain.PlainChange.to_dict()`: both sides without the profiler, compared
    ranks: dict[str, Any] | None = None  # imbalance across ranks (`mmprof ranks`), both sides, on multi-rank profiles
    moves: list[StepMove] = field(default_factory=list)  # per step of the phase: time per category, both sides
    engine: tuple[str, str] | None = None  # the engine steps compared ("30 engine steps of 8 decode requests", ...)
    preface: list[str] = field(default_factory=list)  # warnings about what is compared, shown before the verdict
    compared: Comparability | None = None  # what is compared, row by row, the flags and the profiler's cost
    answer: Answer | None = None           # which is faster and why (the compared phase)
    per_rank: bool = False                 # event tables are per step and per rank (several ranks)
    overlap_roles: dict[str, tuple[float, float]] = field(default_factory=dict)  # role -> overlapped ns per step

    @property
    def moved(self) -> bool:
        return self.dominant[0] != self.dominant[1]

    def step(self, phase: str | None = None) -> StepChange | None:
        return next((s for s in self.steps if s.phase == (phase or self.phase)), None)

    def to_dict(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "phase": self.phase, "rank": self.rank,
                "source": list(self.source), "verdict": self.verdict, "moved": self.moved,
                "dominant": {"before": self.dominant[0], "after": self.dominant[1]},
                "steps": [s.to_dict() for s in self.steps], "categories": [c.to_dict() for c in self.categories],
                "path_changes": [p.to_dict() for p in self.path_changes],
                "matched": [d.to_dict() for d in self.matched], "by_scope": [d.to_dict() for d in self.by_scope],
                "by_layer": [d.to_dict() for d in self.by_layer], "by_rank": [d.to_dict() for d in self.by_rank],
                "layers": [d.to_dict() for d in self.layers],
                "per_step": self.per_step, "notes": self.notes, "warnings": self.warnings, "plain": self.plain,
                "ranks": self.ranks, "moves": [m.to_dict() for m in self.moves],
                "engine_steps": list(self.engine) if self.engine else None, "preface": self.preface,
                "compared": self.compared.to_dict() if self.compared else None,
                "answer": self.answer.to_dict() if self.answer else None, "per_rank": self.per_rank,
                "overlap_roles": {k: list(v) for k, v in self.overlap_roles.items()}}
