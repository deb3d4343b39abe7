"""`mmprof record -- CMD`: run a command unchanged, capture every Python process it starts, merge into one Profile.

How: `build_env` puts `mmprof/capture/hook` first on PYTHONPATH and passes the settings in MMPROF_RECORD_*
variables; every Python process the command starts (and their children, which inherit the environment) then
runs the start-up hook, which captures the process with a `CaptureSession` once it imports torch. The command's
stdin/stdout/stderr are inherited (never captured) and its exit code is returned. Afterwards `collect` reads the
per-process meta files and the `.partial` markers that crashed processes left behind, and `build_profile`
imports each process's trace with the Kineto importer and merges them into one multi-rank Profile whose meta
says which ranks are complete, partial or missing. The command's stdout and stderr pass through unchanged and are
kept as the Profile's log (`capture/output.py`, docs/logs.md; `--no-log`: inherited, not kept).
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mmprof.capture import backends
from mmprof.capture.command import run_command
from mmprof.capture.output import OutputCapture
from mmprof.capture.session import DEFAULT_STEP_MARKERS, MODES, TRACE_SUFFIX
from mmprof.capture.tracefiles import combine_traces, read_trace, salvage_trace
from mmprof.errors import BadInput, CaptureUnavailable, MmprofError
from mmprof.fileio import note_input
from mmprof.fileout import check_output
from mmprof.importers import import_paths
from mmprof.log_rules import load_log_rules
from mmprof.log_text import LIMIT_BYTES
from mmprof.labels import MAX_RANK
from mmprof.profiles.io import save_profile
from mmprof.profiles.profile import merge_profiles

HOOK_DIR = Path(__file__).resolve().parent / "hook"
BACKENDS = ("torch", "rocprofv3", "nsys")


@dataclass
class RecordOptions:
    """What to capture. `steps`/`skip` define the window in steps (see docs/record.md: what counts as a step)."""

    mode: str = "full"
    steps: int | None = None
    skip: int = 0
    step_markers: tuple[str, ...] = DEFAULT_STEP_MARKERS
    activities: str = "auto"        # auto | cpu
    start: str = "auto"             # auto | import | gpu
    grace_s: float = 10.0           # how long to wait for orphaned workers to finish writing after the command
    stop_grace_s: float = 15.0      # after a stop signal: seconds before the command gets SIGTERM, then SIGKILL
    flush_every: int | None = None  # write a segment every N steps, so a process that dies keeps its earlier steps
    modules: bool = True            # a range per nn.Module call, named by the module's path (structure of any model)
    log: bool = True                # keep the command's stdout / stderr as the Profile's log (passed through unchanged)
    log_limit: int = LIMIT_BYTES    # the log's size bound: head, tail and the lines the log rules want

    def validate(self) -> None:
        if self.mode not in MODES:
            raise BadInput(f"capture mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.steps is not None and self.steps < 1:
            raise BadInput("--steps must be at least 1")
        if self.skip < 0:
            raise BadInput("--skip must be 0 or more")
        if self.skip and self.steps is None:
            raise BadInput("--skip needs --steps (the window is: skip M steps, then capture N)")
        if self.flush_every is not None and self.flush_every < 1:
            raise BadInput("--flush-every must be at least 1")
        if self.log_limit < 4096:
            raise BadInput("--log-limit must be at least 4 KiB")
        for name, v in (("--grace", self.grace_s), ("--stop-grace", self.stop_grace_s)):
            if not (v >= 0 and v < float("inf")):  # also refuses NaN
                raise BadInput(f"{name} must be a number of seconds, 0 or more (not {v})")
        if self.activities not in ("auto", "cpu"):
            raise BadInput(f"activities must be auto or cpu, not {self.activities!r}")
        if self.start not in ("auto", "import", "gpu"):
            raise BadInput(f"start must be auto, import or gpu, not {self.start!r}")

    def window(self) -> dict[str, Any]:
        return {"skip": self.skip, "steps": self.steps, "markers": list(self.step_markers),
                "flush_every": self.flush_every, "modules": self.modules}


@dataclass
class ProcessCapture:
    """One captured process, as its meta file (clean exit) or its partial marker (it died) describes it."""

    name: str
    pid: int | None
    env_rank: int | None
    dist_rank: int | None
    world_size: int | None
    host: str | None
    argv: list[str]
    trace: Path | None
    finished: bool
    state: str
    steps_seen: int
    segments: list[dict[str, Any]]
    notes: list[str]
    error: str | None
    rank: int | None = None          # the rank it got in the Profile
    status: str = ""                 # complete | partial | no-data | empty | duplicate
    loss: str | None = None          # what of its capture was lost, and why (None: nothing)

    @property
    def claimed_rank(self) -> int | None:
        return self.dist_rank if self.dist_rank is not None else self.env_rank

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["trace"] = str(self.trace) if self.trace else None
        return d


@dataclass
class RecordResult:
    """What `record` did: the command's exit code, where things went, and the state of every rank."""

    command: list[str]
    exit_code: int
    backend: str
    mode: str
    window: dict[str, Any]
    trace_dir: str
    out: str | None
    world_size: int | None
    ranks: list[dict[str, Any]] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    partial_ranks: list[int] = field(default_factory=list)
    processes: list[ProcessCapture] = field(default_factory=list)
    forked_not_captured: int = 0
    warnings: list[str] = field(default_factory=list)
    log: dict[str, Any] | None = None   # the command's output kept as the log: per stream lines, bytes, kept, dropped

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["processes"] = [p.to_dict() for p in self.processes]
        return d


