"""The assertion kinds of a fast-path spec (require, forbid, max_launches, forbid_pattern, dispatch), each
registered under its code. Every function returns a `CheckResult` whose status is pass, fail or no_evidence;
"nothing matched" is never a pass.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from mmprof.analysis.checks.context import (LABEL_SOURCE, MAX_EVIDENCE, CheckResult, Context, model_has,
                                            phases_present, ran_instead, region_mask, scoped, seen_regions,
                                            top_kernels)
from mmprof.analysis.checks.registry import check, implementation
from mmprof.analysis.checks.selectors import bounded_search, compile_bounded
from mmprof.analysis.checks.spec import KINDS, Assertion, glob_mask, unique_map
from mmprof.units import fmt_ns, fmt_ranges


def result(a: Assertion, status: str, message: str, evidence: list[str] | None = None, **data: Any) -> CheckResult:
    return CheckResult(id=a.id, code=a.code, kind=a.kind, status=status, message=message, description=a.description,
                       evidence=(evidence or [])[:MAX_EVIDENCE], data=data)



def evaluate(a: Assertion, ctx: Context) -> CheckResult:
    """Evaluate one assertion by its kind's registered implementation: on each phase of the run separately when
    the run has more than one and the assertion names none (a fast path that ran in prefill only must not pass
    on the prefill calls), else once."""
    fn = implementation(KINDS[a.kind], a.kind)
    na = _subject_missing(a, ctx)
    if na is not None:
        return na
    phases = phases_present(ctx.events) if a.kind != "dispatch" else \
        sorted({str(p) for p in ctx.dispatch["phase"].dropna().unique()}) if len(ctx.dispatch) else []
    if a.phase or len(phases) < 2 or a.kind in ("forbid_pattern", "log"):  # a log fact is of the run, not a phase
        r = fn(a, ctx)
        if ctx.step_source not in (None, "markers") and a.kind in ("require", "max_launches"):
            r.message += f" (steps: {ctx.step_source})"
    else:
        parts = {}
        for p in phases:
            r = fn(dataclasses.replace(a, phase=p), ctx)
            if a.kind == "require" and r.status == "no_evidence":
                r = _absent_in_phase(a, ctx, p) or r
            parts[p] = r
        r = _combine(a, parts, ctx)
    r.judged_from = r.judged_from or judged_from(a, ctx)
    return r


def judged_from(a: Assertion, ctx: Context) -> str:
    """The evidence an assertion's verdict stands on, in words: the dispatch log, or where the region labels came
    from plus the kernels' classes, and where the steps and phases came from when the profile does not carry them."""
    if a.kind == "dispatch":
        return "dispatch log"
    if a.kind == "log":
        return "the engine's log (rules/logs.toml) and the kernels each fact concerns"
    parts = []
    if a.region and "*" not in a.region:
        ev = ctx.events
        m = region_mask(ev, a.region) if len(ev) else None
        srcs = sorted({LABEL_SOURCE.get(x, str(x)) for x in ev.loc[m, "label_source"].dropna().unique()}) \
            if m is not None and "label_source" in ev else []
        parts.append("regions from " + (" and ".join(srcs) if srcs else "nothing (no event in the region)"))
    parts.append("kernel names" if a.kind == "forbid_pattern" else
                 "kernel classes" if ctx.source == "kernels" else "CPU op classes")
    if ctx.step_source not in (None, "markers"):
        parts.append(f"steps: {ctx.step_source}")
    if ctx.phase_source not in (None, "annotations"):
        parts.append(f"phases {ctx.phase_source}")
    return "; ".join(parts)


def _subject_part(glob: str) -> str | None:
    role = glob.split(".", 2)[2] if glob.startswith("layers.") and glob.count(".") >= 2 else glob
    if role.startswith("moe.shared"):
        return "shared_expert"
    if role.startswith("moe"):
        return "experts"
    if role.startswith("attn.indexer"):
        return "indexer"
    return None


