"""The in-process torch.profiler session shared by `mmprof record` (through its start-up hook) and `mmprof run`.

A `CaptureSession` owns one process's capture:

- **activities**: CPU always; CUDA (which is HIP on ROCm builds) when torch has a usable GPU.
- **mode**: ``full`` records input shapes for every op; ``light`` records shapes only until the first step
  of the window completes, then restarts the profiler without shapes (kernels, launches and annotations are
  always kept). torch.profiler cannot switch shapes off while running, so light mode is two *segments*.
  ``kernels`` records the device activity only (kernels, copies and the runtime calls that launched them; no
  CPU ops, no shapes, no annotations): the lightest capture, for timings; it needs a GPU.
- **window**: the whole session by default; with ``steps=N, skip=M`` it waits for M steps to complete, captures
  the next N, and exports as soon as the window closes (so a later crash does not lose it). A *step* ends when
  the program calls `session.step()`, or when an outermost `record_function` range whose name matches one of
  `step_markers` exits (see `install_marker_hook`), e.g. ``mmprof.step.*`` or ``ProfilerStep#*``.
- **export**: each profiler start/stop is one segment, written by Kineto as plain JSON under a hidden name and
  renamed into place (the fastest way out of a process that is being stopped: no gzip in the dying process);
  `export()` writes ``<name>.meta.json`` and, unless the session leaves that to `mmprof record`
  (`combine=False`), combines the segments into ``<name>.pt.trace.json.gz``.
- **signals**: a transition (start, a step's segment switch, export) is never interrupted half-way by the
  record hook's SIGTERM handler: a signal that arrives during one is acted on when it ends (`deferred_signal`).
- **threads**: torch.profiler can only be stopped by the thread that started it (another thread's stop
  segfaults), so transitions counted on another thread wait for the starting thread, and `export()` from
  another thread raises instead of stopping the profiler.

Nothing here prints; torch is imported only when a session starts.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterable


def _load_sibling(name: str):
    """A stdlib-only sibling module, loaded by path (see below)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_mmprof_capture_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


if __package__:  # imported as mmprof.capture.session
    from mmprof.capture import torch_hooks, tracefiles
else:  # loaded by path from the record hook, in a process that may not have mmprof's dependencies
    torch_hooks, tracefiles = _load_sibling("torch_hooks"), _load_sibling("tracefiles")
install_hooks, remove_session, reset_after_fork = (torch_hooks.install_hooks, torch_hooks.remove_session,
                                                   torch_hooks.reset_after_fork)
install_module_hooks = torch_hooks.install_module_hooks
combine_traces = tracefiles.combine_traces

# Default names of the annotations that delimit a step (fnmatch patterns): the reference runtime's labels,
# torch.profiler's own `profile.step()` ranges, and vLLM's model-runner forward scope.
DEFAULT_STEP_MARKERS: tuple[str, ...] = (
    "mmprof.step.*",               # the reference runtime (mmprof run)
    "ProfilerStep#*",              # torch.profiler.profile.step()
    "gpu_model_runner: forward",   # vLLM V1 model runner, with VLLM_CUSTOM_SCOPES_FOR_PROFILING=1
)

TRACE_SUFFIX = ".pt.trace.json.gz"
SEGMENT_SUFFIX = ".pt.trace.json"  # plain JSON: Kineto writes it directly, no gzip in the captured process
MODES = ("full", "light", "kernels")


def compile_markers(patterns: Iterable[str]) -> re.Pattern[str] | None:
    pats = [p for p in patterns if p]
    if not pats:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in pats))


def process_name(rank: int | None, pid: int | None = None) -> str:
    """The file stem for one process: ``rank{R}.pid{PID}`` or ``proc{PID}`` when the process has no rank."""
    pid = os.getpid() if pid is None else pid
    return f"rank{rank}.pid{pid}" if rank is not None else f"proc{pid}"


def env_rank(env: dict[str, str] | None = None) -> tuple[int | None, int | None, int | None]:
    """(rank, local_rank, world_size) from RANK / LOCAL_RANK / WORLD_SIZE; rank falls back to LOCAL_RANK."""
    env = os.environ if env is None else env

    def _int(key: str) -> int | None:
        try:
            return int(env[key])
        except (KeyError, ValueError):
            return None

    rank, local, world = _int("RANK"), _int("LOCAL_RANK"), _int("WORLD_SIZE")
    if rank is None:
        rank = local
    return rank, local, world


def _atomic_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


