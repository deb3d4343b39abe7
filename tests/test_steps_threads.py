"""Steps and windows across threads, on real multi-thread traces.

A kernel (or CPU op) launched from a thread that carries no step marker (a backward thread, a side thread doing
torch ops, a communication thread) belongs to the step window (ProfilerStep#N of any thread) that holds its
launch; the report's wall per rank never exceeds the span of the rank's events. Every expectation here is an
independent count from the raw JSON, not from mmprof.
"""

from __future__ import annotations

import bisect
import json
from collections import Counter

import numpy as np
import orjson
import pytest

from mmprof.analysis.timeline.events import events_of
from mmprof.analysis.timeline.breakdown import timeline
from mmprof.cli import main
from mmprof.importers import import_paths
from tests.conftest import open_data, data_file

KERNEL_CATS = {"kernel", "Kernel"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver", "hip_runtime"}
# HTA samples whose kernels are launched from two CPU threads, only one of them carrying ProfilerStep#N
HTA_MULTI_THREAD = ["nccl_data.json.xz", "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "sampled_rank-0.json.gz",
                    "sampled_rank-1.json.gz", "control.json.xz", "mi250_minitoy_train_ROCm6_2_kineto.json.gz"]


def _raw(path) -> list[dict]:
    doc = json.loads(open_data(path).read())
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _ns(us) -> int:
    return int(round(float(us) * 1000))


def _windows(events: list[dict], gpu: bool) -> tuple[list[int], list[tuple[int, int, int]]]:
    """ProfilerStep#N ranges of every thread (CPU side) or every stream (gpu_user_annotation), sorted by start."""
    win = sorted((_ns(e["ts"]), _ns(e["ts"]) + _ns(e.get("dur", 0)), int(e["name"].split("#")[1]))
                 for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
                 and (e.get("cat") == "gpu_user_annotation") == gpu)
    return [w[0] for w in win], win


def _step_at(starts, win, t: int) -> int:
    i = bisect.bisect_right(starts, t) - 1
    while i >= 0:
        if win[i][0] <= t < win[i][1]:
            return win[i][2]
        i -= 1
    return -1


def _expected_steps(events: list[dict]) -> tuple[Counter, Counter]:
    """Kernels per step (window holding the launch call, else the GPU-side window holding the kernel) and the
    number of kernels per step launched from a thread with no ProfilerStep of its own."""
    cs, cw = _windows(events, gpu=False)
    gs, gw = _windows(events, gpu=True)
    step_tids = {e.get("tid") for e in events if str(e.get("name", "")).startswith("ProfilerStep#")
                 and e.get("cat") != "gpu_user_annotation"}
    launch = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in RUNTIME_CATS and (e.get("args") or {}).get("correlation") is not None:
            launch.setdefault(e["args"]["correlation"], e)
    per_step, foreign = Counter(), Counter()
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in KERNEL_CATS:
            continue
        la = launch.get((e.get("args") or {}).get("correlation"))
        s = _step_at(cs, cw, _ns(la["ts"])) if la is not None else -1
        if s < 0:
            s = _step_at(gs, gw, _ns(e["ts"]))
        per_step[s] += 1
        if la is not None and la.get("tid") not in step_tids and s >= 0:
            foreign[s] += 1
    return per_step, foreign


def _wall_and_span(profile) -> list[tuple[int, int, int]]:
    ev = events_of(profile)
    tl = timeline(profile, ev)
    out = []
    for r in tl.ranks:
        m = ev.rank == r
        span = int(ev.end[m].max() - ev.start[m].min())
        wall = int(tl.windows.loc[tl.windows["rank"] == r, "span_ns"].sum())
        out.append((r, wall, span))
    return out


@pytest.mark.parametrize("name", HTA_MULTI_THREAD)
def test_kernels_of_threads_without_markers_get_the_step_window_that_holds_them(name):
    path = data_file("samples", "kineto", name)
    raw = _raw(path)
    want, foreign = _expected_steps(raw)
    assert sum(foreign.values()) > 0, "the sample must have kernels launched from a thread without step markers"
    p = import_paths([path])
    got = Counter(p.tables["kernels"]["step"].tolist())
    assert got == want
    for _r, wall, span in _wall_and_span(p):
        assert 0 < wall <= span


@pytest.mark.parametrize("name", HTA_MULTI_THREAD)
def test_summary_kernel_count_and_time_match_the_raw_json(name, capsys):
    path = data_file("samples", "kineto", name)
    ks = [e for e in _raw(path) if e.get("ph") == "X" and e.get("cat") in KERNEL_CATS]
    with pytest.raises(SystemExit) as ex:
        main(["summary", str(path), "--json"])
    assert ex.value.code == 0
    ranks = orjson.loads(capsys.readouterr().out)["ranks"]
    assert sum(r["kernels"] for r in ranks) == len(ks)
    assert sum(r["kernel_time_ns"] for r in ranks) == sum(_ns(e.get("dur", 0)) for e in ks)


def test_report_wall_never_exceeds_the_span(capsys):
    """The numbers the issue found (166.4 ms for a 129.7 ms trace): report's wall per rank stays in the span."""
    for name in HTA_MULTI_THREAD:
        path = data_file("samples", "kineto", name)
        with pytest.raises(SystemExit) as ex:
            main(["report", str(path), "--json"])
        assert ex.value.code in (0, 1)
        rep = orjson.loads(capsys.readouterr().out)
        ks = [e for e in _raw(path) if e.get("ph") == "X" and e.get("cat") in KERNEL_CATS | {"gpu_memcpy", "Memcpy",
                                                                                          "gpu_memset", "Memset"}]
        span = max(_ns(e["ts"]) + _ns(e.get("dur", 0)) for e in ks) - min(_ns(e["ts"]) for e in ks)
        wall = sum(ph["breakdown"]["span_ns"] for ph in rep["phases"])
        assert 0 < wall <= span, name


def test_own_cpu_trace_side_thread_ops_belong_to_the_main_threads_steps():
    path = data_file("kineto_threads", "cpu_threads.json.gz")
    raw = _raw(path)
    cs, cw = _windows(raw, gpu=False)
    step_tid = {e["tid"] for e in raw if str(e.get("name", "")).startswith("ProfilerStep#")}
    ops = [e for e in raw if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    side = [e for e in ops if e["tid"] not in step_tid]
    assert len({e["tid"] for e in side}) >= 2 and len(step_tid) == 1      # side threads with no markers of their own
    want = Counter(_step_at(cs, cw, _ns(e["ts"])) for e in ops)
    assert want[-1] < len(ops) and sum(want[s] for s in want if s >= 0) > len(ops) - len(side)
    p = import_paths([path])
    assert Counter(p.tables["ops"]["step"].tolist()) == want
    # every side-thread matmul is in a step, and each step holds the side work of one thread
    o = p.df("ops")
    side_mm = o[(o["name"] == "aten::mm") & ~o["tid"].isin(step_tid)]
    assert len(side_mm) == sum(1 for e in side if e["name"] == "aten::mm") and (side_mm["step"] >= 0).all()
    assert side_mm.groupby("step")["tid"].nunique().max() == 1
    for _r, wall, span in _wall_and_span(p):
        assert 0 < wall <= span


def test_overlapping_windows_are_split_not_added():
    """Two steps whose events overlap in time (a step's last kernel still runs when the next one starts) give a
    wall equal to the union of their spans, each instant once."""
    from tests.profile_builder import SKINNY, Synth

    s = Synth()
    s.kernel("a", 0, 100_000, op=SKINNY, phase="decode", step=1, stream=1)
    s.kernel("b", 60_000, 100_000, op=SKINNY, phase="decode", step=2, stream=2)   # starts under step 1's kernel
    s.kernel("c", 500_000, 10_000, op=SKINNY, phase="decode")                    # between steps: busy only
    tl = timeline(s.build())
    w = tl.windows.set_index("step")
    assert int(w.loc[1, "span_ns"]) == 60_000 and int(w.loc[2, "span_ns"]) == 100_000
    assert tl.breakdown("decode").span_ns == 170_000
    assert int(np.asarray(tl.windows["span_ns"]).sum()) <= 510_000


def test_range_based_importers_use_other_threads_step_windows():
    """rocpd / nsys / rocprofv3: a launch on a thread without NVTX/roctx markers gets the phase and step of the
    marker ranges of another thread that contain it; its own scope stays its own."""
    from mmprof.importers._timeline import ScopeNest, attribute

    nest = ScopeNest([1, 1, 2], [0, 10, 20], [1000, 900, 60], ["mmprof.decode", "mmprof.step.4", "comm.prep"])
    scope, _path, phase, step = attribute(nest, [1, 2, 2, 3], [50, 30, 2000, 950])
    assert scope == ["mmprof.step.4", "comm.prep", None, None]
    assert phase == ["decode", "decode", None, "decode"]
    assert step == [4, 4, -1, -1]