# -- environment and running ---------------------------------------------------------------------
def build_env(trace_dir: Path, opts: RecordOptions, base: dict[str, str] | None = None) -> dict[str, str]:
    """The command's environment: the hook first on PYTHONPATH plus the MMPROF_RECORD_* settings."""
    env = dict(os.environ if base is None else base)
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(HOOK_DIR) + (os.pathsep + old if old else "")
    env["MMPROF_RECORD_DIR"] = str(Path(trace_dir).resolve())
    env["MMPROF_RECORD_MODE"] = opts.mode
    env["MMPROF_RECORD_MARKERS"] = ",".join(opts.step_markers)
    env["MMPROF_RECORD_ACTIVITIES"] = opts.activities
    env["MMPROF_RECORD_START"] = opts.start
    env["MMPROF_RECORD_MODULES"] = "1" if opts.modules else "0"
    for key, val in (("MMPROF_RECORD_STEPS", opts.steps), ("MMPROF_RECORD_SKIP", opts.skip if opts.steps else None),
                     ("MMPROF_RECORD_FLUSH_EVERY", opts.flush_every)):
        if val is None:
            env.pop(key, None)
        else:
            env[key] = str(val)
    return env


def prepare_trace_dir(path: Path) -> dict[str, tuple[int, int]]:
    """Create the per-process trace folder (when missing) and note what is already in it: `collect` reads and
    removes only files this run wrote, so a previous run's files, and a user's own (even named `rank*` or
    `proc*`), are never deleted or mixed in. Returns {name: (inode, mtime_ns)} of the files already there."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise BadInput(f"{path}: exists and is not a directory (the trace folder; give --trace-dir another path)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        return {f.name: _ident(f) for f in path.iterdir()}
    except OSError as e:
        raise BadInput(f"{path}: cannot create or read the trace folder: {e.strerror or e}") from None


def _ident(f: Path) -> tuple[int, int]:
    try:
        st = f.stat()
        return st.st_ino, st.st_mtime_ns
    except OSError:
        return -1, -1


def _ours(before: dict[str, tuple[int, int]] | None):
    """Is a file of the trace folder this run's: new since `prepare_trace_dir`, or changed since."""
    before = before or {}
    return lambda f: before.get(f.name) is None or before[f.name] != _ident(f)


# -- collecting what the processes left ----------------------------------------------------------
def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def wait_for_stragglers(trace_dir: Path, grace_s: float, ours=None) -> None:
    """Give processes that outlived the command (orphaned workers) up to `grace_s` to finish writing."""
    ours = ours or _ours(None)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        alive = []
        for m in trace_dir.glob("*.partial"):
            if not ours(m):
                continue
            doc = _read_json(m)
            pid = doc.get("pid") if doc else None
            if type(pid) is not int:
                continue
            if _pid_alive(pid):
                alive.append(pid)
        if not alive:
            return
        time.sleep(0.1)


