"""`mmprof report --by-shape` (mmprof.analysis.views.by_shape, rendered by render/text/by_shape.py): a roofline row per
(region, op, input shapes, dtype) and the GPU time per op. The truth is recounted here from the profile's own
kernel and op tables (GEMM FLOPs from the recorded input shapes: 2*M*K*N), and, on another runtime's trace, the
regions come from shape matching against the model config (`--model`).
"""

from __future__ import annotations

import json
from collections import defaultdict

import orjson
import pytest

from mmprof.analysis.views.by_shape import by_shape
from mmprof.importers import import_paths
from mmprof.profiles.io import load_profile, save_profile
from tests.conftest import ROOT, data_file


def _cli(args, capsys):
    from mmprof.cli import main

    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def _gemm_flops(op: str, dims: list) -> float:
    if op == "aten::mm":
        (m, k), (_, n) = dims[0], dims[1]
        return 2.0 * m * k * n
    if op == "aten::bmm":
        (b, m, k), (_, _, n) = dims[0], dims[1]
        return 2.0 * b * m * k * n
    (t, k), (_, _, n) = dims[0], dims[1]   # aten::_grouped_mm: tokens [T, K] x experts [E, K, N]
    return 2.0 * t * k * n


def test_by_shape_lists_every_gemm_shape_of_an_h200_run_with_its_roofline():
    prof = load_profile(ROOT / "examples" / "h200" / "m3-rank-slice" / "fused.json.gz")
    K, O = prof.tables["kernels"], prof.tables["ops"]
    expect: dict[tuple, dict] = {}
    for k in range(prof.n("kernels")):
        o = int(K["op"][k])
        name = prof.string(int(O["name"][o])) if o >= 0 else None
        if name in ("aten::mm", "aten::bmm", "aten::_grouped_mm"):
            dims = prof.string(int(O["input_dims"][o]))
            e = expect.setdefault((name, dims), {"ops": set(), "ns": 0})
            e["ops"].add(o)
            e["ns"] += int(K["dur_ns"][k])
    assert len(expect) >= 20
    res = by_shape(prof)
    rows = defaultdict(list)
    for r in res.rows:
        rows[(r.op, r.shapes)].append(r)
    for (op, dims), e in expect.items():
        got = rows[(op, dims)]
        assert got, f"no row for {op} {dims}"
        assert sum(r.calls for r in got) == len(e["ops"]) and sum(r.time_ns for r in got) == e["ns"]
        flops = sum(r.flops for r in got)
        assert flops == pytest.approx(len(e["ops"]) * _gemm_flops(op, json.loads(dims)), rel=1e-9)
        for r in got:
            assert r.bound in ("compute", "memory") and r.of_roofline is not None and r.dtype.startswith(
                ("bfloat16", "float"))
            assert r.tflops == pytest.approx(r.flops / r.time_ns / 1e3, rel=1e-9)
            if r.bound == "memory":   # every kernel of a row shares the op's intensity: efficiency = TB/s / peak
                assert r.of_roofline == pytest.approx(r.tbs / 4.8, rel=1e-6)
    grouped = [r for r in res.rows if r.op == "aten::_grouped_mm"]
    assert grouped and all(r.region == "moe.routed" and r.layers == "2-7" for r in grouped)
    assert {k.variant for r in grouped for k in r.kernels} >= {"grouped_mm"}
    ops = {o.op: o for o in res.ops}
    grouped_ns = sum(e["ns"] for (op, _), e in expect.items() if op == "aten::_grouped_mm")
    assert ops["aten::_grouped_mm"].time_ns == grouped_ns


def test_by_shape_on_another_runtimes_trace_uses_shape_matching(tmp_path, capsys):
    prof = tmp_path / "m3.json.gz"
    save_profile(import_paths([data_file("hf_moe", "m3_grouped_nostack.json.gz")]), prof)
    cfg = data_file("hf_moe", "configs", "m3.json")
    rc, out, err = _cli(["report", str(prof), "--by-shape", "--model", str(cfg), "--json"], capsys)
    assert rc == 0, err
    doc = orjson.loads(out)
    grouped = [r for r in doc["rows"] if r["op"] == "aten::_grouped_mm"]
    assert grouped and {r["region"] for r in grouped} == {"moe.routed"} and all(r["flops"] for r in grouped)
    assert {"attn.qkv", "attn.o_proj", "lm_head"} <= {r["region"] for r in doc["rows"]}
    rc, text, _ = _cli(["report", str(prof), "--by-shape", "--top", "5"], capsys)
    assert rc == 0 and "aten::_grouped_mm" in text and "time per op" in text
    rc, _, err = _cli(["report", str(prof), "--by-shape", "--html", "x.html"], capsys)
    assert rc == 2 and "--by-shape" in err


def test_events_with_no_op_are_counted_by_their_cause():
    # vLLM's compiled Qwen2-MoE (tests/data/vllm_own): its engine's Triton kernels (`_prepare_prefill_inputs_kernel`,
    # the sampler's) and flashinfer's launch straight from Python, under no torch op; the note counts them as such,
    # not as "no launch correlation or no record_shapes" (they have both). Recounted from the raw JSON: eager
    # kernels whose launch call (by correlation) no cpu_op of its thread encloses
    from tests.conftest import open_data

    path = data_file("vllm_own", "qwen2moe_graphs_b1.pt.trace.json.xz")
    ev_raw = json.load(open_data(path))["traceEvents"]
    launch = {e["args"]["correlation"]: e for e in ev_raw if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "correlation" in e.get("args", {})}
    ops = defaultdict(list)
    for e in ev_raw:
        if e.get("cat") == "cpu_op":
            ops[e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    bare = 0
    for k in ev_raw:
        if k.get("cat") != "kernel":
            continue
        la = launch.get(k["args"]["correlation"])
        if la is None or "graph" in la["name"].lower():
            continue
        if not any(a <= la["ts"] <= b for a, b in ops[la["tid"]]):
            bare += 1
    assert bare > 0
    res = by_shape(import_paths([path]))
    note = next(n for n in res.notes if "events have no CPU op" in n)
    assert f"{bare} launched by a runtime call no CPU op encloses" in note
    assert "record_shapes" not in note
    # and the replayed kernels with a twin stand under its op, at the replay's token count (1: a batch-1 decode)
    twin = next(n for n in res.notes if "stand under their twin's op" in n)
    assert int(twin.split()[0]) > 100
    mm = [r for r in res.rows if r.op == "aten::mm" and r.shapes.startswith("[[1,")]
    assert mm and all(r.bound in ("memory", "compute") for r in mm)