class CaptureSession:
    """One process's torch.profiler capture. Use as a context manager, or call start()/export() yourself.

    >>> with CaptureSession("out", mode="light", rank=0) as s:   # doctest: +SKIP
    ...     for i in range(steps):
    ...         run_step(i)
    ...         s.step()
    >>> s.trace_path                                             # doctest: +SKIP
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        *,
        mode: str = "full",
        rank: int | None = None,
        local_rank: int | None = None,
        world_size: int | None = None,
        steps: int | None = None,
        skip: int = 0,
        step_markers: Iterable[str] = DEFAULT_STEP_MARKERS,
        activities: str = "auto",
        name: str | None = None,
        extra_meta: dict[str, Any] | None = None,
        flush_every: int | None = None,
        quiet: bool = False,
        combine: bool = True,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"capture mode must be one of {', '.join(MODES)}, not {mode!r}")
        if steps is not None and steps < 1:
            raise ValueError("steps must be at least 1")
        if skip < 0:
            raise ValueError("skip must be >= 0")
        self.out_dir = Path(out_dir)
        self.mode = mode
        self.rank, self.local_rank, self.world_size = rank, local_rank, world_size
        self.steps, self.skip = steps, skip
        if flush_every is not None and flush_every < 1:
            raise ValueError("flush_every must be at least 1")
        self.flush_every = flush_every  # rotate segments every N steps so a crash loses at most N steps
        self.step_markers = tuple(step_markers)
        self.marker_re = compile_markers(self.step_markers)
        self.activities = activities
        self.quiet = quiet  # drop Kineto's USDT/STAGE log lines (every other line is passed on)
        self.combine = combine  # export() combines the segments itself (mmprof run); record's collect does it otherwise
        self._transitions = 0          # > 0 while start / step / export is changing the profiler's state
        self.deferred_signal: int | None = None  # a stop signal that arrived during a transition
        self.on_deferred_signal = None  # callable(signum), run when the transition that deferred a signal ends
        self.pid = os.getpid()
        self.name = name or process_name(rank, self.pid)
        self.extra_meta = dict(extra_meta or {})
        self.steps_seen = 0            # steps completed since the session started
        self.state = "new"             # new -> waiting | capturing -> done
        self.segments: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.error: str | None = None  # set when the program died of an uncaught exception
        self.dist: dict[str, Any] | None = None  # torch.distributed rank/world, remembered while initialised
        self.gpu = False
        self.trace_path: Path | None = None
        self._prof = None
        self._prof_thread: int | None = None  # torch.profiler can only be stopped by the thread that started it
        self._seg_shapes = False
        self._seg_start_step = 0
        self._window_start = 0
        self._pending = False
        self._exported = False  # export() ran: later calls (atexit after os._exit's, a finalizer) do nothing
        self.can_switch = None  # callable: True when no record_function range is open (set by install_hooks)
        self._lock = threading.RLock()
        self._t0 = time.time()

    # -- paths ----------------------------------------------------------------------------------
    @property
    def marker_path(self) -> Path:
        return self.out_dir / f"{self.name}.partial"

    @property
    def meta_path(self) -> Path:
        return self.out_dir / f"{self.name}.meta.json"

    def segment_path(self, k: int) -> Path:
        return self.out_dir / f"{self.name}.seg{k}{SEGMENT_SUFFIX}"

    # -- transitions and signals ----------------------------------------------------------------
    @property
    def in_transition(self) -> bool:
        return self._transitions > 0

    @contextlib.contextmanager
    def _transition(self):
        """Hold the lock while the profiler's state changes; a stop signal deferred meanwhile is acted on after."""
        with self._lock:
            self._transitions += 1
            try:
                yield
            finally:
                self._transitions -= 1
        if self._transitions == 0 and self.deferred_signal is not None and self.on_deferred_signal is not None:
            signum, self.deferred_signal = self.deferred_signal, None
            self.on_deferred_signal(signum)

    # -- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> "CaptureSession":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is not None:
            self.notes.append(f"the program raised {exc[0].__name__}")
        self.export()

    def start(self) -> None:
        """Write the partial marker and start capturing (or wait for the first `skip` steps)."""
        with self._transition():
            if self.state != "new" or self._exported:
                return
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self.write_marker()
            if self.skip > 0 and self.steps is not None and self.steps_seen < self.skip:
                self.state = "waiting"  # steps seen before the start (e.g. before the first GPU use) count
            else:
                self._begin_segment(shapes=True)
                self._window_start = self.steps_seen
                self.state = "capturing"

    def step(self, label: str | None = None) -> None:
        """One step completed: advance the window (start, switch light-mode segment, or close it).

        The profiler is only stopped or restarted at a *safe point*: when `can_switch()` says no
        record_function range is open (restarting inside an open range crashes torch when that range exits).
        Otherwise the transition waits for `safe_point()`, which the marker hook calls when the last range
        closes. Without `can_switch` (code calling step() itself between steps) every call is a safe point.
        """
        with self._transition():
            self._note_dist()
            self.steps_seen += 1
            if self.state in ("new", "done", "yielded"):
                return
            if (self.can_switch is not None and not self.can_switch()) or not self._on_prof_thread():
                self._pending = True
                return
            self._advance()

    def safe_point(self) -> None:
        """No range is open any more: carry out a transition that step() had to defer."""
        with self._transition():
            if self._pending and self.state in ("waiting", "capturing") and self._on_prof_thread():
                self._pending = False
                self._advance()

    def _on_prof_thread(self) -> bool:
        """True when no profiler runs, or the calling thread is the one that started it (stopping torch.profiler
        from any other thread crashes the process with SIGSEGV)."""
        return self._prof is None or self._prof_thread == threading.get_ident()

    def _advance(self) -> None:
        self._pending = False
        if self.state == "waiting":
            if self.steps_seen >= self.skip:
                self._begin_segment(shapes=True)
                self._window_start = self.steps_seen
                self.state = "capturing"
            return
        if self.steps is not None and self.steps_seen - self._window_start >= self.steps:
            self._end_segment()
            self.state = "done"
            self.write_marker()
            return
        if self.steps_seen <= self._seg_start_step:
            return
        if self.mode == "light" and self._seg_shapes:
            self._end_segment()
            self._begin_segment(shapes=False)
        elif self.flush_every and self.steps_seen - self._seg_start_step >= self.flush_every:
            shapes = self._seg_shapes
            self._end_segment()
            self._begin_segment(shapes=shapes)

    def yield_to_program(self, why: str) -> None:
        """The program started its own profiler: stop ours (keeping what we have) so theirs can run."""
        with self._transition():
            if self.state == "capturing":
                self._end_segment()
            if self.state not in ("done",):
                self.state = "yielded"
                self.notes.append(why)
                self.write_marker()

    def export(self) -> Path | None:
        """Stop capturing, combine the segments into one trace, write the meta file, remove the marker.

        Returns the trace path (None when nothing was captured, or when `combine` is off: then the meta file lists
        the segments for `mmprof record` to combine). Only the first call does anything: a process can reach
        several exit paths (os._exit, atexit, a signal handler).
        """
        with self._transition():
            if self._exported:
                return self.trace_path
            if not self._on_prof_thread():
                msg = ("torch.profiler was started by another thread of this process and can only be stopped "
                       "there; this trace is not written now (its .partial marker and flushed segments remain)")
                if msg not in self.notes:
                    self.notes.append(msg)
                    self.write_marker()
                raise RuntimeError(msg)
            self._exported = True
            if self._prof is not None:  # capturing, or stopped by a signal while the capture was starting
                self._end_segment()
            if self.state == "new" and not self.segments:
                torch_hooks.remove_session(self)
                return self.trace_path
            if self.steps is not None and self.state in ("waiting", "capturing", "done"):
                captured = max(0, self.steps_seen - self._window_start)
                if self.state == "waiting":
                    self.notes.append(f"the capture window never opened: {self.steps_seen} step(s) seen, "
                                      f"--skip {self.skip} (step markers: {', '.join(self.step_markers)})")
                elif captured < self.steps:
                    self.notes.append(f"only {captured} of {self.steps} window step(s) completed")
            if self.mode == "light" and self.segments and all(s["record_shapes"] for s in self.segments):
                self.notes.append("light mode: no step completed (no step marker seen), so shapes were recorded "
                                  "for the whole capture")
            self.state = "done"
            files = [Path(s["file"]) for s in self.segments if Path(s["file"]).exists()]
            if files and self.combine:
                final = self.out_dir / f"{self.name}{TRACE_SUFFIX}"
                tracefiles.combine_traces(files, final)
                for f in files:
                    if f != final:
                        f.unlink(missing_ok=True)
                self.trace_path = final
            meta = self.info(finished=True)
            _atomic_text(self.meta_path, json.dumps(meta, indent=1))
            self.marker_path.unlink(missing_ok=True)
            torch_hooks.remove_session(self)
            return self.trace_path

    # -- state on disk --------------------------------------------------------------------------
    def info(self, finished: bool = False) -> dict[str, Any]:
        """What this process captured: written as the marker (while running) and the meta file (at the end)."""
        return {
            "name": self.name,
            "pid": self.pid,
            "host": socket.gethostname(),
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "dist": self._note_dist(),
            "argv": list(sys.argv),
            "started": self._t0,
            "updated": time.time(),
            "finished": finished,
            "state": self.state,
            "mode": self.mode,
            "window": {"skip": self.skip, "steps": self.steps, "markers": list(self.step_markers),
                       "flush_every": self.flush_every},
            "steps_seen": self.steps_seen,
            "gpu": self.gpu,
            "segments": [dict(s, file=Path(s["file"]).name) for s in self.segments],
            "trace": self.trace_path.name if self.trace_path else None,
            "notes": list(self.notes),
            "error": self.error,
            **self.extra_meta,
        }

    def write_marker(self) -> None:
        _atomic_text(self.marker_path, json.dumps(self.info(), indent=1))

    def _note_dist(self) -> dict[str, Any] | None:
        """torch.distributed's view of this process; remembered, since programs destroy the group before exit."""
        if self.dist is None:
            self.dist = _dist_info()
        return self.dist

    # -- profiler -------------------------------------------------------------------------------
    def _activities(self) -> list:
        from torch.profiler import ProfilerActivity

        if self.mode == "kernels":
            if not gpu_available():
                raise RuntimeError("kernels-only capture needs a GPU (CUDA or ROCm) visible to torch")
            self.gpu = True
            return [ProfilerActivity.CUDA]
        acts = [ProfilerActivity.CPU]
        if self.activities == "cpu":
            return acts
        if self.activities in ("auto", "gpu") and gpu_available():
            acts.append(ProfilerActivity.CUDA)
            self.gpu = True
        return acts

    def _begin_segment(self, shapes: bool) -> None:
        import torch.profiler as tp

        # light mode: the first segment only (callers pass shapes=False afterwards); never in kernels mode
        record_shapes = shapes and self.mode != "kernels"
        prof = tp.profile(activities=self._activities(), record_shapes=record_shapes,
                          profile_memory=False, with_stack=False)
        with torch_hooks.own_start(), _kineto_log_filtered(self.quiet):
            prof.start()
        self._prof = prof
        self._prof_thread = threading.get_ident()
        self._seg_shapes = record_shapes
        self._seg_start_step = self.steps_seen
        self.segments.append({"k": len(self.segments), "file": str(self.segment_path(len(self.segments))),
                              "record_shapes": record_shapes, "first_step": self.steps_seen,
                              "started": time.time(), "complete": False})
        self.write_marker()

    def _end_segment(self) -> None:
        prof, self._prof = self._prof, None
        if prof is None:
            return
        seg = self.segments[-1]
        try:
            info = self._note_dist()
            if info:
                prof.add_metadata_json("distributedInfo", json.dumps(info, default=str))
            prof.add_metadata_json("mmprof_capture", json.dumps(
                {"mode": self.mode, "record_shapes": seg["record_shapes"], "segment": seg["k"],
                 "rank": self.rank, "pid": self.pid}))
        except Exception:  # metadata is a nicety; never lose the trace over it
            pass
        with _kineto_log_filtered(self.quiet):
            prof.stop()
        path = Path(seg["file"])
        tmp = path.with_name(f".{path.name}")  # hidden while written; plain JSON, written by Kineto itself
        prof.export_chrome_trace(str(tmp))
        os.replace(tmp, path)
        seg.update(complete=True, last_step=self.steps_seen, stopped=time.time())
        self.write_marker()


