"""PyTorch profiler (Kineto) Chrome traces -> Profile.

One file per rank (`.json` or `.json.gz`, an object with `traceEvents` or a bare event array). The rank
comes from `--rank` when given, else `distributedInfo.rank`, else a `rank-N` / `rank_N` file name, else 0
(with a warning). CUDA and ROCm builds, old (2021-2022) category names and HIP-graph replays are handled.

Linking (see docs/importers.md):
    kernel/memcpy --correlation--> runtime call (launches)
    runtime call  --External id--> the CPU op that issued it (checked: same thread, op encloses the call;
                                   else the innermost op enclosing the call, found by time nesting)
    scope/phase/step = the user annotations (record_function) and nn.Module frames (with_stack traces)
                       enclosing the call on its thread, read by mmprof.labels.
All nesting is computed with one sort and a stack sweep per thread, then vectorised chain walks.

Timestamps: Kineto writes µs (floats with 3 decimals, ints in old files) whatever `displayTimeUnit` says;
the Profile stores integer ns on each rank's own timeline.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

from mmprof.errors import BadInput
from mmprof.fileio import GZIP_MAGIC, check_density, check_events, gzip_size, read_bytes
from mmprof.importers import _kineto_meta as km
from mmprof.importers._chrome import decode
from mmprof.importers._kineto_rank import RankImporter
from mmprof.labels import MAX_RANK, rank_from_name
from mmprof.profiles.profile import Profile, merge_profiles

# Several rank files import in worker processes only when each worker gets enough JSON to pay for starting it:
# a pool costs 1-2.5 s on the 2-core VM (the forkserver, one interpreter + mmprof import per worker, the Profiles
# sent back), one import about 12 ns per byte of JSON (1.25 s per 100 MB, docs/benchmarks.md). 8 x 100 MB ran
# 1.75x faster on two workers; 8 x 60 MB (480 MB) was faster in one run and 1.16x slower in another under heavy
# load, so each worker must get 256 MB: the default then stays with one process below about 512 MB.
PARALLEL_MIN_BYTES = 256 << 20


def json_bytes(f: Path) -> int:
    """The JSON size of a trace file: its size, or for a .gz the uncompressed size its trailer records (ISIZE,
    modulo 4 GiB: never smaller than the file itself is taken). A .xz counts its compressed size: an under-estimate,
    which can only choose fewer worker processes (never a pool that costs more than it saves)."""
    try:
        size = f.stat().st_size
        if size >= 18:
            with open(f, "rb") as fh:
                if fh.read(2) == GZIP_MAGIC:  # a gzip by content, whatever its name
                    fh.seek(-4, os.SEEK_END)
                    return max(size, int.from_bytes(fh.read(4), "little"))
        return size
    except OSError:
        return 0


def default_jobs(files: list[Path]) -> int:
    """Worker processes for importing `files`: MMPROF_IMPORT_JOBS, else one per PARALLEL_MIN_BYTES of JSON, at most
    the usable cores (`free_cores`) and one per file; 1 (this process, no workers) for small inputs or one file."""
    env = os.environ.get("MMPROF_IMPORT_JOBS")
    if env:
        try:
            return max(1, min(int(env), len(files)))
        except ValueError:
            raise BadInput(f"MMPROF_IMPORT_JOBS={env!r} is not a number of processes") from None
    if len(files) < 2:
        return 1
    total = sum(json_bytes(Path(f)) for f in files)
    return max(1, min(len(files), free_cores(), total // PARALLEL_MIN_BYTES))


def free_cores() -> int:
    """Cores this process may use: its CPU affinity (a container's or taskset's limit), else the machine's count.
    The load average is not subtracted: measured under load 20 on the 2-core VM, 8 x 60 MB imported in 22 s with
    two workers against 29.5 s with one (a second process gets its own share of the contended cores)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def decode_jobs(path: Path) -> int:
    """Worker processes decoding one file's pieces: MMPROF_DECODE_JOBS, else the usable cores when the JSON is
    at least kineto.PARALLEL_MIN_BYTES (a pool costs 1-2.5 s to start here), else none (this process)."""
    env = os.environ.get("MMPROF_DECODE_JOBS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise BadInput(f"MMPROF_DECODE_JOBS={env!r} is not a number of processes") from None
    return free_cores() if json_bytes(path) >= PARALLEL_MIN_BYTES and free_cores() > 1 else 1


def _load_in_worker(path: str) -> Profile:
    os.environ["MMPROF_DECODE_JOBS"] = "1"  # a file per worker already: its pieces decode in the worker itself
    return load_one(path, many=True)


def _each(files: list[Path], rank: int | None, jobs: int, progress) -> Iterator[tuple[Path, Profile]]:
    """(file, its Profile) as each import finishes: in this process, or in `jobs` worker processes (one file each
    at a time, so a worker's peak memory is one import's; results come back as they finish)."""
    n = len(files)
    if jobs <= 1:
        for i, f in enumerate(files):
            if progress is not None:
                progress(f"importing {f.name}", i, n)
            yield f, load_one(f, rank=rank, many=n > 1)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ctx = multiprocessing.get_context("forkserver" if "forkserver" in multiprocessing.get_all_start_methods()
                                      else "spawn")
    from concurrent.futures.process import BrokenProcessPool

    helpers = _helpers_running()
    pool = futures = fut = got = None
    try:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            futures = {pool.submit(_load_in_worker, str(f)): f for f in files}
            for i, fut in enumerate(as_completed(futures)):
                if progress is not None:
                    progress(f"imported {futures[fut].name} ({jobs} processes)", i, n)
                try:
                    got = fut.result()
                except BrokenProcessPool:
                    raise BadInput(f"{futures[fut]}: the process importing it died (out of memory?); retry with "
                                   "fewer processes (--jobs 1 imports one file at a time)") from None
                yield futures[fut], got
    finally:  # also on an error or a caller that stops early: the with block shut the pool down (its workers ended)
        pool = futures = fut = got = None  # noqa: F841 - dropped so the collection below frees the pool's queues
        _stop_helpers(helpers)


def _helpers_running() -> tuple[bool, bool]:
    """Whether multiprocessing's forkserver and resource tracker processes run already (started by someone else)."""
    from multiprocessing import forkserver, resource_tracker

    return (getattr(forkserver._forkserver, "_forkserver_pid", None) is not None,
            getattr(resource_tracker._resource_tracker, "_pid", None) is not None)


def _stop_helpers(before: tuple[bool, bool]) -> None:
    """End the forkserver and resource tracker this import started, so no process outlives the import (the
    workers end with the pool). Private API of multiprocessing (the methods its own tests use); where it is
    missing they end with the interpreter instead."""
    from multiprocessing import forkserver, resource_tracker

    gc.collect()  # the pool's queues and semaphores: freed before the tracker stops, or freeing them restarts it
    for running, helper in zip(before, (forkserver._forkserver, resource_tracker._resource_tracker)):
        if not running:
            try:
                helper._stop()
            except (AttributeError, TypeError, OSError, ChildProcessError):
                pass


def load(files: list[Path], rank: int | None = None, jobs: int | None = None, progress=None) -> Profile:
    """Import Kineto traces, one file per rank, into one Profile; `jobs` worker processes (default
    `default_jobs`); `progress(stage, done, total)` hears about each file."""
    files = [Path(f) for f in files]
    if not files:
        raise BadInput("no Kineto trace files given")
    if rank is not None and len(files) > 1:
        raise BadInput(f"--rank applies to a single trace file, but {len(files)} were given "
                       "(each file's rank comes from distributedInfo or its rank-N name)")
    if jobs is not None and jobs < 1:
        raise BadInput(f"--jobs must be at least 1, not {jobs}")
    jobs = default_jobs(files) if jobs is None else min(jobs, len(files))
    profiles: list[Profile] = []
    seen: dict[int, Path] = {}
    for f, p in _each(files, rank, jobs, progress):
        r = p.meta["ranks"][0]["rank"]
        if r in seen:
            raise BadInput(f"{seen[r]} and {f} both claim rank {r}; import them separately or pass one file "
                           "with --rank")
        seen[r] = f
        profiles.append(p)
    profiles.sort(key=lambda p: p.meta["ranks"][0]["rank"])
    if len(profiles) == 1:
        return profiles[0]
    merged = merge_profiles(profiles)
    sizes = {p.meta.get("parallel", {}).get("world_size") for p in profiles} - {None}
    merged.meta.setdefault("parallel", {})
    if len(sizes) == 1:
        merged.meta["parallel"]["world_size"] = sizes.pop()
    elif len(sizes) > 1:
        merged.meta.setdefault("warnings", []).append(f"files disagree on world size: {sorted(sizes)}")
    return merged


def load_one(path: str | os.PathLike, rank: int | None = None, many: bool = False) -> Profile:
    """Import one Kineto trace file (one rank)."""
    # Hundreds of thousands of short-lived objects and no reference cycles: pause the cyclic GC.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _load_one(Path(path), rank, many)
    finally:
        if enabled:
            gc.enable()


class _EventCounter:
    """Counts the `"ph"` keys of a trace's chunks as they are read (a key cut between two chunks counted once) and
    applies the event limits (`check_events`, and `check_density` for a gzip of `compressed` bytes) to the count so
    far: a file of too many events stops while it is decompressed, never after."""

    KEY = b'"ph"'

    def __init__(self, where: str, compressed: int | None) -> None:
        self.where, self.compressed, self.n, self.tail = where, compressed, 0, b""

    def __call__(self, chunk: bytes, gzipped: bool) -> None:
        joined = self.tail + chunk[:len(self.KEY) - 1]
        self.n += joined.count(self.KEY) + chunk.count(self.KEY)
        self.tail = (self.tail + chunk[-(len(self.KEY) - 1):])[-(len(self.KEY) - 1):]  # a key's start, if cut
        check_events(self.n, self.where)
        if gzipped and self.compressed is not None:
            check_density(self.n, self.compressed, self.where)


def _load_one(path: Path, rank: int | None, many: bool) -> Profile:
    """The streaming import (`_kineto_columns`), or with MMPROF_KINETO_REFERENCE=1 (and for documents the
    streaming reader does not fit) the Struct path: the whole document decoded, one Struct per event."""
    if os.environ.get("MMPROF_KINETO_REFERENCE") != "1":
        from mmprof.importers._kineto_columns import ColumnRankImporter, gather

        status, trace, g = gather(path, _EventCounter(str(path), gzip_size(path)), decode_jobs(path))
        if status == "ok":
            if not g.events:
                raise BadInput(f"{path}: trace holds no events (traceEvents is empty)")
            check_events(g.events, str(path))
            r, dist, warnings = _rank_of(trace, path, rank, many, g.bad)
            b = ColumnRankImporter(r, warnings)
            b.dist = dist
            b.run_columns(g)
            del g
            return _finish(b, trace, path, r, dist, warnings)
    return _load_reference(path, rank, many)


def _load_reference(path: Path, rank: int | None, many: bool) -> Profile:
    compressed = gzip_size(path)
    data = read_bytes(path, watch=_EventCounter(str(path), compressed))
    trace, bad = decode(data, str(path), compressed, counted=True)  # event limits applied while read
    del data
    events = trace.traceEvents or []
    trace.traceEvents = None  # `RankImporter.run` consumes the list: no second reference keeps the events alive
    if not events:
        raise BadInput(f"{path}: trace holds no events (traceEvents is empty)")
    check_events(len(events), str(path))
    r, dist, warnings = _rank_of(trace, path, rank, many, bad)
    b = RankImporter(r, warnings)
    b.dist = dist  # process-group sizes for collectives that carry no record_param_comms metadata
    b.run(events)  # empties `events`
    return _finish(b, trace, path, r, dist, warnings)


def _finish(b, trace, path: Path, r: int, dist: dict, warnings: list[str]) -> Profile:
    meta = km.build_meta(trace, path, r, dist, b, warnings)
    builder = b.builder
    builder.meta = meta
    b.__dict__.clear()  # the linking arrays (lanes, joins, columns) go before the Profile is built beside them
    from mmprof.importers._kineto_columns import release_memory

    release_memory()
    return builder.build()


def _rank_of(trace, path: Path, rank: int | None, many: bool, bad: int) -> tuple[int, dict, list[str]]:
    """(rank, distributedInfo, warnings so far) of one trace from its header, the file name and --rank."""
    warnings: list[str] = []
    if bad:
        warnings.append(f"{bad} events did not fit the Chrome-trace layout and were dropped")
    dist = dict(trace.distributedInfo) if isinstance(trace.distributedInfo, dict) else {}
    file_rank = dist.get("rank") if type(dist.get("rank")) is int else None
    if file_rank is not None and not 0 <= file_rank <= MAX_RANK:
        raise BadInput(f"{path}: distributedInfo.rank {file_rank} is not a rank (0..{MAX_RANK}); import the file "
                       "alone with --rank N if it is one")
    ws = dist.get("world_size")
    if ws is not None and not (type(ws) is int and 1 <= ws <= MAX_RANK + 1):
        warnings.append(f"distributedInfo.world_size {str(ws)[:40]} is not a world size; ignored")
        dist.pop("world_size")
    name_rank = rank_from_name(path)
    if rank is not None:
        if file_rank is not None and file_rank != rank:
            warnings.append(f"--rank {rank} overrides distributedInfo rank {file_rank}")
        r = rank
    elif file_rank is not None:
        r = file_rank
    elif name_rank is not None:
        r = name_rank
    else:
        r = 0
        if many:
            raise BadInput(f"{path}: cannot tell its rank (no distributedInfo.rank, no rank-N in the name); "
                           "import it alone with --rank N")
        warnings.append("rank unknown (no distributedInfo.rank, no rank-N in the file name): assumed 0")
    if str(trace.displayTimeUnit or "").lower() == "ns":
        warnings.append("displayTimeUnit says ns but ts are µs (treated as µs)")
    return r, dist, warnings
