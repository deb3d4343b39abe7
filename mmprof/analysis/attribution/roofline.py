"""Roofline from shapes: per device event, FLOPs and bytes of its op, achieved rates, and the bound.

A kernel's op is `kernels.op` (the innermost CPU op that launched it, carrying input shapes). When one op launched
several kernels, the op's FLOPs and bytes are shared among them in proportion to duration, so every kernel of the
op gets the op's arithmetic intensity and the op's achieved rate. The bound compares the intensity with the
device's ridge point for the op's dtype (bf16/fp16, fp8, fp32). An op whose kind fixes its bound (`OpCost.bound`:
Inductor's pointwise and reduction kernels are memory-bound) gets that bound without a FLOP count, and an efficiency
when its bytes are known. No shapes, an op not covered by `mmprof.analysis.attribution.flops`, or no device peak: the
bound is unknown ("unattributed compute"), never guessed.

Vectorised: FLOPs are computed once per distinct (op name, input_dims, input_types) and broadcast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.attribution.flops import cost_from_text
from mmprof.hardware import Peak, profile_peaks

BOUND_COMPUTE, BOUND_MEMORY, BOUND_UNKNOWN = 0, 1, -1
OVER_PEAK = 1.1  # an efficiency above this is reported: above the peak is a measurement or estimate error
_DTYPES = ("bf16", "fp8", "fp32")


@dataclass
class Roofline:
    """Arrays aligned with the events (kernels, or CPU ops for a CPU run). NaN / -1 where unknown."""

    flops: np.ndarray
    bytes: np.ndarray
    intensity: np.ndarray
    bound: np.ndarray          # int8: 0 compute-bound, 1 memory-bound, -1 unknown
    achieved_flops: np.ndarray  # FLOP/s
    achieved_bytes: np.ndarray  # bytes/s
    efficiency: np.ndarray     # achieved / peak of the bounding resource, 0..1+
    peaks: dict[int, Peak | None]
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        known = self.bound >= 0
        return {"events": int(len(self.bound)), "with_bound": int(known.sum()),
                "compute_bound": int((self.bound == BOUND_COMPUTE).sum()),
                "memory_bound": int((self.bound == BOUND_MEMORY).sum()),
                "peaks": {r: (p.to_dict() if p else None) for r, p in self.peaks.items()},
                "warnings": self.warnings, "notes": self.notes}


def _unique_triples(profile, op_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unique op rows standing for each distinct (name, dims, types), inverse mapping op_idx -> unique slot)."""
    ops = profile.tables["ops"]
    names, dims, types = ops["name"], ops["input_dims"], ops["input_types"]
    n = len(profile.strings) + 1
    if n ** 3 < 2 ** 62:   # gathered first, widened after: no int64 copy of whole columns
        key = ((names[op_idx].astype(np.int64) + 1)
               + n * ((dims[op_idx].astype(np.int64) + 1) + n * (types[op_idx].astype(np.int64) + 1)))
        inv, uniq = pd.factorize(key)
        first = np.empty(len(uniq), dtype=np.int64)
        first[inv] = np.arange(len(inv))  # any occurrence stands for its triple
    else:  # pragma: no cover - only with billions of strings
        trip = np.stack([names[op_idx], dims[op_idx], types[op_idx]], axis=1).astype(np.int64)
        _, first, inv = np.unique(trip, axis=0, return_index=True, return_inverse=True)
    return op_idx[first], inv.reshape(-1)


