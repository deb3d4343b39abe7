"""Helpers shared by the rocprofv3 / nsys importers: ranks, scope nesting, phase/step, bulk row appends.

Scope semantics match the Kineto importer (DEVELOPERS.md "Scope labels"): a kernel's `scope` is the innermost
CPU range (roctx / NVTX) enclosing its launch call on the launching thread, `scope_path` all enclosing ranges
outermost first joined by " > "; phase and step are read by `mmprof.labels`.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from mmprof._version import __version__
from mmprof.errors import BadInput
from mmprof.importers._nesting import MAX_PATH_DEPTH
from mmprof.labels import MAX_RANK, SEP, phase_of, phase_of_path, step_values
from mmprof.profiles.profile import Profile, ProfileBuilder, merge_profiles
from mmprof.profiles.schema import MAX_TIME_NS, TABLES

RANK_ENV_KEYS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "MV2_COMM_WORLD_RANK",
                 "PALS_RANKID", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
                 "SLURM_LOCALID")

COLLECTIVE_NAMES = {
    "allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce_scatter",
    "broadcast": "broadcast", "bcast": "broadcast", "reduce": "reduce", "alltoall": "alltoall",
    "alltoallv": "alltoall", "sendrecv": "sendrecv", "send": "send", "recv": "recv", "gather": "gather",
    "scatter": "scatter",
}


def rank_from_env(env: dict[str, Any] | None) -> int | None:
    """Global rank from a process environment (torchrun RANK, Open MPI, PMI, Slurm; LOCAL_RANK last)."""
    if not env:
        return None
    for k in RANK_ENV_KEYS:
        v = env.get(k)
        if v is None:
            continue
        try:
            r = int(str(v).strip().strip('"')[:12])
        except ValueError:
            continue
        if 0 <= r <= MAX_RANK:
            return r
    return None


def assign_ranks(units: list[tuple[str, int | None]], rank: int | None, fmt: str) -> tuple[list[int], list[str]]:
    """Final ranks for import units [(label, rank from content/name or None)].

    `rank` (the --rank option) is only allowed for a single unit. Units with no known rank get their order
    index, with a warning. Two units claiming the same rank is a BadInput naming both.
    """
    warnings: list[str] = []
    if rank is not None:
        if len(units) != 1:
            raise BadInput(f"--rank applies to one {fmt} process/file, but {len(units)} were given "
                           f"({', '.join(u[0] for u in units)})")
        return [rank], warnings
    out: list[int] = []
    known = [r for _, r in units if r is not None]
    if len(units) == 1:
        return [units[0][1] if units[0][1] is not None else 0], warnings
    free = iter(x for x in range(len(units) + len(known) + 1) if x not in set(known))
    for label, r in units:
        if r is None:
            r = next(free)
            warnings.append(f"{label}: rank not found in the file or its name; assumed rank {r} from file order")
        out.append(r)
    seen: dict[int, str] = {}
    for (label, _), r in zip(units, out):
        if r in seen:
            raise BadInput(f"{seen[r]} and {label} both claim rank {r}; pass them separately or rename them "
                           "with their ranks (e.g. trace_rank0.db)")
        seen[r] = label
    return out, warnings


def drop_idle(units: list, gpu_work: list[bool], labels: list[str]) -> tuple[list, list[str]]:
    """Leave out processes that did no GPU work (e.g. vLLM's API server) when others did, with a warning."""
    if not any(gpu_work) or all(gpu_work):
        return units, []
    warnings = [f"{lab}: no kernels or copies (a CPU-only process such as an API server); left out"
                for lab, g in zip(labels, gpu_work) if not g]
    return [u for u, g in zip(units, gpu_work) if g], warnings


class _Windows:
    """Labelled time ranges of every thread together; `at(t)` is the latest-started one containing t."""

    def __init__(self, rows: list[tuple[int, int, Any]]) -> None:
        rows.sort(key=lambda r: (r[0], r[1]))
        self.starts = [r[0] for r in rows]
        self.rows = rows
        self.max_end: list[int] = []
        m = None
        for r in rows:
            m = r[1] if m is None else max(m, r[1])
            self.max_end.append(m)

    def at(self, t: int, default: Any) -> Any:
        i = bisect.bisect_right(self.starts, t) - 1
        while i >= 0 and self.max_end[i] > t:
            if self.rows[i][1] > t:
                return self.rows[i][2]
            i -= 1
        return default


@dataclass
class ScopeNest:
    """CPU ranges of one rank, nested per thread. `depth`/`parent` index into the input order."""

    tids: list[int]
    starts: list[int]
    ends: list[int]
    names: list[str]
    depth: list[int] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)
    _by_tid: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.starts)
        self.depth = [0] * n
        self.parent = [-1] * n
        groups: dict[int, list[int]] = {}
        for i, t in enumerate(self.tids):
            groups.setdefault(t, []).append(i)
        for t, idx in groups.items():
            idx.sort(key=lambda i: (self.starts[i], -self.ends[i]))
            stack: list[int] = []
            for i in idx:
                # an ancestor starts no later and ends no earlier; marks (zero length) never enclose
                while stack and (self.ends[stack[-1]] < self.ends[i] or self.ends[stack[-1]] == self.starts[stack[-1]]):
                    stack.pop()
                if stack:
                    self.parent[i] = stack[-1]
                    self.depth[i] = self.depth[stack[-1]] + 1
                stack.append(i)
            self._by_tid[t] = ([self.starts[i] for i in idx], idx)
        # the step each range marks itself: engine step annotations, when present, number the steps
        self.step_val = step_values(self.names, self.starts)
        self._step_win = _Windows([(s, e, v) for s, e, v in zip(self.starts, self.ends, self.step_val)
                                   if v >= 0 and e > s])
        self._phase_win = _Windows([(s, e, ph) for s, e, nm in zip(self.starts, self.ends, self.names)
                                    if (ph := phase_of(nm)) and e > s])

    def window(self, ts: int) -> tuple[str | None, int]:
        """(phase, step) of the phase / step range of ANY thread that contains `ts` (None, -1 when none): the
        window of a kernel launched from a thread that carries no markers of its own."""
        return self._phase_win.at(ts, None), self._step_win.at(ts, -1)

    def enclosing(self, tid: int, ts: int) -> list[int]:
        """Ranges on `tid` that contain time `ts`, outermost first (zero-length marks never enclose)."""
        entry = self._by_tid.get(tid)
        if entry is None:
            return []
        starts, idx = entry
        k = bisect.bisect_right(starts, ts) - 1
        if k < 0:
            return []
        # the innermost enclosing range is the last range starting at or before ts, or one of its ancestors
        i = idx[k]
        while i != -1 and not (self.ends[i] >= ts and self.ends[i] > self.starts[i]):
            i = self.parent[i]
        chain = []
        while i != -1:
            chain.append(i)
            i = self.parent[i]
        return chain[::-1]


