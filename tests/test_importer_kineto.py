"""Kineto importer on every real sample (facts checked against the raw JSON), our own traces, and edge cases."""

from __future__ import annotations

import json
import shutil
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import numpy as np
import pytest

from mmprof.errors import BadInput
from mmprof.importers import import_paths, kineto
from tests.conftest import open_data, DATA, data_file

SAMPLES = sorted([*(DATA / "samples" / "kineto").glob("*.json.gz"), *(DATA / "samples" / "kineto").glob("*.json.xz")])
OWN = sorted((DATA / "kineto_own").glob("*.json.gz"))


def raw(path: Path) -> dict:
    doc = json.loads(open_data(path).read())
    return {"traceEvents": doc} if isinstance(doc, list) else doc


def raw_count(doc: dict, cats: set[str]) -> int:
    return sum(1 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in cats)


def ns(us) -> int:
    """Exact decimal µs -> ns (what the file says, without binary float error)."""
    return int((Decimal(str(us)) * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))


def sample(name: str) -> Path:
    return data_file("samples", "kineto", name)


def strs(p, table, col):
    return p.col(table, col, decode=True)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_sample_imports_with_raw_counts(path):
    doc = raw(path)
    p = kineto.load([path])
    assert p.n("kernels") == raw_count(doc, {"kernel", "Kernel"})
    assert p.n("ops") == raw_count(doc, {"cpu_op"})
    assert p.n("launches") == raw_count(doc, {"cuda_runtime", "cuda_driver", "Runtime"})
    assert p.n("memcpy") == raw_count(doc, {"gpu_memcpy", "gpu_memset"})
    assert p.n("scopes") >= raw_count(doc, {"user_annotation", "gpu_user_annotation"})
    # units: every duration is the raw µs x 1000, rounded
    k = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel")]
    if k:
        assert sorted(p.col("kernels", "dur_ns").tolist()) == sorted(ns(e["dur"]) for e in k)
        assert p.col("kernels", "start_ns").min() == ns(min(e["ts"] for e in k))
    dist = doc.get("distributedInfo") or {}
    if "rank" in dist:
        assert p.ranks == [dist["rank"]]


def test_nccl_collectives_and_device():
    p = kineto.load([sample("nccl_data.json.xz")])
    assert p.ranks == [0] and p.meta["parallel"]["world_size"] == 2
    dev = p.meta["ranks"][0]["devices"][0]
    assert (dev["vendor"], dev["arch"], dev["peak_key"]) == ("nvidia", "sm_80", "A100")
    c = p.df("collectives")
    # the excerpt (ProfilerStep#4-5 of 3; tests/data/samples/README.md) has 10 ncclKernel_AllReduce and 4
    # ncclKernel_Broadcast kernels, one c10d::allreduce_ / c10d::broadcast_ op each (counted in the raw JSON)
    assert len(c) == 14
    assert sorted(c.name.astype(str).value_counts().items()) == [("allreduce", 10), ("broadcast", 4)]
    assert (c.kernel >= 0).all()
    # 6637568 Float elements (kernel args) -> 26550272 bytes
    row = c[c.bytes_in == 6637568 * 4].iloc[0]
    assert row.group_size == 2 and row.group == "default_pg" and row.group_ranks == "[0, 1]"
    assert "AllReduce" in p.strings[p.col("kernels", "name")[row.kernel]]
    # ns conversion of a known event: record_param_comms at ts 4458676524648.797 us, dur 189.626 us
    ops = p.df("ops")
    rpc = ops[(ops.name == "record_param_comms") & (ops.start_ns == 4458676524648797)]
    assert len(rpc) == 1 and rpc.dur_ns.iloc[0] == 189626


