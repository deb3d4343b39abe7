"""Capture: the in-process torch.profiler session (`CaptureSession`, shared by `mmprof record` and `mmprof run`),
the `record` wrapper that captures every process of a command, the rocprofv3 / nsys backends and the rank
launcher. The run / demo / shapes commands as library calls are in `mmprof.capture.workflows`.

Importing this package does not import torch.
"""

from __future__ import annotations

from mmprof.capture.session import DEFAULT_STEP_MARKERS, CaptureSession, combine_traces, install_hooks

__all__ = ["CaptureSession", "DEFAULT_STEP_MARKERS", "combine_traces", "install_hooks"]