def _read_json(path: Path) -> dict[str, Any] | None:
    """A meta or partial-marker file as a dict, or None when it is unreadable, not JSON, or not an object (a
    crashed process may leave it half-written; a file may be anything)."""
    try:
        if path.stat().st_size > 16 * 2**20:
            return None
        doc = json.loads(path.read_bytes())
        return doc if isinstance(doc, dict) else None
    except (OSError, ValueError, RecursionError):
        return None


def _typed(d: dict[str, Any], key: str, kind, default=None):
    """d[key] when it has the type a capture writes (bool is not an int), else `default`."""
    v = d.get(key)
    if kind is int:
        return v if type(v) is int and -(2**63) <= v < 2**63 else default
    return v if isinstance(v, kind) else default


def collect(trace_dir: Path, ours=None) -> tuple[list[ProcessCapture], int, list[str]]:
    """Every process that started a capture: (processes, forked children not captured, warnings). Only files this
    run wrote (`ours`, from `prepare_trace_dir`) are read or removed."""
    trace_dir = Path(trace_dir)
    ours = ours or _ours(None)
    procs: list[ProcessCapture] = []
    warnings: list[str] = []
    docs: dict[str, tuple[dict[str, Any], bool]] = {}
    for f in sorted(trace_dir.glob("*.meta.json")):
        if not ours(f):
            continue
        d = _read_json(f)
        if d is None:
            warnings.append(f"{f.name}: unreadable capture metadata, ignored")
            continue
        docs[f.name[: -len(".meta.json")]] = (d, True)
    for f in sorted(trace_dir.glob("*.partial")):
        if not ours(f):
            continue
        name = f.name[: -len(".partial")]
        if name in docs:
            f.unlink(missing_ok=True)  # exported after all (a race with the marker rewrite)
            continue
        d = _read_json(f)
        if d is None:
            d = {"name": name}
            warnings.append(f"{f.name}: unreadable partial marker")
        docs[name] = (d, False)
    for name, (d, finished) in sorted(docs.items()):
        dist = _typed(d, "dist", dict, {})
        trace = trace_dir / f"{name}{TRACE_SUFFIX}"
        loss = _combine_segments(trace_dir, name, trace, ours, warnings)
        if loss:
            finished = False
        segs_meta = [g for g in _typed(d, "segments", list, []) if isinstance(g, dict)]
        notes = [str(n) for n in _typed(d, "notes", list, [])]
        if (not finished and d.get("state") == "done" and segs_meta and all(g.get("complete") for g in segs_meta)
                and trace.exists() and ours(trace)):
            # its window closed and was flushed; it only skipped the clean-up (os._exit, e.g. a forked worker)
            finished = True
            notes.append("exited without clean-up after its capture window was written")
        rank, drank = _typed(d, "rank", int), _typed(dist, "rank", int)
        world = _typed(dist, "world_size", int) or _typed(d, "world_size", int)
        err = d.get("error")
        procs.append(ProcessCapture(
            name=name, pid=_typed(d, "pid", int), env_rank=rank if rank is None or 0 <= rank <= MAX_RANK else None,
            dist_rank=drank if drank is None or 0 <= drank <= MAX_RANK else None,
            world_size=world if world is None or 0 < world <= MAX_RANK + 1 else None,
            host=_typed(d, "host", str), argv=[str(a) for a in _typed(d, "argv", list, [])],
            trace=trace if trace.exists() and ours(trace) else None, finished=finished,
            state=_typed(d, "state", str, "?"), steps_seen=max(0, _typed(d, "steps_seen", int, 0)),
            segments=segs_meta, notes=notes, error=None if err is None else str(err),
            loss=loss or (None if finished or (trace.exists() and ours(trace)) else _why_no_data(d, segs_meta)),
        ))
    forked = len([f for f in trace_dir.glob("proc*.forked") if ours(f)])
    return procs, forked, warnings


