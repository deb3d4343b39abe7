"""One rank's Kineto events -> the Profile tables (ops, scopes, launches, kernels, copies, collectives).

`RankImporter.run(events)` buckets the decoded events by category and fills a ProfileBuilder. Linking (see
`mmprof.importers.kineto`): kernel/copy -> launch by correlation, launch -> op by External id (checked against
time nesting), scope / phase / step from the annotations and nn.Module frames enclosing the launch.
"""

from __future__ import annotations

import re

import numpy as np

from mmprof.importers._chrome import Args
from mmprof.importers._kineto_comm import collectives, is_comm_kernel_name
from mmprof.importers._nesting import (
    MAX_PATH_DEPTH,
    MAX_TIME_NS,
    SWEEP_BLOCK,
    Lanes,
    int_array,
    to_int,
    finite_us,
    to_ns,
)
from mmprof.labels import phase_of, step_of, step_values
from mmprof.profiles.profile import ProfileBuilder

KERNEL_CATS = {"kernel", "Kernel"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver", "hip_runtime", "xpu_runtime",
                "privateuse1_runtime", "privateuse1_driver", "mtia_runtime"}
OP_CATS = {"cpu_op", "Operator", "operator"}
ANN_CATS = {"user_annotation"}
GPU_ANN_CATS = {"gpu_user_annotation"}
MEMCPY_CATS = {"gpu_memcpy", "Memcpy"}
MEMSET_CATS = {"gpu_memset", "Memset"}
PY_CATS = {"python_function"}
# categories we know and deliberately do not import (no warning)
KNOWN_SKIPPED = {None, "ac2g", "async_cpu_to_gpu", "async_gpu", "fwdbwd", "fwd_bwd", "cpu_instant_event",
                 "python_function", "overhead", "Trace", "cuda_sync", "cuda_event", "cuda_profiler_range",
                 "external_correlation", "collective_comm", "mtia_ccp_events", "hpu_op", "Python",
                 "gpu_mem_alloc", "memory", "Memory"}

VERSION_SUFFIX = re.compile(r"_v\d+$")
_EMPTY = Args()