@contextlib.contextmanager
def _kineto_log_filtered(active: bool):
    """Hide the `USDT:`/`STAGE:` lines Kineto writes straight to fd 2 at profiler start/stop (no env var
    turns them off); every other line written meanwhile is passed on."""
    if not active:
        yield
        return
    import tempfile

    try:
        sys.stderr.flush()
    except (OSError, ValueError):  # the program closed its stderr: nothing to filter, nothing to pass on
        pass
    try:
        saved = os.dup(2)
    except OSError:  # fd 2 is closed: Kineto's lines go nowhere anyway
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [ln for ln in tmp.read().decode(errors="replace").splitlines(True)
                    if not ln.startswith(("USDT:", "STAGE:"))]
            if kept:
                try:
                    sys.stderr.write("".join(kept))
                except (OSError, ValueError):
                    pass


def gpu_available() -> bool:
    """Whether torch has a usable CUDA/HIP device, checked without initialising the CUDA runtime.

    Uses NVML where torch supports it so that a parent process that later forks workers is not left with
    an initialised driver by mmprof.
    """
    import torch

    if not (getattr(torch.version, "cuda", None) or getattr(torch.version, "hip", None)):
        return False
    old = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False
    finally:
        if old is None:
            os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        else:
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = old


def _dist_info() -> dict[str, Any] | None:
    """rank / world size / backend from torch.distributed when this process initialised it."""
    mod = sys.modules.get("torch.distributed")
    try:
        if mod is None or not mod.is_available() or not mod.is_initialized():
            return None
        return {"rank": mod.get_rank(), "world_size": mod.get_world_size(), "backend": str(mod.get_backend())}
    except Exception:
        return None