def _combine_segments(trace_dir: Path, name: str, trace: Path, ours, warnings: list[str]) -> str | None:
    """Fold a process's segments (plain JSON, or gzip from older captures) into `trace`, reading one that was cut
    short while being written (a hidden `.NAME.segK...` file: the process was killed during its export) as far as
    it goes. Returns what was lost, or None."""
    esc = glob.escape(name)
    done = [g for g in trace_dir.glob(f"{esc}.seg*.pt.trace.json*") if ours(g) and not g.name.endswith(".tmp")]
    cut = [g for g in trace_dir.glob(f".{esc}.seg*.pt.trace.json*") if ours(g) and not g.name.endswith(".tmp")]
    if not done and not cut:
        return None
    parts = sorted([(_seg_index(g), False, g) for g in done] + [(_seg_index(g), True, g) for g in cut],
                   key=lambda t: (t[0], t[1]))
    loss = None
    try:
        docs, paths = [], []
        for k, was_cut, g in parts:
            if was_cut:
                doc, info = salvage_trace(g)
                if info["complete"]:
                    continue  # written whole, only its rename was missed
                loss = (f"segment {k} was cut short while it was being written (the process was killed during its "
                        f"export, e.g. by an engine's shutdown): {info['events']:,} events kept"
                        + (f" up to ts {info['last_ts_us']:.0f} us" if info.get("last_ts_us") is not None else "")
                        + ", the rest of that segment is lost")
                docs.append(doc)
            else:
                docs.append(None)
            paths.append(g)
        if not paths:
            return None
        if any(doc is not None for doc in docs) or len(paths) > 1:
            docs = [doc if doc is not None else read_trace(g) for doc, g in zip(docs, paths)]
            combine_traces(paths, trace, docs=docs)
        else:
            combine_traces(paths, trace)
    except (OSError, ValueError, EOFError, zlib.error, RecursionError, MemoryError) as e:
        warnings.append(f"{name}: its segments are unreadable ({str(e)[:120]}); none kept")
        return f"its segments are unreadable ({str(e)[:120]})"
    for _, _, g in parts:
        if g != trace:
            g.unlink(missing_ok=True)
    return loss


def _why_no_data(d: dict[str, Any], segs: list[dict[str, Any]]) -> str:
    """Why a process that started a capture left no trace, from its partial marker."""
    state = d.get("state")
    if state == "waiting":
        return "its capture window never opened (no step seen before it ended)"
    if not segs:
        return "it was stopped or died before its capture started (it had imported torch, nothing ran under the profiler)"
    return ("it was killed (SIGKILL, or a crash) while capturing, before any segment was written; a process that "
            "is stopped with SIGTERM writes its trace first: give it time to (e.g. a longer shutdown timeout)")


def _seg_index(p: Path) -> int:
    m = re.search(r"\.seg(\d+)\.pt\.trace", p.name)
    return int(m.group(1)) if m else 0


def assign_ranks(procs: list[ProcessCapture]) -> None:
    """Give each process a Profile rank: its torch.distributed rank, else its RANK env, else the next free one.

    A second process claiming a rank already taken (e.g. a DataLoader worker that inherited RANK) becomes an
    extra rank after the real ones, flagged `duplicate`.
    """
    taken: dict[int, ProcessCapture] = {}
    procs = [p for p in procs if not (p.trace is None and p.finished)]  # finished with nothing: no rank
    order = sorted(procs, key=lambda p: (p.dist_rank is None, p.trace is None, p.pid or 0))
    later: list[ProcessCapture] = []
    for p in order:
        r = p.claimed_rank
        if r is not None and r not in taken:
            p.rank = r
            taken[r] = p
        else:
            later.append(p)
    nxt = (max(taken) + 1) if taken else 0
    for p in sorted(later, key=lambda p: p.pid or 0):
        if p.claimed_rank is not None:
            p.status = "duplicate"
        p.rank = nxt
        nxt += 1


