"""`verify`: evaluate a fast-path spec (its built-in checks and its assertions) against a profile.

`verify()` returns a `VerifyResult`; renderers show it (rich / JSON / JUnit) and the CLI exits with
`VerifyResult.exit_code`: 0 every check passed, 1 a violation, 2 no evidence for at least one (never a pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmprof.analysis.checks import assertions, fastpath  # noqa: F401 (registers the FP implementations)
from mmprof.analysis.checks.context import MAX_EVIDENCE, CheckResult, Context, dispatch_frame
from mmprof.analysis.checks.registry import implementation, info
from mmprof.analysis.checks.selectors import validate_spec
from mmprof.analysis.checks.spec import Spec, default_spec
from mmprof.analysis.events import events_of
from mmprof.labels import region_pattern


@dataclass
class RegionSummary:
    """What ran in one region across layers: e.g. `layers.*.moe.routed` in 57 layers."""

    region: str
    layers: int
    count: int
    time_ns: int
    variants: list[dict[str, Any]]  # family, variant, library, path, count, time_ns, share

    def to_dict(self) -> dict[str, Any]:
        return {"region": self.region, "layers": self.layers, "count": self.count, "time_ns": self.time_ns,
                "variants": self.variants}


@dataclass
class VerifyResult:
    spec_id: str
    spec_source: str
    source: str  # kernels | cpu_ops
    events: int
    attributed: int
    results: list[CheckResult]
    regions: list[RegionSummary]
    profile: str | None = None

    @property
    def exit_code(self) -> int:
        if any(r.status == "fail" for r in self.results):
            return 1
        if not self.results or any(r.status == "no_evidence" for r in self.results):
            return 2
        return 0

    @property
    def status(self) -> str:
        return {0: "pass", 1: "fail", 2: "no_evidence"}[self.exit_code]

    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "fail": 0, "no_evidence": 0}
        for r in self.results:
            out[r.status] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec_id, "spec_source": self.spec_source, "profile": self.profile, "status": self.status,
                "exit_code": self.exit_code, "source": self.source, "events": self.events,
                "attributed": self.attributed, "counts": self.counts(),
                "results": [r.to_dict() for r in self.results], "regions": [g.to_dict() for g in self.regions]}


def region_summaries(events: Any, top: int = 6) -> list[RegionSummary]:
    """Per region pattern (layer index replaced by *): layers, events, time, and the variants that ran."""
    if not len(events) or not events["region"].notna().any():
        return []
    ev = events[events["region"].notna()].copy()
    ev["pattern"] = ev["region"].astype(str).map(region_pattern)
    out = []
    for pat, g in ev.groupby("pattern", sort=True):
        total = int(g["dur_ns"].sum())
        v = (g.fillna({"variant": "-", "library": "-"})
             .groupby(["family", "variant", "library", "path"], dropna=False)["dur_ns"].agg(["count", "sum"])
             .sort_values("sum", ascending=False))
        variants = [{"family": k[0], "variant": k[1], "library": k[2], "path": k[3], "count": int(r["count"]),
                     "time_ns": int(r["sum"]), "share": (float(r["sum"]) / total if total else 0.0)}
                    for k, r in v.head(top).iterrows()]
        out.append(RegionSummary(region=pat, layers=int(g.loc[g["layer"] >= 0, "layer"].nunique()), count=int(len(g)),
                                 time_ns=total, variants=variants))
    return out


def run_check(code: str, ctx: Context) -> CheckResult:
    """Run one built-in check by its code."""
    meta = info(code)
    fn = implementation(code)
    if fn is None:
        return CheckResult(id=meta.name, code=code, kind="check", status="no_evidence",
                           message=f"{code} is an assertion kind, not a stand-alone check; use it in [[assert]]",
                           description=meta.summary)
    status, message, evidence, data = fn(ctx)
    return CheckResult(id=meta.name, code=code, kind="check", status=status, message=message,
                       description=meta.summary, evidence=evidence[:MAX_EVIDENCE], data=data)


def verify(profile: Any, spec: Spec | None = None, rules: Any = None, sparse_layers: Any = None,
           moe_layers: Any = None, profile_name: str | None = None, shape_regions: Any = None) -> VerifyResult:
    """Evaluate the spec's built-in checks and assertions against a profile (default: `default_spec`)."""
    spec = spec or default_spec(profile.n("dispatch") > 0)
    validate_spec(spec, rules)  # a selector that names nothing that can exist is bad input, not a pass
    frame = events_of(profile, rules, shape_regions)
    events = frame.frame()
    events = events[events["kind"] != "memcpy"].reset_index(drop=True)
    ctx = Context(events=events, dispatch=dispatch_frame(profile), source=frame.source, meta=profile.meta,
                  sparse_layers=sparse_layers if sparse_layers is not None else spec.sparse_layers,
                  moe_layers=moe_layers if moe_layers is not None else spec.moe_layers)
    results = [run_check(code, ctx) for code in spec.checks]
    results += [assertions.evaluate(a, ctx) for a in spec.assertions]
    return VerifyResult(spec_id=spec.id, spec_source=spec.source, source=frame.source, events=len(events),
                        attributed=int(events["region"].notna().sum()) if len(events) else 0,
                        results=results, regions=region_summaries(events), profile=profile_name)
