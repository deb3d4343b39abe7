"""mmprof record's start-up hook. `mmprof record` puts this folder first on PYTHONPATH, so every Python
process the command starts (torchrun ranks, multiprocessing spawn/forkserver workers, subprocesses) runs it.

It does nothing unless MMPROF_RECORD_DIR is set. Then it:

1. chains to the sitecustomize that would have run without us (next one on sys.path), so nothing changes
   for the program;
2. waits for `import torch` (a one-shot meta-path finder; processes that never import torch are untouched,
   and torch launchers such as torchrun's agent are skipped);
3. once torch is imported, creates a `CaptureSession` named from RANK / LOCAL_RANK / WORLD_SIZE, and starts it
   at once (CPU builds, or MMPROF_RECORD_START=import) or when the program first initialises the GPU (GPU
   builds: so mmprof never initialises CUDA in a parent that later forks, and GPU-less helpers stay light);
4. exports on normal exit (atexit), on SIGTERM (then re-raises the signal with the default action; a SIGTERM that
   arrives while the capture is starting or switching segments is acted on right after) and on
   `os._exit` (wrapped while the hook is armed: torchrun entry points that skip interpreter clean-up, and every
   multiprocessing *fork* worker, end that way, and neither runs atexit). SIGINT raises KeyboardInterrupt as
   usual, so atexit covers it. A process that dies without running any of these (SIGKILL, a segfault) leaves
   its `<name>.partial` marker, plus any window/segment already flushed to disk; a segment cut short while it was
   being written is read as far as it goes by `mmprof record`. Segments are plain JSON written by Kineto itself
   (no gzip here: an engine that stops its workers gives them only seconds), compressed by `mmprof record`.

Every failure is caught and reported once on stderr with a `[mmprof]` prefix: the hook never breaks a program.
The session module is loaded by file path, so the hook works in any Python that has torch, even one where
mmprof itself is not installed.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_state: dict = {"session": None, "logged": set(), "mod": None}


def _log(msg: str) -> None:
    if msg in _state["logged"]:
        return
    _state["logged"].add(msg)
    try:
        sys.stderr.write(f"[mmprof] {msg}\n")
        sys.stderr.flush()
    except Exception:
        pass


def _chain_original() -> None:
    """Run the sitecustomize that Python would have found without our folder on the path."""
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    try:
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    except Exception:
        spec = None
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_mmprof_chained_sitecustomize"] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # the original would have printed an error too; keep going like site does
        _log(f"error in the original sitecustomize ({spec.origin}): {e!r}")


# -- torch import watcher ---------------------------------------------------------------------------
class _TorchWatcher:
    """A meta-path finder that notices `import torch` and runs `_on_torch` right after torch is initialised."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        import importlib.util

        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        orig = spec.loader
        try:
            base = type(orig)

            def exec_module(loader_self, module, _orig=base.exec_module):
                _orig(loader_self, module)
                _on_torch()

            wrapped = object.__new__(type(f"Mmprof{base.__name__}", (base,), {"exec_module": exec_module}))
            wrapped.__dict__.update(orig.__dict__)
            spec.loader = wrapped
        except Exception as e:
            _log(f"cannot watch the torch import, this process is not captured: {e!r}")
            spec.loader = orig
        return spec


def _gpu_build(torch) -> bool:
    """Whether this torch was built for CUDA or ROCm (then the capture waits for the first GPU use)."""
    return bool(getattr(torch.version, "cuda", None) or getattr(torch.version, "hip", None))


def _on_first_gpu_use(fn) -> None:
    """Run `fn` when the program first initialises the GPU, or now if it already has.

    torch.cuda's lazy-init queue runs it inside `torch.cuda._lazy_init`, i.e. at the program's first GPU use.
    (A module-level function so that tests can drive this start path on a CPU build.)
    """
    import torch

    torch.cuda._lazy_call(fn)


_LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch", "torch.distributed.elastic")


