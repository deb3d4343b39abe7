"""The streaming Kineto import: pieces decoded to columns (`_kineto_stream`), gathered per kind of event, and
linked by `ColumnRankImporter`, which is `_kineto_rank.RankImporter` reading numpy columns instead of one Struct
per event. It fills the same tables in the same row order and interns the same strings in the same order, so the
Profile is identical to the Struct path's (tests/test_kineto_streaming.py compares every table of both on every real
trace). The linking helpers (lanes, nesting, scope propagation, windows, correlation and External id joins) are
RankImporter's own; only the per-kind column handling is here.
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import numpy as np

from mmprof.fileio import check_density, check_events, iter_bytes
from mmprof.importers import _kineto_stream as ks
from mmprof.importers._kineto_rank import (
    ANN_CATS,
    GPU_ANN_CATS,
    KERNEL_CATS,
    KNOWN_SKIPPED,
    MEMCPY_CATS,
    MEMSET_CATS,
    OP_CATS,
    PY_CATS,
    RUNTIME_CATS,
    RankImporter,
    VERSION_SUFFIX,
)
from mmprof.importers._kineto_comm import is_comm_kernel_name
from mmprof.importers._nesting import Lanes, finite_us, to_ns, MAX_TIME_NS

# CPU seconds the decode workers spent on the last import (they report it: a forkserver's children are not this
# process's, so getrusage cannot see them); benchmarks/import_scale.py reads it
WORKER_CPU_S = [0.0]

SETS = {"kernel": KERNEL_CATS, "runtime": RUNTIME_CATS, "op": OP_CATS, "ann": ANN_CATS, "gpu_ann": GPU_ANN_CATS,
        "memcpy": MEMCPY_CATS, "memset": MEMSET_CATS, "module": PY_CATS}


class Dictionary(ks.Codes):
    """Values (names, thread ids, shape texts) of the whole trace -> global codes; pieces' local codes remapped."""

    def remap(self, local: list) -> np.ndarray:
        """Global codes of a piece's local values, indexed by local code; the last entry (local -1, None) is -1."""
        return np.append(self.codes(local), np.int32(-1)).astype(np.int32)


_EMPTY_COLUMNS = (("cat", np.int8), ("ts", np.float64), ("ts_none", bool), ("dur", np.float64), ("name", np.int32),
                  ("pid", np.int32), ("tid", np.int32), ("tid_int", np.int64), ("device", np.int64),
                  ("stream", np.int64), ("corr", np.int64), ("ext", np.int64), ("size", np.int64),
                  ("bytes", np.int64), ("direction", np.int32), ("dims", np.int32), ("types", np.int32),
                  ("src", np.int8), ("kind", np.int8))


class Table:
    """One kind's columns, aligned; `coll`: row -> the full Args of the rows that carry collective metadata."""

    def __init__(self, cols: dict[str, np.ndarray], coll: dict[int, Any] | None = None) -> None:
        self.c = cols
        self.coll = coll or {}
        self.n = len(cols["ts"]) if "ts" in cols else 0

    def take(self, idx: np.ndarray) -> "Table":
        idx = np.asarray(idx, np.int64)
        pos = {int(old): new for new, old in enumerate(idx.tolist())} if self.coll else {}
        return Table({k: v[idx] for k, v in self.c.items()},
                     {pos[r]: a for r, a in self.coll.items() if r in pos})

    @staticmethod
    def empty() -> "Table":
        """No rows, with every column a kind may have."""
        cols = {k: np.zeros(0, dt) for k, dt in _EMPTY_COLUMNS}
        cols.update(grid=np.zeros((0, 3), np.int64), block=np.zeros((0, 3), np.int64))
        return Table(cols)

    @staticmethod
    def concat(tables: list["Table"], consume: bool = False) -> "Table":
        """The tables' rows in order; `consume`: the parts are emptied as their columns are copied."""
        tables = [t for t in tables if t.n]
        if not tables:
            return Table.empty()
        if len(tables) == 1:  # one part: its arrays as they are (nothing writes into a Table's columns)
            return tables[0] if consume else Table(dict(tables[0].c), dict(tables[0].coll))
        keys = [k for k in tables[0].c if all(k in t.c for t in tables)]
        coll, off = {}, 0
        for t in tables:
            coll.update({r + off: a for r, a in t.coll.items()})
            off += t.n
        if not consume:
            return Table({k: np.concatenate([t.c[k] for t in tables]) for k in keys}, coll)
        # column by column, each part's column freed once it is copied: the parts and the whole never both exist
        cols = {}
        for k in keys:
            cols[k] = np.concatenate([t.c[k] for t in tables])
            for t in tables:
                del t.c[k]
        for t in tables:
            t.c.clear()
        release_memory()  # the parts are small heap blocks: their pages go back only when trimmed
        return Table(cols, coll)