def _subject_missing(a: Assertion, ctx: Context) -> CheckResult | None:
    """Not applicable: every region the assertion names is a part the model does not have (routed experts in a
    dense model, an indexer without sparse attention, a shared expert a MoE model does not have)."""
    if a.kind == "dispatch" or not a.region or "*" in a.region:
        return None
    parts = {_subject_part(g) for g in a.region}
    if None in parts or len(parts) != 1:
        return None
    part = parts.pop()
    has, src = model_has(ctx, part)
    if has is False:
        what = {"experts": "no MoE layers", "shared_expert": "no shared expert", "indexer": "no sparse-attention indexer"}
        return result(a, "not_applicable", f"the model has {what[part]} (from {src}): {'|'.join(a.region)} cannot "
                      "exist", judged_from=src)
    return None


def _combine(a: Assertion, parts: dict[str, CheckResult], ctx: Context) -> CheckResult:
    """One verdict from the per-phase ones: a failure in any phase fails (the phase named first), a pass needs a
    pass in at least one phase (for `require`, in every phase that is not N/A: a phase without evidence makes it
    no evidence), the rest is said; all without evidence stays without evidence."""
    st = {p: r.status for p, r in parts.items()}
    status = "fail" if "fail" in st.values() else "pass" if "pass" in st.values() else \
        "not_applicable" if set(st.values()) == {"not_applicable"} else "no_evidence"
    if status == "pass" and a.kind == "require" and "no_evidence" in st.values():
        status = "no_evidence"  # a required fast path must cover every phase: one it cannot see is not covered
    order = sorted(parts, key=lambda p: (st[p] != "fail", list(parts).index(p)))
    msg = "; ".join(f"{p}: {parts[p].message}" for p in order)
    evidence = [f"{p}: {e}" for p in order for e in parts[p].evidence]
    src = f" (steps: {ctx.step_source})" if ctx.step_source not in (None, "markers") and a.kind in (
        "require", "max_launches") else ""
    src += f" (phases {ctx.phase_source})" if ctx.phase_source and ctx.phase_source != "annotations" else ""
    # the first phase's data (the failing one first) stays at the top, as for a single-phase result
    data = {**parts[order[0]].data, "phases": {p: {"status": r.status, "message": r.message, **r.data}
                                               for p, r in parts.items()}}
    return result(a, status, msg + src, evidence, **data)


def _absent_in_phase(a: Assertion, ctx: Context, phase: str) -> CheckResult | None:
    """A required region with no events in a phase in which its layers ran: the fast path did not run there.
    Says what ran instead in the region's context (its parent, e.g. layers.*.moe.* for layers.*.moe.routed):
    the kernels there that the phases where the region did run do not show."""
    ev = ctx.events
    in_phase = (ev["phase"] == phase).to_numpy(dtype=bool)
    layered = in_phase & (ev["layer"] >= 0).to_numpy(dtype=bool)
    if not layered.any() or all(not g.startswith("layers.") for g in a.region):
        return None
    region_any = scoped(dataclasses.replace(a, phase=None), ev)
    if not len(region_any):
        return None  # the region ran in no phase: the plain no-evidence message says what exists
    ctx_globs = a.within or _parent_globs(a.region)
    here = scoped(Assertion(id=a.id, kind=a.kind, code=a.code, region=ctx_globs, phase=phase, layers=a.layers), ev)
    where = "|".join(a.region)
    good = set(region_any["phase"].dropna().astype(str))
    elsewhere = scoped(Assertion(id=a.id, kind=a.kind, code=a.code, region=ctx_globs, layers=a.layers), ev)
    elsewhere = elsewhere[elsewhere["phase"].astype(str).isin(good)]
    seen = set(zip(elsewhere["family"].astype(str), elsewhere["variant"].astype(str)))
    new = here[[(f, v) not in seen for f, v in zip(here["family"].astype(str), here["variant"].astype(str))]]
    steps = fmt_ranges(ev.loc[layered, "step"])
    instead = ran_instead(new if len(new) else here)
    steps = ("step " if "," not in steps and "-" not in steps else "steps ") + steps
    return result(a, "fail", f"{a.selector.describe()} never ran: no events in {where} in {steps}, while its "
                  f"layers ran (it ran in {', '.join(sorted(good))}); ran instead in {'|'.join(ctx_globs)}: {instead}",
                  [f"ran instead: {instead}"], region_events=0, steps=steps)