def _is_launcher() -> bool:
    """torchrun / torch.distributed.launch agents import torch but run no model code: not a rank."""
    argv = list(getattr(sys, "orig_argv", None) or sys.argv)
    names = [os.path.basename(a) for a in argv[:3]]
    if "torchrun" in names:
        return True
    for i, a in enumerate(argv[:-1]):
        if a == "-m" and argv[i + 1].startswith(_LAUNCHER_MODULES):
            return True
    main = sys.argv[0] if sys.argv else ""
    if main.replace("\\", "/").endswith(("torch/distributed/run.py", "torch/distributed/launch.py")):
        return True
    import fnmatch

    for pat in filter(None, os.environ.get("MMPROF_RECORD_EXCLUDE", "").split(",")):
        if any(fnmatch.fnmatch(n, pat) for n in names):
            return True
    return False


def _load_session_module():
    if _state["mod"] is None:
        import importlib.util

        path = os.path.join(os.path.dirname(_HERE), "session.py")
        spec = importlib.util.spec_from_file_location("_mmprof_capture_session", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["_mmprof_capture_session"] = mod
        spec.loader.exec_module(mod)
        _state["mod"] = mod
    return _state["mod"]


def _int_env(key: str, default=None):
    v = os.environ.get(key, "")
    try:
        return int(v) if v != "" else default
    except ValueError:
        _log(f"ignoring {key}={v!r}: not an integer")
        return default


def _on_torch() -> None:
    try:
        if _state["session"] is not None or _is_launcher():
            return
        mod = _load_session_module()
        rank, local, world = mod.env_rank()
        markers = os.environ.get("MMPROF_RECORD_MARKERS")
        session = mod.CaptureSession(
            os.environ["MMPROF_RECORD_DIR"],
            mode=os.environ.get("MMPROF_RECORD_MODE", "full"),
            rank=rank, local_rank=local, world_size=world,
            steps=_int_env("MMPROF_RECORD_STEPS"), skip=_int_env("MMPROF_RECORD_SKIP", 0) or 0,
            step_markers=markers.split(",") if markers else mod.DEFAULT_STEP_MARKERS,
            activities=os.environ.get("MMPROF_RECORD_ACTIVITIES", "auto"),
            flush_every=_int_env("MMPROF_RECORD_FLUSH_EVERY"),
            quiet=os.environ.get("MMPROF_RECORD_KINETO_LOG", "0") != "1",  # Kineto's USDT/STAGE lines hidden
            combine=False,  # segments stay plain JSON; `mmprof record` combines and compresses them afterwards
        )
        _state["session"] = session
        mod.install_hooks(session)
        if os.environ.get("MMPROF_RECORD_MODULES", "1") != "0":
            mod.install_module_hooks()
        _install_exit_handlers(session)
        start = os.environ.get("MMPROF_RECORD_START", "auto")
        import torch

        gpu_build = _gpu_build(torch)
        if start == "auto":
            start = "gpu" if gpu_build and session.activities != "cpu" else "import"
        if start == "gpu" and gpu_build:
            _on_first_gpu_use(_start_safely)  # runs now if the GPU is already initialised
        else:
            _start_safely()
    except Exception as e:
        _log(f"capture not started in pid {os.getpid()}: {e!r}")


def _start_safely() -> None:
    s = _state["session"]
    if s is None or s.pid != os.getpid():
        return
    try:
        s.start()
    except Exception as e:
        _log(f"capture not started in pid {os.getpid()}: {e!r}")


def _finish(reason: str | None = None) -> None:
    s = _state["session"]
    if s is None or s.pid != os.getpid():
        return  # a forked child inherits the parent's session: never export it from here
    try:
        if reason:
            s.notes.append(reason)
        s.export()
    except Exception as e:
        _log(f"could not write the trace of pid {os.getpid()}: {e!r}")
        _stop_profiler(s)


def _stop_profiler(s) -> None:
    """Last resort after a failed export: never leave torch.profiler running into interpreter shutdown (torch
    crashes with SIGSEGV there, which would change how the program ends)."""
    prof = getattr(s, "_prof", None)
    if prof is None:
        return
    s._prof = None
    try:
        prof.stop()
    except Exception:
        pass


def _finish_at_os_exit(code) -> None:
    """`os._exit` was called: write this process's trace first (once; never raises, never blocks the exit)."""
    try:
        s = _state["session"]
        if s is None or s.pid != os.getpid() or _state.get("os_exit") == os.getpid():
            return
        _state["os_exit"] = os.getpid()
        _finish(f"exited through os._exit({code}); the trace was written just before")
    except BaseException as e:  # noqa: BLE001 - the program asked to exit: let nothing stop it
        _log(f"could not write the trace of pid {os.getpid()} before os._exit: {e!r}")


def _wrap_os_exit() -> None:
    """Replace `os._exit` with a wrapper that exports the active capture before exiting.

    os._exit skips atexit: torchrun entry points call it to dodge clean-up aborts at interpreter exit, and
    multiprocessing's fork workers always end with it, so without this their traces would be lost. Installed
    when the hook is armed (before the program can bind `os._exit` itself); it does nothing but call the
    real `os._exit` while no capture is active in the calling process.
    """
    real = os._exit
    if getattr(real, "_mmprof_wrapped", False):
        return

    def _exit(*args, **kwargs):
        _finish_at_os_exit(args[0] if args else kwargs.get("status", "?"))
        real(*args, **kwargs)

    _exit._mmprof_wrapped = True
    _exit.__wrapped__ = real
    _exit.__doc__ = real.__doc__
    os._exit = _exit


def _install_exit_handlers(session) -> None:
    """atexit, SIGTERM, excepthook and fork handlers; once per process (forked children inherit them)."""
    if _state.get("handlers"):
        return
    _state["handlers"] = True
    import atexit
    import signal

    atexit.register(_finish)

    def _die_of(signum):
        _finish(f"stopped by signal {signum}")
        try:
            signal.signal(signum, signal.SIG_DFL)
        except Exception:
            pass
        os.kill(os.getpid(), signum)

    def _on_sigterm(signum, frame):
        cur = _state["session"]
        if cur is not None and cur.pid == os.getpid() and cur.in_transition:
            # the profiler is being started or switched on this very thread: finish that first (an export now
            # would see half a state), then write the trace and die of the signal
            cur.deferred_signal = signum
            cur.on_deferred_signal = _die_of
            return
        _die_of(signum)

    try:
        import threading

        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
    except Exception as e:
        _log(f"no SIGTERM handler installed: {e!r}")

    old_hook = sys.excepthook

    def _excepthook(tp, value, tb):
        try:
            cur = _state["session"]
            if cur is not None and cur.pid == os.getpid():
                cur.notes.append(f"uncaught {tp.__name__}: {str(value)[:200]}")
                cur.error = tp.__name__
        except Exception:
            pass
        old_hook(tp, value, tb)

    sys.excepthook = _excepthook

    def _after_fork_in_child():
        # A forked child inherits the parent's session. If the parent's profiler is running, torch.profiler
        # cannot continue in the child (Kineto's threads are gone): leave a note and capture nothing. If it
        # is not running yet (waiting for the GPU or for the window), the child captures itself afresh.
        try:
            s = _state["session"]
            if s is None:
                return
            mod = _state["mod"]
            mod.remove_session(s)
            mod.reset_after_fork()
            if s._prof is None and s.state in ("new", "waiting"):
                _state["session"] = None
                _on_torch()
                return
            note = os.path.join(s.out_dir, f"proc{os.getpid()}.forked")
            with open(note, "w") as f:
                f.write(f"{s.pid}\n")
        except Exception:
            pass

    try:
        os.register_at_fork(after_in_child=_after_fork_in_child)
    except Exception:
        pass


def _activate() -> None:
    if not os.environ.get("MMPROF_RECORD_DIR"):
        return
    _wrap_os_exit()
    if "torch" in sys.modules:  # imported by the original sitecustomize or a .pth file
        _on_torch()
    else:
        sys.meta_path.insert(0, _TorchWatcher())


try:
    _chain_original()
finally:
    try:
        _activate()
    except Exception as _e:  # pragma: no cover - defensive
        _log(f"start-up hook failed: {_e!r}")
