"""mmprof: profile and verify LLM inference runs of MiniMax M3 on AMD and NVIDIA GPUs.

Data flows one way: capture / record / import -> Profile -> analyses -> renderers.
"""

from __future__ import annotations

__version__ = "0.1.0"

from mmprof.errors import MmprofError  # noqa: E402
from mmprof.profiles import Profile, load_profile, save_profile  # noqa: E402

__all__ = ["Profile", "load_profile", "save_profile", "MmprofError", "__version__"]
