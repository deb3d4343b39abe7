"""mmprof summary: numbers checked against the raw sample events and hand-made traces."""

from __future__ import annotations

import json

import pytest

from mmprof.analysis.views.summary import summarize
from mmprof.errors import BadInput
from mmprof.importers import kineto
from tests.conftest import open_data, data_file


def test_event_sync_trace_summary_matches_raw():
    path = data_file("samples", "kineto", "event_sync_trace.json.gz")
    doc = json.loads(open_data(path).read())
    gpu = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy")]
    s = summarize(kineto.load([path]))
    r = s.ranks[0]
    assert r.has_gpu and r.kernels == 4 and r.memcpy == 1
    # brute force union in ns over a boolean timeline of the GPU window
    iv = sorted((round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)) for e in gpu)
    lo = iv[0][0]
    covered = set()
    for a, b in iv:
        covered.update(range(a - lo, b - lo))
    assert abs(r.gpu_busy_ns - len(covered)) <= len(iv)  # per-interval rounding of ts+dur
    assert r.gpu_span_ns == max(b for _, b in iv) - lo or abs(r.gpu_span_ns - (max(b for _, b in iv) - lo)) <= 1
    assert r.gpu_idle_ns == r.gpu_span_ns - r.gpu_busy_ns
    assert sum(k.count for k in r.top_kernels) == 4
    assert abs(sum(k.share for k in r.top_kernels) - 1.0) < 1e-9


def test_cpu_only_said_plainly():
    s = summarize(kineto.load([data_file("samples", "kineto", "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")]))
    r = s.ranks[0]
    assert not r.has_gpu and r.note == "No GPU events in this profile (CPU-only trace)"
    assert r.gpu_busy_share is None and r.wall_ns > 0 and r.top_ops[0].name == "aten::empty"


def test_self_time_and_streams(tmp_path):
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "outer", "pid": 1, "tid": 1, "ts": 0.0, "dur": 10.0},
        {"ph": "X", "cat": "cpu_op", "name": "inner", "pid": 1, "tid": 1, "ts": 1.0, "dur": 4.0},
        {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 2.0, "dur": 3.0, "args": {"stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 9, "ts": 4.0, "dur": 4.0, "args": {"stream": 9}},
        {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 12.0, "dur": 1.0, "args": {"stream": 7}},
    ]
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"traceEvents": ev}))
    p = kineto.load([f])
    r = summarize(p, top=5).ranks[0]
    assert r.gpu_span_ns == 11000 and r.gpu_busy_ns == 7000 and r.gpu_idle_ns == 4000
    assert [(k.name, k.count, k.total_ns) for k in r.top_kernels] == [("k1", 2, 4000), ("k2", 1, 4000)]
    assert {(s.stream, s.busy_ns, s.kernels) for s in r.streams} == {(7, 4000, 2), (9, 4000, 1)}
    ops = {o.name: (o.self_ns, o.total_ns) for o in r.top_ops}
    assert ops == {"outer": (6000, 10000), "inner": (4000, 4000)}
    assert [o.name for o in summarize(p, ops_by="total").ranks[0].top_ops] == ["outer", "inner"]
    assert r.wall_ns == 13000
    with pytest.raises(BadInput):
        summarize(p, rank=4)
