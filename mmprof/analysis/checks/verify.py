"""`verify`: evaluate a fast-path spec (its built-in checks and its assertions) against a profile.

`verify()` returns a `VerifyResult`; renderers show it (rich / JSON / JUnit) and the CLI exits with
`VerifyResult.exit_code`: 0 every check passed, 1 a violation, 2 no evidence for at least one (never a pass).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mmprof.analysis.checks import assertions, fastpath, log_checks  # noqa: F401 (registers the implementations)
from mmprof.analysis.checks.context import LABEL_SOURCE, MAX_EVIDENCE, CheckResult, Context, dispatch_frame
from mmprof.analysis.checks.steps import infer_phases, infer_steps
from mmprof.analysis.checks.registry import implementation, info
from mmprof.analysis.checks.selectors import validate_spec
from mmprof.analysis.checks.spec import Spec, default_spec
from mmprof.analysis.logs.join import LogReport, log_report
from mmprof.analysis.timeline.events import events_of
from mmprof.analysis.timeline.window import serving
from mmprof.errors import BadInput
from mmprof.labels import region_pattern
from mmprof.units import fmt_ranges


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
    warnings: list[str] = field(default_factory=list)  # input that does not fit: said before the verdict
    log: LogReport | None = None  # the engine log's facts with the kernels they concern (None: no log)

    @property
    def exit_code(self) -> int:
        if any(r.status == "fail" for r in self.results):
            return 1
        if not self.results or any(r.status == "no_evidence" for r in self.results):
            return 2
        if all(r.status == "not_applicable" for r in self.results):
            return 2  # nothing could be judged
        return 0  # passes, and checks that do not apply to this model (neither a pass nor missing evidence)

    @property
    def status(self) -> str:
        return {0: "pass", 1: "fail", 2: "no_evidence"}[self.exit_code]

    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "fail": 0, "no_evidence": 0, "not_applicable": 0}
        for r in self.results:
            out[r.status] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec_id, "spec_source": self.spec_source, "profile": self.profile, "status": self.status,
                "exit_code": self.exit_code, "source": self.source, "events": self.events,
                "attributed": self.attributed, "counts": self.counts(),
                "results": [r.to_dict() for r in self.results], "regions": [g.to_dict() for g in self.regions],
                "warnings": list(self.warnings), "log": self.log.to_dict() if self.log else None}


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


def spec_warnings(spec: Spec, profile: Any, source: str) -> list[str]:
    """A spec that does not fit the profile: an example spec, a spec for another device, a GPU spec on a CPU run."""
    out = []
    if spec.example:
        out.append(f"spec {spec.id} is an example (example = true): adapt its regions, selectors and thresholds to "
                   "your deployment before gating CI on it")
    if spec.device:
        names = [str(d.get("name") or d.get("arch") or "") for r in profile.meta.get("ranks") or [] if isinstance(r, dict)
                 for d in r.get("devices") or [] if isinstance(d, dict)]
        if source == "cpu_ops":
            out.append(f"spec {spec.id} is for {spec.device}, but this profile ran on the CPU (no GPU kernels)")
        elif names and not any(spec.device.lower() in n.lower() for n in names):
            out.append(f"spec {spec.id} is for {spec.device}, but this profile ran on "
                       f"{', '.join(sorted(set(n for n in names if n))) or 'an unnamed device'}")
    return out


def _op_column(profile: Any, frame: Any, col: str) -> Any:
    """A column of each event's CPU op (its launching op for a kernel): the name, for "ran instead" evidence, and
    the input shapes, for evidence in shapes (a fused shared-expert slot)."""
    op = np.asarray(frame.op)
    if not profile.n("ops") or not len(op):
        return np.full(len(op), None, dtype=object)
    vals = np.asarray(profile.col("ops", col, decode=True), dtype=object)
    ok = (op >= 0) & (op < len(vals))
    out = np.full(len(op), None, dtype=object)
    out[ok] = vals[op[ok]]
    return out


def _op_names(profile: Any) -> frozenset:
    """The distinct CPU op names (each string id decoded once)."""
    if not profile.n("ops"):
        return frozenset()
    codes = np.unique(np.asarray(profile.tables["ops"]["name"]))
    return frozenset(s for s in (profile.string(int(c)) for c in codes if c >= 0) if isinstance(s, str))


def model_layers(model: Any, meta: dict[str, Any], events: Any) -> tuple[int, str] | None:
    """(number of layers, where it comes from): the --model config, the profile's model config, else the layers
    the profile's structure shows (the highest layer index + 1). None when nothing says."""
    if model is not None:
        return int(model.n_layers), f"--model ({model.model_type or model.family})"
    m = meta.get("model") or (meta.get("run") or {}).get("model") or {}
    if isinstance(m, dict):
        for key in ("n_layers", "num_hidden_layers"):
            v = m.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v, "the profile's model config"
    if len(events) and (events["layer"] >= 0).any():
        lay = events.loc[events["layer"] >= 0]
        srcs = sorted({LABEL_SOURCE.get(x, str(x)) for x in lay["label_source"].dropna().unique()}) \
            if "label_source" in lay else []
        return int(lay["layer"].max()) + 1, f"this profile's layers ({' and '.join(srcs) or 'region labels'})"
    return None


