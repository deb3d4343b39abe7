"""`mmprof record` never changes how a workload behaves and keeps what it captured when the workload is stopped
(issue 33: closed stdio, pools, signals; issue 37: an engine's own shutdown). Real commands run under the hook on
CPU (tests/data/record/*.py); the trace-file salvage is tested on files cut at known bytes.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mmprof.capture.record import RecordResult, build_profile, collect
from mmprof.capture.session import CaptureSession
from mmprof.capture.tracefiles import combine_traces, salvage_trace
from mmprof.profiles.io import load_profile
from tests.test_record import ops_df, run_record, script


def _plain_rc(*cmd: str) -> int:
    return subprocess.run([sys.executable, *cmd], capture_output=True, timeout=120).returncode


def test_a_workload_that_closes_its_stdio_ends_as_it_would_without_record(tmp_path):
    """With fds 1 and 2 closed, torch.profiler could not be stopped cleanly (the Kineto log filter dup'ed fd 2):
    the profiler stayed on into interpreter shutdown and the workload died of SIGSEGV (139) under record."""
    truth = _plain_rc(script("closed_stdio.py"))
    assert truth == 1  # the final print fails on the closed stdout
    proc, out = run_record(tmp_path, cmd=[sys.executable, script("closed_stdio.py")])
    assert proc.returncode == truth, proc.stderr
    ops = ops_df(load_profile(out))
    assert len(ops[ops.name == "aten::mm"]) == 3  # its three steps are in the trace


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_pool_workers_stopped_by_the_pool_are_never_lost(tmp_path, method):
    """Leaving a `with Pool()` block SIGTERMs the workers, one possibly while its capture is starting: each
    worker that imported torch ends complete (its trace written) or empty (it ran nothing), never no-data."""
    proc, out = run_record(tmp_path, "--json", cmd=[sys.executable, script("pool_with.py"), method])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("8 tasks\n")
    p = load_profile(out)
    statuses = [r["status"] for r in p.meta["ranks"]]
    assert statuses and set(statuses) == {"complete"}, p.meta["ranks"]
    assert not any("wrote no trace" in w for w in p.meta["warnings"])
    mm = ops_df(p)
    assert len(mm[mm.name == "aten::mm"]) == 8  # every task's matmul, whichever worker ran it


def test_a_signal_during_a_transition_is_acted_on_after_it(tmp_path):
    """The hook's SIGTERM handler never exports half-way through a start or a segment switch (the pool race: a
    worker SIGTERMed inside `start()` exported nothing and left a marker that said it had died)."""
    s = CaptureSession(tmp_path, rank=0, combine=False, activities="cpu")
    heard = []
    s.on_deferred_signal = heard.append
    with s._transition():
        assert s.in_transition
        s.deferred_signal = signal.SIGTERM
        assert heard == []  # nothing happens while the transition runs
    assert heard == [signal.SIGTERM] and s.deferred_signal is None and not s.in_transition


def test_export_writes_a_segment_whose_start_was_interrupted(tmp_path):
    """A profiler started but not yet marked as capturing (a signal between the two) is stopped and written."""
    import torch

    s = CaptureSession(tmp_path, rank=0, combine=False, activities="cpu")
    s.out_dir.mkdir(parents=True, exist_ok=True)
    s._begin_segment(shapes=True)      # the profiler runs; `start()` would now set state = "capturing"
    assert s.state == "new"
    torch.randn(8, 8) @ torch.randn(8, 8)
    assert s.export() is None          # combine=False: the meta lists the segment for record to combine
    seg = tmp_path / "rank0.pid{}.seg0.pt.trace.json".format(os.getpid())
    assert seg.exists() and seg.read_bytes().lstrip()[:1] == b"{"  # plain JSON, written by Kineto
    meta = json.loads(s.meta_path.read_text())
    assert meta["state"] == "done" and meta["segments"][0]["complete"] is True
    assert any(e.get("name") == "aten::mm" for e in json.loads(seg.read_bytes())["traceEvents"])


def test_a_workload_that_ignores_sigint_is_ended_and_its_capture_kept(tmp_path):
    """Ctrl-C to record reaches the workload; one that ignores it gets SIGTERM after --stop-grace (its hook then
    writes the trace), so record ends in bounded time with the data (issue 33: still running 120 s later)."""
    out = tmp_path / "prof.json.gz"
    p = subprocess.Popen([sys.executable, "-m", "mmprof", "record", "-o", str(out), "--stop-grace", "1", "--",
                          sys.executable, script("stubborn.py"), "int"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGINT)
    rest, err = p.communicate(timeout=120)
    assert p.returncode == 128 + signal.SIGTERM, err
    assert "still running 1 s after SIGINT: sending SIGTERM" in err
    prof = load_profile(out)
    assert prof.meta["ranks"][0]["status"] == "complete"
    assert set(ops_df(prof).step) >= {0, 1}


def test_a_workload_that_ignores_sigint_and_sigterm_is_killed_and_the_loss_named(tmp_path):
    out = tmp_path / "prof.json.gz"
    p = subprocess.Popen([sys.executable, "-m", "mmprof", "record", "-o", str(out), "--stop-grace", "1", "--",
                          sys.executable, script("stubborn.py"), "int,term"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGTERM)
    rest, err = p.communicate(timeout=120)
    assert p.returncode == 2, err  # nothing could be captured: one clear line
    assert "sending SIGKILL" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("mmprof: error: nothing captured") and "killed (SIGKILL, or a crash)" in last
    assert not out.exists()


def test_an_engine_core_stopped_by_its_front_end_keeps_its_capture(tmp_path):
    """vLLM's layout: the engine core runs in a spawned process with its own SIGTERM handler, and its front end
    kills it if it has not exited some seconds after SIGTERM. Its trace is written on the way out (plain JSON, no
    gzip in the dying process) and record combines it: the engine's steps are in the Profile and the front end
    (no torch) is not a rank. The kill timeout here is generous (a loaded CI machine is slow; vLLM's own 5 s
    budget against the export time is measured in benchmarks/record_export.py, not here)."""
    proc, out = run_record(tmp_path, cmd=[sys.executable, script("engine_shutdown.py"), "--steps", "20",
                                          "--timeout", "300"], timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "engine exit code 0" in proc.stdout and "force killing" not in proc.stdout
    p = load_profile(out)
    assert [r["status"] for r in p.meta["ranks"]] == ["complete"]
    steps = set(ops_df(p).step)
    assert set(range(21)) <= steps
    left = [f.name for f in (tmp_path / "prof.traces").iterdir()]
    assert not [f for f in left if ".seg" in f], left  # segments folded into the one gzipped trace
    assert any(f.endswith(".pt.trace.json.gz") for f in left)


# -- a trace cut short while it was being written ---------------------------------------------------------------
def _trace_bytes(n: int) -> bytes:
    doc = {"schemaVersion": 1, "baseTimeNanoseconds": 1_000_000_000, "deviceProperties": [],
           "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0 * i,
                            "dur": 5.0, "args": {"External id": i}} for i in range(n)]}
    return json.dumps(doc).encode()


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_salvage_keeps_every_complete_event_before_the_cut(tmp_path, gz):
    raw = _trace_bytes(50)
    evs = json.loads(raw)["traceEvents"]
    ends = [raw.index(json.dumps(e).encode()) + len(json.dumps(e).encode()) for e in evs]
    for cut, expect in ((ends[9] + 3, 10), (ends[9] - 1, 9), (ends[-1], 50)):
        data = raw[:cut]
        f = tmp_path / ("t.json.gz" if gz else "t.json")
        f.write_bytes(gzip.compress(data)[: -9] if gz else data)  # gzip: the stream itself cut short too
        doc, info = salvage_trace(f)
        assert info["complete"] is False
        kept = len(doc["traceEvents"])
        assert kept == expect or (gz and expect - 1 <= kept <= expect), (cut, kept)
        assert doc["baseTimeNanoseconds"] == 1_000_000_000  # the header before the events is kept
        assert doc["traceEvents"] == evs[:kept]
        assert info["last_ts_us"] == 10.0 * (kept - 1)
    f = tmp_path / "whole.json"
    f.write_bytes(raw)
    assert salvage_trace(f)[1] == {"complete": True, "events": 50, "bytes_read": len(raw)}
    f.write_bytes(raw[: raw.index(b'"traceEvents"') - 2])
    with pytest.raises(ValueError, match="cut short before its events began"):
        salvage_trace(f)


def test_collect_reads_a_segment_cut_during_export_and_names_the_loss(tmp_path):
    """A process killed while Kineto wrote its segment leaves the hidden `.NAME.seg0...` file and its marker:
    record keeps the events written so far, marks the rank partial and says what was lost and why."""
    name = "proc4242"
    raw = _trace_bytes(40)
    (tmp_path / f".{name}.seg0.pt.trace.json").write_bytes(raw[: len(raw) * 3 // 4])
    marker = {"name": name, "pid": 4242, "state": "capturing", "argv": ["engine.py"], "steps_seen": 0,
              "segments": [{"k": 0, "file": f"{name}.seg0.pt.trace.json", "complete": False}], "notes": []}
    (tmp_path / f"{name}.partial").write_text(json.dumps(marker))
    procs, forked, warns = collect(tmp_path)
    assert len(procs) == 1 and warns == []
    pc = procs[0]
    assert pc.trace == tmp_path / f"{name}.pt.trace.json.gz" and not pc.finished
    assert pc.loss.startswith("segment 0 was cut short while it was being written")
    kept = json.loads(gzip.decompress(pc.trace.read_bytes()))["traceEvents"]
    assert 25 <= len(kept) < 40  # three quarters of the bytes: every event before the cut
    assert not list(tmp_path.glob(".proc4242.seg*"))
    res = RecordResult(command=["x"], exit_code=0, backend="torch", mode="full", window={}, trace_dir=str(tmp_path),
                       out=None, world_size=None)
    prof = build_profile(procs, res)
    assert prof.meta["ranks"][0]["status"] == "partial" and "cut short" in prof.meta["ranks"][0]["loss"]
    assert any("did not finish: segment 0 was cut short" in w for w in res.warnings)
    assert prof.n("ops") == len(kept)


def test_a_process_killed_before_any_segment_says_why(tmp_path):
    marker = {"name": "proc7", "pid": 7, "state": "capturing", "segments": [{"k": 0, "complete": False}],
              "notes": []}
    (tmp_path / "proc7.partial").write_text(json.dumps(marker))
    (procs, _, _), = [collect(tmp_path)]
    assert procs[0].trace is None and "killed (SIGKILL, or a crash) while capturing" in procs[0].loss


def test_combine_compresses_a_single_plain_segment(tmp_path):
    seg = tmp_path / "a.seg0.pt.trace.json"
    seg.write_bytes(_trace_bytes(3))
    out = combine_traces([seg], tmp_path / "a.pt.trace.json.gz")
    assert out.read_bytes()[:2] == b"\x1f\x8b"  # the caller removes the segment (collect, export)
    assert len(json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]) == 3