def event_roofline(profile, op_idx: np.ndarray, dur_ns: np.ndarray, rank: np.ndarray,
                   eligible: np.ndarray | None = None, call: np.ndarray | None = None) -> Roofline:
    """Roofline of events (kernels or CPU ops) given their op row, duration and rank.

    `eligible` masks events that may get a bound (communication and copies are categorised elsewhere). An op's
    work is shared among the events of one *call* of it, by duration; a call is the op row unless `call` gives
    another key per event (graph replays: every replay of a captured op is a call of its own).
    """
    n = len(op_idx)
    flops = np.full(n, np.nan)
    byts = np.full(n, np.nan)
    dcls = np.full(n, -1, dtype=np.int8)
    peaks, warnings, notes = profile_peaks(profile)
    has = op_idx >= 0
    if eligible is not None:
        has &= eligible
    idx = np.flatnonzero(has)
    if len(idx):
        rows, inv = _unique_triples(profile, op_idx[idx])
        names = profile.col("ops", "name")
        dims = profile.col("ops", "input_dims")
        types = profile.col("ops", "input_types")
        u_fl = np.full(len(rows), np.nan)
        u_by = np.full(len(rows), np.nan)
        u_dc = np.full(len(rows), -1, dtype=np.int8)
        u_mem = np.zeros(len(rows), dtype=bool)  # memory-bound by kind (no FLOP count)
        for j, r in enumerate(rows.tolist()):
            c = cost_from_text(profile.string(names[r]), profile.string(dims[r]), profile.string(types[r]))
            if c is not None and c.bound == "memory":
                u_mem[j], u_by[j] = True, c.bytes
            elif c is not None and c.bytes > 0:
                u_fl[j], u_by[j] = c.flops, c.bytes
                u_dc[j] = _DTYPES.index(c.dtype_class) if c.dtype_class in _DTYPES else -1
        # share each op's work among its kernels by duration
        if call is None:
            calls, ncalls = op_idx[idx], profile.n("ops")
        else:
            calls, uniq = pd.factorize(call[idx])
            ncalls = len(uniq)
        tot = np.bincount(calls, weights=dur_ns[idx].astype(np.float64), minlength=ncalls)
        cnt = np.bincount(calls, minlength=ncalls)
        denom = tot[calls]
        pos = denom > 0
        share = np.divide(dur_ns[idx], denom, out=np.empty(len(idx)), where=pos)  # by duration; equally if none
        if not pos.all():
            share[~pos] = 1.0 / cnt[calls[~pos]]
        flops[idx] = u_fl[inv] * share
        byts[idx] = u_by[inv] * share
        dcls[idx] = u_dc[inv]
        mem_kind = np.zeros(n, dtype=bool)
        mem_kind[idx] = u_mem[inv]
    else:
        mem_kind = np.zeros(n, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = flops / byts
        secs = dur_ns.astype(np.float64) * 1e-9
        pos = secs > 0
        ach_f = np.divide(flops, secs, out=np.full(n, np.nan), where=pos)   # no temporaries: the same values
        ach_b = np.divide(byts, secs, out=np.full(n, np.nan), where=pos)
    bound = np.full(n, BOUND_UNKNOWN, dtype=np.int8)
    eff = np.full(n, np.nan)
    # peaks per event: by rank and dtype class; the bandwidth roof also by the bytes an event moves (cache levels)
    rinv, ranks_u = pd.factorize(rank) if n else (np.array([], dtype=np.int64), np.array([], dtype=np.int64))
    ranks_u = np.asarray(ranks_u)
    pf = np.full((len(ranks_u), len(_DTYPES)), np.nan)
    ok = np.flatnonzero((dcls >= 0) & np.isfinite(intensity))   # the events a bound can be given: only these
    r_ok = rinv[ok]                                             # need the roofs
    e_pb = np.full(len(ok), np.nan)
    for i, r in enumerate(ranks_u.tolist()):
        p = peaks.get(r)
        if p is not None:
            m = r_ok == i
            e_pb[m] = p.mem_bytes_per_s(byts[ok[m]])
            for k, d in enumerate(_DTYPES):
                v = p.flops_per_s(d)
                pf[i, k] = np.nan if v is None else v
    if len(ok):
        e_pf = pf[r_ok, dcls[ok]]
        with np.errstate(divide="ignore", invalid="ignore"):
            ridge = e_pf / e_pb
            valid = np.isfinite(ridge)
            it = intensity[ok]
            c_sub, m_sub = valid & (it >= ridge), valid & (it < ridge)
            comp, mem = ok[c_sub], ok[m_sub]                    # event indices
            bound[comp] = BOUND_COMPUTE
            bound[mem] = BOUND_MEMORY
            eff[comp] = ach_f[comp] / e_pf[c_sub]
            eff[mem] = ach_b[mem] / e_pb[m_sub]
        for i, r in enumerate(ranks_u.tolist()):  # what the measured peaks of a rank cannot support
            p = peaks.get(r)
            if p is None:
                continue
            if not p.compute_eff:
                eff[comp[rinv[comp] == i]] = np.nan
            if p.min_mem_bytes:
                eff[mem[(rinv[mem] == i) & (byts[mem] < p.min_mem_bytes)]] = np.nan
    _bound_by_kind(mem_kind, byts, ach_b, rank, peaks, bound, eff)
    if len(ok) or mem_kind.any():
        over = np.isfinite(eff) & (eff > OVER_PEAK)
        if over.any():  # never silently: either the peak or the shape-based work estimate is off
            warnings.append(_over_peak(profile, op_idx, eff, over, peaks, rank, bound))
    return Roofline(flops, byts, intensity, bound, ach_f, ach_b, eff, peaks, warnings, notes)


def _bound_by_kind(mem_kind: np.ndarray, byts: np.ndarray, ach_b: np.ndarray, rank: np.ndarray, peaks: dict,
                   bound: np.ndarray, eff: np.ndarray) -> None:
    """Events whose op is memory-bound by its kind: that bound where a device peak is known, and the efficiency
    over the bandwidth roof where their bytes are known."""
    for r, p in peaks.items():
        if p is None:
            continue
        sel = np.flatnonzero(mem_kind & (rank == r))
        if not len(sel):
            continue
        bound[sel] = BOUND_MEMORY
        known = sel[np.isfinite(byts[sel])]
        if len(known):
            roof = p.mem_bytes_per_s(byts[known])
            e = np.divide(ach_b[known], roof, out=np.full(len(known), np.nan), where=roof > 0)
            if p.min_mem_bytes:
                e[byts[known] < p.min_mem_bytes] = np.nan
            eff[known] = e


def _over_peak(profile, op_idx: np.ndarray, eff: np.ndarray, over: np.ndarray, peaks: dict, rank: np.ndarray,
               bound: np.ndarray) -> str:
    """The warning for events above the peak: how many, which ops, and the likely cause for each bound and kind of
    peak (an efficiency above 100% is an error of the peak or of the work estimate, never a result)."""
    names = profile.tables["ops"]["name"]
    ops = op_idx[over]
    ids = np.where(ops >= 0, names[np.clip(ops, 0, None)] if len(names) else -1, -1)
    df = pd.DataFrame({"name": ids, "eff": eff[over]}).groupby("name")["eff"].agg(["size", "max"])
    top = df.sort_values(["size", "max"], ascending=False).head(3)
    what = ", ".join(f"{profile.string(int(k)) if k >= 0 else '?'} x{int(v['size'])} (up to {v['max']:.0%})"
                     for k, v in top.iterrows())
    over_ranks = set(rank[over].tolist())
    measured = any(p is not None and p.key == "measured" for r, p in peaks.items() if r in over_ranks)
    why = []
    if measured:
        why.append("the peaks were measured once, at the start of the run, on a machine other work shares: an op "
                   "that ran while that work paused beats them")
    else:
        if (over & (bound == BOUND_MEMORY)).any():
            why.append("a memory-bound op whose data sat in the GPU's cache (L2) moved fewer bytes through HBM than "
                       "its shapes say, so its rate over the HBM peak exceeds 100%")
        if (over & (bound == BOUND_COMPUTE)).any():
            why.append("a compute-bound op did less work than its shapes say (e.g. masked, causal or skipped work "
                       "counted as dense)")
    return (f"{int(over.sum())} events run above the peak ({what}): " + "; ".join(why)
            + "; these efficiencies are not trustworthy")


@dataclass
class BoundSummary:
    """Time by bound for a set of events, and the efficiency of each bound (time-weighted)."""

    compute_ns: int
    memory_ns: int
    unknown_ns: int
    compute_eff: float | None   # achieved FLOP/s over peak, aggregated over compute-bound events
    memory_eff: float | None    # achieved bytes/s over peak, aggregated over memory-bound events

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def summarise_bounds(roof: Roofline, dur_ns: np.ndarray, rank: np.ndarray, mask: np.ndarray | None = None) -> BoundSummary:
    """Aggregate time by bound, with efficiency = sum(work) / sum(time) / peak (per rank peak)."""
    m = np.ones(len(dur_ns), dtype=bool) if mask is None else mask
    b = roof.bound
    d = dur_ns.astype(np.float64)
    comp, mem = m & (b == BOUND_COMPUTE), m & (b == BOUND_MEMORY)
    has = np.isfinite(roof.efficiency)

    def eff(sel: np.ndarray) -> float | None:
        # weighted by time: sum(eff_i * t_i) / sum(t_i) == sum(work_i / peak_i) / sum(t_i), over the events that
        # have an efficiency (a bound without one, e.g. a cache-resident op on a CPU, does not count as 0)
        s = sel & has
        return float((roof.efficiency[s] * d[s]).sum() / d[s].sum()) if s.any() and d[s].sum() > 0 else None

    ce, me = eff(comp), eff(mem)
    return BoundSummary(int(d[comp].sum()), int(d[mem].sum()), int(d[m & (b == BOUND_UNKNOWN)].sum()), ce, me)
