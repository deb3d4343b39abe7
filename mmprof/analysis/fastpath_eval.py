"""Evaluation of fast-path assertions and the built-in checks FP000-FP004 over classified device events.

Split from fastpath.py (spec model and loader) to keep both small. Every function here returns a
`CheckResult` whose status is pass, fail or no_evidence; "nothing matched" is never a pass.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from mmprof.analysis.fastpath import Assertion, CheckResult, RegionSummary, glob_mask, load_checks, unique_map

MAX_EVIDENCE = 12


@dataclass
class Context:
    events: Any  # DataFrame from regions.device_events
    dispatch: Any  # DataFrame of the dispatch table, strings decoded
    source: str
    meta: dict[str, Any]
    sparse_layers: Any = None
    moe_layers: Any = None


def dispatch_frame(profile: Any) -> Any:
    import pandas as pd

    cols = {}
    for c in ("rank", "step", "layer"):
        cols[c] = profile.col("dispatch", c)
    for c in ("phase", "op", "impl", "requested", "reason", "scope"):
        cols[c] = profile.col("dispatch", c, decode=True)
    return pd.DataFrame(cols)


def _fmt_ns(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{int(ns)} ns"


def _layers_text(layers: Any) -> str:
    ls = sorted({int(x) for x in layers if x is not None and x >= 0})
    if not ls:
        return "-"
    runs, start, prev = [], ls[0], ls[0]
    for x in ls[1:] + [None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        runs.append(f"{start}" if start == prev else f"{start}-{prev}")
        if x is not None:
            start = prev = x
    return ",".join(runs)


def _top_kernels(df: Any, n: int = 5) -> list[str]:
    if not len(df):
        return []
    g = df.groupby("name", sort=False)["dur_ns"].agg(["count", "sum"]).sort_values("sum", ascending=False).head(n)
    return [f"{name[:110]} x{int(r['count'])} ({_fmt_ns(r['sum'])})" for name, r in g.iterrows()]


def _region_mask(events: Any, globs: tuple[str, ...]) -> Any:
    if not globs or "*" in globs:  # "*" is every event, attributed to a region or not
        return np.ones(len(events), dtype=bool)
    return glob_mask(events["region"], globs)


def _scoped(a: Assertion, events: Any) -> Any:
    m = _region_mask(events, a.region)
    if a.phase:
        m = m & (events["phase"] == a.phase).to_numpy(dtype=bool)
    if a.layers is not None:
        m = m & events["layer"].isin(list(a.layers)).to_numpy(dtype=bool)
    return events[m]


def _seen_regions(events: Any) -> str:
    roles = events["region"].dropna()
    if not len(roles):
        return "no event is attributed to any region (no scope annotations in this profile)"
    pats = sorted({re.sub(r"^layers\.\d+\.", "layers.*.", r) for r in roles})
    return "regions present: " + ", ".join(pats[:10]) + (" ..." if len(pats) > 10 else "")


def _result(a: Assertion, status: str, message: str, evidence: list[str] | None = None, **data: Any) -> CheckResult:
    return CheckResult(id=a.id, code=a.code, kind=a.kind, status=status, message=message, description=a.description,
                       evidence=(evidence or [])[:MAX_EVIDENCE], data=data)


# ------------------------------------------------------------------------------------------ assertions
def evaluate(a: Assertion, ctx: Context) -> CheckResult:
    return {"require": _require, "forbid": _forbid, "max_launches": _max_launches,
            "forbid_pattern": _forbid_pattern, "dispatch": _dispatch}[a.kind](a, ctx)


def _require(a: Assertion, ctx: Context) -> CheckResult:
    ev = _scoped(a, ctx.events)
    where = "|".join(a.region)
    if not len(ev):
        return _result(a, "no_evidence", f"region {where} matched no events; {_seen_regions(ctx.events)}")
    hit = ev[a.selector.mask(ev)]
    problems, evidence = [], []
    share = float(hit["dur_ns"].sum()) / float(ev["dur_ns"].sum()) if ev["dur_ns"].sum() > 0 else (1.0 if len(hit) else 0.0)
    layered = (ev["layer"] >= 0).any()
    missing_keys: set[tuple[int, int, int]] = set()
    if a.every_layer and layered:
        keys = ["rank", "step", "layer"]
        all_keys = set(map(tuple, ev[keys].drop_duplicates().to_numpy().tolist()))
        have = set(map(tuple, hit[keys].drop_duplicates().to_numpy().tolist()))
        missing_keys = all_keys - have
        if missing_keys:
            layers = {k[2] for k in missing_keys}
            steps = {k[1] for k in missing_keys}
            problems.append(f"{a.selector.describe()} missing in layers {_layers_text(layers)} "
                            f"({len(missing_keys)} of {len(all_keys)} layer-steps; steps {_layers_text(steps)})")
            idx = ev.set_index(keys).index
            ran = ev[idx.isin(list(missing_keys))]
            evidence.append("ran instead: " + "; ".join(_top_kernels(ran, 4)))
    elif not len(hit):
        problems.append(f"{a.selector.describe()} never ran in {where}")
        evidence.append("ran instead: " + "; ".join(_top_kernels(ev, 4)))
    if a.min_time_share is not None and share < float(a.min_time_share):
        problems.append(f"{a.selector.describe()} is {share:.1%} of {where} time, below {float(a.min_time_share):.0%}")
    data = {"region_events": int(len(ev)), "matched_events": int(len(hit)), "time_share": share,
            "layers": _layers_text(ev["layer"]), "missing_layers": _layers_text({k[2] for k in missing_keys})}
    if problems:
        return _result(a, "fail", "; ".join(problems), evidence, **data)
    return _result(a, "pass", f"{a.selector.describe()} ran in {where}: {len(hit)} of {len(ev)} events, "
                   f"{share:.1%} of its time, layers {_layers_text(hit['layer'])}", _top_kernels(hit, 3), **data)


def _parent_globs(globs: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(g.rsplit(".", 1)[0] + ".*" if "." in g else "*" for g in globs)


def _forbid(a: Assertion, ctx: Context) -> CheckResult:
    ev = _scoped(a, ctx.events)
    where = "|".join(a.region) or "anywhere"
    if not len(ctx.events):
        return _result(a, "no_evidence", "the profile has no device events")
    if not len(ev):
        if a.selector.empty or a.within:
            ctx_globs = a.within or _parent_globs(a.region)
            ctx_ev = _scoped(Assertion(id=a.id, kind=a.kind, code=a.code, region=ctx_globs, phase=a.phase,
                                       layers=a.layers), ctx.events)
            if len(ctx_ev):
                return _result(a, "pass", f"no events in {where} ({len(ctx_ev)} events in its context "
                               f"{'|'.join(ctx_globs)}, layers {_layers_text(ctx_ev['layer'])})",
                               context_events=int(len(ctx_ev)))
            return _result(a, "no_evidence", f"neither {where} nor its context {'|'.join(ctx_globs)} matched any "
                           f"event; {_seen_regions(ctx.events)}")
        return _result(a, "no_evidence", f"region {where} matched no events; {_seen_regions(ctx.events)}")
    bad = ev if a.selector.empty else ev[a.selector.mask(ev)]
    if len(bad):
        what = "events exist" if a.selector.empty else f"{a.selector.describe()} ran"
        return _result(a, "fail", f"{what} in {where}: {len(bad)} events, {_fmt_ns(bad['dur_ns'].sum())}, "
                       f"layers {_layers_text(bad['layer'])}", _top_kernels(bad), events=int(len(bad)),
                       time_ns=int(bad["dur_ns"].sum()), layers=_layers_text(bad["layer"]))
    return _result(a, "pass", f"no {a.selector.describe()} among {len(ev)} events in {where}", events=int(len(ev)))


def _max_launches(a: Assertion, ctx: Context) -> CheckResult:
    ev = _scoped(a, ctx.events)
    where = "|".join(a.region)
    if not len(ev):
        return _result(a, "no_evidence", f"region {where} matched no events; {_seen_regions(ctx.events)}")
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
        return _result(a, "fail", f"up to {worst} launches per layer-step in {where}, limit {a.max}; "
                       f"{len(over)} of {len(cnt)} layer-steps over{note}", ex + _top_kernels(grp, 4), **data)
    return _result(a, "pass", f"at most {worst} launches per layer-step in {where} (limit {a.max}, "
                   f"{len(cnt)} layer-steps){note}", **data)


def _forbid_pattern(a: Assertion, ctx: Context) -> CheckResult:
    ev = _scoped(a, ctx.events) if (a.region or a.phase or a.layers is not None) else ctx.events
    if not len(ev):
        return _result(a, "no_evidence", "no device events to search" + (f" in {'|'.join(a.region)}" if a.region else ""))
    rx = re.compile(a.pattern)
    bad = ev[unique_map(ev["name"], lambda s: bool(rx.search(s)))]
    if len(bad):
        return _result(a, "fail", f"{len(bad)} events match /{a.pattern}/ ({_fmt_ns(bad['dur_ns'].sum())}, "
                       f"{bad['name'].nunique()} distinct names)", _top_kernels(bad), events=int(len(bad)))
    return _result(a, "pass", f"none of {len(ev)} events ({ev['name'].nunique()} names) match /{a.pattern}/")


def _dispatch(a: Assertion, ctx: Context) -> CheckResult:
    d = ctx.dispatch
    if not len(d):
        return _result(a, "no_evidence", "the profile has no dispatch log (only the reference runtime writes one)")
    m = glob_mask(d["op"], [a.op])
    if a.phase:
        m = m & (d["phase"] == a.phase).to_numpy(dtype=bool)
    if a.layers is not None:
        m = m & d["layer"].isin(list(a.layers)).to_numpy(dtype=bool)
    rows = d[m]
    if not len(rows):
        ops = sorted({str(o) for o in d["op"].dropna()})
        return _result(a, "no_evidence", f"no dispatch rows for op {a.op}; ops logged: {', '.join(ops) or '-'}")
    ok = rows["impl"].isin(list(a.impl)).to_numpy(dtype=bool)
    bad = rows[~ok]
    impls = rows["impl"].value_counts().to_dict()
    data = {"rows": int(len(rows)), "impls": {str(k): int(v) for k, v in impls.items()}}
    if a.every_layer and len(bad) or (not a.every_layer and not ok.any()):
        ev = []
        for (impl, req, reason), g in bad.groupby(["impl", "requested", "reason"], dropna=False):
            ev.append(f"impl {impl} (requested {req}{', reason: ' + str(reason) if isinstance(reason, str) else ''}) "
                      f"in layers {_layers_text(g['layer'])}, {len(g)} calls")
        return _result(a, "fail", f"{a.op} ran {', '.join(f'{k} x{v}' for k, v in impls.items())}; expected "
                       f"{'|'.join(a.impl)}" + (" in every call" if a.every_layer else ""), ev, **data)
    return _result(a, "pass", f"{a.op} ran {'|'.join(a.impl)} in {int(ok.sum())} of {len(rows)} calls, "
                   f"layers {_layers_text(rows['layer'])}", **data)


# ------------------------------------------------------------------------------------------ summaries
def region_summaries(events: Any, top: int = 6) -> list[RegionSummary]:
    """Per region pattern (layer index replaced by *): layers, events, time, and the variants that ran."""
    if not len(events) or not events["region"].notna().any():
        return []
    ev = events[events["region"].notna()].copy()
    ev["pattern"] = ev["region"].astype(str).str.replace(r"^layers\.\d+\.", "layers.*.", regex=True)
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


# ------------------------------------------------------------------------------------------ built-in checks
def run_check(code: str, ctx: Context) -> CheckResult:
    from mmprof.analysis import fastpath_checks as fc

    info = load_checks()[code]
    fn = {"FP000": fc.fp000, "FP001": fc.fp001, "FP002": fc.fp002, "FP003": fc.fp003, "FP004": fc.fp004}.get(code)
    if fn is None:
        return CheckResult(id=info["name"], code=code, kind="check", status="no_evidence",
                           message=f"{code} is an assertion kind, not a stand-alone check; use it in [[assert]]",
                           description=info["summary"])
    status, message, evidence, data = fn(ctx)
    return CheckResult(id=info["name"], code=code, kind="check", status=status, message=message,
                       description=info["summary"], evidence=evidence[:MAX_EVIDENCE], data=data)


__all__ = ["Context", "dispatch_frame", "evaluate", "region_summaries", "run_check", "math"]