def test_v100_displaytimeunit_lies():
    p = kineto.load([sample("rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")])
    assert any("displayTimeUnit says ns but ts are µs" in w for w in p.meta["warnings"])
    dev = p.meta["ranks"][0]["devices"][0]
    assert (dev["name"], dev["arch"], dev["peak_key"]) == ("Tesla V100-SXM2-32GB", "sm_70", "V100")
    # every kernel is linked to its launch, and that launch to an op that encloses it on its thread
    k = p.tables["kernels"]
    assert (k["launch"] >= 0).all() and (k["op"] >= 0).all()
    li = k["launch"]
    ls = p.col("launches", "start_ns")[li]
    os_, od = p.col("ops", "start_ns")[k["op"]], p.col("ops", "dur_ns")[k["op"]]
    assert ((os_ <= ls) & (ls <= os_ + od)).all()
    # world size 1: NCCL ran no kernels; collectives come from record_param_comms ops (waits skipped)
    c = p.df("collectives")
    assert (c.kernel < 0).all() and set(c.name.astype(str)) == {"allreduce", "broadcast"}


def test_mi250_rocm_roctracer():
    p = kineto.load([sample("mi250_minitoy_train_ROCm6_2_kineto.json.gz")])
    dev = p.meta["ranks"][0]["devices"][0]
    assert (dev["vendor"], dev["arch"], dev["peak_key"], dev["index"]) == ("amd", "gfx90a", "MI250", 2)
    k = p.df("kernels")
    # grid/block come from the hipExtModuleLaunchKernel call (kernel events carry none on roctracer)
    cijk = k[k.name.astype(str).str.startswith("Cijk_Alik_Bljk")].iloc[0]
    assert (cijk.grid_x, cijk.grid_y, cijk.block_x) == (512, 1, 256)
    assert p.strings[p.col("launches", "name")[cijk.launch]] == "hipExtModuleLaunchKernel"
    m = p.df("memcpy")
    assert list(m.bytes) == [2560, 2560] and set(m.direction.astype(str)) == {"HtoD"}
    assert (k.launch >= 0).all() and (k.op >= 0).all()
    assert set(p.col("scopes", "source", decode=True)) >= {"gpu_user_annotation", "user_annotation"}


def test_triton_kernel_op_and_shapes():
    p = kineto.load([sample("triton_example.json.gz")])
    k = p.df("kernels").iloc[0]
    assert k["name"] == "triton_poi_fused_add_cos_sin_0"
    assert (k.grid_x, k.block_x, k.stream, k.correlation) == (1, 128, 7, 35)
    assert p.strings[p.col("launches", "name")[k.launch]] == "cuLaunchKernel"
    assert p.strings[p.col("ops", "name")[k.op]] == "triton_poi_fused_add_cos_sin_0"
    assert p.strings[p.col("ops", "input_dims")[k.op]] == "[[10, 10], [10, 10], [10, 10], []]"


def test_old_category_names():
    p = kineto.load([sample("inference_rank_1.json.gz")])
    assert p.ranks == [1] and p.n("kernels") == 4
    assert (p.col("kernels", "launch") >= 0).all()
    assert not p.meta["warnings"]


def test_old_trace_external_id_is_correlation_falls_back_to_nesting():
    # 2023 trace: runtime "External id" equals the correlation, not an op; nesting finds aten::mul
    p = kineto.load([sample("sampled_rank-0.json.gz")])
    k = p.df("kernels")
    row = k[k.correlation == 6941019].iloc[0]
    assert p.strings[p.col("ops", "name")[row.op]] == "aten::mul"
    assert p.strings[p.col("ops", "input_dims")[row.op]] == "[[2048, 125], [2048, 125]]"
    assert row.step == 551 and row.grid_x == 500


def test_two_ranks_merge_and_directory(tmp_path):
    for n in ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz"):
        shutil.copy(sample(n), tmp_path / n)
    p = import_paths([tmp_path])
    assert p.ranks == [0, 1] and p.meta["parallel"]["world_size"] == 128
    assert p.n("kernels") == 1154 + 1104
    assert np.bincount(p.col("kernels", "rank")).tolist() == [1154, 1104]


def test_cpu_only_and_counter_only():
    p = kineto.load([sample("rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")])
    assert p.ranks == [34] and p.meta["parallel"]["world_size"] == 300 and p.n("kernels") == 0
    b = kineto.load([sample("benchmark_result_924719_1679055439_trace.json.gz")])
    assert b.n("kernels") == 0 and b.n("launches") == 1862