class Gathered:
    """The decoded pieces of one trace: per kind the column chunks (global codes), and the counts."""

    def __init__(self) -> None:
        self.names, self.vals, self.raws = Dictionary(), Dictionary(), Dictionary()
        self.chunks: dict[str, list[Table]] = {k: [] for k in ks.KINDS}
        self.counts: dict = {}
        self.first_pids: dict[str, list] = {}
        self.odd = self.bad = self.events = 0

    def add(self, piece: dict[str, Any]) -> None:
        nm, vl, rw = (self.names.remap(piece["names"]), self.vals.remap(piece["vals"]), self.raws.remap(piece["raws"]))
        for c, n in piece["counts"].items():
            self.counts[c] = self.counts.get(c, 0) + n
        self.odd += piece["odd"]
        self.bad += piece["bad"]
        self.events += piece["events"]
        for kind, cols in piece["kinds"].items():
            coll = cols.pop("coll", None)
            first = cols.pop("first_pids", None)
            if cols.get("ts_none") is None:
                cols["ts_none"] = np.zeros(len(cols["ts"]), bool)
            for k in ("name", "direction"):
                if k in cols:
                    cols[k] = nm[cols[k]]
            for k in ("pid", "tid"):
                cols[k] = vl[cols[k]]
            for k in ("dims", "types"):
                if k in cols:
                    cols[k] = rw[cols[k]]
            for cat, codes in (first or {}).items():
                lst = self.first_pids.setdefault(cat, [])
                if len(lst) < ks.FIRST_PIDS:
                    lst.extend(self.vals.values[i] if i >= 0 else None
                               for i in vl[codes][:ks.FIRST_PIDS - len(lst)].tolist())
            self.chunks[kind].append(Table(cols, coll))

    def table(self, kind: str) -> Table:
        """The kind's rows in the order RankImporter's `pick` gives: by category (in this process's set order),
        then file order."""
        t = Table.concat(self.chunks.pop(kind), consume=True)
        if not t.n:
            return t
        rank = {c: i for i, c in enumerate(SETS[kind])}
        order = np.array([rank[c] for c in ks.CANON[kind]], np.int64)[t.c["cat"].astype(np.int64)]
        if (order[1:] >= order[:-1]).all():  # one category (the usual case), or already in that order
            return t
        return t.take(np.argsort(order, kind="stable"))

    def name_str(self, code: int):
        """The value a code names, as RankImporter passes it to the string table (None stays None)."""
        if code < 0:
            return None
        v = self.names.values[code]
        return v if type(v) is str else str(v)


class _Rows:
    """A read-only sequence standing for the Struct list `_kineto_comm` reads a few rows of (op_events,
    ann_events, k_args, k_names): each item is built when asked for."""

    def __init__(self, n: int, item) -> None:
        self.n, self.item = n, item

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.item(j) for j in range(*i.indices(self.n))]
        return self.item(i)

    def __iter__(self):
        return (self.item(j) for j in range(self.n))


_EMPTY_RAW = msgspec.Raw(b"")