@check("FP007", "require")
def _require(a: Assertion, ctx: Context) -> CheckResult:
    ev = scoped(a, ctx.events)
    where = "|".join(a.region)
    if not len(ev):
        return result(a, "no_evidence", f"region {where} matched no events; {seen_regions(ctx.events)}")
    hit = ev[a.selector.mask(ev)]
    cov = step_coverage(a, ctx, ev, hit)
    share = float(hit["dur_ns"].sum()) / float(ev["dur_ns"].sum()) if ev["dur_ns"].sum() > 0 else (1.0 if len(hit) else 0.0)
    problems, evidence = [], []
    sel = a.selector.describe()
    if cov.share < a.min_step_share:
        if cov.missing_keys:
            layers = {k[2] for k in cov.missing_keys}
            problems.append(f"{sel} missing in layers {fmt_ranges(layers)} ({len(cov.missing_keys)} of "
                            f"{cov.layer_steps} layer-steps; steps {fmt_ranges({k[1] for k in cov.missing_keys})})")
        problems.append(f"{sel} carried {where} in {cov.covered} of {cov.judged} steps ({cov.share:.0%}; the spec "
                        f"asks {'every step' if a.min_step_share >= 1 else f'{a.min_step_share:.0%} of them'})"
                        + (f"; not in steps {fmt_ranges(cov.uncovered_steps)}" if cov.uncovered_steps else ""))
        if cov.ran_instead is not None and len(cov.ran_instead):
            evidence.append("ran instead: " + "; ".join(top_kernels(cov.ran_instead, 4)))
    if a.min_time_share is not None and share < float(a.min_time_share):
        problems.append(f"{sel} is {share:.1%} of {where} time, below {float(a.min_time_share):.0%}")
    if not problems and not len(hit):  # defensive: a pass needs the fast path to have run at all
        problems.append(f"{sel} never ran in {where}")
    data = {"region_events": int(len(ev)), "matched_events": int(len(hit)), "time_share": share,
            "steps": cov.judged, "steps_covered": cov.covered, "step_share": cov.share,
            "uncovered_steps": fmt_ranges(cov.uncovered_steps), "unjudged_steps": cov.unjudged,
            "layers": fmt_ranges(ev["layer"]), "missing_layers": fmt_ranges({k[2] for k in cov.missing_keys}),
            "min_step_share": a.min_step_share}
    note = cov.note()
    if problems:
        return result(a, "fail", "; ".join(problems) + note, evidence, **data)
    layers = f", layers {fmt_ranges(hit['layer'])}" if (hit["layer"] >= 0).any() else ""
    return result(a, "pass", f"{sel} ran in {where} in {cov.covered} of {cov.judged} steps"
                  f"{' (every layer)' if a.every_layer and cov.layer_steps else ''}: {len(hit)} of {len(ev)} events, "
                  f"{share:.1%} of its time{layers}{note}", top_kernels(hit, 3), **data)


@dataclass
class Coverage:
    """How much of a region's steps a required fast path carried (the steps of one phase, or of the run)."""

    judged: int                # steps in which the region's layers ran (or the region did, for model-level regions)
    covered: int               # of those, steps in which the selector carried the region (every layer, or once)
    uncovered_steps: set[int]
    unjudged: int              # steps whose events have no layer at all (nothing attributed): not judged
    layer_steps: int           # (rank, step, layer) groups of the region
    missing_keys: set[tuple[int, int, int]]
    ran_instead: Any           # the region's events in the steps / layers the selector did not cover
    steps_known: bool

    @property
    def share(self) -> float:
        return self.covered / self.judged if self.judged else 0.0

    def note(self) -> str:
        if not self.steps_known:
            return " (steps unknown: no step markers or forward boundaries, the profile counts as one step)"
        return f" ({self.unjudged} steps without attributed layers not judged)" if self.unjudged else ""


