"""rocprofv3 CSV importer: the real docs snippets plus header layouts written here from formats.md 2.1.

Expected values are read back with the csv module, independently of the importer.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from mmprof.errors import BadInput, UnsupportedFormat
from mmprof.importers import detect, import_paths
from tests.conftest import data_file

CSV_DIR = data_file("samples", "rocprofv3", "csv")
KT = CSV_DIR / "kernel_trace.csv"
KT_TRUNC = CSV_DIR / "kernel_trace_truncated.csv"


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("name", ["kernel_trace.csv", "kernel_trace_truncated.csv", "hip_runtime_trace.csv",
                                  "marker_api_trace.csv", "memory_copy_trace.csv", "rocpd-to-csv.csv"])
def test_every_sample_is_detected(name):
    assert detect(CSV_DIR / name) == "rocprofv3-csv"


def test_kernel_trace_19_columns():
    rows = _rows(KT)
    p = import_paths([KT])
    assert p.n("kernels") == len(rows) == 8
    k = p.df("kernels")
    assert list(k.name.astype(str)) == [r["Kernel_Name"] for r in rows]
    assert len(set(k.name.astype(str))) == 4
    assert list(k.dur_ns) == [int(r["End_Timestamp"]) - int(r["Start_Timestamp"]) for r in rows]
    assert k.dur_ns.iloc[0] == 2414192765369494 - 2414192765353337 == 16157
    assert list(k.stream) == [int(r["Stream_Id"]) for r in rows]
    assert list(k.correlation) == [int(r["Correlation_Id"]) for r in rows]
    # work-items -> workgroups
    assert set(k.grid_x) == {1024 // 64} and set(k.grid_y) == {1024} and set(k.block_x) == {64}
    # no agent_info.csv beside it: the device is rocprofv3's agent id as written
    assert set(k.device) == {2}


def test_sibling_memory_copy_file_is_read():
    rows = _rows(CSV_DIR / "memory_copy_trace.csv")
    p = import_paths([KT])
    m = p.df("memcpy")
    assert len(m) == len(rows) == 4
    assert set(m.direction.astype(str)) == {"HtoD"}
    assert list(m.correlation) == [int(r["Correlation_Id"]) for r in rows]
    assert set(m.device) == {2}
    # the docs' API and marker snippets come from other runs (days apart): skipped with a warning, not merged
    assert p.n("launches") == 0 and p.n("scopes") == 0
    assert sum("from another run" in w for w in p.meta["warnings"]) == 2


def test_truncated_layout_agent_strings_and_no_final_newline():
    raw = KT_TRUNC.read_bytes()
    assert not raw.endswith(b"\n")
    rows = _rows(KT_TRUNC)
    p = import_paths([KT_TRUNC])
    k = p.df("kernels")
    assert len(k) == len(rows) == 4
    assert {r["Agent_Id"] for r in rows} == {"Agent 4"}
    assert set(k.device) == {4}
    assert Counter(k.name.astype(str)) == Counter(r["Kernel_Name"] for r in rows)
    assert list(k.dur_ns) == [int(r["End_Timestamp"]) - int(r["Start_Timestamp"]) for r in rows]


def test_rocpd_convert_output_with_guid_column():
    f = CSV_DIR / "rocpd-to-csv.csv"
    rows = _rows(f)
    assert list(rows[0])[0] == "Guid"
    p = import_paths([f])
    want = [r for r in rows if any(w in r["Function"] for w in ("Launch", "Memcpy", "Memset"))]
    assert p.n("launches") == len(want) > 0
    assert list(p.col("launches", "name", decode=True)) == [r["Function"] for r in want]
    assert set(p.col("launches", "tid").tolist()) == {int(r["Thread_Id"]) for r in want}


def test_marker_file_gives_roctx_scopes():
    f = CSV_DIR / "marker_api_trace.csv"
    rows = _rows(f)
    p = import_paths([f])
    s = p.df("scopes")
    assert len(s) == len(rows) == 5
    assert set(s.source.astype(str)) == {"roctx"}
    assert Counter(s.name.astype(str)) == Counter(r["Function"] for r in rows)
    marks = s[s.dur_ns == 0]
    assert set(marks.name.astype(str)) == {"before hipLaunchKernel", "after hipLaunchKernel"}
    # 'hipMemcpy' (thread 717) lies inside 'hipLaunchKernel' on the same thread
    inner = s[s.name.astype(str) == "hipMemcpy"].iloc[0]
    assert inner.depth == 1 and s.name.astype(str).iloc[inner.parent] == "hipLaunchKernel"


ROCM7_HEADER = ("Guid,Kind,Agent_Id,Queue_Id,Stream_Id,Thread_Id,Dispatch_Id,Kernel_Id,Kernel_Name,Correlation_Id,"
                "Start_Timestamp,End_Timestamp,LDS_Block_Size,Scratch_Size,VGPR_Count,Accum_VGPR_Count,SGPR_Count,"
                "Workgroup_Size_X,Workgroup_Size_Y,Workgroup_Size_Z,Grid_Size_X,Grid_Size_Y,Grid_Size_Z")


def _run_dir(tmp_path: Path) -> Path:
    """A ROCm 7-style run: 22-column kernel trace (+Guid), HIP API, roctx markers and agent_info, pid 4242."""
    d = tmp_path / "host"
    d.mkdir()
    (d / "4242_kernel_trace.csv").write_text(
        ROCM7_HEADER + "\n"
        '"g","KERNEL_DISPATCH","GPU-0",1,3,4243,1,7,"fused_moe_kernel",11,1000500,1003500,0,0,64,0,32,256,1,1,65536,2,1\n'
        '"g","KERNEL_DISPATCH","GPU-0",1,3,4243,2,8,"ncclDevKernel_AllReduce_Sum_bf16_RING_LL",12,1004000,1009000,'
        '0,0,32,0,16,512,1,1,512,1,1\n')
    (d / "4242_hip_api_trace.csv").write_text(
        "Domain,Function,Process_Id,Thread_Id,Correlation_Id,Start_Timestamp,End_Timestamp\n"
        "HIP_RUNTIME_API,hipLaunchKernel,4242,4243,11,1000100,1000300\n"
        "HIP_RUNTIME_API,hipExtLaunchKernel,4242,4243,12,1000350,1000450\n"
        "HIP_RUNTIME_API,hipGetDevice,4242,4243,13,1000460,1000470\n")
    (d / "4242_marker_api_trace.csv").write_text(
        "Domain,Function,Process_Id,Thread_Id,Correlation_Id,Start_Timestamp,End_Timestamp\n"
        "MARKER_CORE_API,mmprof.prefill,4242,4243,1,1000000,1000400\n"
        "MARKER_CORE_API,mmprof.step.0,4242,4243,2,1000010,1000390\n"
        "MARKER_CORE_API,layers.3.moe.routed,4242,4243,3,1000050,1000320\n")
    (d / "4242_agent_info.csv").write_text(
        "Node_Id,Logical_Node_Id,Agent_Type,Cpu_Cores_Count,Simd_Count,Cu_Count,Name,Vendor_Name,Product_Name,"
        "Logical_Node_Type_Id\n"
        "0,0,CPU,64,0,0,AMD EPYC,CPU,AMD EPYC,0\n"
        "1,1,GPU,0,1216,256,gfx950,AMD,AMD Instinct MI355X,0\n")
    return d


def test_rocm7_layout_with_siblings_links_and_scopes(tmp_path):
    d = _run_dir(tmp_path)
    with pytest.raises(UnsupportedFormat, match="agent_info"):
        detect(d / "4242_agent_info.csv")
    p = import_paths([d / "4242_kernel_trace.csv"])  # siblings found by name
    k = p.df("kernels")
    assert list(k.name.astype(str)) == ["fused_moe_kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"]
    assert list(k.grid_x) == [65536 // 256, 1] and list(k.grid_y) == [2, 1] and list(k.block_x) == [256, 512]
    assert list(k.stream) == [3, 3]
    assert set(k.device) == {0}  # "GPU-0"
    lnames = p.col("launches", "name", decode=True)
    assert [lnames[i] for i in k.launch] == ["hipLaunchKernel", "hipExtLaunchKernel"]
    assert p.n("launches") == 2  # hipGetDevice issues no GPU work
    assert k.scope.astype(str).iloc[0] == "layers.3.moe.routed"
    assert k.scope_path.astype(str).iloc[0] == "mmprof.prefill > mmprof.step.0 > layers.3.moe.routed"
    assert k.phase.astype(str).iloc[0] == "prefill" and k.step.iloc[0] == 0
    assert k.scope.astype(str).iloc[1] == "mmprof.step.0"  # launched after the innermost range closed
    c = p.df("collectives")
    assert list(c.name.astype(str)) == ["allreduce"] and c.kernel.iloc[0] == 1 and c.bytes_in.iloc[0] == -1
    devs = p.meta["ranks"][0]["devices"]
    assert devs == [{"index": 0, "name": "AMD Instinct MI355X", "vendor": "amd", "arch": "gfx950",
                     "peak_key": "MI355X"}]


def test_directory_import_uses_one_rank_per_run(tmp_path):
    d = _run_dir(tmp_path)
    p = import_paths([d])
    assert p.ranks == [0]
    assert (p.n("kernels"), p.n("launches"), p.n("scopes")) == (2, 2, 3)


def test_rocm62_layout_without_stream_and_thread(tmp_path):
    f = tmp_path / "old_kernel_trace.csv"
    f.write_text("Kind,Agent_Id,Queue_Id,Kernel_Id,Kernel_Name,Correlation_Id,Start_Timestamp,End_Timestamp,"
                 "Private_Segment_Size,Group_Segment_Size,Workgroup_Size_X,Workgroup_Size_Y,Workgroup_Size_Z,"
                 "Grid_Size_X,Grid_Size_Y,Grid_Size_Z\n"
                 "KERNEL_DISPATCH,4,9,1,gemm,5,100,250,0,0,128,1,1,1000,1,1\n")
    k = import_paths([f]).df("kernels")
    assert (k.stream.iloc[0], k.dur_ns.iloc[0], k.grid_x.iloc[0], k.device.iloc[0]) == (9, 150, 8, 4)  # ceil(1000/128)


def test_incomplete_last_row_is_dropped_with_warning(tmp_path):
    f = tmp_path / "cut_kernel_trace.csv"
    f.write_text(KT.read_text().rstrip("\n") + '\n"KERNEL_DISPATCH",2,1,1,21228,9,11,"void addition_kern')
    p = import_paths([f])
    assert p.n("kernels") == 8
    assert any("dropped 1 incomplete row" in w for w in p.meta["warnings"])


def test_rank_from_file_names(tmp_path):
    for r in (0, 1):
        (tmp_path / f"rank{r}_kernel_trace.csv").write_text(KT.read_text())
    p = import_paths([tmp_path / "rank1_kernel_trace.csv", tmp_path / "rank0_kernel_trace.csv"])
    assert p.ranks == [0, 1] and p.n("kernels") == 16
    with pytest.raises(BadInput, match="--rank"):
        import_paths([tmp_path / "rank1_kernel_trace.csv", tmp_path / "rank0_kernel_trace.csv"], rank=0)


def test_header_only_csv_is_bad_input(tmp_path):
    f = tmp_path / "kernel_trace.csv"
    f.write_text(ROCM7_HEADER + "\n")
    with pytest.raises(BadInput, match="no kernel, API, copy or marker rows"):
        import_paths([f])