class RankImporter:
    """Fills a ProfileBuilder from decoded events of one rank."""

    def __init__(self, rank: int, warnings: list[str]) -> None:
        self.rank = rank
        self.warnings = warnings
        self.builder = ProfileBuilder({})
        self.st = self.builder.strings
        self.lane_ids: dict[tuple, int] = {}
        self.counts: dict[str, int] = {}
        self.pids: set = set()
        self.dist: dict = {}

    # -- helpers ------------------------------------------------------------------------------------
    def _lane(self, pids: list, tids: list) -> np.ndarray:
        """A dense lane id per (pid, tid) pair, shared by every table of this rank."""
        ids = self.lane_ids
        keys = list(zip(pids, tids))
        local = {k: ids.setdefault(k, len(ids)) for k in dict.fromkeys(keys)}
        return np.fromiter(map(local.__getitem__, keys), dtype=np.int64, count=len(keys))

    def _sid(self, vals) -> np.ndarray:
        """String-table ids of `vals` (interning each distinct value once)."""
        sid = self.st.id
        vals = list(vals)
        local = {v: sid(v if v is None or type(v) is str else str(v)) for v in dict.fromkeys(vals)}
        return np.fromiter(map(local.__getitem__, vals), dtype=np.int32, count=len(vals))

    def _timed(self, evs: list, what: str) -> tuple[list, np.ndarray, np.ndarray]:
        """Drop events without ts (counted), sort by ts, return (events, start_ns, dur_ns)."""
        ts = [e.ts for e in evs]
        if None in ts:
            n0 = len(evs)
            evs = [e for e in evs if e.ts is not None]
            ts = [e.ts for e in evs]
            self.warnings.append(f"{n0 - len(evs)} {what} events without a timestamp were dropped")
        durs = [e.dur or 0 for e in evs]
        _, ok_ts = finite_us(ts)
        _, ok_dur = finite_us(durs)
        ok = ok_ts & ok_dur
        if not ok.all():  # 1e300, inf or beyond int64 ns: no number to compute with, never a silent wrap-around
            keep = np.flatnonzero(ok).tolist()
            self.warnings.append(f"{len(evs) - len(keep)} {what} events with a timestamp or duration out of range "
                                 f"(not finite, or beyond {MAX_TIME_NS:.0e} ns) were dropped")
            evs = [evs[i] for i in keep]
            ts = [ts[i] for i in keep]
            durs = [durs[i] for i in keep]
        start = to_ns(ts) if evs else np.zeros(0, np.int64)
        dur = to_ns(durs) if evs else np.zeros(0, np.int64)
        if len(start) and (np.diff(start) < 0).any():
            order = np.argsort(start, kind="stable")
            evs = [evs[i] for i in order.tolist()]
            start, dur = start[order], dur[order]
        neg = dur < 0
        if neg.any():
            self.warnings.append(f"{int(neg.sum())} {what} events with negative duration set to 0")
            dur[neg] = 0
        return evs, start, dur

    # -- main ---------------------------------------------------------------------------------------
    def run(self, events: list) -> None:
        """Import `events` (consumed: the list is emptied once they are bucketed, so that events of categories
        nothing imports are freed before the tables are built)."""
        buckets: dict = {}
        get = buckets.get
        for e in events:
            c = e.cat
            b = get(c)
            if b is None:
                b = buckets[c] = []
            b.append(e)
        events.clear()
        self.counts = {str(c): len(v) for c, v in buckets.items()}
        def pick(cats: set) -> list:
            return [e for c in cats if c in buckets for e in buckets[c] if e.ph == "X"]

        imported = KERNEL_CATS | RUNTIME_CATS | OP_CATS | ANN_CATS | GPU_ANN_CATS | MEMCPY_CATS | MEMSET_CATS
        odd = sum(1 for c in imported if c in buckets for e in buckets[c] if e.ph not in ("X", "i", "I", "s", "f", "t"))
        if odd:  # Kineto writes complete ("X") events only; B/E pairs from other writers are not read
            self.warnings.append(f"{odd} events in imported categories are not complete (ph 'X') events and were skipped")
        kernels = pick(KERNEL_CATS)
        runtime = pick(RUNTIME_CATS)
        ops = pick(OP_CATS)
        anns = pick(ANN_CATS)
        gpu_anns = pick(GPU_ANN_CATS)
        # nn.Module frames of with_stack traces: ranges like any annotation (source "module"); other Python frames
        # are not imported
        modules = [e for e in pick(PY_CATS) if isinstance(e.name, str) and e.name.startswith("nn.Module: ")]
        copies = [(e, "memcpy") for e in pick(MEMCPY_CATS)] + [(e, "memset") for e in pick(MEMSET_CATS)]
        known = KERNEL_CATS | RUNTIME_CATS | OP_CATS | ANN_CATS | GPU_ANN_CATS | MEMCPY_CATS | MEMSET_CATS | KNOWN_SKIPPED
        unknown = {str(c): len(v) for c, v in buckets.items() if c not in known}
        if unknown:
            self.warnings.append("unknown event categories not imported: "
                                 + ", ".join(f"{c} ({n})" for c, n in sorted(unknown.items())))
        self.pids = {e.pid for e in ops[:1000] + runtime[:1000] if e.pid is not None}
        del events
        buckets.clear()
        self._ops(ops)
        self._scopes(anns, gpu_anns, modules)
        scope, path, phase, step = self._scope_cols(self.ann.enclosing(self.op_lane, self.op_start))
        phase, step = self._by_time(phase, step, self.op_start)
        c = self.builder.cols["ops"]
        c["scope"], c["scope_path"], c["phase"], c["step"] = scope, path, phase, step
        self._launches(runtime)
        self._kernels(kernels)
        self._copies(copies)
        self._collectives()

    # -- ops ----------------------------------------------------------------------------------------
    def _ops(self, ops: list) -> None:
        ops, start, dur = self._timed(ops, "cpu_op")
        self.op_events = ops
        self.op_start, self.op_end = start, start + dur
        self.op_lane = self._lane([e.pid for e in ops], [e.tid for e in ops])
        self.op_nest = Lanes(self.op_lane, start, start + dur)
        args = [e.args or _EMPTY for e in ops]
        ext = int_array([a.external_id if a.external_id is not None else a.external_id_old for a in args])
        self.op_ext = ext
        # External id -> op row, via a sorted index
        valid = np.flatnonzero(ext > 0)
        o = valid[np.argsort(ext[valid], kind="stable")]
        self.ext_sorted, self.ext_rows = ext[o], o
        raw_cache: dict[bytes, int] = {}
        sid = self.st.id

        def raw_id(r) -> int:
            b = bytes(r)
            if not b:
                return -1
            i = raw_cache.get(b)
            if i is None:
                i = raw_cache[b] = sid(b.decode("utf-8", "replace").strip())
            return i

        c = self.builder.cols["ops"]
        n = len(ops)
        c["rank"] = np.full(n, self.rank, np.int64)
        c["tid"] = int_array([e.tid for e in ops])
        c["start_ns"] = start
        c["dur_ns"] = dur
        c["name"] = self._sid([e.name for e in ops])
        c["input_dims"] = [raw_id(a.input_dims) for a in args]
        c["input_types"] = [raw_id(a.input_type) for a in args]
        c["external_id"] = ext
        c["parent"] = self.op_nest.parent

    def op_by_ext(self, ext: np.ndarray) -> np.ndarray:
        """Op row whose External id equals each value, or -1."""
        if not len(self.ext_sorted) or not len(ext):
            return np.full(len(ext), -1, np.int64)
        pos = np.clip(np.searchsorted(self.ext_sorted, ext), 0, len(self.ext_sorted) - 1)
        hit = (self.ext_sorted[pos] == ext) & (ext > 0)
        return np.where(hit, self.ext_rows[pos], -1)

    # -- annotations -> scopes --------------------------------------------------------------------------
    def _scopes(self, anns: list, gpu_anns: list, modules: list) -> None:
        steps = [e for e in self.op_events if isinstance(e.name, str) and e.name.startswith("ProfilerStep#")]
        cpu = ([(e, "user_annotation") for e in anns] + [(e, "step") for e in steps]
               + [(e, "module") for e in modules])
        cpu.sort(key=lambda x: x[0].ts if x[0].ts is not None else 0)
        evs, start, dur = self._timed([e for e, _ in cpu], "user_annotation")
        src_of = {id(e): s for e, s in cpu}
        lane = self._lane([e.pid for e in evs], [e.tid for e in evs])
        self.ann = Lanes(lane, start, start + dur)
        self.ann_events, self.ann_start, self.ann_end, self.ann_lane = evs, start, start + dur, lane
        names = [e.name if isinstance(e.name, str) else str(e.name) for e in evs]
        steps = step_values(names, start.tolist())  # engine step annotations, when present, are the steps
        self.ann_name, self.ann_path, self.ann_phase, self.ann_step = self._propagate(self.ann, names, steps)
        self.step_win, self.phase_win = self._windows(names, start, start + dur, steps)
        n = len(evs)
        c = self.builder.cols["scopes"]
        sid = self.st.id
        c["rank"] = np.full(n, self.rank, np.int64)
        c["tid"] = int_array([e.tid for e in evs])
        c["device"] = np.full(n, -1, np.int64)
        c["stream"] = np.full(n, -1, np.int64)
        c["start_ns"] = start
        c["dur_ns"] = dur
        c["name"] = self.ann_name
        c["source"] = [sid(src_of[id(e)]) for e in evs]
        c["depth"] = self.ann.depth
        c["parent"] = self.ann.parent
        # GPU-side annotations: lanes are (device, stream)
        gevs, gstart, gdur = self._timed(gpu_anns, "gpu_user_annotation")
        gargs = [e.args or _EMPTY for e in gevs]
        dev = int_array([a.device if a.device is not None else e.pid for a, e in zip(gargs, gevs)])
        stream = int_array([a.stream if a.stream is not None else e.tid for a, e in zip(gargs, gevs)])
        glane = self._lane([("gpu", d) for d in dev.tolist()], stream.tolist())
        gnames = [e.name if isinstance(e.name, str) else str(e.name) for e in gevs]
        self._gpu_scopes(glane, dev, stream, gstart, gdur, gnames, n)

    def _gpu_scopes(self, glane, dev, stream, gstart, gdur, gnames: list[str], off: int) -> None:
        """The GPU-side annotations (lanes are (device, stream)) after the `off` CPU ones in the scopes table."""
        self.gann = Lanes(glane, gstart, gstart + gdur)
        self.gann_name, self.gann_path, self.gann_phase, self.gann_step = self._propagate(self.gann, gnames)
        self.gstep_win, self.gphase_win = self._windows(gnames, gstart, gstart + gdur)
        c = self.builder.cols["scopes"]
        m = len(gstart)
        gpu_source = self.st.id("gpu_user_annotation")  # interned whether or not there are any (the string table)
        if not m:  # no GPU-side annotations: the CPU columns stay as they are (no copy beside the linking arrays)
            return
        cat = lambda a, b: np.concatenate([np.asarray(a, np.int64), np.asarray(b, np.int64)])  # noqa: E731
        c["rank"] = cat(c["rank"], np.full(m, self.rank))
        c["tid"] = cat(c["tid"], np.full(m, -1))
        c["device"] = cat(c["device"], dev)
        c["stream"] = cat(c["stream"], stream)
        c["start_ns"] = cat(c["start_ns"], gstart)
        c["dur_ns"] = cat(c["dur_ns"], gdur)
        c["name"] = cat(c["name"], self.gann_name)
        c["source"] = cat(c["source"], np.full(m, gpu_source))
        c["depth"] = cat(c["depth"], self.gann.depth)
        c["parent"] = cat(c["parent"], np.where(self.gann.parent >= 0, self.gann.parent + off, -1))

    def _propagate(self, lanes: Lanes, names: list[str], steps: list[int] | None = None):
        """Name id, ' > '-joined path id, phase id and step of each annotation (inherited from parents); `steps`:
        the step each label marks itself (`mmprof.labels.step_values`; default `step_of` of each)."""
        n = len(names)
        sid = self.st.id
        name_id = np.array([sid(x) for x in names], dtype=np.int64) if n else np.zeros(0, np.int64)
        path = [""] * n
        phase: list = [None] * n
        step: list = [-1] * n
        own = steps if steps is not None else [step_of(x) for x in names]
        # in blocks of the order (parents come before children in it), so that the Python ints of the order, parent
        # and depth columns exist for one block at a time, not for every annotation at once
        for a in range(0, n, SWEEP_BLOCK):
            ob = lanes.order[a:a + SWEEP_BLOCK]
            for i, p, d in zip(ob.tolist(), lanes.parent[ob].tolist(), lanes.depth[ob].tolist()):
                nm = names[i]
                ph = phase_of(nm)
                sp = own[i]
                if p >= 0:
                    path[i] = path[p] + " > " + nm if d < MAX_PATH_DEPTH else path[p]  # bounded
                    phase[i] = phase[p] or ph  # the outermost label that names a phase
                    step[i] = sp if sp >= 0 else step[p]
                else:
                    path[i] = nm
                    phase[i] = ph
                    step[i] = sp
        path_id = np.array([sid(x) for x in path], dtype=np.int64) if n else np.zeros(0, np.int64)
        phase_id = np.array([sid(x) for x in phase], dtype=np.int64) if n else np.zeros(0, np.int64)
        return name_id, path_id, phase_id, np.array(step, dtype=np.int64)

    def _windows(self, names: list[str], start: np.ndarray, end: np.ndarray, steps: list[int] | None = None):
        """Step and phase windows of every lane together: (Lanes, value per interval) for the annotations that
        name a step (engine steps, ProfilerStep#N, mmprof.step.N) or a phase themselves, or None when none."""
        out = []
        own = steps if steps is not None else [step_of(x) for x in names]
        for val in (own, [self.st.id(ph) if (ph := phase_of(x)) else -1 for x in names]):
            v = np.asarray(val, dtype=np.int64).reshape(-1)
            rows = np.flatnonzero(v >= 0)
            out.append((Lanes(np.zeros(len(rows), np.int64), start[rows], end[rows]), v[rows]) if len(rows) else None)
        return out[0], out[1]

    @staticmethod
    def _in_window(win, cols: np.ndarray, t: np.ndarray) -> np.ndarray:
        """`cols` with its -1 entries filled from the window (of any lane) that contains time `t`."""
        need = np.flatnonzero(cols < 0)
        if win is None or not len(need):
            return cols
        lanes, vals = win
        idx = lanes.enclosing(np.zeros(len(need), np.int64), t[need])
        out = cols.copy()
        out[need] = np.where(idx >= 0, vals[np.maximum(idx, 0)], -1)
        return out

    def _by_time(self, phase: np.ndarray, step: np.ndarray, t: np.ndarray, gpu_t: np.ndarray | None = None):
        """Phase and step of events whose own thread has no marker around them: the CPU step / phase window of any
        thread that contains `t` (the launch time), else the GPU-side window of any stream that contains `gpu_t`."""
        phase = self._in_window(self.phase_win, phase, t)
        step = self._in_window(self.step_win, step, t)
        if gpu_t is not None:
            phase = self._in_window(self.gphase_win, phase, gpu_t)
            step = self._in_window(self.gstep_win, step, gpu_t)
        return phase, step

    def _scope_cols(self, idx: np.ndarray, gpu: bool = False) -> tuple[np.ndarray, ...]:
        """(scope, scope_path, phase, step) columns for annotation rows `idx` (-1 = none)."""
        name, path, phase, step = ((self.gann_name, self.gann_path, self.gann_phase, self.gann_step) if gpu
                                   else (self.ann_name, self.ann_path, self.ann_phase, self.ann_step))
        ok = idx >= 0
        j = np.where(ok, idx, 0)
        if not len(name):
            m1 = np.full(len(idx), -1, np.int64)
            return m1, m1.copy(), m1.copy(), m1.copy()
        return (np.where(ok, name[j], -1), np.where(ok, path[j], -1), np.where(ok, phase[j], -1),
                np.where(ok, step[j], -1))

    # -- launches -----------------------------------------------------------------------------------
    def _launches(self, rt: list) -> None:
        rt, start, dur = self._timed(rt, "runtime")
        args = [e.args or _EMPTY for e in rt]
        lane = self._lane([e.pid for e in rt], [e.tid for e in rt])
        corr = int_array([a.correlation for a in args])
        ext = int_array([a.external_id if a.external_id is not None else a.external_id_old for a in args])
        # op: the External id's op when it is on the same thread and encloses the call, else nesting
        op = self.op_by_ext(ext)
        j = np.where(op >= 0, op, 0)
        if len(self.op_start):
            good = (op >= 0) & (self.op_lane[j] == lane) & (self.op_start[j] <= start) & (self.op_end[j] >= start)
        else:
            good = np.zeros(len(op), bool)
        nest = self.op_nest.enclosing(lane, start)
        op = np.where(good, op, nest)
        ann = self.ann.enclosing(lane, start)
        self.l_start, self.l_lane, self.l_op, self.l_ann, self.l_args = start, lane, op, ann, args
        o = np.argsort(corr, kind="stable")
        self.l_corr_sorted, self.l_corr_rows = corr[o], o
        names = [(VERSION_SUFFIX.sub("", e.name) if isinstance(e.name, str) else str(e.name)) for e in rt]
        c = self.builder.cols["launches"]
        n = len(rt)
        c["rank"] = np.full(n, self.rank, np.int64)
        c["tid"] = int_array([e.tid for e in rt])
        c["start_ns"] = start
        c["dur_ns"] = dur
        c["name"] = self._sid(names)
        c["correlation"] = corr
        c["op"] = op

    def launch_by_corr(self, corr: np.ndarray) -> np.ndarray:
        s = self.l_corr_sorted
        if not len(s) or not len(corr):
            return np.full(len(corr), -1, np.int64)
        pos = np.clip(np.searchsorted(s, corr), 0, len(s) - 1)
        hit = (s[pos] == corr) & (corr >= 0)
        return np.where(hit, self.l_corr_rows[pos], -1)

    def _attach(self, ext: np.ndarray, corr: np.ndarray, gpu_lane: np.ndarray, start: np.ndarray):
        """launch, op, (scope, path, phase, step) for GPU events by correlation, External id, GPU annotations."""
        launch = self.launch_by_corr(corr)
        has = launch >= 0
        j = np.where(has, launch, 0)
        if len(self.l_op):
            op = np.where(has, self.l_op[j], -1)
            ann = np.where(has, self.l_ann[j], -1)
        else:
            op = np.full(len(corr), -1, np.int64)
            ann = op.copy()
        # no launch: the event's own External id names the op (e.g. runtime events not captured)
        direct = self.op_by_ext(ext)
        op = np.where(op >= 0, op, direct)
        scope, path, phase, step = self._scope_cols(ann)
        # no CPU annotation: fall back to the GPU-side annotation around the event on its stream (for the scope
        # when there is none, for phase / step when the CPU side gave none)
        if len(self.gann_name) and ((scope < 0) | (phase < 0) | (step < 0)).any():
            g = self.gann.enclosing(gpu_lane, start)
            gscope, gpath, gphase, gstep = self._scope_cols(g, gpu=True)
            need = scope < 0
            scope, path = np.where(need, gscope, scope), np.where(need, gpath, path)
            phase, step = np.where(phase < 0, gphase, phase), np.where(step < 0, gstep, step)
        # still none: the step / phase window of another thread (a backward, DataLoader or communication thread's
        # kernels run inside the main thread's ProfilerStep), by the launch time, else by the event's own start
        t = np.where(has, self.l_start[j], start) if len(self.l_start) else start
        phase, step = self._by_time(phase, step, t, start)
        return launch, op, scope, path, phase, step

    # -- kernels ------------------------------------------------------------------------------------
    def _kernels(self, ks: list) -> None:
        ks, start, dur = self._timed(ks, "kernel")
        n = len(ks)
        args, dev, stream, corr, (launch, op, scope, path, phase, step) = self._gpu_links(ks, start)
        grid = self._dims([a.grid for a in args])
        block = self._dims([a.block for a in args])
        # ROCm roctracer builds put grid/block on the launch (runtime) event only
        missing = (grid[:, 0] < 0) & (launch >= 0)
        if missing.any():
            rows = launch[missing].tolist()
            grid[missing] = self._dims([self.l_args[i].grid for i in rows])
            block[missing] = self._dims([self.l_args[i].block for i in rows])
        self.k_start, self.k_dur, self.k_op, self.k_args, self.k_names = start, dur, op, args, [e.name for e in ks]
        self.k_phase, self.k_step, self.k_scope = phase, step, scope
        c = self.builder.cols["kernels"]
        c["rank"] = np.full(n, self.rank, np.int64)
        c["device"] = dev
        c["stream"] = stream
        c["start_ns"] = start
        c["dur_ns"] = dur
        c["name"] = self._sid(self.k_names)
        for k, col in enumerate("xyz"):
            c[f"grid_{col}"] = np.ascontiguousarray(grid[:, k])
            c[f"block_{col}"] = np.ascontiguousarray(block[:, k])
        c["correlation"] = corr
        c["launch"] = launch
        c["op"] = op
        c["scope"] = scope
        c["scope_path"] = path
        c["phase"] = phase
        c["step"] = step

    def _gpu_links(self, evs: list, start: np.ndarray):
        """Args, device, stream and correlation of GPU events (kernels, copies), and their links from `_attach`:
        (launch, op, scope, scope_path, phase, step)."""
        args = [e.args or _EMPTY for e in evs]
        dev = int_array([a.device if a.device is not None else e.pid for a, e in zip(args, evs)])
        stream = int_array([a.stream if a.stream is not None else e.tid for a, e in zip(args, evs)])
        corr = int_array([a.correlation for a in args])
        ext = int_array([a.external_id if a.external_id is not None else a.external_id_old for a in args])
        gpu_lane = self._lane([("gpu", d) for d in dev.tolist()], stream.tolist())
        return args, dev, stream, corr, self._attach(ext, corr, gpu_lane, start)

    @staticmethod
    def _dims(vals: list) -> np.ndarray:
        none = (-1, -1, -1)
        rows = [tuple(v) if type(v) is list and len(v) == 3 else none for v in vals]
        try:
            return np.array(rows, dtype=np.int64).reshape(len(rows), 3)
        except (TypeError, ValueError, OverflowError):
            return np.array([tuple(to_int(x) for x in r) for r in rows], dtype=np.int64).reshape(len(rows), 3)

    # -- memcpy / memset ----------------------------------------------------------------------------
    def _copies(self, copies: list) -> None:
        kind_of = {id(e): k for e, k in copies}
        evs, start, dur = self._timed([e for e, _ in copies], "memcpy")
        args, dev, stream, corr, (launch, op, scope, _path, phase, step) = self._gpu_links(evs, start)
        nbytes = int_array([a.bytes for a in args])
        miss = (nbytes < 0) & (launch >= 0)
        if miss.any():  # roctracer: the size sits on the hipMemcpy* call as a string
            nbytes[miss] = int_array([self.l_args[i].size if self.l_args[i].size is not None else self.l_args[i].bytes
                                  for i in launch[miss].tolist()])
        kinds = [kind_of[id(e)] for e in evs]
        dirs = [direction(e.name, a.kind) if k == "memcpy" else None for e, a, k in zip(evs, args, kinds)]
        n = len(evs)
        c = self.builder.cols["memcpy"]
        c["rank"] = np.full(n, self.rank, np.int64)
        c["device"] = dev
        c["stream"] = stream
        c["start_ns"] = start
        c["dur_ns"] = dur
        c["kind"] = self._sid(kinds)
        c["direction"] = self._sid(dirs)
        c["bytes"] = nbytes
        c["name"] = self._sid([e.name for e in evs])
        c["correlation"] = corr
        c["launch"] = launch
        c["op"] = op
        c["scope"] = scope
        c["phase"] = phase
        c["step"] = step

    # -- collectives --------------------------------------------------------------------------------
    def _collectives(self) -> None:
        collectives(self)

    # the rows mmprof.importers._kineto_comm scans for (one pass each; the columnar importer answers from columns)
    def comm_op_rows(self) -> list[int]:
        """Op rows whose args name a collective (record_param_comms)."""
        return [i for i, e in enumerate(self.op_events) if e.args is not None and e.args.coll_name is not None]

    def comm_kernel_rows(self) -> list[int]:
        """Kernel rows that are communication: their args name a collective, or their name is NCCL / RCCL's."""
        return [k for k, (a, name) in enumerate(zip(self.k_args, self.k_names))
                if a.coll_name is not None or is_comm_kernel_name(name)]

    def c10d_op_names(self) -> list[tuple[int, str]]:
        """(row, name) of the ops named `c10d::*`."""
        return [(i, e.name) for i, e in enumerate(self.op_events)
                if isinstance(e.name, str) and e.name.startswith("c10d::")]

    def gloo_ann_rows(self) -> list[int]:
        """Annotation rows named `gloo:*`."""
        return [j for j, e in enumerate(getattr(self, "ann_events", []))
                if isinstance(e.name, str) and e.name.startswith("gloo:")]


_DIRS = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "HtoA", "AtoH", "AtoA", "DtoA", "AtoD")


def direction(name, kind) -> str | None:
    if isinstance(kind, str) and kind in _DIRS:
        return kind
    if isinstance(name, str):
        for d in _DIRS:
            if d in name:
                return d
        if "Peer" in name or "P2P" in name:
            return "PtoP"
    return None
