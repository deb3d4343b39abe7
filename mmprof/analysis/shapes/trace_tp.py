"""The tensor-parallel size a trace ran with, read from the trace: the rank count its metadata or files show and,
given the model, the per-rank shapes of its weight GEMMs (at TP t a column-parallel projection has N/t columns,
a row-parallel one K/t rows). A `--tp` that contradicts what the shapes show is bad input that says what the
trace shows (`check_tp`), instead of "58 of 63 calls differ" against a layout the trace never ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mmprof.analysis.shapes.problems import head_problems, rank_problems
from mmprof.analysis.shapes.shape_match import profile_tp, weight_gemm_shapes
from mmprof.errors import BadInput
from mmprof.modelspec import ModelSpec

CANDIDATES = (1, 2, 4, 8, 16, 32, 64)


@dataclass
class TraceTP:
    tp: int | None              # what the shapes show (None: they cannot tell)
    ranks: int                  # ranks in the profile
    gemms: int                  # weight GEMMs with shapes
    scores: dict[int, int] = field(default_factory=dict)  # TP -> GEMMs whose shape is that TP's per-rank shape
    meta_tp: int | None = None  # the profile metadata's own TP

    def evidence(self) -> str:
        parts = [f"{self.ranks} rank{'s' if self.ranks != 1 else ''}"]
        if self.meta_tp:
            parts.append(f"its metadata says TP {self.meta_tp}")
        if self.tp is not None:
            parts.append(f"{self.scores[self.tp]} of {self.gemms} weight GEMMs have TP {self.tp}'s per-rank shapes")
        return "; ".join(parts)


def _sharded_shapes(spec: ModelSpec, tp: int, ep: int) -> set[tuple[int, int, int]]:
    out = set()
    for lp in rank_problems(spec, tp, ep):
        out |= {(p.n, p.k, p.groups) for p in lp.problems if p.sharded}
    out |= {(p.n, p.k, p.groups) for p in head_problems(spec, tp) if p.sharded}
    return out


def trace_tp(profile, spec: ModelSpec | None, ep: int = 1) -> TraceTP:
    """What the trace shows of its TP size (module docstring)."""
    par = profile.meta.get("parallel") or {}
    meta_tp = par.get("tp") if isinstance(par.get("tp"), int) and not isinstance(par.get("tp"), bool) else None
    res = TraceTP(None, len(profile.ranks), 0, meta_tp=meta_tp)
    if spec is None:
        return res
    shapes = weight_gemm_shapes(profile, spec)
    res.gemms = sum(shapes.values())
    if not res.gemms:
        return res
    cands = sorted(set(CANDIDATES) | {profile_tp(profile)})
    for t in cands:
        try:
            have = _sharded_shapes(spec, t, t if ep > 1 else 1)
        except BadInput:  # the model does not split over t ranks
            continue
        res.scores[t] = sum(c for nkg, c in shapes.items() if nkg in have)
    if res.scores:
        best = max(res.scores.values())
        tied = [t for t, s in res.scores.items() if s == best]
        if best > 0 and len(tied) == 1:
            res.tp = tied[0]
    return res


def check_tp(profile, spec: ModelSpec | None, tp: int | None, ep: int = 1) -> TraceTP:
    """`trace_tp`, refusing a `tp` the trace's shapes contradict: its GEMMs have another TP's per-rank shapes and
    fewer of them fit `tp`'s."""
    shown = trace_tp(profile, spec, ep)
    if tp is None or shown.tp is None or shown.tp == tp:
        return shown
    at = shown.scores.get(tp)
    if at is not None and at >= shown.scores[shown.tp]:
        return shown
    fit = f"{at} fit TP {tp}" if at is not None else f"the model does not split over {tp} ranks"
    raise BadInput(f"--tp {tp} contradicts the trace: {shown.evidence()} ({fit}); leave --tp out or pass "
                   f"--tp {shown.tp}")