def add_scopes(b: ProfileBuilder, rank: int, tids: list[int], starts: list[int], ends: list[int],
               names: list[str], source: str) -> ScopeNest:
    """Append CPU ranges (roctx / NVTX) to the scopes table with depth and parent; returns the nesting."""
    ends = [e if e is not None and e >= s else s for s, e in zip(starts, ends)]
    nest = ScopeNest(list(tids), list(starts), ends, list(names))
    first = b.n("scopes")
    n = len(starts)
    extend(b, "scopes", n, rank=[rank] * n, tid=tids, start_ns=starts, dur_ns=[e - s for s, e in zip(starts, ends)],
           name=names, source=[source] * n, depth=nest.depth,
           parent=[p + first if p >= 0 else -1 for p in nest.parent])
    return nest


def attribute(nest: ScopeNest | None, tids: Sequence[int], times: Sequence[int]
              ) -> tuple[list[str | None], list[str | None], list[str | None], list[int]]:
    """scope, scope_path, phase, step for each (tid, time) query (e.g. a kernel's launch call)."""
    n = len(times)
    if nest is None or not nest.starts:
        return [None] * n, [None] * n, [None] * n, [-1] * n
    scope: list[str | None] = []
    path: list[str | None] = []
    phase: list[str | None] = []
    step: list[int] = []
    cache: dict[tuple[int, ...], tuple] = {}
    for t, ts in zip(tids, times):
        if t is None or t < 0 or ts is None or ts < 0:
            chain: list[int] = []
        else:
            chain = nest.enclosing(t, ts)
        key = tuple(chain)
        hit = cache.get(key)
        if hit is None:
            names = [nest.names[i] for i in chain]
            inner = [nest.step_val[i] for i in chain if nest.step_val[i] >= 0]  # the innermost step marker
            hit = (names[-1] if names else None, SEP.join(names[:MAX_PATH_DEPTH]) if names else None,
                   phase_of_path(names), inner[-1] if inner else -1)
            cache[key] = hit
        if (hit[2] is None or hit[3] < 0) and ts is not None and ts >= 0:
            wph, wst = nest.window(ts)  # no marker on the launching thread: the window of another thread
            hit = (hit[0], hit[1], hit[2] or wph, hit[3] if hit[3] >= 0 else wst)
        scope.append(hit[0])
        path.append(hit[1])
        phase.append(hit[2])
        step.append(hit[3])
    return scope, path, phase, step


