"""Rank files imported in worker processes: the same Profile as one by one, errors as one line naming the file."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from mmprof.errors import BadInput
from mmprof.importers import import_paths, kineto

DATA = Path(__file__).parent / "data"
RANKS = [DATA / "hf_moe" / f"m3_tp2_rank{r}.json.gz" for r in (0, 1)]


def _same(a, b) -> None:
    assert a.strings == b.strings and a.ranks == b.ranks
    for t in a.tables:
        for c in a.tables[t]:
            assert np.array_equal(a.tables[t][c], b.tables[t][c], equal_nan=a.tables[t][c].dtype.kind == "f"), (t, c)


def test_two_workers_give_the_profile_one_process_gives():
    seen = []
    par = kineto.load(RANKS, jobs=2, progress=lambda stage, done, n: seen.append((done, n)))
    seq = kineto.load(RANKS, jobs=1)
    _same(par, seq)
    assert par.ranks == [0, 1] and sorted(seen) == [(0, 2), (1, 2)]


def test_a_damaged_rank_file_is_one_line_naming_it(tmp_path):
    good = tmp_path / "rank0.json.gz"
    shutil.copy(RANKS[0], good)
    bad = tmp_path / "rank1.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": ')  # cut off
    with pytest.raises(BadInput, match="rank1.json"):
        kineto.load([good, bad], jobs=2)


def test_two_files_claiming_one_rank_are_refused_in_parallel_too(tmp_path):
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    shutil.copy(RANKS[0], a)
    shutil.copy(RANKS[0], b)
    with pytest.raises(BadInput, match="both claim rank 0"):
        kineto.load([a, b], jobs=2)


def test_default_jobs(monkeypatch, tmp_path):
    assert kineto.default_jobs(RANKS) == 1  # small files: no processes to start
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 1)
    assert kineto.default_jobs(RANKS) == min(2, __import__("os").cpu_count() or 1)
    monkeypatch.setenv("MMPROF_IMPORT_JOBS", "7")
    assert kineto.default_jobs(RANKS) == 2  # never more than one per file
    monkeypatch.setenv("MMPROF_IMPORT_JOBS", "many")
    with pytest.raises(BadInput, match="MMPROF_IMPORT_JOBS"):
        kineto.default_jobs(RANKS)


def test_import_paths_passes_jobs_and_the_cli_refuses_zero(tmp_path, capsys):
    d = tmp_path / "ranks"
    d.mkdir()
    for f in RANKS:
        shutil.copy(f, d / f.name)
    _same(import_paths([d], jobs=2), import_paths([d], jobs=1))
    from mmprof.cli import main

    with pytest.raises(SystemExit) as e:
        main(["import", str(d), "-o", str(tmp_path / "p.json"), "--jobs", "0"])
    assert e.value.code == 2 and "Traceback" not in capsys.readouterr().err
