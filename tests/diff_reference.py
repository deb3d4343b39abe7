"""The diff's grouping as it was before it was vectorised (per-event DataFrame, one groupby per table), kept as
the reference that `tests/test_diff_scale.py` compares the grouped-once implementation against, field by field.

Only the grouping / matching is here (regions, matched work, deltas by scope and layer, path changes); the
verdict, step times and categories come from the timeline and are not re-derived.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mmprof.analysis.compare.diff import (UNSCOPED, _choose_phase, _deltas, _path_changes, _short, _side,
                                  variant_times)
from mmprof.labels import is_marker, module_event


def _roles(profile, ev):
    n = len(ev)
    sinv, su = pd.factorize(ev.scope)
    fb_u = np.array([UNSCOPED if (s < 0 or is_marker(profile.string(int(s))) or module_event(profile.string(int(s))))
                     else profile.string(int(s)) for s in su], dtype=object)
    fallback = fb_u[sinv] if n else np.array([], dtype=object)
    known = ev.role != None  # noqa: E711
    return pd.Categorical(np.where(known, ev.role, fallback))


def _work(side, phase, rank):
    ev = side.events
    m = np.ones(len(ev), dtype=bool)
    if phase is not None:
        m &= side.phase_lab == phase
    if rank is not None:
        m &= ev.rank == rank
    idx = np.flatnonzero(m)
    role = _roles(side.profile, ev)
    df = pd.DataFrame({"step": ev.step[idx], "layer": ev.layer[idx], "role": role[idx],
                       "family": ev.family[idx].astype(str) if len(idx) else pd.Categorical([]),
                       "variant": ev.variant[idx], "library": ev.library[idx], "name": ev.name[idx],
                       "dur": ev.dur[idx].astype(np.float64)})
    for c in ("family", "variant", "library"):
        if not isinstance(df[c].dtype, pd.CategoricalDtype):
            df[c] = df[c].astype("category")
    return df, int(df.loc[df["step"] >= 0, "step"].nunique()) * max(int(len(np.unique(ev.rank[idx]))), 1)


def _agg(df, keys, norm):
    g = df.groupby(keys, observed=True, dropna=False)["dur"].agg(["sum", "count"])
    g["sum"] /= norm
    g["count"] /= norm
    return g


def _variants(df, norm, total, prof):
    g = df.groupby(["role", "family", "variant", "library", "name"], observed=True, dropna=False)["dur"].agg(
        ["sum", "count"]).reset_index()
    if g.empty:
        return {}
    # the per-event grouping above is the reference; the variant records it feeds are built as diff.py builds them
    return variant_times(g, float(len(df)), norm, total, prof)


def reference_grouping(before, after, phase=None, rank=None) -> dict:
    """{matched, by_scope, by_layer, layers, path_changes, per_step} as dicts, computed the per-event way."""
    b, a = _side(before), _side(after)
    ph, _ = _choose_phase(b, a, phase)
    wb, nb = _work(b, ph, rank)
    wa, na = _work(a, ph, rank)
    per_step = nb > 0 and na > 0
    nb, na = (nb, na) if per_step else (1, 1)
    mb, ma = _agg(wb, ["role", "family"], nb), _agg(wa, ["role", "family"], na)
    vb = _variants(wb, nb, float(wb["dur"].sum()), before)
    va = _variants(wa, na, float(wa["dur"].sum()), after)
    detail = {}
    for key in set(mb.index) | set(ma.index):
        role, fam = str(key[0]), str(key[1])
        detail[key] = tuple(", ".join(_short(v.variant, 40) for v in sorted(
            (v for (f, _, _), v in side.get(role, {}).items() if f == fam), key=lambda v: -v.time_ns)[:2])
            for side in (vb, va))
    lb, la = _agg(wb, ["layer"], nb), _agg(wa, ["layer"], na)
    lay = lambda k: (f"layer {k}" if int(k) >= 0 else "(no layer)")  # noqa: E731
    return {"matched": [d.to_dict() for d in _deltas(mb, ma, lambda k: f"{k[0]} / {k[1]}", detail)],
            "by_scope": [d.to_dict() for d in _deltas(_agg(wb, ["role"], nb), _agg(wa, ["role"], na),
                                                      lambda k: str(k[0] if isinstance(k, tuple) else k), top=None)],
            "by_layer": [d.to_dict() for d in _deltas(lb, la, lay)],
            "layers": sorted((d.to_dict() for d in _deltas(lb, la, lay, top=None)),
                             key=lambda d: (d["key"] == "(no layer)",
                                            int(d["key"].split()[-1]) if d["key"] != "(no layer)" else 0)),
            "path_changes": [p.to_dict() for p in _path_changes(vb, va)], "per_step": per_step}
