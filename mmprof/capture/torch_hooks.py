"""Hooks into torch for a capture session: step markers, and programs that start their own profiler.

Standard library only at import (torch is imported when hooks are installed): the `mmprof record` hook loads this
(through session.py) by path, in processes that may not have mmprof's dependencies installed.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any

_OWN_START = False  # True while a CaptureSession starts its own profiler (see hook: yield detection)


def own_start_in_progress() -> bool:
    return _OWN_START


@contextlib.contextmanager
def own_start():
    """A CaptureSession starts its own profiler in this block: it is not the program's (no yield)."""
    global _OWN_START
    _OWN_START = True
    try:
        yield
    finally:
        _OWN_START = False


_ACTIVE: list = []  # CaptureSessions
_OPEN = [0]  # record_function ranges open right now, all threads (entered through the patched class)
_tls = threading.local()
_installed = False


def install_hooks(session) -> None:
    """Route step markers and "the program started its own profiler" to `session`.

    Patches `torch.autograd.profiler.record_function.__enter__/__exit__` (the class behind
    `torch.profiler.record_function` and `profile.step()`'s ``ProfilerStep#N`` ranges): the exit of an
    outermost range whose name matches the session's step markers counts as one completed step. Patches
    `torch.autograd.profiler.profile._prepare_trace` so a profiler the program starts itself makes the
    session stop and keep what it has, instead of the program failing on "profiler already enabled".
    """
    global _installed
    if session not in _ACTIVE:
        _ACTIVE.append(session)
    session.can_switch = lambda: _OPEN[0] == 0
    if _installed:
        return
    import torch.autograd.profiler as ap

    rf = ap.record_function
    orig_enter, orig_exit = rf.__enter__, rf.__exit__
    cache: dict[str, bool] = {}
    open_lock = threading.Lock()

    def _is_marker(name: Any) -> bool:
        hit = cache.get(name)
        if hit is None:
            hit = any(s.marker_re is not None and s.marker_re.match(str(name)) for s in _ACTIVE)
            if len(cache) < 65536:
                cache[name] = hit
        return hit

    def __enter__(self):  # noqa: N807
        out = orig_enter(self)
        try:
            with open_lock:
                _OPEN[0] += 1
            if _ACTIVE and _is_marker(self.name):
                _tls.depth = getattr(_tls, "depth", 0) + 1
        except Exception:
            pass
        return out

    def __exit__(self, *exc):  # noqa: N807
        out = orig_exit(self, *exc)
        try:
            with open_lock:
                _OPEN[0] = max(0, _OPEN[0] - 1)
                idle = _OPEN[0] == 0
            if _ACTIVE and _is_marker(self.name):
                depth = getattr(_tls, "depth", 1) - 1
                _tls.depth = max(depth, 0)
                if depth <= 0:
                    for s in list(_ACTIVE):
                        s.step(self.name)
            if idle:
                for s in list(_ACTIVE):
                    s.safe_point()
        except Exception as e:  # a capture problem must never break the program
            _log_once(f"step marker handling failed: {e!r}")
        return out

    rf.__enter__, rf.__exit__ = __enter__, __exit__

    prof_cls = ap.profile
    orig_prepare = prof_cls._prepare_trace

    def _prepare_trace(self, *a, **k):
        if not _OWN_START:
            for s in list(_ACTIVE):
                try:
                    s.yield_to_program("the program started its own torch.profiler; mmprof's capture of this "
                                       "process stopped there (the program's own trace holds the rest)")
                except Exception as e:
                    _log_once(f"could not hand the profiler over to the program: {e!r}")
        return orig_prepare(self, *a, **k)

    prof_cls._prepare_trace = _prepare_trace
    _installed = True


def reset_after_fork() -> None:
    """In a forked child: the parent's open ranges are not the child's (a multiprocessing child never exits
    them), so start counting from zero."""
    _OPEN[0] = 0
    _tls.depth = 0


def remove_session(session) -> None:
    if session in _ACTIVE:
        _ACTIVE.remove(session)


_logged: set[str] = set()


def _log_once(msg: str) -> None:
    if msg in _logged:
        return
    _logged.add(msg)
    try:
        sys.stderr.write(f"[mmprof] {msg}\n")
    except Exception:
        pass


# -- nn.Module ranges: every module call becomes a profiler range named by the module's path ---------------------
_MODULE_NAMES: Any = None   # WeakKeyDictionary module -> range name, filled per root module on its first call
_MODULE_TLS = threading.local()
_module_handles: list = []


def _module_name(module) -> str:
    """`model.layers.12.mlp.shared_experts (MiniMaxM3VLDenseMLP)`: the module's path from its root (the outermost
    module called), then its class. The root itself is named by its class."""
    name = _MODULE_NAMES.get(module)
    if name is None:
        root = type(module).__name__
        try:
            for path, sub in module.named_modules():
                _MODULE_NAMES[sub] = f"{path} ({type(sub).__name__})" if path else root
        except Exception:  # a module whose children cannot be listed: name it alone
            _MODULE_NAMES[module] = root
        name = _MODULE_NAMES.get(module, root)
    return name


def install_module_hooks() -> None:
    """Open a torch.profiler range around every nn.Module forward (global forward pre/post hooks), named by the
    module's path and class, while a profiler runs; outside a capture the hooks return at once.

    Ranges opened while a CUDA / HIP graph is captured are recorded with that capture (they are CPU-side
    ranges; replays run kernels only), so the graph-replay attribution can use them."""
    global _MODULE_NAMES
    if _module_handles:
        return
    import weakref

    import torch
    from torch.autograd import profiler as ap
    from torch.nn.modules import module as nn_module

    _MODULE_NAMES = weakref.WeakKeyDictionary()
    enabled = torch._C._autograd._profiler_enabled
    RF = ap.record_function
    # While Dynamo traces a module (torch.compile, e.g. vLLM's default mode) the hooks are traced too, and
    # fullgraph capture refuses the profiler query ("torch.* op returned non-Tensor"). is_compiling() is
    # True only during tracing, so the hook folds away in the compiled graph (no ranges from inside it).
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)

    def pre(module, args):
        if compiling() or not enabled():
            return None
        try:
            rf = RF(_module_name(module))
            rf.__enter__()
            stack = getattr(_MODULE_TLS, "stack", None)
            if stack is None:
                stack = _MODULE_TLS.stack = []
            stack.append((module, rf))
        except Exception as e:  # a capture problem must never break the program
            _log_once(f"module range not opened: {e!r}")
        return None

    def post(module, args, output):
        if compiling():
            return None
        stack = getattr(_MODULE_TLS, "stack", None)
        if stack and stack[-1][0] is module:
            _, rf = stack.pop()
            try:
                rf.__exit__(None, None, None)
            except Exception as e:
                _log_once(f"module range not closed: {e!r}")
        return None

    _module_handles.append(nn_module.register_module_forward_pre_hook(pre))
    _module_handles.append(nn_module.register_module_forward_hook(post, always_call=True))


def remove_module_hooks() -> None:
    while _module_handles:
        _module_handles.pop().remove()
