"""Runtime tests use one intra-op thread: the CI box has 2 cores shared with other test workers, and
oversubscribed OpenMP threads make tiny-model ops 10-100x slower."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    try:
        import torch
    except ImportError:
        yield
        return
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _interpret_triton_on_cpu() -> None:
    """The Triton kernels (mmprof/runtime/kernels/) run on the CPU under Triton's interpreter, which Triton reads
    from TRITON_INTERPRET when a kernel is defined: set it before any test imports them. A GPU run
    (MMPROF_GPU_TESTS=1) compiles them for the GPU instead."""
    import os

    if not os.environ.get("MMPROF_GPU_TESTS"):
        os.environ.setdefault("TRITON_INTERPRET", "1")


_interpret_triton_on_cpu()
