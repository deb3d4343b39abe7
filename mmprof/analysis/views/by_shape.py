"""`mmprof report --by-shape`: a roofline row for every (region, op, input shapes, dtype), and GPU time per op.

A device event's op is the CPU op that launched it (`kernels.op`, the innermost op carrying shapes; on a CPU run
the outermost compute op itself). Its work is `mmprof.analysis.attribution.flops` (GEMMs, grouped GEMMs `aten::_grouped_mm`
and fused-MoE expert ops, attention: SDPA, flash, cuDNN, and elementwise / norm / reduction / copy ops), shared
among the op's kernels by duration (`mmprof.analysis.attribution.roofline`). Rows group the events of one op with the same
input shapes and dtypes in the same part of the model: the region's role (`attn.qkv`, `moe.routed`, `lm_head`;
the layers it ran in are listed), from annotations, nn.Module events or `--model` shape matching.

Per row: calls (distinct op calls), GPU time, FLOPs and bytes (totals), TFLOP/s and TB/s achieved, FLOP per byte,
the bound (the roofline side most of its time falls on) and the share of that roofline reached (time-weighted
over its kernels, against the device's peak), and the kernels it dispatched. Communication and copies have no
roofline and are left out of the shape rows; the per-op table has everything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pandas as pd

from mmprof.analysis.timeline.columns import call_ids, CAT_COMM, CAT_MEMCPY
from mmprof.analysis.timeline.events import events_of
from mmprof.analysis.attribution.roofline import BOUND_COMPUTE, BOUND_MEMORY
from mmprof.analysis.timeline.phases import phase_labels
from mmprof.errors import NoEvidence
from mmprof.units import fmt_ranges

NO_OP = "(no CPU op)"
UNSCOPED = "(unscoped)"
KERNELS_PER_ROW = 4


@dataclass
class KernelUse:
    name: str
    variant: str
    calls: int
    time_ns: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ShapeRow:
    region: str                 # the role (attn.qkv, moe.routed, lm_head, ...) or (unscoped)
    layers: str                 # layer indices it ran in ("0-5"; "-" none)
    op: str
    shapes: str                 # input dims as the profiler wrote them
    dtype: str                  # the inputs' tensor dtypes
    family: str
    calls: int
    time_ns: int
    share: float                # of the selection's compute time
    flops: float | None         # totals over the calls
    bytes: float | None
    tflops: float | None        # achieved
    tbs: float | None
    intensity: float | None     # FLOP per byte
    bound: str                  # compute, memory or unknown
    of_roofline: float | None   # achieved / peak of the bound, time-weighted
    kernels: list[KernelUse]

    def to_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in self.__dict__.items() if k != "kernels"},
                "kernels": [k.to_dict() for k in self.kernels]}


@dataclass
class OpTime:
    op: str
    family: str
    calls: int
    time_ns: int
    share: float                # of the selection's event time
    kernels: list[KernelUse]

    def to_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in self.__dict__.items() if k != "kernels"},
                "kernels": [k.to_dict() for k in self.kernels]}


@dataclass
class ByShape:
    source: str
    phase: str | None
    rank: int | None
    devices: dict[int, str | None]
    rows: list[ShapeRow]
    ops: list[OpTime]
    compute_ns: int
    total_ns: int
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "phase": self.phase, "rank": self.rank, "devices": self.devices,
                "compute_ns": self.compute_ns, "total_ns": self.total_ns, "rows": [r.to_dict() for r in self.rows],
                "ops": [o.to_dict() for o in self.ops], "notes": self.notes, "warnings": self.warnings}


def _dtypes(types: str | None) -> str:
    """'["c10::BFloat16", "c10::BFloat16", "int", ""]' -> 'bfloat16,int'."""
    try:
        ts = orjson.loads(types) if types else []
    except orjson.JSONDecodeError:
        return "?"
    out = []
    for t in ts if isinstance(ts, list) else []:
        if isinstance(t, str) and t and t not in ("Scalar", "TensorList", "ScalarList", "GenericList"):
            t = t.replace("c10::", "").lower()
            if t not in out:
                out.append(t)
    return ",".join(out) or "-"


def _kernels(df: pd.DataFrame, gid: np.ndarray, prof) -> dict[int, list[KernelUse]]:
    """The top kernels (by time) of every group: one aggregation over all groups at once."""
    k = pd.DataFrame({"g": gid, "k": df["kname"].to_numpy(), "d": df["dur"].to_numpy(),
                      "v": df["variant"].to_numpy()})
    a = k.groupby(["g", "k"], sort=False).agg(n=("d", "size"), t=("d", "sum"), v=("v", "first")).reset_index()
    a = a.sort_values(["g", "t"], ascending=[True, False], kind="stable")
    a = a[a.groupby("g", sort=False).cumcount() < KERNELS_PER_ROW]
    out: dict[int, list[KernelUse]] = {}
    for g, kn, n, t, v in zip(a["g"].tolist(), a["k"].tolist(), a["n"].tolist(), a["t"].tolist(), a["v"].tolist()):
        out.setdefault(int(g), []).append(KernelUse(prof.string(int(kn)) or "?", str(v), int(n), int(t)))
    return out


def _family(df: pd.DataFrame, gid: np.ndarray) -> dict[int, str]:
    """The most frequent family of every group."""
    f = pd.DataFrame({"g": gid, "f": df["family"].to_numpy()}).groupby(["g", "f"], sort=False).size()
    f = f.sort_values(ascending=False, kind="stable").reset_index().drop_duplicates("g")
    return dict(zip(f["g"].tolist(), f["f"].tolist()))


def by_shape(profile, phase: str | None = None, rank: int | None = None, shape_regions=None,
             events=None) -> ByShape:
    """The per-shape roofline table and the per-op time table of one Profile (see the module docstring)."""
    ev = events if events is not None else events_of(profile, shape_regions=shape_regions)
    if not len(ev):
        raise NoEvidence("the profile has no kernels, copies or CPU ops: no shapes to tabulate")
    m = np.ones(len(ev), dtype=bool)
    if phase is not None:
        lab = phase_labels(profile, ev.phase)
        if phase not in set(lab):
            raise NoEvidence(f"the profile has no {phase!r} phase (it has: {', '.join(sorted(set(lab)))})")
        m &= lab == phase
    if rank is not None:
        if rank not in set(ev.rank.tolist()):
            raise NoEvidence(f"the profile has no events on rank {rank}")
        m &= ev.rank == rank
    idx = np.flatnonzero(m)
    O = profile.tables["ops"]
    op = ev.op[idx]
    has = op >= 0
    safe = np.where(has, op, 0)
    roof = ev.roof
    role = ev.role[idx]
    region = np.where(role != None, role, np.where(ev.region[idx] != None, ev.region[idx], UNSCOPED))
    b = roof.bound[idx]
    dur = ev.dur[idx].astype(np.float64)
    df = pd.DataFrame({
        "region": region.astype(object), "layer": ev.layer[idx],
        "op": np.where(has, O["name"][safe] if len(O["name"]) else -1, -2),
        "dims": np.where(has, O["input_dims"][safe] if len(O["name"]) else -1, -1),
        "types": np.where(has, O["input_types"][safe] if len(O["name"]) else -1, -1),
        "row": np.where(has, call_ids(op, ev.graph[idx], profile.n("launches")), -(idx + 1)), "kname": ev.name[idx], "variant": np.asarray(ev.variant[idx]).astype(str),
        "family": np.asarray(ev.family[idx]).astype(str), "dur": dur, "cat": ev.cat[idx],
        "fl": np.nan_to_num(roof.flops[idx]), "by": np.nan_to_num(roof.bytes[idx]),
        "known": np.isfinite(roof.flops[idx]) & np.isfinite(roof.bytes[idx]),
        "c": (b == BOUND_COMPUTE) * dur, "mm": (b == BOUND_MEMORY) * dur,
        "ce": np.where(b == BOUND_COMPUTE, np.nan_to_num(roof.efficiency[idx]) * dur, 0.0),
        "me": np.where(b == BOUND_MEMORY, np.nan_to_num(roof.efficiency[idx]) * dur, 0.0)})
    df["kt"] = df["known"] * df["dur"]
    total = float(df["dur"].sum())
    comp = df[~np.isin(df["cat"], [CAT_COMM, CAT_MEMCPY])]
    compute_ns = float(comp["dur"].sum())
    s = profile.string
    keys = ["region", "op", "dims", "types"]
    gid = comp.groupby(keys, sort=False).ngroup().to_numpy()
    agg = comp.assign(g=gid).groupby("g", sort=True).agg(
        region=("region", "first"), op=("op", "first"), dims=("dims", "first"), types=("types", "first"),
        t=("dur", "sum"), kt=("kt", "sum"), fl=("fl", "sum"), by=("by", "sum"), c=("c", "sum"), mm=("mm", "sum"),
        ce=("ce", "sum"), me=("me", "sum"), calls=("row", "nunique"),
        layers=("layer", lambda x: fmt_ranges(x.unique().tolist())))
    kernels, families = _kernels(comp, gid, profile), _family(comp, gid)
    rows = []
    for g, r in zip(agg.index.tolist(), agg.itertuples(index=False)):
        t, kt, c, mm = float(r.t), float(r.kt), float(r.c), float(r.mm)
        fl, by = float(r.fl), float(r.by)
        known = kt > 0
        bound = "unknown" if c + mm == 0 else ("compute" if c >= mm else "memory")
        eff = (float(r.ce) / c if bound == "compute" else float(r.me) / mm) if c + mm else None
        rows.append(ShapeRow(
            str(r.region), r.layers, NO_OP if r.op == -2 else (s(int(r.op)) or "?"),
            (s(int(r.dims)) or "-") if r.dims >= 0 else "-", _dtypes(s(int(r.types)) if r.types >= 0 else None),
            str(families[g]), int(r.calls), int(t), t / compute_ns if compute_ns else 0.0,
            fl if known else None, by if known else None,
            fl / (kt * 1e-9) / 1e12 if known else None, by / (kt * 1e-9) / 1e12 if known else None,
            fl / by if known and by > 0 else None, bound, eff, kernels.get(g, [])))
    rows.sort(key=lambda r: -r.time_ns)
    ogid = df.groupby("op", sort=False).ngroup().to_numpy()
    oagg = df.assign(g=ogid).groupby("g", sort=True).agg(op=("op", "first"), t=("dur", "sum"),
                                                          calls=("row", "nunique"))
    okern, ofam = _kernels(df, ogid, profile), _family(df, ogid)
    ops = [OpTime(NO_OP if r.op == -2 else (s(int(r.op)) or "?"), str(ofam[g]), int(r.calls), int(r.t),
                  float(r.t) / total if total else 0.0, okern.get(g, []))
           for g, r in zip(oagg.index.tolist(), oagg.itertuples(index=False))]
    ops.sort(key=lambda o: -o.time_ns)
    notes = list(ev.notes)
    no_op = int((~has).sum())
    if no_op:
        notes.append(f"{no_op} events have no CPU op (no launch correlation or no record_shapes): "
                     f"row '{NO_OP}', without shapes")
    devices = {r: (p.name if p else None) for r, p in roof.peaks.items()}
    return ByShape(ev.source, phase, rank, devices, rows, ops, int(compute_ns), int(total), notes,
                   list(ev.warnings))