def step_coverage(a: Assertion, ctx: Context, ev: Any, hit: Any) -> Coverage:
    """The steps of `a`'s phase (all steps without one) in which the model's layers ran, and in which of them the
    selector's events `hit` ran in every layer of the region (`every_layer`), or at least once."""
    all_ev = ctx.events
    if a.phase:
        all_ev = all_ev[(all_ev["phase"] == a.phase).to_numpy(dtype=bool)]
    layered_region = (ev["layer"] >= 0).any()
    keys2 = ["rank", "step"]
    region_steps = set(map(tuple, ev[keys2].drop_duplicates().to_numpy().tolist()))
    if layered_region:
        lay = all_ev[(all_ev["layer"] >= 0).to_numpy(dtype=bool)]
        if a.layers is not None:
            lay = lay[lay["layer"].isin(list(a.layers)).to_numpy(dtype=bool)]
        steps = set(map(tuple, lay[keys2].drop_duplicates().to_numpy().tolist())) | region_steps
    else:
        steps = region_steps
    every = set(map(tuple, all_ev[keys2].drop_duplicates().to_numpy().tolist()))
    unjudged = len(every - steps)
    missing_keys: set[tuple[int, int, int]] = set()
    layer_steps = 0
    if a.every_layer and layered_region:
        keys = ["rank", "step", "layer"]
        all_keys = set(map(tuple, ev[keys].drop_duplicates().to_numpy().tolist()))
        have = set(map(tuple, hit[keys].drop_duplicates().to_numpy().tolist()))
        missing_keys = all_keys - have
        layer_steps = len(all_keys)
        bad_steps = {k[:2] for k in missing_keys}
        covered = {k[:2] for k in have} - bad_steps
    else:
        covered = set(map(tuple, hit[keys2].drop_duplicates().to_numpy().tolist()))
    covered &= steps
    uncovered = steps - covered
    if missing_keys:
        idx = ev.set_index(["rank", "step", "layer"]).index
        instead = ev[idx.isin(list(missing_keys))]
    elif uncovered:
        instead = ev[[tuple(k) in uncovered for k in ev[keys2].to_numpy().tolist()]]
    else:
        instead = None
    steps_known = bool((all_ev["step"] >= 0).any())
    return Coverage(judged=len(steps), covered=len(covered), uncovered_steps={s for _, s in uncovered},
                    unjudged=unjudged, layer_steps=layer_steps, missing_keys=missing_keys, ran_instead=instead,
                    steps_known=steps_known)


