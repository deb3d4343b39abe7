"""Collectives across ranks: each call aligned with its instances on the other ranks, the time each rank waited
for the slowest peer, and the bus bandwidth per collective and message size.

Rank clocks are not aligned (each rank's trace has its own timeline), so nothing here compares timestamps of two
ranks. Instead:

- **Alignment by call order.** Per rank, the calls of one collective on one process group within one phase and
  step are numbered in start order; call k of rank A and call k of rank B are the same instance. Where ranks made
  a different number of such calls only the first min(...) are aligned (a warning says so).
- **Waiting from durations.** A blocking collective ends on every rank at about the same moment, so the rank that
  arrived last has the shortest duration: that minimum is the transfer (plus the protocol's fixed cost), and the
  excess of each rank over it is the time it waited for the slowest peer.
- **Bus bandwidth** per NCCL's conventions (nccl-tests `PERFORMANCE.md`): with S the message size in bytes
  (all-reduce: the buffer; all-gather: the gathered output; reduce-scatter: the full input; all-to-all: the bytes
  each rank sends) and t the transfer time, algbw = S / t and busbw = algbw x 2(n-1)/n for all-reduce,
  x (n-1)/n for all-gather, reduce-scatter and all-to-all, x 1 for broadcast, reduce and point-to-point, with n
  the group size. busbw is comparable with the per-direction peak of a GPU's links (`mmprof.hardware.LINKS`).
  With one rank in the profile there is no peer to compare with: its own duration (wait included) is the time,
  and the bandwidth is a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.timeline.columns import TABLE_KERNELS, TABLE_OPS
from mmprof.hardware import LinkPeak, profile_links
from mmprof.units import fmt_ns

# busbw / algbw by collective, for a group of n ranks
_FACTORS = {
    "allreduce": lambda n: 2.0 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


def bus_factor(name: str | None, n: int) -> float | None:
    """busbw / algbw for a collective on n ranks (nccl-tests PERFORMANCE.md); None when not defined or n unknown."""
    f = _FACTORS.get(name or "")
    return None if f is None or n is None or n < 1 else f(n)


@dataclass
class Calls:
    """One row per collective call of the profile (the `collectives` table), aligned across ranks."""

    rank: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    name: np.ndarray          # object: allreduce, allgather, ...
    group: np.ndarray         # object: the alignment key's group part
    size: np.ndarray          # message size S in bytes (max of in/out), -1 unknown
    dtype: np.ndarray         # object
    group_size: np.ndarray    # -1 unknown
    phase: np.ndarray         # object: phase labels (`mmprof.analysis.timeline.breakdown.phase_labels`)
    step: np.ndarray
    event: np.ndarray         # the call's row in the event frame (its kernel or CPU op), -1 none
    instance: np.ndarray      # aligned instance id, -1 not aligned
    peers: np.ndarray         # ranks holding the instance (1 = only this rank)
    wait: np.ndarray          # ns waited for the slowest peer (0 when not aligned)
    transfer: np.ndarray      # ns: the instance's shortest duration over ranks (own duration when alone)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rank)


def _event_index(ev, table: int, rows: np.ndarray) -> np.ndarray:
    """Event-frame index of rows of one Profile table (-1 where the row is not an event)."""
    out = np.full(len(rows), -1, dtype=np.int64)
    sel = np.flatnonzero(ev.table == table)
    if not len(sel) or not len(rows):
        return out
    lut = pd.Series(sel, index=ev.row[sel])
    lut = lut[~lut.index.duplicated()]
    ok = rows >= 0
    out[ok] = lut.reindex(rows[ok]).fillna(-1).to_numpy(dtype=np.int64)
    return out


def align_calls(profile, ev, phase: np.ndarray) -> Calls:
    """Align the profile's collective calls across ranks (see the module docstring). `phase` gives the phase label
    of every row of the collectives table (in the vocabulary of the event frame's phase labels)."""
    C = profile.tables["collectives"]
    n = profile.n("collectives")
    s = profile.string
    name = np.array([s(int(i)) or "?" for i in C["name"]], dtype=object)
    grp = np.array([s(int(g)) if g >= 0 else (s(int(r)) if r >= 0 else f"size {z}")
                    for g, r, z in zip(C["group"], C["group_ranks"], C["group_size"])], dtype=object)
    dtype = np.array([s(int(d)) if d >= 0 else None for d in C["dtype"]], dtype=object)
    size = np.maximum(C["bytes_in"], C["bytes_out"]).astype(np.int64)
    ev_k = _event_index(ev, TABLE_KERNELS, C["kernel"]) if ev.source == "kernels" else np.full(n, -1, np.int64)
    ev_o = _event_index(ev, TABLE_OPS, C["op"]) if ev.source == "cpu_ops" else np.full(n, -1, np.int64)
    event = np.where(ev_k >= 0, ev_k, ev_o)
    df = pd.DataFrame({"rank": C["rank"], "start": C["start_ns"], "dur": np.maximum(C["dur_ns"], 0), "name": name,
                       "group": grp, "phase": phase, "step": C["step"], "size": size})
    df = df.sort_values(["rank", "start"], kind="stable")
    warnings, notes = [], []
    # the finest key whose call counts agree on every rank: step labels anchor the alignment when ranks captured
    # different steps, but a collective launched outside the step range on one rank only (autograd threads, a
    # late launch) has no step there, and then call order over the phase or the profile is the better key
    for keys in (["group", "name", "phase", "step"], ["group", "name", "phase"], ["group", "name"]):
        seq = df.groupby(["rank", *keys], sort=False).cumcount()
        calls = seq.groupby([df[k] for k in ["rank", *keys]], sort=False).transform("size")
        by_key = calls.groupby([df[k] for k in keys], sort=False)
        lim, most = by_key.transform("min").to_numpy(), by_key.transform("max").to_numpy()
        if (lim == most).all():
            break
    else:
        keys = ["group", "name", "phase", "step"]
        seq = df.groupby(["rank", *keys], sort=False).cumcount()
        calls = seq.groupby([df[k] for k in ["rank", *keys]], sort=False).transform("size")
        by_key = calls.groupby([df[k] for k in keys], sort=False)
        lim, most = by_key.transform("min").to_numpy(), by_key.transform("max").to_numpy()
        uneven = np.flatnonzero(lim != most)
        r = df.iloc[int(uneven[0])]
        nkeys = df.iloc[uneven].groupby(keys, sort=False).ngroups
        warnings.append(f"{nkeys} collective(s) were called a different number of times on different ranks "
                        f"(e.g. {r['name']} on {r['group']}, phase {r['phase']}, step {r['step']}: "
                        f"{int(lim[uneven[0]])} to {int(most[uneven[0]])} calls): only the first calls of each are aligned")
    if "step" not in keys:
        notes.append("collectives carry different step labels on different ranks: aligned by call order over "
                     + ("each phase" if "phase" in keys else "the whole profile"))
    df["seq"] = seq.to_numpy()
    matched = df["seq"].to_numpy() < lim
    inst = np.where(matched, df.groupby([*keys, "seq"], sort=False).ngroup().to_numpy(), -1) if len(df) else \
        np.zeros(0, np.int64)
    df["inst"] = inst
    grp_by = df[matched].groupby("inst")["dur"]
    dmin = pd.Series(df["dur"].to_numpy(), index=df.index)
    peers = pd.Series(1, index=df.index)
    if matched.any():
        dmin[matched] = grp_by.transform("min").to_numpy()
        peers[matched] = grp_by.transform("size").to_numpy()
        sizes = df[matched].groupby("inst")["size"].agg(["min", "max"])
        bad = int((sizes["min"] != sizes["max"]).sum())
        if bad:
            warnings.append(f"{bad} aligned collective instance(s) have different message sizes on different ranks: "
                            "the ranks called collectives in a different order, so their waits may be wrong")
    wait = np.where(matched, df["dur"].to_numpy() - dmin.to_numpy(), 0)
    # the first call on each group: the ranks reach it after start-up (process start, model load, warm-up) at
    # different times, which is skew, not imbalance: left out of the waits
    first = (df.groupby(["rank", "group"], sort=False).cumcount().to_numpy() == 0) & matched & (wait > 0)
    skew = wait[first]
    if len(skew) and skew.max() > 0:
        notes.append(f"the ranks reached their first collective up to {fmt_ns(float(skew.max()))} apart (start-up "
                     "skew): left out of the waits")
    wait = np.where(first, 0, wait)
    order = df.index.to_numpy()
    out = np.empty(n, dtype=np.int64)
    out[order] = np.arange(n)  # position of each table row in df

    def back(a) -> np.ndarray:
        return np.asarray(a)[out] if n else np.asarray(a)

    return Calls(rank=C["rank"].copy(), start=C["start_ns"].copy(), dur=np.maximum(C["dur_ns"], 0), name=name,
                 group=grp, size=size, dtype=dtype, group_size=C["group_size"].copy(), phase=phase,
                 step=C["step"].copy(), event=event, instance=back(inst), peers=back(peers.to_numpy()),
                 wait=back(wait), transfer=back(dmin.to_numpy()), warnings=warnings, notes=notes)


@dataclass
class CollectiveStat:
    """One collective and message size: its instances' transfer times, bandwidths and skew."""

    name: str
    bytes: int | None             # message size S (None: unknown)
    dtype: str | None
    group_size: int | None
    calls: int                    # instances (aligned calls count once)
    ranks: int                    # most ranks holding one instance
    time_ns: float                # median transfer time per instance
    algbw_gbs: float | None       # S / median time
    busbw_gbs: float | None       # algbw x the collective's factor
    best_busbw_gbs: float | None  # from the fastest instance
    peak_gbs: float | None        # the link's per-direction peak (None: unknown device or CPU)
    peak_link: str | None
    of_peak: float | None         # busbw / peak
    skew_ns: float                # median over instances of (slowest - fastest rank's duration) = the most waited
    skew_max_ns: float
    lower_bound: bool             # one rank only: the time includes any wait, the bandwidth is a lower bound

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def collective_stats(profile, calls: Calls, mask: np.ndarray | None = None) -> tuple[list[CollectiveStat], dict]:
    """Per (collective, message size, dtype, group size): see CollectiveStat. Also returns the link peak per rank."""
    links = profile_links(profile)
    m = np.ones(len(calls), dtype=bool) if mask is None else mask
    if not m.any():
        return [], {r: (p.to_dict() if p else None) for r, p in links.items()}
    idx = np.flatnonzero(m)
    inst = calls.instance[idx]
    solo = inst < 0
    key = np.where(solo, -(idx + 1), inst)  # unaligned calls are instances of their own
    df = pd.DataFrame({"key": key, "name": calls.name[idx], "size": calls.size[idx], "dtype": calls.dtype[idx],
                       "n": calls.group_size[idx], "dur": calls.dur[idx], "rank": calls.rank[idx]})
    df["dtype"] = df["dtype"].fillna("-")
    g = df.groupby("key").agg(name=("name", "first"), size=("size", "max"), dtype=("dtype", "first"),
                              n=("n", "max"), t=("dur", "min"), tmax=("dur", "max"), ranks=("rank", "nunique"))
    g["skew"] = g["tmax"] - g["t"]
    out = []
    for (name, size, dt, n), s in g.groupby(["name", "size", "dtype", "n"], sort=False):
        t = float(s["t"].median())
        tbest = float(s["t"].min())
        nranks = int(s["ranks"].max())
        lk = {links.get(int(r)) for r in df.loc[df["key"].isin(s.index), "rank"].unique()}
        link: LinkPeak | None = lk.pop() if len(lk) == 1 else None
        known = size is not None and size > 0
        alg = size / (t * 1e-9) if known and t > 0 else None   # bytes/s
        f = bus_factor(name, int(n)) if n and n > 0 else None
        bus = alg * f if alg is not None and f is not None else None
        best = size / (tbest * 1e-9) * f if known and tbest > 0 and f is not None else None
        peak = link.gbs_per_direction if link else None
        out.append(CollectiveStat(
            str(name), int(size) if size >= 0 else None, None if dt == "-" else str(dt), int(n) if n > 0 else None,
            len(s), nranks, t, alg / 1e9 if alg is not None else None, bus / 1e9 if bus is not None else None,
            best / 1e9 if best is not None else None, peak, link.link if link else None,
            (bus / 1e9 / peak) if bus is not None and peak else None, float(s["skew"].median()),
            float(s["skew"].max()), nranks < 2))
    out.sort(key=lambda c: -(c.time_ns * c.calls))
    return out, {r: (p.to_dict() if p else None) for r, p in links.items()}
