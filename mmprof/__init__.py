"""mmprof: profile and verify LLM inference runs of MiniMax M3 on AMD and NVIDIA GPUs.

Data flows one way: capture / record / import -> Profile -> analyses -> renderers.
"""

from __future__ import annotations

from typing import Any

from mmprof._version import __version__
from mmprof.errors import MmprofError

__all__ = ["Profile", "load_profile", "save_profile", "MmprofError", "__version__"]
_PROFILES = ("Profile", "load_profile", "save_profile")


def __getattr__(name: str) -> Any:
    # An exception to "imports at module top" (like torch's): `mmprof.profiles` imports numpy, and every
    # `mmprof --version` / `--help` / `rules` imports this package first; Profile and its I/O load on first use.
    if name in _PROFILES:
        from mmprof import profiles

        return getattr(profiles, name)
    raise AttributeError(f"module 'mmprof' has no attribute {name!r}")