def _parent_globs(globs: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(g.rsplit(".", 1)[0] + ".*" if "." in g else "*" for g in globs)


@check("FP009", "forbid")
def _forbid(a: Assertion, ctx: Context) -> CheckResult:
    ev = scoped(a, ctx.events)
    where = "|".join(a.region) or "the profile"  # no region: anywhere ("in the profile", not "in anywhere")
    if not len(ctx.events):
        return result(a, "no_evidence", "the profile has no device events")
    if not len(ev):
        if a.selector.empty or a.within:
            ctx_globs = a.within or _parent_globs(a.region)
            ctx_ev = scoped(Assertion(id=a.id, kind=a.kind, code=a.code, region=ctx_globs, phase=a.phase,
                                       layers=a.layers), ctx.events)
            if len(ctx_ev):
                return result(a, "pass", f"no events in {where} ({len(ctx_ev)} events in its context "
                               f"{'|'.join(ctx_globs)}, layers {fmt_ranges(ctx_ev['layer'])})",
                               context_events=int(len(ctx_ev)))
            return result(a, "no_evidence", f"neither {where} nor its context {'|'.join(ctx_globs)} matched any "
                           f"event; {seen_regions(ctx.events)}")
        return result(a, "no_evidence", f"region {where} matched no events; {seen_regions(ctx.events)}")
    bad = ev if a.selector.empty else ev[a.selector.mask(ev)]
    if len(bad):
        what = "events exist" if a.selector.empty else f"{a.selector.describe()} ran"
        return result(a, "fail", f"{what} in {where}: {len(bad)} events, {fmt_ns(bad['dur_ns'].sum())}, "
                       f"layers {fmt_ranges(bad['layer'])}", top_kernels(bad), events=int(len(bad)),
                       time_ns=int(bad["dur_ns"].sum()), layers=fmt_ranges(bad["layer"]))
    return result(a, "pass", f"no {a.selector.describe()} among {len(ev)} events in {where}", events=int(len(ev)))


@check("FP005", "max_launches")
def _max_launches(a: Assertion, ctx: Context) -> CheckResult:
    ev = scoped(a, ctx.events)
    where = "|".join(a.region)
    if not len(ev):
        return result(a, "no_evidence", f"region {where} matched no events; {seen_regions(ctx.events)}")
    counted = ev if a.selector.empty else ev[a.selector.mask(ev)]
    keys = ["rank", "step", "layer"]
    base = ev.groupby(keys).size().rename("all")
    cnt = counted.groupby(keys).size().reindex(base.index, fill_value=0)
    worst = int(cnt.max()) if len(cnt) else 0
    over = cnt[cnt > a.max]
    steps_known = bool((ev["step"] >= 0).any())
    note = "" if steps_known else " (steps unknown: the whole profile counts as one step)"
    data = {"max_seen": worst, "limit": a.max, "groups": int(len(cnt)), "over": int(len(over))}
    if len(over):
        ex = [f"rank {k[0]} step {k[1]} layer {k[2]}: {int(v)} launches" for k, v in over.sort_values(ascending=False).head(6).items()]
        k0 = over.idxmax()
        grp = counted[(counted["rank"] == k0[0]) & (counted["step"] == k0[1]) & (counted["layer"] == k0[2])]
        return result(a, "fail", f"up to {worst} launches per layer-step in {where}, limit {a.max}; "
                       f"{len(over)} of {len(cnt)} layer-steps over{note}", ex + top_kernels(grp, 4), **data)
    return result(a, "pass", f"at most {worst} launches per layer-step in {where} (limit {a.max}, "
                   f"{len(cnt)} layer-steps){note}", **data)


@check("FP006", "forbid_pattern")
def _forbid_pattern(a: Assertion, ctx: Context) -> CheckResult:
    ev = scoped(a, ctx.events) if (a.region or a.phase or a.layers is not None) else ctx.events
    if not len(ev):
        return result(a, "no_evidence", "no device events to search" + (f" in {'|'.join(a.region)}" if a.region else ""))
    rx = compile_bounded(a.pattern, a.id, "pattern")  # validated when the spec was read; bounded work
    bad = ev[unique_map(ev["name"], lambda s: bounded_search(rx, s))]
    if len(bad):
        return result(a, "fail", f"{len(bad)} events match /{a.pattern}/ ({fmt_ns(bad['dur_ns'].sum())}, "
                       f"{bad['name'].nunique()} distinct names)", top_kernels(bad), events=int(len(bad)))
    return result(a, "pass", f"none of {len(ev)} events ({ev['name'].nunique()} names) match /{a.pattern}/")


@check("FP008", "dispatch")
def _dispatch(a: Assertion, ctx: Context) -> CheckResult:
    d = ctx.dispatch
    if not len(d):
        return result(a, "no_evidence", "the profile has no dispatch log (only the reference runtime writes one)")
    m = glob_mask(d["op"], [a.op])
    if a.phase:
        m = m & (d["phase"] == a.phase).to_numpy(dtype=bool)
    if a.layers is not None:
        m = m & d["layer"].isin(list(a.layers)).to_numpy(dtype=bool)
    rows = d[m]
    if not len(rows):
        ops = sorted({str(o) for o in d["op"].dropna()})
        return result(a, "no_evidence", f"no dispatch rows for op {a.op}; ops logged: {', '.join(ops) or '-'}")
    ok = rows["impl"].isin(list(a.impl)).to_numpy(dtype=bool)
    bad = rows[~ok]
    impls = rows["impl"].value_counts().to_dict()
    data = {"rows": int(len(rows)), "impls": {str(k): int(v) for k, v in impls.items()}}
    if a.every_layer and len(bad) or (not a.every_layer and not ok.any()):
        ev = []
        for (impl, req, reason), g in bad.groupby(["impl", "requested", "reason"], dropna=False):
            ev.append(f"impl {impl} (requested {req}{', reason: ' + str(reason) if isinstance(reason, str) else ''}) "
                      f"in layers {fmt_ranges(g['layer'])}, {len(g)} calls")
        return result(a, "fail", f"{a.op} ran {', '.join(f'{k} x{v}' for k, v in impls.items())}; expected "
                       f"{'|'.join(a.impl)}" + (" in every call" if a.every_layer else ""), ev, **data)
    return result(a, "pass", f"{a.op} ran {'|'.join(a.impl)} in {int(ok.sum())} of {len(rows)} calls, "
                   f"layers {fmt_ranges(rows['layer'])}", **data)
