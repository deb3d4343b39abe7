"""One helper that opens a named region: torch.profiler.record_function plus an NVTX/roctx range.

Names follow DEVELOPERS.md ("layers.12.moe.routed", "mmprof.decode", "mmprof.step.3", ...). record_function
makes them `user_annotation` events in torch.profiler traces; the NVTX range (torch.cuda.nvtx, which is
roctx on ROCm builds) makes them visible to nsys / rocprofv3 when the runtime runs under `mmprof record`.
`set_scopes_enabled(False)` (or MMPROF_SCOPES=0) turns every scope into a no-op, for timing runs where the
few microseconds of host work per region would be measured too; set MMPROF_NVTX=0 to keep only
record_function.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

_NVTX: bool | None = None
_ENABLED = os.environ.get("MMPROF_SCOPES", "1") != "0"
_NULL = contextlib.nullcontext()
_STACK: list[str] | None = None  # the open scopes' names while `tracked_scopes()` runs


def set_scopes_enabled(enabled: bool) -> bool:
    """Turn scopes on or off process-wide; returns the previous setting."""
    global _ENABLED
    prev, _ENABLED = _ENABLED, bool(enabled)
    return prev


def _nvtx_enabled() -> bool:
    global _NVTX
    if _NVTX is None:
        _NVTX = False
        if os.environ.get("MMPROF_NVTX", "1") != "0":
            try:
                import torch

                _NVTX = bool(torch.cuda.is_available())
            except Exception:
                _NVTX = False
    return _NVTX


@contextlib.contextmanager
def _scope(name: str) -> Iterator[None]:

    stack = _STACK
    if stack is not None:
        stack.append(name)
    try:
        with _range(name):
            yield
    finally:
        if stack is not None:
            stack.pop()


@contextlib.contextmanager
def _range(name: str) -> Iterator[None]:
    import torch

    with torch.profiler.record_function(name):
        if _nvtx_enabled():
            torch.cuda.nvtx.range_push(name)
            try:
                yield
            finally:
                torch.cuda.nvtx.range_pop()
        else:
            yield


def scope(name: str):
    """`with scope("layers.3.attn.core"): ...`"""
    return _scope(name) if _ENABLED else _NULL


@contextlib.contextmanager
def tracked_scopes() -> Iterator[list[str]]:
    """Scopes switched on, and the names of those open at any moment (outermost first) in the yielded list,
    while the block runs (for `mmprof shapes --live`, which labels each call it sees with them)."""
    global _STACK
    prev_stack, prev_enabled = _STACK, set_scopes_enabled(True)
    _STACK = []
    try:
        yield _STACK
    finally:
        _STACK = prev_stack
        set_scopes_enabled(prev_enabled)
