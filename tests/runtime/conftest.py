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