def test_same_rank_twice_is_an_error(tmp_path):
    shutil.copy(sample("nccl_data.json.xz"), tmp_path / "a.json.xz")
    shutil.copy(sample("nccl_data.json.xz"), tmp_path / "b.json.xz")
    with pytest.raises(BadInput, match=r"a\.json\.xz and .*b\.json\.xz both claim rank 0"):
        kineto.load([tmp_path / "a.json.xz", tmp_path / "b.json.xz"])
    with pytest.raises(BadInput, match="--rank applies to a single trace"):
        kineto.load([tmp_path / "a.json.xz", tmp_path / "b.json.xz"], rank=3)


def test_rank_option_and_name(tmp_path):
    p = kineto.load([sample("triton_example.json.gz")], rank=5)
    assert p.ranks == [5]
    dst = tmp_path / "worker_rank-7.pt.trace.json.gz"
    shutil.copy(sample("triton_example.json.gz"), dst)
    assert kineto.load([dst]).ranks == [7]


def _write(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_bare_array_unknown_category_and_graph_replay(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0, "dur": 5.0,
         "args": {"External id": 4, "Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel_v7000", "pid": 1, "tid": 1, "ts": 11.0, "dur": 1.0,
         "args": {"External id": 4, "correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20.0005, "dur": 2.0,
         "args": {"correlation": 9, "device": 0, "stream": 7, "grid": [4, 2, 1], "block": [64, 1, 1]}},
        # a HIP-graph replay: no External id, no correlation
        {"ph": "X", "cat": "kernel", "name": "replayed", "pid": 0, "tid": 7, "ts": 30.0, "dur": 1.0,
         "args": {"device": 0, "stream": 7, "kind": "Dispatch Task"}},
        {"ph": "X", "cat": "weird_cat", "name": "x", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0},
    ]
    p = kineto.load([_write(tmp_path / "t.json", events)])
    k = p.df("kernels")
    assert list(k.name.astype(str)) == ["gemm", "replayed"]
    assert k.start_ns.tolist() == [20001, 30000] or k.start_ns.tolist() == [20000, 30000]
    assert k.op.tolist()[1] == -1 and k.launch.tolist()[1] == -1
    assert p.strings[p.col("ops", "input_dims")[k.op.iloc[0]]] == "[[2, 3], [3, 4]]"
    assert p.strings[p.col("launches", "name")[0]] == "cudaLaunchKernel"
    assert any("weird_cat (1)" in w for w in p.meta["warnings"])


def test_phase_step_and_scope_nesting(tmp_path):
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "mmprof.decode", "pid": 1, "tid": 1, "ts": 0.0, "dur": 100.0},
        {"ph": "X", "cat": "user_annotation", "name": "mmprof.step.3", "pid": 1, "tid": 1, "ts": 1.0, "dur": 90.0},
        {"ph": "X", "cat": "user_annotation", "name": "layers.0.moe.routed", "pid": 1, "tid": 1, "ts": 2.0, "dur": 50.0},
        {"ph": "X", "cat": "user_annotation", "name": "## decoder ##", "pid": 1, "tid": 2, "ts": 2.0, "dur": 50.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 3.0, "dur": 1.0,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 60.0, "dur": 1.0,
         "args": {"correlation": 2}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 3.0, "dur": 1.0,
         "args": {"correlation": 3}},
        {"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": 5.0, "dur": 1.0, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "b", "pid": 0, "tid": 7, "ts": 62.0, "dur": 1.0, "args": {"correlation": 2}},
        {"ph": "X", "cat": "kernel", "name": "c", "pid": 0, "tid": 7, "ts": 70.0, "dur": 1.0, "args": {"correlation": 3}},
        # thread 2 again, after thread 1's decode window: no phase ('decoder' names none), no step
        {"ph": "X", "cat": "user_annotation", "name": "## decoder ##", "pid": 1, "tid": 2, "ts": 150.0, "dur": 50.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 151.0, "dur": 1.0,
         "args": {"correlation": 4}},
        {"ph": "X", "cat": "kernel", "name": "d", "pid": 0, "tid": 7, "ts": 160.0, "dur": 1.0, "args": {"correlation": 4}},
    ]
    p = kineto.load([_write(tmp_path / "t.json", {"traceEvents": ev, "distributedInfo": {"rank": 2}})])
    k = p.df("kernels")
    assert list(k.scope.astype(str)) == ["layers.0.moe.routed", "mmprof.step.3", "## decoder ##", "## decoder ##"]
    assert k.scope_path.iloc[0] == "mmprof.decode > mmprof.step.3 > layers.0.moe.routed"
    # c is launched on thread 2, whose own ranges name no phase or step, inside thread 1's decode / step 3 windows:
    # it belongs to them; d is launched after them and belongs to none ('decoder' is no phase)
    assert list(k.phase.astype(object)[:3]) == ["decode", "decode", "decode"] and k.phase.isna().iloc[3]
    assert k.step.tolist() == [3, 3, 3, -1]
    s = p.df("scopes")
    assert s.depth.tolist()[:3] == [0, 1, 2] or sorted(s.depth.tolist()) == [0, 0, 0, 1, 2]