def validate_layers(spec: Spec, known: tuple[int, str] | None) -> None:
    """A spec's `layers` (and `sparse_layers` / `moe_layers` lists) that the model does not have are bad input, with
    the nearest valid range: `layers = "2-59"` on a 6-layer model must not pass on layers 2-5 without a word."""
    if known is None:
        return
    n, src = known
    valid = set(range(n))

    def refuse(where: str, asked: set[int]) -> None:
        bad = asked - valid
        if bad:
            near = fmt_ranges(asked & valid) or f"0-{n - 1}"
            raise BadInput(f"{where}: layers {fmt_ranges(bad)} do not exist: the model has {n} layers (0-{n - 1}, "
                           f"from {src}); nearest valid: {near}")

    for a in spec.assertions:
        if a.layers is not None:
            refuse(f"{spec.source}: assertion {a.id}", set(a.layers))
    for key in ("sparse_layers", "moe_layers"):
        v = getattr(spec, key)
        if isinstance(v, list):
            refuse(f"{spec.source}: [spec] {key}", set(v))
        elif isinstance(v, int) and v > n:
            raise BadInput(f"{spec.source}: [spec] {key} = {v}, but the model has {n} layers (from {src})")


def run_check(code: str, ctx: Context) -> CheckResult:
    """Run one built-in check by its code."""
    meta = info(code)
    fn = implementation(code)
    if fn is None:
        return CheckResult(id=meta.name, code=code, kind="check", status="no_evidence",
                           message=f"{code} is an assertion kind, not a stand-alone check; use it in [[assert]]",
                           description=meta.summary)
    status, message, evidence, data = fn(ctx)
    judged = data.get("judged_from")
    return CheckResult(id=meta.name, code=code, kind="check", status=status, message=message,
                       description=meta.summary, evidence=evidence[:MAX_EVIDENCE], data=data,
                       judged_from=judged if isinstance(judged, str) else "")


def verify(profile: Any, spec: Spec | None = None, rules: Any = None, sparse_layers: Any = None,
           moe_layers: Any = None, profile_name: str | None = None, shape_regions: Any = None,
           model: Any = None, warnings: list[str] | None = None, engine: Any = None) -> VerifyResult:
    """Evaluate the spec's built-in checks and assertions against a profile (default: `default_spec`)."""
    spec = spec or default_spec(profile.n("dispatch") > 0)
    validate_spec(spec, rules)  # a selector that names nothing that can exist is bad input, not a pass
    # the checks judge serving only: a window recorded from the engine's start holds its start-up and graph
    # capture (warm-up forwards), which are not the serving steps the checks are about
    frame, part_note = serving(profile, events_of(profile, rules, shape_regions))
    cpu_ns = np.where(np.asarray(frame.launch_start) >= 0, frame.launch_start, frame.start)
    events = frame.frame().assign(op_name=_op_column(profile, frame, "name"), cpu_ns=cpu_ns,  # a copy: frame()
                                  op_dims=_op_column(profile, frame, "input_dims"))         # is cached
    events = events[events["kind"] != "memcpy"].reset_index(drop=True)
    events, step_source, emb_of = infer_steps(profile, events)
    events, phase_source = infer_phases(profile, events, emb_of)
    validate_layers(spec, model_layers(model, profile.meta, events))
    log = log_report(profile, events) if profile.n("log") else None
    ctx = Context(events=events, dispatch=dispatch_frame(profile), source=frame.source, meta=profile.meta,
                  sparse_layers=sparse_layers if sparse_layers is not None else spec.sparse_layers,
                  moe_layers=moe_layers if moe_layers is not None else spec.moe_layers, phase_source=phase_source,
                  step_source=step_source, model=model, engine=engine, log=log, op_names=_op_names(profile))
    results = [run_check(code, ctx) for code in spec.checks]
    if log is not None:  # the engine's log: judged against the kernels whenever the profile holds one
        results.append(run_check("LG002", ctx))
    results += [assertions.evaluate(a, ctx) for a in spec.assertions]
    log_checks.cite_log(results, spec.assertions, log)
    return VerifyResult(spec_id=spec.id, spec_source=spec.source, source=frame.source, events=len(events),
                        attributed=int(events["region"].notna().sum()) if len(events) else 0,
                        results=results, regions=region_summaries(events), profile=profile_name,
                        warnings=list(warnings or []) + ([part_note] if part_note else [])
                        + spec_warnings(spec, profile, frame.source), log=log)
