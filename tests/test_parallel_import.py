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
    assert kineto.default_jobs(RANKS) == min(2, kineto.free_cores())
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


def test_json_bytes_reads_the_gzip_trailer():
    """A .gz is judged by the JSON it holds (the gzip ISIZE trailer, RFC 1952 section 2.3.1), not its compressed
    size: the default --jobs is about import work, which follows the JSON bytes."""
    import gzip

    for f in RANKS:
        assert kineto.json_bytes(f) == len(gzip.decompress(f.read_bytes()))


def test_default_jobs_needs_enough_json_per_worker(monkeypatch):
    """One worker per PARALLEL_MIN_BYTES of JSON, at most the cores and the files: inputs that would give a worker
    less than that import in this process (a pool costs more than it saves on them: docs/benchmarks.md)."""
    total = sum(kineto.json_bytes(f) for f in RANKS)
    monkeypatch.setattr(kineto, "free_cores", lambda: 8)
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", total // 2 + 1)
    assert kineto.default_jobs(RANKS) == 1          # 2 files, but not two workers' worth of JSON
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", total // 2)
    assert kineto.default_jobs(RANKS) == 2
    assert kineto.default_jobs(RANKS[:1]) == 1       # one file: never a pool
    monkeypatch.setattr(kineto, "free_cores", lambda: 1)
    assert kineto.default_jobs(RANKS) == 1          # one usable core: never a pool


def test_free_cores_follows_the_affinity_mask(monkeypatch):
    """The cores this process may run on (os.sched_getaffinity: taskset / a container's cpuset), never 0."""
    monkeypatch.setattr(kineto.os, "sched_getaffinity", lambda pid: {0, 1, 5}, raising=False)
    assert kineto.free_cores() == 3
    monkeypatch.setattr(kineto.os, "sched_getaffinity", lambda pid: set(), raising=False)
    assert kineto.free_cores() == 1


CHILDREN = """
import os, sys
from pathlib import Path
from mmprof.importers import kineto


def children():
    me = str(os.getpid())
    out = []
    for pid in os.listdir("/proc"):
        try:
            stat = open(f"/proc/{pid}/stat").read() if pid.isdigit() else ""
        except OSError:
            continue
        if stat and stat.rsplit(")", 1)[1].split()[1] == me:   # field 4 of /proc/PID/stat: the parent pid
            out.append(pid)
    return out


if __name__ == "__main__":
    p = kineto.load([Path(f) for f in sys.argv[1:]], jobs=2)
    print(len(children()), p.ranks)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="counts children through /proc (Linux)")
def test_no_process_outlives_an_import_with_two_jobs(tmp_path):
    """After kineto.load(jobs=2) returns, the importing process has no children left: the workers end with the
    pool, and the forkserver and resource tracker that multiprocessing started for it are stopped too (before
    this, both outlived the import until the interpreter exited)."""
    import subprocess
    import sys

    script = tmp_path / "children.py"
    script.write_text(CHILDREN)
    out = subprocess.run([sys.executable, str(script), *map(str, RANKS)], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parents[1])
    assert out.stdout.split(maxsplit=1) == ["0", "[0, 1]\n"]
    assert "Traceback" not in out.stderr and "leaked" not in out.stderr