def test_own_cpu_trace_shapes_and_scopes():
    p = kineto.load([data_file("kineto_own", "cpu_tiny_block.json.gz")])
    assert p.n("kernels") == 0
    o = p.df("ops")
    lin = o[(o.name == "aten::linear")]
    assert len(lin) == 16  # 2 steps x 2 layers x (qkv, o_proj, up, down)
    qkv = lin[lin.scope == "layers.0.attn.qkv"]
    assert sorted(qkv.input_dims.astype(str)) == ["[[1, 1, 64], [192, 64], [192]]", "[[1, 8, 64], [192, 64], [192]]"]
    pre = qkv[qkv.phase == "prefill"].iloc[0]
    assert pre.step == 0 and pre.scope_path == "mmprof.prefill > mmprof.step.0 > layers.0.attn.qkv"
    assert pre.input_dims == "[[1, 8, 64], [192, 64], [192]]"
    dec = qkv[qkv.phase == "decode"].iloc[0]
    assert dec.step == 1 and dec.input_dims == "[[1, 1, 64], [192, 64], [192]]"
    mlp = lin[(lin.scope == "layers.1.mlp") & (lin.phase == "decode")]
    assert sorted(mlp.input_dims.astype(str)) == ["[[1, 1, 256], [64, 256], [64]]", "[[1, 1, 64], [256, 64], [256]]"]
    # the op tree: aten::addmm sits under aten::linear
    add = o[o.name == "aten::addmm"]
    assert (o.name.astype(str).values[add.parent.values] == "aten::linear").all()


@pytest.mark.parametrize("path", OWN, ids=lambda p: p.name)
def test_own_traces_generic_invariants(path):
    p = kineto.load([path])
    k = p.tables["kernels"]
    assert (p.col("ops", "dur_ns") >= 0).all() and (k["dur_ns"] >= 0).all()
    assert (k["dur_ns"] < 10**10).all()  # no kernel of 10 s: units are ns, not ps
    has_corr = k["correlation"] >= 0
    if p.n("launches") and p.n("ops"):
        assert (k["launch"][has_corr] >= 0).all()
        assert (k["op"][has_corr] >= 0).all()
    names = p.col("ops", "name", decode=True)
    assert p.n("ops") == 0 or any(n.startswith("aten::") for n in names)