def collective_name(api_or_kernel: str) -> str | None:
    """'ncclAllReduce' / 'ncclDevKernel_AllReduce_Sum_f32_RING_LL' / 'rcclAllGather' -> canonical name."""
    s = api_or_kernel
    m = re.search(r"(?:nccl|rccl)(?:DevKernel_|Kernel_)?([A-Za-z]+)", s, re.IGNORECASE)
    if not m:
        return None
    word = m.group(1).lower()
    for k in sorted(COLLECTIVE_NAMES, key=len, reverse=True):
        if word.startswith(k):
            return COLLECTIVE_NAMES[k]
    return None


def add_comm_kernels(b: ProfileBuilder, first: int, n: int) -> None:
    """Collective rows for NCCL/RCCL kernels among kernels[first:first+n] (bytes unknown: -1)."""
    kc = b.cols["kernels"]
    strs = b.strings.strings
    rows = []
    for k in range(first, first + n):
        nid = kc["name"][k]
        name = strs[nid] if nid >= 0 else ""
        if "ccl" in name.lower():
            c = collective_name(name)
            if c:
                rows.append((k, c))
    if not rows:
        return
    ph = [kc["phase"][k] for k, _ in rows]
    extend(b, "collectives", len(rows), rank=[kc["rank"][k] for k, _ in rows],
           start_ns=[kc["start_ns"][k] for k, _ in rows], dur_ns=[kc["dur_ns"][k] for k, _ in rows],
           name=[c for _, c in rows], kernel=[k for k, _ in rows],
           phase=[strs[p] if p >= 0 else None for p in ph], step=[kc["step"][k] for k, _ in rows])


def extend(b: ProfileBuilder, table: str, n: int, **columns: Sequence[Any]) -> int:
    """Append n rows column-wise; string columns take str/None; missing columns get their null. Returns first row."""
    first = b.n(table)
    if n == 0:
        return first
    if "start_ns" in columns or "dur_ns" in columns:
        columns["start_ns"], columns["dur_ns"] = _times(b, table, columns.get("start_ns"), columns.get("dur_ns"))
    cols = b.cols[table]
    for col, ctype, _ in TABLES[table]:
        vals = columns.pop(col, None)
        if vals is None:
            cols[col].extend([float("nan") if ctype == "float" else -1] * n)
            continue
        if len(vals) != n:
            raise ValueError(f"{table}.{col}: {len(vals)} values for {n} rows")
        if ctype == "str":
            sid = b.strings.id
            cols[col].extend([sid(v) if v is not None else -1 for v in vals])
        elif any(v is None for v in vals):
            cols[col].extend([int(v) if v is not None else -1 for v in vals])
        else:
            cols[col].extend(vals)
    if columns:
        raise KeyError(f"table {table!r} has no column(s) {', '.join(columns)}")
    return first


def _times(b: ProfileBuilder, table: str, start, dur) -> tuple[list | None, list | None]:
    """Start and duration columns a Profile can hold: an end before its start (a clock glitch, a row cut short) is
    a zero duration, with a warning; a time beyond +-MAX_TIME_NS or not an integer is a damaged file."""
    def bad(v) -> bool:
        if isinstance(v, (bool, float, str)) or not hasattr(v, "__index__"):
            return True
        return not -MAX_TIME_NS <= v <= MAX_TIME_NS

    for vals in (start, dur):
        if vals is not None and any(bad(v) for v in vals if v is not None):
            v = next(v for v in vals if v is not None and bad(v))
            raise BadInput(f"{table}: a timestamp or duration of {str(v)[:30]} ns is not an integer within "
                           f"+-{MAX_TIME_NS:.0e} ns; the file is damaged")
    if dur is not None and any(v is not None and v < 0 for v in dur):
        neg = sum(1 for v in dur if v is not None and v < 0)
        b.meta.setdefault("warnings", []).append(f"{neg} {table} rows end before they start; their duration is "
                                                 "set to 0")
        dur = [0 if v is not None and v < 0 else v for v in dur]
    return start, dur


def base_meta(fmt: str, files: list[Path], tool: str | None) -> dict[str, Any]:
    return {
        "mmprof_version": __version__,
        "source": {"format": fmt, "files": [str(f) for f in files], "tool": tool},
        "ranks": [],
        "clock": {"unit": "ns", "note": f"{fmt}: the tool's monotonic/boot clock in ns, per rank (not wall clock)"},
    }


def finish(profiles: list[Profile], warnings: list[str], files: list[Path], empty: str | None = None) -> Profile:
    """Merge the per-rank profiles of one import, attach the import's warnings, and refuse an import with no
    timeline rows at all (`empty` says what was missing, in the format's own words; None: allow empty)."""
    prof = merge_profiles(profiles) if len(profiles) > 1 else profiles[0]
    if warnings:
        prof.meta.setdefault("warnings", []).extend(warnings)
    if empty is not None and not any(prof.n(t) for t in ("kernels", "launches", "memcpy", "scopes")):
        raise BadInput(f"{', '.join(map(str, files))}: {empty}")
    return prof