def release_memory() -> None:
    """Give freed heap back to the OS (glibc's malloc_trim): the pieces' small objects leave holes that the large
    column arrays (mapped, not from the heap) never reuse. A no-op where there is no glibc."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class ColumnRankImporter(RankImporter):
    """RankImporter over the columns of `Gathered` (see the module docstring)."""

    def run_columns(self, g: Gathered) -> None:
        release_memory()
        self.g = g
        self.counts = {str(c): n for c, n in g.counts.items()}
        if g.odd:
            self.warnings.append(f"{g.odd} events in imported categories are not complete (ph 'X') events and were "
                                 "skipped")
        known = (KERNEL_CATS | RUNTIME_CATS | OP_CATS | ANN_CATS | GPU_ANN_CATS | MEMCPY_CATS | MEMSET_CATS
                 | KNOWN_SKIPPED)
        unknown = {str(c): n for c, n in g.counts.items() if c not in known}
        if unknown:
            self.warnings.append("unknown event categories not imported: "
                                 + ", ".join(f"{c} ({n})" for c, n in sorted(unknown.items())))
        first = [p for c in OP_CATS for p in g.first_pids.get(c, [])][:1000] + \
                [p for c in RUNTIME_CATS for p in g.first_pids.get(c, [])][:1000]
        self.pids = {p for p in first if p is not None}
        self._ops_t(g.table("op"))
        release_memory()
        self._scopes_t(g.table("ann"), g.table("gpu_ann"), g.table("module"))
        release_memory()
        scope, path, phase, step = self._scope_cols(self.ann.enclosing(self.op_lane, self.op_start))
        phase, step = self._by_time(phase, step, self.op_start)
        c = self.builder.cols["ops"]
        c["scope"], c["scope_path"], c["phase"], c["step"] = scope, path, phase, step
        release_memory()
        self._launches_t(g.table("runtime"))
        self.no_comm = not self._comm_evidence()
        if self.no_comm:  # nothing for _kineto_comm to read: the op and annotation nesting go before the kernels
            self.op_nest = self.ann = self.op_lane = self.ann_lane = self.op_end = self.ann_end = None
        release_memory()
        self._kernels_t(g.table("kernel"))
        release_memory()
        mc, ms = g.table("memcpy"), g.table("memset")
        mc.c["kind"] = np.zeros(mc.n, np.int8)
        ms.c["kind"] = np.ones(ms.n, np.int8)
        ms.c.setdefault("direction", np.full(ms.n, -1, np.int32))
        self._copies_t(Table.concat([mc, ms]))
        self._collectives()

    # -- helpers ------------------------------------------------------------------------------------------
    def _lane_arrays(self, a: np.ndarray, b: np.ndarray, gpu: bool = False) -> np.ndarray:
        """RankImporter._lane over two integer columns (thread id codes, or GPU device and stream: keys
        (("gpu", device), stream) as there), without a Python tuple per event."""
        n = len(a)
        if not n:
            return np.zeros(0, np.int64)
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        lim = 2**31
        if a.min() >= -lim and a.max() < lim and b.min() >= -lim and b.max() < lim:
            key = ((a + lim) << 32) | (b + lim)
            u, first, inv = np.unique(key, return_index=True, return_inverse=True)
            pairs = [((int(k) >> 32) - lim, (int(k) & 0xFFFFFFFF) - lim) for k in u.tolist()]
        else:
            u, first, inv = np.unique(np.stack([a, b], 1), axis=0, return_index=True, return_inverse=True)
            pairs = [(int(x), int(y)) for x, y in u.tolist()]
        ids = self.lane_ids
        lut = np.empty(len(pairs), np.int64)
        for j in np.argsort(first, kind="stable").tolist():
            x, y = pairs[j]
            lut[j] = ids.setdefault((("gpu", x), y) if gpu else (x, y), len(ids))
        return lut[inv.reshape(-1)]

    @staticmethod
    def _drop(t: Table, keep: tuple[str, ...]) -> None:
        """Free the columns of `t` later stages do not read."""
        for k in [k for k in t.c if k not in keep]:
            del t.c[k]

    def _timed_t(self, t: Table, what: str) -> tuple[Table, np.ndarray, np.ndarray]:
        """RankImporter._timed over columns."""
        if not t.n:
            return t, np.zeros(0, np.int64), np.zeros(0, np.int64)
        if t.c["ts_none"].any():
            n0 = t.n
            t = t.take(np.flatnonzero(~t.c["ts_none"]))
            self.warnings.append(f"{n0 - t.n} {what} events without a timestamp were dropped")
        _, ok_ts = finite_us(t.c["ts"])
        _, ok_dur = finite_us(t.c["dur"])
        ok = ok_ts & ok_dur
        if not ok.all():
            keep = np.flatnonzero(ok)
            self.warnings.append(f"{t.n - len(keep)} {what} events with a timestamp or duration out of range "
                                 f"(not finite, or beyond {MAX_TIME_NS:.0e} ns) were dropped")
            t = t.take(keep)
        start = to_ns(t.c["ts"]) if t.n else np.zeros(0, np.int64)
        dur = to_ns(t.c["dur"]) if t.n else np.zeros(0, np.int64)
        if len(start) and (np.diff(start) < 0).any():
            order = np.argsort(start, kind="stable")
            t, start, dur = t.take(order), start[order], dur[order]
        neg = dur < 0
        if neg.any():
            self.warnings.append(f"{int(neg.sum())} {what} events with negative duration set to 0")
            dur[neg] = 0
        return t, start, dur

    def _sid_codes(self, codes: np.ndarray, text=None) -> np.ndarray:
        """String ids of name codes, interned in first-appearance order (RankImporter._sid's order); `text(code)`
        gives the string of a code (default: the name; None -> null)."""
        text = text or self.g.name_str
        if not len(codes):
            return np.zeros(0, np.int32)
        u, first, inv = np.unique(codes, return_index=True, return_inverse=True)
        ids = np.empty(len(u), np.int64)
        for j in np.argsort(first, kind="stable").tolist():
            ids[j] = self.st.id(text(int(u[j])))
        return ids[inv].astype(np.int32)

    def _raw_ids(self, codes: np.ndarray, cache: dict) -> np.ndarray:
        """String ids of shape texts (the op's Input Dims / Input type JSON, stripped), in appearance order."""
        sid, raws = self.st.id, self.g.raws.values
        out = np.full(len(codes), -1, np.int32)  # string ids: the Profile's int32 (no wider copy held)
        if not len(codes):
            return out
        u, first, inv = np.unique(codes, return_index=True, return_inverse=True)
        ids = np.full(len(u), -1, np.int64)
        for j in np.argsort(first, kind="stable").tolist():
            c = int(u[j])
            if c < 0:
                continue
            i = cache.get(c)
            if i is None:
                i = cache[c] = sid(raws[c].decode("utf-8", "replace").strip())
            ids[j] = i
        return ids[inv].astype(np.int32)

    def _str_list(self, codes: np.ndarray) -> list:
        return [self.g.name_str(c) for c in codes.tolist()]

    # -- tables -------------------------------------------------------------------------------------------
    def _ops_t(self, t: Table) -> None:
        t, start, dur = self._timed_t(t, "cpu_op")
        self.op_t = t
        end = start + dur  # one array for the ends (the nesting reads them, never writes)
        self.op_start, self.op_end = start, end
        self.op_lane = self._lane_arrays(t.c["pid"], t.c["tid"])
        self.op_nest = Lanes(self.op_lane, start, end)
        ext = t.c["ext"]
        self.op_ext = ext
        valid = np.flatnonzero(ext > 0)
        o = valid[np.argsort(ext[valid], kind="stable")]
        self.ext_sorted, self.ext_rows = ext[o], o
        c = self.builder.cols["ops"]
        n = t.n
        c["rank"] = np.full(n, self.rank, np.int64)
        c["tid"] = t.c["tid_int"]
        c["start_ns"] = start
        c["dur_ns"] = dur
        c["name"] = self._sid_codes(t.c["name"])
        cache: dict = {}
        c["input_dims"] = self._raw_ids(t.c["dims"], cache)
        c["input_types"] = self._raw_ids(t.c["types"], cache)
        c["external_id"] = ext
        c["parent"] = self.op_nest.parent
        self.op_events = _Rows(n, self._op_event)
        self.steps_t = t.take(np.flatnonzero(self._is_step(t.c["name"])))  # ProfilerStep ops: scopes too
        self._drop(t, ("name", "dims", "types"))

    def _is_step(self, codes: np.ndarray) -> np.ndarray:
        vals = self.g.names.values
        hit = [c for c, v in enumerate(vals) if type(v) is str and v.startswith("ProfilerStep#")]
        return np.isin(codes, hit) if hit else np.zeros(len(codes), bool)

    def _args_of(self, t: Table, i: int):
        a = t.coll.get(i)
        if a is not None:
            return a
        raws = self.g.raws.values
        d, ty = (int(t.c["dims"][i]), int(t.c["types"][i])) if "dims" in t.c else (-1, -1)
        return SimpleNamespace(coll_name=None, input_dims=msgspec.Raw(raws[d]) if d >= 0 else _EMPTY_RAW,
                               input_type=msgspec.Raw(raws[ty]) if ty >= 0 else _EMPTY_RAW)

    def _op_event(self, i: int):
        return SimpleNamespace(name=self.g.name_str(int(self.op_t.c["name"][i])), args=self._args_of(self.op_t, i))

    def _scopes_t(self, anns: Table, gpu_anns: Table, modules: Table) -> None:
        steps = self.steps_t
        del self.steps_t
        src = ["user_annotation", "step", "module"]
        parts = []
        for j, part in enumerate((anns, steps, modules)):
            cols = {k: part.c[k] for k in ("ts", "ts_none", "dur", "name", "pid", "tid", "tid_int") if part.n}
            if part.n:
                cols["dims"] = part.c.get("dims", np.full(part.n, -1, np.int32))
                cols["types"] = part.c.get("types", np.full(part.n, -1, np.int32))
                cols["src"] = np.full(part.n, j, np.int8)
            parts.append(Table(cols) if part.n else Table.empty())
        cpu = Table.concat(parts)
        del anns, steps, modules, part, parts
        if cpu.n:  # the Struct path sorts by the raw ts (None as 0), stably, before _timed
            key = np.where(cpu.c["ts_none"], 0.0, cpu.c["ts"])
            if not (key[1:] >= key[:-1]).all():  # (a stable sort of sorted keys is no move: no copy then)
                cpu = cpu.take(np.argsort(key, kind="stable"))
            del key
        t, start, dur = self._timed_t(cpu, "user_annotation")
        self.ann_t = t
        lane = self._lane_arrays(t.c["pid"], t.c["tid"])
        end = start + dur
        self.ann = Lanes(lane, start, end)
        self.ann_start, self.ann_end, self.ann_lane = start, end, lane
        names = [x if x is not None else "None" for x in self._str_list(t.c["name"])]
        from mmprof.labels import step_values

        steps_v = step_values(names, start)  # the array: a list of 8-byte ints per annotation is not needed
        self.ann_name, self.ann_path, self.ann_phase, self.ann_step = self._propagate(self.ann, names, steps_v)
        self.step_win, self.phase_win = self._windows(names, start, end, steps_v)
        self.ann_names = names
        self.ann_events = _Rows(t.n, self._ann_event)
        n = t.n
        c = self.builder.cols["scopes"]
        c["rank"] = np.full(n, self.rank, np.int64)
        c["tid"] = t.c["tid_int"]
        c["device"] = np.full(n, -1, np.int64)
        c["stream"] = np.full(n, -1, np.int64)
        c["start_ns"] = start
        c["dur_ns"] = dur
        c["name"] = self.ann_name
        c["source"] = self._sid_codes(t.c["src"].astype(np.int64), lambda j: src[j])
        c["depth"] = self.ann.depth
        c["parent"] = self.ann.parent
        self._drop(t, ("dims", "types"))
        self._gpu_scopes_t(gpu_anns, n)

    def _ann_event(self, j: int):
        return SimpleNamespace(name=self.ann_names[j], args=self._args_of(self.ann_t, j))

    def _gpu_scopes_t(self, gpu_anns: Table, off: int) -> None:
        gt, gstart, gdur = self._timed_t(gpu_anns, "gpu_user_annotation")
        dev = gt.c["device"] if gt.n else np.zeros(0, np.int64)
        stream = gt.c["stream"] if gt.n else np.zeros(0, np.int64)
        glane = self._lane_arrays(dev, stream, gpu=True)
        gnames = [x if x is not None else "None" for x in self._str_list(gt.c["name"])] if gt.n else []
        self._gpu_scopes(glane, dev, stream, gstart, gdur, gnames, off)

    def _launches_t(self, t: Table) -> None:
        t, start, dur = self._timed_t(t, "runtime")
        n = t.n
        lane = self._lane_arrays(t.c["pid"], t.c["tid"])
        corr = t.c["corr"] if n else np.zeros(0, np.int64)
        ext = t.c["ext"] if n else np.zeros(0, np.int64)
        op = self.op_by_ext(ext)
        j = np.where(op >= 0, op, 0)
        if len(self.op_start):
            good = (op >= 0) & (self.op_lane[j] == lane) & (self.op_start[j] <= start) & (self.op_end[j] >= start)
        else:
            good = np.zeros(len(op), bool)
        op = np.where(good, op, self.op_nest.enclosing(lane, start))
        ann = self.ann.enclosing(lane, start)
        self.l_start, self.l_op, self.l_ann = start, op, ann  # the call's lane is not read again
        # grid / block of the calls, kept for kernels that carry none (ROCm) only where a call has one
        grid, block = (t.c["grid"], t.c["block"]) if n else (np.zeros((0, 3), np.int64), np.zeros((0, 3), np.int64))
        any_dims = bool((grid != -1).any() or (block != -1).any())
        self.l_grid, self.l_block = (grid, block) if any_dims else (None, None)
        self.l_size = t.c["size"] if n else np.zeros(0, np.int64)
        o = np.argsort(corr, kind="stable")
        self.l_corr_sorted, self.l_corr_rows = corr[o], o

        def text(code: int) -> str:
            v = self.g.names.values[code] if code >= 0 else None
            return VERSION_SUFFIX.sub("", v) if type(v) is str else str(v)

        c = self.builder.cols["launches"]
        c["rank"] = np.full(n, self.rank, np.int64)
        c["tid"] = t.c["tid_int"] if n else np.zeros(0, np.int64)
        c["start_ns"] = start
        c["dur_ns"] = dur
        c["name"] = self._sid_codes(t.c["name"], text) if n else np.zeros(0, np.int32)
        c["correlation"] = corr
        c["op"] = op

    def _gpu_links_t(self, t: Table, start: np.ndarray):
        dev, stream, corr, ext = (t.c[k] if t.n else np.zeros(0, np.int64) for k in ("device", "stream", "corr", "ext"))
        gpu_lane = self._lane_arrays(dev, stream, gpu=True)
        return dev, stream, corr, self._attach(ext, corr, gpu_lane, start)

    def _kernels_t(self, t: Table) -> None:
        t, start, dur = self._timed_t(t, "kernel")
        n = t.n
        self._drop(t, ("name", "device", "stream", "corr", "ext", "grid", "block"))  # what is read below
        dev, stream, corr, (launch, op, scope, path, phase, step) = self._gpu_links_t(t, start)
        grid = t.c.pop("grid").astype(np.int64, copy=False) if n else np.zeros((0, 3), np.int64)
        block = t.c.pop("block").astype(np.int64, copy=False) if n else np.zeros((0, 3), np.int64)
        missing = (grid[:, 0] < 0) & (launch >= 0)
        if missing.any():  # ROCm roctracer builds put grid/block on the launch (runtime) event only
            grid[missing] = self.l_grid[launch[missing]] if self.l_grid is not None else -1
            block[missing] = self.l_block[launch[missing]] if self.l_block is not None else -1
        self.l_grid = self.l_block = None
        names = t.c["name"] if n else np.zeros(0, np.int32)
        self.k_t = t
        self.k_start, self.k_dur, self.k_op = start, dur, op
        self.k_phase, self.k_step, self.k_scope = phase, step, scope
        self.k_names = _Rows(n, lambda k: self.g.name_str(int(names[k])))
        self.k_args = _Rows(n, lambda k: t.coll.get(k) or SimpleNamespace(coll_name=None))
        c = self.builder.cols["kernels"]
        c["rank"] = np.full(n, self.rank, np.int64)
        c["device"] = dev
        c["stream"] = stream
        c["start_ns"] = start
        c["dur_ns"] = dur
        c["name"] = self._sid_codes(names)
        for k, col in enumerate("xyz"):
            c[f"grid_{col}"] = np.ascontiguousarray(grid[:, k])
            c[f"block_{col}"] = np.ascontiguousarray(block[:, k])
        del grid, block
        c["correlation"] = corr
        c["launch"] = launch
        c["op"] = op
        c["scope"] = scope
        c["scope_path"] = path
        c["phase"] = phase
        c["step"] = step
        self._drop(t, ("name",))

    def _copies_t(self, t: Table) -> None:
        t, start, dur = self._timed_t(t, "memcpy")
        n = t.n
        dev, stream, corr, (launch, op, scope, _path, phase, step) = self._gpu_links_t(t, start)
        nbytes = t.c["bytes"].astype(np.int64) if n else np.zeros(0, np.int64)
        miss = (nbytes < 0) & (launch >= 0)
        if miss.any():  # roctracer: the size sits on the hipMemcpy* call as a string
            nbytes[miss] = self.l_size[launch[miss]]
        kinds = ("memcpy", "memset")
        c = self.builder.cols["memcpy"]
        c["rank"] = np.full(n, self.rank, np.int64)
        c["device"] = dev
        c["stream"] = stream
        c["start_ns"] = start
        c["dur_ns"] = dur
        c["kind"] = self._sid_codes(t.c["kind"].astype(np.int64), lambda j: kinds[j]) if n else np.zeros(0, np.int32)
        c["direction"] = self._sid_codes(t.c["direction"]) if n else np.zeros(0, np.int32)
        c["bytes"] = nbytes
        c["name"] = self._sid_codes(t.c["name"]) if n else np.zeros(0, np.int32)
        c["correlation"] = corr
        c["launch"] = launch
        c["op"] = op
        c["scope"] = scope
        c["phase"] = phase
        c["step"] = step

    def _comm_evidence(self) -> bool:
        """Whether `_kineto_comm.collectives` may make a row: an op or kernel with collective args, a c10d op, a
        gloo range, or a communication kernel name anywhere in the trace's names (the kernels are not linked yet).
        With none it makes no row and reads nothing, so the nesting it would read need not be kept."""
        return bool(self.op_t.coll or any(t.coll for t in self.g.chunks.get("kernel", ())) or self.c10d_op_names()
                    or self.gloo_ann_rows() or any(is_comm_kernel_name(v) for v in self.g.names.values))

    def _collectives(self) -> None:
        if not self.no_comm:
            super()._collectives()

    # -- what _kineto_comm scans for ----------------------------------------------------------------------
    def comm_op_rows(self) -> list[int]:
        return sorted(self.op_t.coll)

    def comm_kernel_rows(self) -> list[int]:
        names = self.k_t.c["name"] if self.k_t.n else np.zeros(0, np.int32)
        comm_codes = [c for c, v in enumerate(self.g.names.values) if is_comm_kernel_name(v)]
        hit = set(np.flatnonzero(np.isin(names, comm_codes)).tolist()) | set(self.k_t.coll)
        return sorted(hit)

    def c10d_op_names(self) -> list[tuple[int, str]]:
        vals = self.g.names.values
        codes = [c for c, v in enumerate(vals) if type(v) is str and v.startswith("c10d::")]
        if not codes or not self.op_t.n:
            return []
        rows = np.flatnonzero(np.isin(self.op_t.c["name"], codes))
        return [(int(i), vals[int(self.op_t.c["name"][i])]) for i in rows]

    def gloo_ann_rows(self) -> list[int]:
        return [j for j, x in enumerate(self.ann_names) if x.startswith("gloo:")]


# -- reading ----------------------------------------------------------------------------------------------
def _limits(n: int, where: str, watch) -> None:
    """The event limits on the elements decoded so far (every element counts, with a "ph" key or not: the byte
    counter of `watch` sees only the keys): the cap, and for a gzip the events per compressed byte."""
    check_events(n, where)
    compressed = getattr(watch, "compressed", None)
    if compressed is not None:
        check_density(n, compressed, where)


def gather(path: Path, watch, jobs: int) -> tuple[str, Any, Gathered | bytes]:
    """Read and decode the file: ('ok', header Trace, Gathered) or ('fallback', None, b'') when its shape is not
    the streamable one (the caller reads it whole)."""
    g = Gathered()
    head = tail = b""
    shape_array = False
    where = str(path)
    stream = ks.pieces(iter(iter_bytes(path, watch=watch)), where)
    pending: deque = deque()
    pool = None

    try:
        if jobs > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            ctx = multiprocessing.get_context("forkserver" if "forkserver" in multiprocessing.get_all_start_methods()
                                              else "spawn")
            pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx)
        carry = b""
        joins = 0  # wrong cuts joined in a row
        WORKER_CPU_S[0] = 0.0
        for kind, data in stream:
            if kind == "fallback":
                return "fallback", None, b""
            if kind == "head":
                head, shape_array = data, not data.strip()
                continue
            if kind == "tail":
                tail = data
                continue
            piece, sep = data
            text = carry + piece if carry else piece
            if pool is None:
                try:
                    g.add(ks.decode_piece(text))
                    _limits(g.events, where, watch)
                    carry, joins = b"", 0
                except ks.WrongCut:
                    if joins >= ks.MAX_JOINS:
                        return "fallback", None, b""
                    carry, joins = text + sep, joins + 1  # the cut was inside an event: join with the next
                continue
            pending.append((text, sep, pool.submit(ks.decode_piece, text)))
            while len(pending) > 2 * jobs:
                if _drain_one(pending, g, where, pool, watch):
                    return "fallback", None, b""
        if carry:
            return "fallback", None, b""
        while pending:
            if _drain_one(pending, g, where, pool, watch):
                return "fallback", None, b""
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return "ok", ks.decode_header(head, tail, shape_array, where), g


def _drain_one(pending: deque, g: Gathered, where: str, pool, watch) -> bytes:
    """Add the oldest decoded piece; a wrong cut is decoded again joined with the next piece (in this process)."""
    text, sep, fut = pending.popleft()
    try:
        piece = fut.result()
        WORKER_CPU_S[0] += piece["cpu_s"]
        g.add(piece)
        _limits(g.events, where, watch)
        return b""
    except ks.WrongCut:
        for _ in range(ks.MAX_JOINS):
            if not pending:
                return text
            nxt, sep2, fut2 = pending.popleft()
            fut2.cancel()
            text, sep = text + sep + nxt, sep2
            try:
                g.add(ks.decode_piece(text))
                _limits(g.events, where, watch)
                return b""
            except ks.WrongCut:
                continue
        return text
