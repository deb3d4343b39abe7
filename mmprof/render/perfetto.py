"""A profile as a Chrome trace / Perfetto JSON timeline, with mmprof's knowledge on every slice (`mmprof export`).

The trace-event format (JSON object form: `{"traceEvents": [...]}`, times in microseconds) that Perfetto UI
(ui.perfetto.dev) and chrome://tracing open:

- per rank a process (`pid` = rank + 1, named `rank N (device)`); in it one track per CPU thread and one per GPU
  stream (`tid`s numbered per process: CPU threads first, then streams, each named);
- device events (kernels and copies, from the event frame `mmprof.analysis.timeline.events`) as complete slices (`X`) on
  their stream, named by their display name (`mmprof.names`), with args: full name, family, variant, library,
  path (fast / fallback / neutral), rule, region, layer, role, label source, bound, efficiency, phase, step,
  graph replay (the graph launch that ran it) and op source, and the collective with its bytes for communication kernels;
- CPU ops, launch calls and scopes (annotations, nn.Module frames) as slices on their CPU thread (GPU-side ranges
  on their stream; zero-length marks as instants); on a CPU run the outermost compute ops carry the same args as
  kernels;
- the timeline categories (`mmprof.analysis.timeline.breakdown.category_segments`: compute-bound, memory-bound,
  unattributed, communication, memcpy, idle host-bound, idle other; on a serving engine's trace also idle between
  the engine steps and host work inside them) as counter tracks per rank, 1 while the
  category holds the rank, 0 otherwise;
- flow arrows (`s` / `f` with `bp: "e"`) from each launch call to the kernel or copy it launched;
- on a serving engine's trace, an "engine steps" track per rank: one slice per engine step (its share of the
  timeline from `mmprof.analysis.timeline.breakdown`) with the engine's request and token counts, GPU busy time, launch /
  queue and host time as args.

The document is written in pieces (never held whole in memory) to a temporary file, gzip-compressed when the name
ends in `.gz`, then renamed into place. Strings are JSON-escaped by the encoder (orjson), so a name with control
characters cannot break the document. A kernel's full name can be 1,000+ characters: with more than
`FULL_NAMES_EVERY_MAX` device events (`full_names="auto"`), only the first slice of each name per rank carries it
(the others say where), which keeps a 1M-kernel trace loadable.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import orjson

from mmprof._version import __version__
from mmprof.analysis.timeline.columns import TABLE_KERNELS, TABLE_MEMCPY
from mmprof.analysis.timeline.events import EventFrame, events_of
from mmprof.analysis.attribution.roofline import BOUND_COMPUTE, BOUND_MEMORY
from mmprof.errors import BadInput, NoEvidence
from mmprof.fileio import atomic_output
from mmprof.names import display_name
from mmprof.render.safe import json_text, visible
from mmprof.render.perfetto_timeline import CHUNK, COUNTER, STREAM_TID0, to_us, counter_slices, engine_slices

FULL_NAMES_EVERY_MAX = 200_000
FLOW = "launch"
Progress = Callable[[str, int, int], None]


@dataclass
class ExportStats:
    """What `export_trace` wrote."""

    path: str
    events: int
    device_events: int
    ops: int
    launches: int
    scopes: int
    flows: int
    counters: int
    ranks: int
    bytes: int
    seconds: float
    full_names: str
    engine_steps: int = 0     # slices on the "engine steps" tracks

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Tracks:
    """pid per rank and tid per CPU thread / GPU stream, with the metadata events naming them."""

    def __init__(self, profile, ev: EventFrame):
        self.meta: list[dict] = []
        self.cpu: dict[tuple[int, int], int] = {}
        self.gpu: dict[tuple[int, int, int], int] = {}
        T = profile.tables
        threads: dict[int, set] = {}
        streams: dict[int, set] = {}
        for table in ("ops", "launches"):
            for r, t in set(zip(T[table]["rank"].tolist(), T[table]["tid"].tolist())):
                threads.setdefault(r, set()).add(t)
        S = T["scopes"]
        for r, t, d, s in set(zip(S["rank"].tolist(), S["tid"].tolist(), S["device"].tolist(), S["stream"].tolist())):
            if s >= 0 and t < 0:
                streams.setdefault(r, set()).add((d, s))
            else:
                threads.setdefault(r, set()).add(t)
        for table in ("kernels", "memcpy"):
            for r, d, s in set(zip(T[table]["rank"].tolist(), T[table]["device"].tolist(), T[table]["stream"].tolist())):
                streams.setdefault(r, set()).add((d, s))
        self.ranks = sorted(set(threads) | set(streams) | set(profile.ranks))
        for r in self.ranks:
            pid = r + 1
            devs = sorted({str(d.get("name")) for d in profile.rank_meta(r).get("devices") or [] if d.get("name")})
            self._m("process_name", pid, None, name=f"rank {r}" + (f" ({', '.join(devs)})" if devs else ""))
            self._m("process_sort_index", pid, None, sort_index=r)
            for i, t in enumerate(sorted(threads.get(r, ()))):
                self.cpu[(r, t)] = i + 1
                self._m("thread_name", pid, i + 1, name=f"CPU thread {t}")
                self._m("thread_sort_index", pid, i + 1, sort_index=i + 1)
            for i, (d, s) in enumerate(sorted(streams.get(r, ()))):
                tid = STREAM_TID0 + i
                self.gpu[(r, d, s)] = tid
                self._m("thread_name", pid, tid, name=f"GPU {d} stream {s}" if d >= 0 else f"stream {s}")
                self._m("thread_sort_index", pid, tid, sort_index=tid)

    def _m(self, what: str, pid: int, tid: int | None, **args) -> None:
        e = {"ph": "M", "name": what, "pid": pid, "args": args}
        if tid is not None:
            e["tid"] = tid
        self.meta.append(e)

    def cpu_tids(self, rank: np.ndarray, tid: np.ndarray) -> np.ndarray:
        return np.array([self.cpu[k] for k in zip(rank.tolist(), tid.tolist())], dtype=np.int64)

    def gpu_tids(self, rank: np.ndarray, dev: np.ndarray, stream: np.ndarray) -> np.ndarray:
        return np.array([self.gpu[k] for k in zip(rank.tolist(), dev.tolist(), stream.tolist())], dtype=np.int64)


def _t0(profile) -> int:
    starts = [profile.tables[t]["start_ns"] for t in ("kernels", "ops", "launches", "memcpy", "scopes")
              if profile.n(t)]
    return int(min(int(s.min()) for s in starts)) if starts else 0


def _static_args(ev: EventFrame, full_names: str) -> tuple[np.ndarray, list[dict], list[str]]:
    """Per distinct (name, family, variant, library, path, rule): the display name and the classification args."""
    p = ev.profile
    cls = [np.asarray(getattr(ev, c).astype(object)) for c in ("family", "variant", "library", "path", "rule")]
    keys = list(zip(ev.name.tolist(), *(c.tolist() for c in cls)))
    uniq: dict[tuple, int] = {}
    inv = np.fromiter((uniq.setdefault(k, len(uniq)) for k in keys), dtype=np.int64, count=len(keys))
    static, names = [], []
    for (nid, fam, var, lib, path, rule) in uniq:
        full = p.string(int(nid)) or "?"
        short = display_name(full)
        a = {"display name": short}
        if full != short:
            a["full name"] = full
        for k, v in (("family", fam), ("variant", var), ("library", lib), ("path", path), ("rule", rule)):
            if v is not None and v == v:
                a[k] = v
        static.append(a)
        names.append(short)
    return inv, static, names


def _device_args(ev: EventFrame, idx: np.ndarray) -> list[dict]:
    """Per-event args of device events: region, layer, role, label source, bound, efficiency, phase, step, graph."""
    p = ev.profile
    roof = ev.roof
    bound = np.where(roof.bound[idx] == BOUND_COMPUTE, "compute", np.where(roof.bound[idx] == BOUND_MEMORY,
                                                                           "memory", ""))
    eff = roof.efficiency[idx]
    phase = [p.string(int(x)) if x >= 0 else None for x in ev.phase[idx].tolist()]
    scope = [p.string(int(x)) if x >= 0 else None for x in ev.scope[idx].tolist()]
    graph = ev.graph[idx].tolist()
    osrc = np.full(len(idx), -1, dtype=np.int64)
    if ev.source == "kernels":
        for tbl, code in (("kernels", TABLE_KERNELS), ("memcpy", TABLE_MEMCPY)):
            m = ev.table[idx] == code
            osrc[m] = p.tables[tbl]["op_source"][ev.row[idx][m]]
    osrc_s = [p.string(int(x)) if x >= 0 else None for x in osrc.tolist()]
    out = []
    layer, step = ev.layer[idx].tolist(), ev.step[idx].tolist()
    region, role, src = ev.region[idx].tolist(), ev.role[idx].tolist(), ev.label_source[idx].tolist()
    for i in range(len(idx)):
        a: dict[str, Any] = {}
        if region[i] is not None:
            a["region"] = region[i]
        if layer[i] >= 0:
            a["layer"] = layer[i]
        if role[i] is not None:
            a["role"] = role[i]
        if src[i] is not None:
            a["label source"] = src[i]
        if bound[i]:
            a["bound"] = bound[i]
            if eff[i] == eff[i]:
                a["efficiency"] = round(float(eff[i]), 4)
        if phase[i] is not None:
            a["phase"] = phase[i]
        if step[i] >= 0:
            a["step"] = step[i]
        if scope[i] is not None:
            a["scope"] = scope[i]
        if graph[i] >= 0:
            a["graph replay"] = graph[i]
            a["op source"] = osrc_s[i]
        out.append(a)
    return out


@lru_cache(maxsize=1 << 16)
def _shown(s: str) -> str:
    return visible(s)


def _inert(events: list[dict]) -> None:
    """Every name and string argument the UI shows, with control and invisible characters as visible escapes
    (mmprof.render.safe.visible: the one sanitiser): a slice named `gemm\u200b` must not look like `gemm`."""
    for e in events:
        n = e.get("name")
        if n.__class__ is str:
            e["name"] = _shown(n)
        a = e.get("args")
        if a:
            for k, v in a.items():
                if v.__class__ is str:
                    a[k] = _shown(v)


def _dumps(events: list[dict]) -> bytes:
    if not events:
        return b""
    _inert(events)
    body = orjson.dumps(events)[1:-1]
    return json_text(body.decode()).encode() if not body.isascii() else body  # what is left (DEL, C1) as \uXXXX


class _Doc:
    """What the track generators share: the profile, its event frame and tracks, the time origin, the full-name
    policy, the counts for `stats`, the progress callback, and the separator between pieces."""

    def __init__(self, profile, ev: EventFrame, policy: str, progress: Progress | None) -> None:
        self.p, self.ev, self.policy, self.progress = profile, ev, policy, progress
        self.T = profile.tables
        self.t0 = _t0(profile)
        self.tracks = _Tracks(profile, ev)
        self.st = {"events": 0, "device_events": 0, "ops": 0, "launches": 0, "scopes": 0, "flows": 0,
                   "counters": 0, "ranks": len(self.tracks.ranks), "full_names": policy}
        self.total = len(ev) + profile.n("ops") + profile.n("launches") + profile.n("scopes")
        self.done = 0
        self.first = True

    def tick(self, stage: str, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(stage, self.done, self.total)

    def piece(self, events: list[dict]) -> bytes:
        """Events as a piece of the traceEvents array (with the comma that joins it to the previous piece)."""
        self.st["events"] += len(events)
        body = _dumps(events)
        if not body:
            return b""
        out = body if self.first else b",\n" + body
        self.first = False
        return out


def trace_chunks(profile, full_names: str = "auto", progress: Progress | None = None,
                 stats: dict | None = None, cpu: bool = True) -> Iterator[bytes]:
    """The trace document as byte pieces (see the module docstring); `stats` receives the counts. `cpu=False`
    leaves out CPU ops, launch calls (and so the arrows) and CPU-side scopes: device tracks and counters only (on
    a CPU run, the outermost compute ops stay), about half the size for very large profiles."""
    if full_names not in ("auto", "every", "first"):
        raise BadInput(f"full_names must be auto, every or first, not {full_names!r}")
    ev = events_of(profile)
    if not len(ev) and not profile.n("ops") and not profile.n("scopes"):
        raise NoEvidence("the profile holds no kernels, copies, ops or annotations: nothing to put on a timeline")
    policy = full_names if full_names != "auto" else ("every" if len(ev) <= FULL_NAMES_EVERY_MAX else "first")
    d = _Doc(profile, ev, policy, progress)
    meta = {"mmprof": {"version": __version__, "source": profile.meta.get("source", {}).get("format"),
                       "device_events": ev.source, "t0_ns": d.t0, "full_names": policy, "cpu_tracks": cpu,
                       "counters": f"'{COUNTER} <category>' is 1 while the category holds the rank "
                                   "(mmprof.analysis.timeline.breakdown)"}}
    yield (b'{"displayTimeUnit":"ns","metadata":' + orjson.dumps(meta) + b',"traceEvents":[\n')
    yield d.piece(d.tracks.meta)
    frame_args: dict[int, dict] = {}
    if len(ev) and ev.source == "kernels":
        yield from _device_slices(d)
    elif len(ev):
        frame_args = _cpu_frame_args(d)  # a CPU run's compute ops are annotated ops
    yield from _op_slices(d, frame_args, cpu)
    if profile.n("launches") and cpu:
        yield from _launch_slices(d)
    yield from _scope_slices(d, cpu)
    if len(ev):
        yield from counter_slices(d)
    steps = engine_slices(d.p, ev, d.t0)
    if steps:
        d.st["engine_steps"] = sum(1 for e in steps if e["ph"] == "X")
        yield d.piece(steps)
    yield b"\n]}\n"
    if stats is not None:
        stats.update(d.st)


def _device_slices(d: _Doc) -> Iterator[bytes]:
    """Kernels and copies as slices on their streams, with their classification and region args."""
    ev, T, policy = d.ev, d.T, d.policy
    inv, static, short = _static_args(ev, policy)
    seen: set[tuple[int, int]] = set()
    for tbl, code in (("kernels", TABLE_KERNELS), ("memcpy", TABLE_MEMCPY)):
        sel = np.flatnonzero(ev.table == code)
        rows = ev.row[sel]
        tids = d.tracks.gpu_tids(ev.rank[sel], T[tbl]["device"][rows], ev.stream[sel])
        coll = _collectives(d.p) if code == TABLE_KERNELS else {}
        for lo in range(0, len(sel), CHUNK):
            idx = sel[lo:lo + CHUNK]
            dyn = _device_args(ev, idx)
            ts, dur = to_us(ev.start[idx], d.t0), np.round(np.maximum(ev.dur[idx], 0) / 1000.0, 3).tolist()
            ranks, u = ev.rank[idx].tolist(), inv[idx].tolist()
            out = []
            for i in range(len(idx)):
                a = dict(static[u[i]])
                a.update(dyn[i])
                if "full name" in a and policy == "first":
                    key = (ranks[i], u[i])
                    if key in seen:
                        a["full name"] = "(on the first slice of this name in this process)"
                    else:
                        seen.add(key)
                c = coll.get(int(rows[lo + i])) if coll else None
                if c:
                    a.update(c)
                out.append({"ph": "X", "name": short[u[i]], "cat": a.get("family", "kernel"), "pid": ranks[i] + 1,
                            "tid": int(tids[lo + i]), "ts": ts[i], "dur": dur[i], "args": a})
            d.st["device_events"] += len(out)
            d.tick("device events", len(out))
            yield d.piece(out)


def _cpu_frame_args(d: _Doc) -> dict[int, dict]:
    """On a CPU run: ops row -> the args of its device event (the outermost compute ops)."""
    ev = d.ev
    inv, static, _ = _static_args(ev, d.policy)
    dyn = _device_args(ev, np.arange(len(ev)))
    frame_args: dict[int, dict] = {}
    for i, row in enumerate(ev.row.tolist()):
        a = dict(static[inv[i]])
        a.update(dyn[i])
        a.pop("full name", None)  # an op's name is its full name
        frame_args[row] = a
    d.st["device_events"] = len(frame_args)
    return frame_args


def _op_slices(d: _Doc, frame_args: dict[int, dict], cpu: bool) -> Iterator[bytes]:
    """CPU ops on their threads, with their shapes (and, on a CPU run, their device-event args)."""
    p, O = d.p, d.T["ops"]
    op_rows = np.arange(p.n("ops")) if cpu else np.array(sorted(frame_args), dtype=np.int64)
    if not len(op_rows):
        return
    tids = d.tracks.cpu_tids(O["rank"], O["tid"])
    for lo in range(0, len(op_rows), CHUNK):
        r = op_rows[lo:lo + CHUNK]
        ts, dur = to_us(O["start_ns"][r], d.t0), np.round(np.maximum(O["dur_ns"][r], 0) / 1000.0, 3).tolist()
        out = []
        for i, row in enumerate(r.tolist()):
            a = frame_args.get(row)
            a = dict(a) if a else {}
            dims, types = O["input_dims"][row], O["input_types"][row]
            if dims >= 0 and p.strings[dims] not in ("", "[]"):
                a["shapes"] = p.strings[dims]
                if types >= 0:
                    a["dtypes"] = p.strings[types]
            out.append({"ph": "X", "name": p.string(int(O["name"][row])) or "?",
                        "cat": "op" if row not in frame_args else f"op,{a.get('family', '')}",
                        "pid": int(O["rank"][row]) + 1, "tid": int(tids[row]), "ts": ts[i], "dur": dur[i],
                        **({"args": a} if a else {})})
        d.st["ops"] += len(out)
        d.tick("CPU ops", len(out))
        yield d.piece(out)


def _launch_slices(d: _Doc) -> Iterator[bytes]:
    """Launch calls on their threads, with flow arrows to the kernels and copies they launched."""
    p, L = d.p, d.T["launches"]
    n = p.n("launches")
    tids = d.tracks.cpu_tids(L["rank"], L["tid"])
    ts_all = to_us(L["start_ns"], d.t0)
    dur_all = np.round(np.maximum(L["dur_ns"], 0) / 1000.0, 3).tolist()
    names = {i: p.string(int(i)) or "launch" for i in np.unique(L["name"]).tolist()}
    targets = _launch_targets(p, d.tracks, d.t0)
    flow_id = 0
    for lo in range(0, n, CHUNK):
        out = []
        for row in range(lo, min(lo + CHUNK, n)):
            pid, tid = int(L["rank"][row]) + 1, int(tids[row])
            out.append({"ph": "X", "name": names[int(L["name"][row])], "cat": "launch", "pid": pid, "tid": tid,
                        "ts": ts_all[row], "dur": dur_all[row]})
            for kpid, ktid, kts in targets.get(row, ()):
                flow_id += 1
                out.append({"ph": "s", "name": FLOW, "cat": FLOW, "id": flow_id, "pid": pid, "tid": tid,
                            "ts": ts_all[row]})
                out.append({"ph": "f", "bp": "e", "name": FLOW, "cat": FLOW, "id": flow_id, "pid": kpid,
                            "tid": ktid, "ts": kts})
        d.st["launches"] += min(lo + CHUNK, n) - lo
        d.tick("launches", min(lo + CHUNK, n) - lo)
        yield d.piece(out)
    d.st["flows"] = flow_id


def _scope_slices(d: _Doc, cpu: bool) -> Iterator[bytes]:
    """Scopes: annotations and module frames on their CPU thread (GPU-side ranges on their stream); zero-length
    marks as instants."""
    p, S, tracks = d.p, d.T["scopes"], d.tracks
    gpu = (S["stream"] >= 0) & (S["tid"] < 0)
    if not p.n("scopes") or not (cpu or gpu.any()):
        return
    ts_all, dur_all = to_us(S["start_ns"], d.t0), np.round(np.maximum(S["dur_ns"], 0) / 1000.0, 3).tolist()
    src = {i: p.string(int(i)) for i in np.unique(S["source"]).tolist()}
    for lo in range(0, p.n("scopes"), CHUNK):
        out = []
        for row in range(lo, min(lo + CHUNK, p.n("scopes"))):
            if not cpu and not gpu[row]:
                continue
            r = int(S["rank"][row])
            tid = (tracks.gpu[(r, int(S["device"][row]), int(S["stream"][row]))] if gpu[row]
                   else tracks.cpu[(r, int(S["tid"][row]))])
            e = {"ph": "X" if dur_all[row] > 0 else "i", "name": p.string(int(S["name"][row])) or "?",
                 "cat": f"scope,{src[int(S['source'][row])] or 'annotation'}", "pid": r + 1, "tid": tid,
                 "ts": ts_all[row]}
            if dur_all[row] > 0:
                e["dur"] = dur_all[row]
            else:
                e["s"] = "t"
            out.append(e)
        d.st["scopes"] += len(out)
        d.tick("scopes", len(out))
        yield d.piece(out)


def _collectives(p) -> dict[int, dict]:
    """kernel row -> {"collective", "bytes in", "bytes out", "group size"} for communication kernels."""
    C = p.tables["collectives"]
    out = {}
    for i in np.flatnonzero(C["kernel"] >= 0).tolist():
        out[int(C["kernel"][i])] = {"collective": p.string(int(C["name"][i])), "bytes in": int(C["bytes_in"][i]),
                                    "bytes out": int(C["bytes_out"][i]), "group size": int(C["group_size"][i])}
    return out


def _launch_targets(p, tracks: _Tracks, t0: int) -> dict[int, list[tuple[int, int, float]]]:
    """launch row -> [(pid, tid, ts)] of the kernels and copies it launched."""
    out: dict[int, list] = {}
    nl = p.n("launches")
    for tbl in ("kernels", "memcpy"):
        X = p.tables[tbl]
        ok = np.flatnonzero((X["launch"] >= 0) & (X["launch"] < nl))
        if not len(ok):
            continue
        tids = tracks.gpu_tids(X["rank"][ok], X["device"][ok], X["stream"][ok])
        ts = to_us(X["start_ns"][ok], t0)
        for j, (row, r) in enumerate(zip(X["launch"][ok].tolist(), X["rank"][ok].tolist())):
            out.setdefault(row, []).append((r + 1, int(tids[j]), ts[j]))
    return out


def export_trace(profile, path: str | os.PathLike, full_names: str = "auto",
                 progress: Progress | None = None, cpu: bool = True) -> ExportStats:
    """Write the trace of `profile` to `path` (gzip when it ends in `.gz`), atomically; see the module docstring."""
    t = time.perf_counter()
    out = Path(path)
    stats: dict[str, Any] = {}
    # the one output guard (mmprof.fileio): never over an input, a device or FIFO written into, no debris
    with atomic_output(out, compress=out.suffix == ".gz", level=4) as f:
        for chunk in trace_chunks(profile, full_names, progress, stats, cpu):
            f.write(chunk)
    real = Path(os.path.realpath(out))
    return ExportStats(path=str(out), bytes=real.stat().st_size if real.is_file() else 0, seconds=time.perf_counter() - t, **stats)