def test_lenient_decode_string_ts_and_stream_tid(tmp_path):
    # ts/dur written as strings by some converters; GPU tid as "stream 7" in 2021-era traces
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": "100.5", "dur": "10",
         "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 101.0, "dur": 2.0,
         "args": {"External id": 1, "correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "add_kernel", "pid": 0, "tid": "stream 7", "ts": 120.0, "dur": 1.5,
         "args": {"correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "broken", "pid": 0, "tid": 7, "ts": "soon", "dur": 1.0},
    ]
    p = kineto.load([_write(tmp_path / "t.json", {"traceEvents": ev})])
    assert p.n("kernels") == 1 and p.col("kernels", "stream").tolist() == [7]
    assert p.col("ops", "start_ns").tolist() == [100500] and p.col("ops", "dur_ns").tolist() == [10000]
    assert p.strings[p.col("ops", "name")[p.col("kernels", "op")[0]]] == "aten::add"
    assert any("1 events did not fit" in w for w in p.meta["warnings"])


def test_not_a_trace_and_empty_events(tmp_path):
    with pytest.raises(BadInput, match='without "traceEvents"'):
        kineto.load([_write(tmp_path / "a.json", {"schemaVersion": 1})])
    with pytest.raises(BadInput, match="holds no events"):
        kineto.load([_write(tmp_path / "b.json", {"traceEvents": []})])
    with pytest.raises(BadInput, match="not valid JSON"):
        (tmp_path / "c.json").write_text('{"traceEvents": [{"ph": "X",')
        kineto.load([tmp_path / "c.json"])


def test_h200_probe_trace_links_every_kernel():
    """Real H200 trace (torch 2.11 + CUDA 13): every kernel -> launch -> op, checked against the raw chain."""
    path = data_file("kineto_own", "h200_probe.json.gz")
    doc = raw(path)
    X = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    ops_by_ext = {e["args"]["External id"]: e for e in X if e.get("cat") == "cpu_op"}
    rt_by_corr = {e["args"]["correlation"]: e for e in X if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    raw_kernels = sorted((e for e in X if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    p = kineto.load([path])
    dev = p.meta["ranks"][0]["devices"][0]
    assert (dev["name"], dev["arch"], dev["peak_key"]) == ("NVIDIA H200", "sm_90", "H200")
    k = p.df("kernels")
    assert len(k) == len(raw_kernels) == 153
    op_names = p.col("ops", "name", decode=True)
    op_dims = p.col("ops", "input_dims", decode=True)
    for row, e in zip(k.itertuples(), raw_kernels):
        launch = rt_by_corr[e["args"]["correlation"]]
        op = ops_by_ext[launch["args"]["External id"]]
        assert row.start_ns == ns(e["ts"]) and row.name == e["name"]
        assert op_names[row.op] == op["name"]
        assert op_dims[row.op] == json.dumps(op["args"]["Input Dims"])
    assert set(k.phase.astype(str)) == {"decode"} and k.step.value_counts().to_dict() == {1: 51, 2: 51, 3: 51}
    gg = k[k.name.astype(str).str.startswith("_ZN7cutlass13device_kernel")].iloc[0]
    assert op_names[gg.op] == "aten::_grouped_mm" and op_dims[gg.op] == "[[256, 2048], [16, 2048, 1536], [16], [], []]"
    assert gg.scope == "layers.3.moe.routed" and gg.scope_path == "mmprof.decode > mmprof.step.1 > layers.3.moe.routed"
    assert (gg.grid_x, gg.block_x) == (132, 384)
    tri = k[k.name.astype(str).str.startswith("triton_")].iloc[0]
    assert p.strings[p.col("launches", "name")[tri.launch]] == "cuLaunchKernel"


def test_begin_end_events_are_counted_not_lost(tmp_path):
    ev = [{"ph": "B", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0},
          {"ph": "E", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 2.0},
          {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 3.0, "dur": 1.0}]
    p = kineto.load([_write(tmp_path / "t.json", ev)])
    assert p.n("ops") == 1
    assert any("2 events in imported categories are not complete" in w for w in p.meta["warnings"])


def test_collective_names_and_sizes():
    from mmprof.importers._kineto_comm import normalize_collective
    from mmprof.units import dtype_bytes

    assert [normalize_collective(n) for n in ("_allgather_base", "allreduce_coalesced", "all_to_allv",
                                              "reduce_scatter_tensor_coalesced", "AllReduce", "broadcast")] == [
        "allgather", "allreduce", "all_to_all", "reduce_scatter", "allreduce", "broadcast"]
    assert (dtype_bytes("BFloat16"), dtype_bytes("c10::Half"), dtype_bytes("Float8_e4m3fn"), dtype_bytes("Long")) == (2, 2, 1, 8)
    assert dtype_bytes("weird") is None


# -- collectives without record_param_comms: gloo on CPU ----------------------------------------------------
GLOO_EXPECTED = [  # (name, bytes_in, bytes_out, dtype, c10d op) per rank, in call order; see make_gloo_traces.py
    ("allreduce", 4000, 4000, "float32", "c10d::allreduce_"),
    ("allgather", 120, 240, "float32", "c10d::allgather_"),
    ("broadcast", 56, 56, "float64", "c10d::broadcast_"),
    ("barrier", 0, 0, None, "c10d::barrier"),
    ("allgather", 40, 80, "float32", "c10d::_allgather_base_"),
    ("reduce_scatter", 40, 20, "float32", "c10d::_reduce_scatter_base_"),
    ("all_to_all", 16, 16, "float32", "c10d::alltoall_base_"),
    ("send|recv", 12, 12, "float32", "c10d::send|c10d::recv_"),
    ("allreduce", 12, 12, "bfloat16", "c10d::allreduce_"),
]


def test_gloo_collectives_from_c10d_ops_timed_by_gloo_ranges():
    files = [data_file("kineto_own", f"gloo_rank{r}.json.gz") for r in (0, 1)]
    p = kineto.load(files)
    assert p.ranks == [0, 1] and p.meta["parallel"]["world_size"] == 2
    ops = p.df("ops")
    assert not (ops.name == "record_param_comms").any()  # the case this path exists for
    c = p.df("collectives")
    assert np.bincount(c["rank"]).tolist() == [9, 9]
    scopes = p.df("scopes")
    for r in (0, 1):
        rows = c[c["rank"] == r].sort_values("start_ns")
        assert len(rows) == len(GLOO_EXPECTED)
        for (_, row), (name, b_in, b_out, dtype, opname) in zip(rows.iterrows(), GLOO_EXPECTED):
            want_name = name.split("|")[r] if "|" in name else name
            assert (row["name"], row.bytes_in, row.bytes_out) == (want_name, b_in, b_out)
            assert (row["dtype"] if isinstance(row["dtype"], str) else None) == dtype
            assert ops.name.iloc[row.op] == (opname.split("|")[r] if "|" in opname else opname)
            assert ops["rank"].iloc[row.op] == r
            assert (row.group, row.group_size, row.group_ranks) == ("default_pg", 2, "[0, 1]")
            assert row.kernel == -1 and (row.phase, row.step) == ("decode", 1)
        # timed by the gloo:* range (the transfer), not by the c10d op (an enqueue for async collectives)
        gl = scopes[(scopes["rank"] == r) & scopes.name.astype(str).str.startswith("gloo:")]
        assert sorted(zip(gl.start_ns, gl.dur_ns)) == sorted(zip(rows.start_ns, rows.dur_ns))
        first = rows.iloc[0]
        assert first.dur_ns > ops.dur_ns.iloc[first.op]  # the async all_reduce: transfer outlasts the enqueue
    assert not any("gloo" in w or "c10d" in w for w in p.meta.get("warnings", []))


def test_gloo_ranges_alone_become_collectives():
    """A gloo run whose trace holds gloo:all_reduce ranges but no c10d ops (older torch): rank 34 of 300."""
    path = sample("rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    doc = raw(path)
    gloo = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("gloo:")]
    p = kineto.load([path])
    c = p.df("collectives").sort_values("start_ns")
    assert len(c) == len(gloo) == 10
    assert set(c.name.astype(str)) == {"allreduce"} and set(c.group_size) == {300}
    assert sorted(c.bytes_in.tolist()) == sorted(e["args"]["Input Dims"][0][0] * 4 for e in gloo)
    assert (c.bytes_in == c.bytes_out).all() and set(c.dtype.astype(str)) == {"float32"}
    assert sorted(c.start_ns.tolist()) == sorted(ns(e["ts"]) for e in gloo)


def test_c10d_rows_do_not_double_count_record_param_comms():
    """NCCL traces have c10d ops around record_param_comms: one row per collective, as before. Truth: the raw
    JSON's c10d:: ops (one per collective call; the excerpt of nccl_data keeps its first 2 ProfilerSteps: 14,
    that of rank-0 its first: 7; the full files had 21 and 35)."""
    for name, n in (("nccl_data.json.xz", 14), ("sampled_rank-0.json.gz", 10),
                    ("rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", 7)):
        raw = json.load(open_data(sample(name)))["traceEvents"]
        assert n == sum(e.get("ph") == "X" and str(e.get("name", "")).startswith("c10d::") for e in raw)
        p = kineto.load([sample(name)])
        ops = p.df("ops")
        n_c10d = int(ops.name.astype(str).str.startswith("c10d::").sum())
        assert n_c10d > 0 and p.n("collectives") == n
        assert not any("gloo:" in w or "c10d op" in w for w in p.meta.get("warnings", []))


def test_c10d_argument_rules():
    from mmprof.importers._kineto_comm import group_of, tensor_arg, torch_dtype

    assert [torch_dtype(t) for t in ("float", "c10::BFloat16", "long int", "unsigned char", "Scalar", "", None)] == [
        "float32", "bfloat16", "int64", "uint8", None, None, None]
    # a TensorList sums its tensors and has no dtype; a Tensor has both; an unrecorded list of lists is unknown
    assert tensor_arg([[[2, 3], [4]]], ["TensorList"], 0) == (10, None)
    assert tensor_arg([[20], [10]], ["float", "float"], 1) == (10, "float32")
    assert tensor_arg([[], [[10, 3]]], ["", "TensorList"], 0) == (None, None)
    one = {"pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 4, "ranks": [0, 1, 2, 3]}]}
    assert group_of(one, 1) == ("default_pg", 4, "[0, 1, 2, 3]")
    two = {"pg_config": [{"pg_name": "0", "pg_size": 4, "ranks": [0, 1, 2, 3]},
                         {"pg_name": "1", "pg_desc": "tp", "pg_size": 2, "ranks": [0, 1]}]}
    assert group_of(two, 0) == (None, -1, None)  # two groups of different sizes: the op does not say which
    assert group_of(two, 3) == ("0", 4, "[0, 1, 2, 3]")  # rank 3 is only in the world group
    assert group_of({"world_size": 8}, 0) == (None, 8, None)
    assert group_of({"world_size": 8, "pg_count": 3}, 0) == (None, -1, None)


def test_mixed_nccl_and_gloo_groups_and_unmatched_c10d_ops(tmp_path):
    """One rank with an NCCL all_reduce (record_param_comms inside its c10d op) and gloo collectives: the NCCL
    one keeps its single row; a gloo one gets its gloo range's time; one with no gloo range (and a TensorList,
    so no dtype) falls back to the op's own span with unknown sizes, and both fallbacks are warned about."""
    op = lambda name, ts, dur, dims, types, tid=1: {  # noqa: E731
        "ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
        "args": {"Input Dims": dims, "Input type": types}}
    events = [
        op("c10d::allreduce_", 10.0, 20.0, [[[64]], [], [], [], [], []], ["TensorList", "", "", "", "Scalar", "Scalar"]),
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 11.0, "dur": 5.0,
         "args": {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 64, "Out msg nelems": 64,
                  "Group size": 8}},
        op("c10d::allreduce_", 40.0, 2.0, [[[100]], [], [], [], [], []], ["TensorList", "", "", "", "Scalar", "Scalar"]),
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 9, "ts": 45.0, "dur": 30.0,
         "args": {"Input Dims": [[100]], "Input type": ["c10::Half"]}},
        op("c10d::broadcast_", 80.0, 3.0, [[[7]], [], [], [], [], []], ["TensorList", "", "Scalar", "Scalar", "Scalar", "Scalar"]),
    ]
    doc = {"traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 8, "pg_config": [
        {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 8, "ranks": list(range(8))}]}}
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(doc))
    import pandas as pd

    p = kineto.load([path])
    c = p.df("collectives").sort_values("start_ns")
    assert list(c.name.astype(str)) == ["allreduce", "allreduce", "broadcast"]
    assert c.bytes_in.tolist() == [64 * 4, 100 * 2, -1]
    assert c.start_ns.tolist() == [11000, 45000, 80000] and c.dur_ns.tolist() == [5000, 30000, 3000]
    assert c["dtype"].iloc[1] == "float16" and pd.isna(c["dtype"].iloc[2])
    assert c.group_size.tolist() == [8, 8, 8]
    w = " | ".join(p.meta["warnings"])
    assert "1 collectives timed by their c10d op" in w and "1 collectives from c10d ops have no recorded dtype" in w
