from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


def data_file(*parts: str) -> Path:
    """A fixture under tests/data/; fails loudly when missing (never skips)."""
    p = DATA.joinpath(*parts)
    if not p.exists():
        raise FileNotFoundError(f"test fixture missing: {p}")
    return p


def sql_rows(path: Path, sql: str) -> list[tuple]:
    """Run one query on an SQLite file read-only (tests check importers against the raw tables)."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    if has_gpu or os.environ.get("MMPROF_GPU_TESTS"):
        return
    skip = pytest.mark.skip(reason="needs a GPU (marked gpu); run on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