# -- building the Profile ------------------------------------------------------------------------
def build_profile(procs: list[ProcessCapture], result: RecordResult, progress=None):
    """Import each process's trace and merge; fills result.ranks / missing / partial / warnings."""

    assign_ranks(procs)
    profiles = []
    ranks_meta: list[dict[str, Any]] = []
    for i, p in enumerate(sorted(procs, key=lambda p: p.rank if p.rank is not None else 1 << 30)):
        if progress is not None:
            progress(f"importing the trace of {p.name}", i, len(procs) + 1)
        entry: dict[str, Any] = {"rank": p.rank, "pid": p.pid, "host": p.host, "process": p.name,
                                 "file": str(p.trace) if p.trace else None, "partial": not p.finished}
        if p.trace is None:
            p.status = "no-data" if not p.finished else "empty"
        else:
            try:
                prof = import_paths([p.trace], rank=p.rank, check_ranks=False)
            except MmprofError as e:
                result.warnings.append(f"{p.name}: trace could not be imported ({e})")
                p.status = "no-data"
                prof = None
            if prof is not None:
                if prof.n("ops") == 0 and prof.n("kernels") == 0 and p.claimed_rank is None:
                    p.status = "empty"  # a helper process that imported torch but ran nothing
                else:
                    if not p.status:
                        p.status = "complete" if p.finished else "partial"
                    imported = prof.meta.get("ranks") or [{}]
                    entry = {**imported[0], **entry}
                    for w in prof.meta.get("warnings", []):
                        result.warnings.append(f"{p.name}: {w}")
                    profiles.append(prof)
        entry["status"] = p.status
        if p.status == "duplicate":
            entry["claimed"] = p.claimed_rank
        if p.error:
            entry["error"] = p.error
        if p.loss:
            entry["loss"] = p.loss
        if p.notes:
            entry["notes"] = p.notes
        if p.status != "empty":
            ranks_meta.append(entry)
    result.processes = procs
    world = _world_size(procs)
    result.world_size = world
    have = {e["rank"] for e in ranks_meta if e["status"] in ("complete", "partial", "duplicate")}
    if world:
        result.missing_ranks = [r for r in range(world) if r not in have]
    result.partial_ranks = sorted({e["rank"] for e in ranks_meta if e["partial"]})
    result.ranks = ranks_meta
    for e in ranks_meta:
        if e["status"] == "partial":
            result.warnings.append(f"rank {e['rank']} (pid {e['pid']}) did not finish: "
                                   + (e.get("loss") or "its trace holds only what was flushed before it died"))
        elif e["status"] == "no-data":
            result.warnings.append(f"rank {e['rank']} (pid {e['pid']}) wrote no trace: "
                                   f"{e.get('loss') or 'killed or crashed; only its partial marker is left'}")
        elif e["status"] == "duplicate":
            result.warnings.append(f"pid {e['pid']} also claimed rank {e.get('claimed', '?')}; kept as rank {e['rank']}")
        if e.get("error"):
            result.warnings.append(f"rank {e['rank']} (pid {e['pid']}) raised {e['error']}")
        for n in e.get("notes", []):
            if ("window" in n or "own torch.profiler" in n or "another thread" in n
                    or n.startswith(("stopped by signal", "light mode"))
                    or (n.startswith("exited through os._exit(") and not n.startswith("exited through os._exit(0)"))):
                result.warnings.append(f"rank {e['rank']}: {n}")
    if result.missing_ranks:
        result.warnings.append(f"world size is {world} but rank(s) {', '.join(map(str, result.missing_ranks))} "
                               "wrote no trace")
    if result.forked_not_captured:
        result.warnings.append(f"{result.forked_not_captured} forked child process(es) not captured "
                               "(torch.profiler does not survive fork; use spawn or forkserver)")
    if not profiles:
        raise CaptureUnavailable(_nothing_captured(procs, result))
    meta = {
        "source": {"format": "record", "files": [e["file"] for e in ranks_meta if e.get("file")],
                   "tool": _tool_version()},
        "command": result.command,
        "capture": {"backend": result.backend, "mode": result.mode, "window": result.window,
                    "trace_dir": result.trace_dir, "processes": len(procs),
                    "forked_not_captured": result.forked_not_captured,
                    "shapes": {"full": "all ops", "light": "first step only"}.get(result.mode, "none")},
        "ranks": ranks_meta,
        "warnings": list(result.warnings),
    }
    if world:
        meta["parallel"] = {"world_size": world}
    merged = merge_profiles(profiles, meta=meta)
    return merged


