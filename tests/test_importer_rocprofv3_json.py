"""rocprofv3 JSON importer.

tests/data/rocprofv3_json/14_results.json is a CONVERSION of the real rocpd sample 14_results.db into the
rocprofiler-sdk JSON layout (see its README and make_from_rocpd.py): importing it must give the same
dispatches as importing the DB. The small hand-written documents below cover what the DB lacks (markers,
copies, RCCL, several processes, the older `kernel_dispatches` key).
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from mmprof.errors import BadInput
from mmprof.importers import detect, import_paths
from tests.conftest import data_file

JSON14 = data_file("rocprofv3_json", "14_results.json")
DB14 = data_file("samples", "rocprofv3", "rocpd", "14_results.db")


@pytest.fixture(scope="module")
def pair():
    return import_paths([JSON14]), import_paths([DB14])


def test_detected_as_rocprofv3_json():
    assert detect(JSON14) == "rocprofv3-json"


def test_same_dispatches_as_the_rocpd_import(pair):
    j, r = pair
    doc = json.loads(JSON14.read_text())["rocprofiler-sdk-tool"][0]
    assert len(doc["buffer_records"]["kernel_dispatch"]) == 301
    assert j.n("kernels") == r.n("kernels") == 301
    assert j.n("launches") == r.n("launches")
    for col in ("start_ns", "dur_ns", "device", "stream", "grid_x", "grid_y", "grid_z", "block_x", "correlation",
                "launch"):
        assert np.array_equal(j.col("kernels", col), r.col("kernels", col)), col
    assert list(j.col("kernels", "name", decode=True)) == list(r.col("kernels", "name", decode=True))
    assert list(j.col("launches", "name", decode=True)) == list(r.col("launches", "name", decode=True))
    assert np.array_equal(j.col("launches", "start_ns"), r.col("launches", "start_ns"))


def test_devices_and_meta(pair):
    j, r = pair
    assert j.meta["ranks"][0]["devices"] == r.meta["ranks"][0]["devices"]
    assert len(j.meta["ranks"][0]["devices"]) == 8
    assert j.meta["ranks"][0]["pid"] == 14
    assert j.meta["source"]["format"] == "rocprofv3-json"
    assert j.meta["command"] == ["./batched_gemm"]


def _doc(procs: list[dict]) -> dict:
    return {"rocprofiler-sdk-tool": procs}


def _proc(pid: int, key: str = "kernel_dispatch") -> dict:
    names = [{"kind": "NONE", "operations": []} for _ in range(24)]
    names[7] = {"kind": "MARKER_CORE_API", "operations": ["roctxRangePushA", "roctxRangePop", "roctxMarkA"]}
    names[10] = {"kind": "MEMORY_COPY", "operations": ["MEMORY_COPY_NONE", "MEMORY_COPY_HOST_TO_HOST",
                                                       "MEMORY_COPY_HOST_TO_DEVICE", "MEMORY_COPY_DEVICE_TO_HOST"]}
    names[11] = {"kind": "KERNEL_DISPATCH", "operations": ["KERNEL_DISPATCH_NONE", "KERNEL_DISPATCH_COMPLETE"]}
    names[15] = {"kind": "RCCL_API", "operations": ["ncclGetVersion", "ncclAllGather", "ncclAllReduce"]}
    names[22] = {"kind": "HIP_RUNTIME_API_EXT", "operations": ["hipGetDevice", "hipLaunchKernel", "hipMemcpyAsync"]}
    kd = [{"size": 1, "kind": 11, "operation": 1, "thread_id": pid + 1, "correlation_id": {"internal": 2, "external": 0},
           "start_timestamp": 1500, "end_timestamp": 2500, "stream_id": {"handle": 1},
           "dispatch_info": {"agent_id": {"handle": 222}, "queue_id": {"handle": 5}, "kernel_id": 3, "dispatch_id": 1,
                             "workgroup_size": {"x": 128, "y": 1, "z": 1}, "grid_size": {"x": 1280, "y": 4, "z": 1}}}]
    return {
        "metadata": {"pid": pid, "init_time": 0, "fini_time": 9000, "command": ["python", "serve.py"],
                     "node": {"hostname": "mi355-node"}},
        "agents": [{"id": {"handle": 111}, "type": 1, "name": "CPU", "logical_node_type_id": 0},
                   {"id": {"handle": 222}, "type": 2, "name": "gfx950", "product_name": "AMD Instinct MI355X",
                    "cu_count": 256, "logical_node_type_id": 0}],
        "strings": {"buffer_records": names, "marker_api": [{"key": 1, "value": "mmprof.decode"},
                                                            {"key": 9, "value": "step-marker"}]},
        "kernel_symbols": [{"kernel_id": 3, "kernel_name": "_Z3moev.kd", "formatted_kernel_name": "moe()"}],
        "buffer_records": {
            key: kd,
            "hip_api": [{"kind": 22, "operation": 1, "correlation_id": {"internal": 2, "external": 0},
                         "start_timestamp": 1100, "end_timestamp": 1200, "thread_id": pid + 1},
                        {"kind": 22, "operation": 2, "correlation_id": {"internal": 4, "external": 0},
                         "start_timestamp": 2600, "end_timestamp": 2700, "thread_id": pid + 1},
                        {"kind": 22, "operation": 0, "correlation_id": {"internal": 5, "external": 0},
                         "start_timestamp": 2800, "end_timestamp": 2810, "thread_id": pid + 1}],
            "marker_api": [{"kind": 7, "operation": 0, "correlation_id": {"internal": 1, "external": 0},
                            "start_timestamp": 1000, "end_timestamp": 3000, "thread_id": pid + 1},
                           {"kind": 7, "operation": 2, "correlation_id": {"internal": 9, "external": 0},
                            "start_timestamp": 1050, "end_timestamp": 1050, "thread_id": pid + 1}],
            "memory_copy": [{"kind": 10, "operation": 3, "correlation_id": {"internal": 4, "external": 0},
                             "start_timestamp": 2650, "end_timestamp": 2900, "src_agent_id": {"handle": 222},
                             "dst_agent_id": {"handle": 111}, "bytes": 4096}],
            "rccl_api": [{"kind": 15, "operation": 2, "correlation_id": {"internal": 6, "external": 0},
                          "start_timestamp": 2950, "end_timestamp": 2990, "thread_id": pid + 1}],
        },
    }


def test_handmade_markers_copies_rccl(tmp_path):
    f = tmp_path / "4242_results.json"
    f.write_text(json.dumps(_doc([_proc(4242)])))
    assert detect(f) == "rocprofv3-json"
    p = import_paths([f])
    k = p.df("kernels")
    assert list(k.name.astype(str)) == ["moe()"]
    assert (k.grid_x.iloc[0], k.grid_y.iloc[0], k.block_x.iloc[0], k.dur_ns.iloc[0]) == (10, 4, 128, 1000)
    assert k.scope.astype(str).iloc[0] == "mmprof.decode" and k.phase.astype(str).iloc[0] == "decode"
    s = p.df("scopes")
    assert list(s.name.astype(str)) == ["mmprof.decode", "step-marker"] and list(s.dur_ns) == [2000, 0]
    assert Counter(p.col("launches", "name", decode=True)) == {"hipLaunchKernel": 1, "hipMemcpyAsync": 1}
    m = p.df("memcpy")
    assert (m.direction.astype(str).iloc[0], m.bytes.iloc[0], m.device.iloc[0]) == ("DtoH", 4096, 0)
    assert p.col("launches", "name", decode=True)[m.launch.iloc[0]] == "hipMemcpyAsync"
    c = p.df("collectives")
    assert list(c.name.astype(str)) == ["allreduce"] and c.dur_ns.iloc[0] == 40
    assert p.meta["ranks"][0]["devices"][0]["peak_key"] == "MI355X"
    assert p.meta["ranks"][0]["host"] == "mi355-node"


def test_several_processes_and_older_key(tmp_path):
    f = tmp_path / "results.json"
    f.write_text(json.dumps(_doc([_proc(10, "kernel_dispatches"), _proc(20)])))
    p = import_paths([f])
    assert p.ranks == [0, 1]
    assert p.n("kernels") == 2
    assert [r["pid"] for r in p.meta["ranks"]] == [10, 20]
    assert sum("assumed rank" in w for w in p.meta["warnings"]) == 2


def test_truncated_json_is_bad_input(tmp_path):
    f = tmp_path / "cut.json"
    f.write_text(JSON14.read_text()[:5000])
    assert detect(f) == "rocprofv3-json"
    with pytest.raises(BadInput, match="truncated or malformed JSON"):
        import_paths([f])


def test_conversion_readme_says_it_is_not_tool_output():
    text = data_file("rocprofv3_json", "README.md").read_text()
    assert "conversion" in text.lower() and "14_results.db" in text
