"""mmprof: profile and verify LLM inference runs of MiniMax M3 on AMD and NVIDIA GPUs.

Data flows one way: capture / record / import -> Profile -> analyses -> renderers.
"""

from __future__ import annotations

from mmprof._version import __version__
from mmprof.errors import MmprofError
from mmprof.profiles import Profile, load_profile, save_profile

__all__ = ["Profile", "load_profile", "save_profile", "MmprofError", "__version__"]