def _world_size(procs: list[ProcessCapture]) -> int | None:
    sizes = [p.world_size for p in procs if p.world_size and p.status != "duplicate"]
    return max(sizes) if sizes else None


def _tool_version() -> str:
    try:
        from importlib.metadata import version

        return f"torch.profiler (torch {version('torch')})"
    except Exception:
        return "torch.profiler"


def _nothing_captured(procs: list[ProcessCapture], result: RecordResult) -> str:
    rc = f" (the command exited with code {result.exit_code})"
    if not procs:
        return ("no process captured anything: the command started no Python process that imported torch "
                f"(or it ran a Python where PYTHONPATH is reset){rc}")
    notes = [n for p in procs for n in p.notes if "window" in n]
    if notes:
        return f"nothing captured: {notes[0]}{rc}"
    why = sorted({p.loss for p in procs if p.loss})
    return (f"nothing captured: {len(procs)} process(es) started a capture but none left usable data{rc}"
            + (f": {'; '.join(why)}" if why else ""))


def protect_command_files(cmd: list[str]) -> None:
    """Register every file the wrapped command names (its program, its script, `--opt=FILE` values) as an input
    of this command: the output guard (mmprof.fileout.check_output) then refuses `-o` onto any of them."""
    if cmd:
        exe = shutil.which(cmd[0])
        if exe:
            note_input(exe)
    for a in cmd:
        for part in (a, a.split("=", 1)[-1]) if "=" in a else (a,):
            try:
                if part and os.path.isfile(part):
                    note_input(part)
            except (OSError, ValueError):
                pass


# -- the whole thing ------------------------------------------------------------------------------
def record(cmd: list[str], out: str | os.PathLike | None, *, backend: str = "torch", opts: RecordOptions | None = None,
           trace_dir: str | os.PathLike | None = None, progress=None, say=None):
    """Run `cmd` under capture and save the merged Profile at `out`. Returns (RecordResult, Profile).

    `progress(stage, done, total)` hears about the import and merge after the command ended (never during it);
    `say(text)` hears, while it runs, that a command which did not stop after a stop signal is being ended.
    `result.exit_code` is the command's exit code, unchanged. When the command ran but nothing usable was
    captured, a CaptureUnavailable (naming the command's exit code) is raised after the command finished,
    so its output is never lost.
    """
    opts = opts or RecordOptions()
    opts.validate()
    if backend not in BACKENDS:
        raise BadInput(f"unknown backend {backend!r}; backends are {', '.join(BACKENDS)}")
    out_path = Path(out) if out else Path("mmprof-record.json.gz")
    tdir = Path(trace_dir) if trace_dir else out_path.with_name(out_path.name.split(".", 1)[0] + ".traces")
    result = RecordResult(command=list(cmd), exit_code=0, backend=backend, mode=opts.mode, window=opts.window(),
                          trace_dir=str(tdir), out=str(out_path), world_size=None)
    if backend != "torch":
        return backends.record_with_tool(backend, cmd, out_path, tdir, opts, result)
    protect_command_files(cmd)
    check_output(out_path)  # before the command runs: a bad -o is refused now, not after an hour's run
    ours = _ours(prepare_trace_dir(tdir))
    env = build_env(tdir, opts)
    rules = load_log_rules() if opts.log else None
    output = OutputCapture(opts.log_limit, rules.anchors, rules.wanted) if rules is not None else None
    try:
        result.exit_code = run_command(cmd, env, stop_grace_s=opts.stop_grace_s, say=say, output=output)
        wait_for_stragglers(tdir, opts.grace_s, ours)
    finally:
        if output is not None:
            output.drain(1.0)  # what the command's last writers still had in flight
            output.restore()
    procs, forked, warns = collect(tdir, ours)
    result.forked_not_captured = forked
    result.warnings.extend(warns)
    profile = build_profile(procs, result, progress)
    if output is not None:
        profile, result.log = output.attach(profile, result.warnings)
    if progress is not None:
        progress(f"writing {out_path}", len(procs), len(procs) + 1)
    save_profile(profile, out_path)
    return result, profile
