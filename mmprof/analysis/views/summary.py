"""Per-rank summary of a Profile: wall span, GPU busy and idle, top kernels, top ops, per-stream busy.

A pure function over a Profile (`summarize`) returning dataclasses; the CLI renders them as rich tables or
JSON. GPU busy is the union of kernel and memcpy/memset intervals over all streams of the rank (overlap
between streams counted once); idle is the rest of the GPU span (first to last GPU event).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mmprof.analysis.timeline.intervals import busy_by_key, union_length
from mmprof.errors import BadInput
from mmprof.names import display_name
from mmprof.profiles.profile import Profile

TIMED_TABLES = ("kernels", "ops", "launches", "memcpy", "collectives", "scopes")


@dataclass
class KernelStat:
    name: str
    count: int
    total_ns: int
    mean_ns: float
    share: float  # of the rank's summed kernel time
    display_name: str = ""  # mmprof.names.display_name: derived on load, never stored

    def __post_init__(self) -> None:
        self.display_name = self.display_name or display_name(self.name)


@dataclass
class OpStat:
    name: str
    count: int
    total_ns: int
    self_ns: int


@dataclass
class StreamStat:
    device: int
    stream: int
    kernels: int
    busy_ns: int
    busy_share: float  # of the GPU span


@dataclass
class RankSummary:
    rank: int
    devices: list[str]
    wall_start_ns: int | None
    wall_ns: int
    has_gpu: bool
    gpu_span_ns: int
    gpu_busy_ns: int
    gpu_idle_ns: int
    gpu_busy_share: float | None  # busy / GPU span; None without GPU events
    kernels: int
    kernel_time_ns: int
    memcpy: int
    memcpy_bytes: int
    ops: int
    launches: int
    collectives: int
    top_kernels: list[KernelStat] = field(default_factory=list)
    top_ops: list[OpStat] = field(default_factory=list)
    streams: list[StreamStat] = field(default_factory=list)
    note: str | None = None


@dataclass
class Summary:
    source: str | None
    ranks: list[RankSummary]
    warnings: list[str]
    ops_by: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _names(profile: Profile, ids: np.ndarray) -> list[str]:
    return [profile.strings[i] if i >= 0 else "(unnamed)" for i in ids.tolist()]


def _group_sum(keys: np.ndarray, vals: np.ndarray):
    """(unique keys, count, sum) for integer keys."""
    if not len(keys):
        return keys, np.zeros(0, np.int64), np.zeros(0, np.int64)
    u, inv = np.unique(keys, return_inverse=True)
    return u, np.bincount(inv, minlength=len(u)), np.bincount(inv, weights=vals, minlength=len(u)).astype(np.int64)


def summarize(profile: Profile, top: int = 10, rank: int | None = None, ops_by: str = "self") -> Summary:
    """Summarise every rank (or one) of `profile`."""
    if ops_by not in ("self", "total"):
        raise BadInput(f"ops_by must be 'self' or 'total', not {ops_by!r}")
    ranks = profile.ranks
    if rank is not None:
        if rank not in ranks:
            raise BadInput(f"rank {rank} is not in this profile (ranks: {', '.join(map(str, ranks)) or 'none'})")
        ranks = [rank]
    out = [_rank_summary(profile, r, top, ops_by) for r in ranks]
    src = profile.meta.get("source", {})
    return Summary(source=src.get("format"), ranks=out, warnings=list(profile.meta.get("warnings", [])), ops_by=ops_by)


def _rank_summary(p: Profile, r: int, top: int, ops_by: str) -> RankSummary:
    t = p.tables
    sel = {name: (t[name]["rank"] == r) for name in TIMED_TABLES}
    starts, ends = [], []
    for name in TIMED_TABLES:
        m = sel[name]
        if m.any():
            s = t[name]["start_ns"][m]
            starts.append(s.min())
            ends.append((s + np.maximum(t[name]["dur_ns"][m], 0)).max())
    wall_start = int(min(starts)) if starts else None
    wall_ns = int(max(ends) - min(starts)) if starts else 0

    k = p.select("kernels", sel["kernels"])
    c = p.select("memcpy", sel["memcpy"])
    k["dur_ns"] = np.maximum(k["dur_ns"], 0)  # -1 = unknown duration (some importers): counts as 0
    c["dur_ns"] = np.maximum(c["dur_ns"], 0)
    ks, ke = k["start_ns"], k["start_ns"] + k["dur_ns"]
    cs, ce = c["start_ns"], c["start_ns"] + c["dur_ns"]
    gs = np.concatenate([ks, cs])
    ge = np.concatenate([ke, ce])
    has_gpu = len(gs) > 0
    span = int(ge.max() - gs.min()) if has_gpu else 0
    busy = int(union_length(gs, ge)) if has_gpu else 0

    top_k: list[KernelStat] = []
    ktotal = int(k["dur_ns"].sum())
    if len(ks):
        u, cnt, tot = _group_sum(k["name"].astype(np.int64), k["dur_ns"])
        order = np.lexsort((u, -tot))[:top]
        for name, n, tt in zip(_names(p, u[order]), cnt[order].tolist(), tot[order].tolist()):
            top_k.append(KernelStat(name, n, tt, tt / n, tt / ktotal if ktotal else 0.0))

    o = p.select("ops", sel["ops"])
    o["dur_ns"] = np.maximum(o["dur_ns"], 0)
    top_o: list[OpStat] = []
    if len(o["start_ns"]):
        rows = np.flatnonzero(sel["ops"])
        dur = np.maximum(t["ops"]["dur_ns"], 0)
        par = t["ops"]["parent"]
        child = np.zeros(len(dur), np.int64)
        has_par = par >= 0
        np.add.at(child, par[has_par], dur[has_par])
        self_ns = np.maximum(dur - child, 0)[rows]
        names = o["name"].astype(np.int64)
        u, cnt, tot = _group_sum(names, o["dur_ns"])
        _, _, slf = _group_sum(names, self_ns)
        key = slf if ops_by == "self" else tot
        order = np.lexsort((u, -key))[:top]
        for name, n, tt, ss in zip(_names(p, u[order]), cnt[order].tolist(), tot[order].tolist(), slf[order].tolist()):
            top_o.append(OpStat(name, n, tt, ss))

    streams: list[StreamStat] = []
    if has_gpu:
        dev = np.concatenate([k["device"], c["device"]])
        st = np.concatenate([k["stream"], c["stream"]])
        key = dev * (1 << 32) + (st & 0xFFFFFFFF)
        per = busy_by_key(key, gs, ge)
        nk = {}
        if len(ks):
            kk = k["device"] * (1 << 32) + (k["stream"] & 0xFFFFFFFF)
            uk, ck = np.unique(kk, return_counts=True)
            nk = dict(zip(uk.tolist(), ck.tolist()))
        for kkey, b in sorted(per.items(), key=lambda kv: -kv[1]):
            d, s = kkey >> 32, kkey & 0xFFFFFFFF
            s = s - (1 << 32) if s >= (1 << 31) else s
            streams.append(StreamStat(int(d), int(s), int(nk.get(kkey, 0)), int(b), b / span if span else 0.0))

    devs = [str(d.get("name") or f"device {d.get('index')}") for d in p.rank_meta(r).get("devices") or []]
    note = None if has_gpu else "No GPU events in this profile (CPU-only trace)"
    return RankSummary(
        rank=r, devices=devs, wall_start_ns=wall_start, wall_ns=wall_ns, has_gpu=has_gpu, gpu_span_ns=span,
        gpu_busy_ns=busy, gpu_idle_ns=max(span - busy, 0), gpu_busy_share=(busy / span if span else None) if has_gpu else None,
        kernels=len(ks), kernel_time_ns=ktotal, memcpy=len(cs), memcpy_bytes=int(np.maximum(c["bytes"], 0).sum()),
        ops=len(o["start_ns"]), launches=int(sel["launches"].sum()), collectives=int(sel["collectives"].sum()),
        top_kernels=top_k, top_ops=top_o, streams=streams, note=note,
    )
