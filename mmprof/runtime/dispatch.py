"""The dispatch log: which implementation of each switchable op actually ran, and why when it fell back.

One record per call of a switchable op, with exactly the columns of the Profile `dispatch` table
(rank, step, phase, layer, op, impl, requested, reason, scope). `generate()` sets step/phase; the model
appends with `log(layer=, op=, impl=, requested=, scope=, reason=)` (keywords only). Ops and impls
(DEVELOPERS.md): moe.experts (grouped_mm | grouped_bmm | loop), moe.shared (fused | separate),
attn.indexer (computed | reused), attn.core (sparse | sparse_masked | dense).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, replace

COLUMNS = ("rank", "step", "phase", "layer", "op", "impl", "requested", "reason", "scope")


@dataclass
class DispatchRecord:
    rank: int
    step: int
    phase: str
    layer: int
    op: str
    impl: str
    requested: str
    reason: str | None
    scope: str


@dataclass
class DispatchLog:
    """Append-only list of DispatchRecord; cheap enough to stay on in benchmarks (a Python append per op)."""

    rank: int = 0
    step: int = 0
    phase: str = "prefill"
    enabled: bool = True
    records: list[DispatchRecord] = field(default_factory=list)

    def set_step(self, step: int, phase: str) -> None:
        self.step, self.phase = step, phase

    def log(self, *, layer: int, op: str, impl: str, requested: str, scope: str, reason: str | None = None) -> None:
        """Append one record (keywords only, so a call reads as the row it writes)."""
        if self.enabled:
            self.records.append(
                DispatchRecord(self.rank, self.step, self.phase, layer, op, impl, requested,
                               reason if impl != requested or reason else None, scope)
            )

    def extend_as(self, records: list[DispatchRecord], step: int, phase: str) -> None:
        """Append copies of `records` as rows of `step` / `phase`: a CUDA-graph replay runs no Python, so each
        replayed step repeats the rows its capture wrote (the table keeps one set of rows per decode step)."""
        if self.enabled:
            self.records.extend(replace(r, step=step, phase=phase) for r in records)

    def clear(self) -> None:
        self.records.clear()

    def rows(self) -> list[dict]:
        """Records as dicts keyed by the `dispatch` table columns (for ProfileBuilder.row)."""
        return [asdict(r) for r in self.records]

    def summary(self) -> dict[tuple[str, str], int]:
        """(op, impl) -> count."""
        return dict(Counter((r.op, r.impl) for r in self.records))

    def fallbacks(self) -> list[DispatchRecord]:
        return [r for r in self.records if r.impl != r.requested]
