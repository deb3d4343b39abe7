"""Nsight Systems SQLite importer on the two real exports (nsys 2024.5 CloverLeaf, nsys 2022.2 MPI saxpy; the
CloverLeaf one cut to its first 600 ms by tests/data/samples/nsys/cut_sqlite.py, README there).

Expected numbers are recomputed with sqlite3 on the sample files, not copied from the importer's output.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections import Counter

import pytest

from mmprof.errors import BadInput
from mmprof.importers import detect, import_paths
from mmprof.importers._devices import describe_device
from tests.conftest import sql_rows as _sql, data_file

CLOVER = data_file("samples", "nsys", "perlmutter-cloverleaf-cuda.sqlite")
SAXPY = data_file("samples", "nsys", "saxpy-mpi-cuda_nsys_perlmutter0.sqlite")




@pytest.fixture(scope="module")
def clover():
    return import_paths([CLOVER])


@pytest.fixture(scope="module")
def saxpy():
    return import_paths([SAXPY])


def test_detected():
    assert detect(CLOVER) == "nsys-sqlite"
    assert detect(SAXPY) == "nsys-sqlite"


def test_cloverleaf_counts(clover):
    (nk,), = _sql(CLOVER, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    (nm,), = _sql(CLOVER, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    # the committed excerpt: the run's first 600 ms (samples/nsys/README.md; the full export had 1,312 and 279)
    assert (nk, nm) == (271, 65)
    assert clover.n("kernels") == 271
    assert clover.n("memcpy") == 65
    assert clover.n("scopes") == 0  # this export has no NVTX_EVENTS table at all
    assert "NVTX_EVENTS" not in {r[0] for r in _sql(CLOVER, "SELECT name FROM sqlite_master")}


def test_cloverleaf_kernel_names_and_durations(clover):
    want = {r[0] for r in _sql(CLOVER, "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                       "JOIN StringIds s ON s.id = k.demangledName")}
    assert len(want) == 100   # distinct kernel names (102 in the full export)
    assert set(clover.col("kernels", "name", decode=True)) == want
    (start, dur, name), = _sql(CLOVER, "SELECT k.start, k.end - k.start, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                       "JOIN StringIds s ON s.id = k.demangledName ORDER BY k.start LIMIT 1")
    k = clover.df("kernels")
    first = k.sort_values("start_ns").iloc[0]
    assert (first.start_ns, first.dur_ns, first["name"]) == (start, dur, name)
    assert dur == 1367644
    total = _sql(CLOVER, "SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    assert int(k.dur_ns.sum()) == total
    assert (k.grid_x.iloc[0], k.block_x.iloc[0]) == _sql(CLOVER, "SELECT gridX, blockX FROM CUPTI_ACTIVITY_KIND_KERNEL "
                                                                 "ORDER BY start LIMIT 1")[0]


def test_cloverleaf_runtime_names_without_version_suffix(clover):
    names = Counter(clover.col("launches", "name", decode=True))
    assert names == {"cudaLaunchKernel": 271, "cudaMemcpy": 65}
    raw = {r[0] for r in _sql(CLOVER, "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                                      "JOIN StringIds s ON s.id = r.nameId")}
    assert "cudaLaunchKernel_v7000" in raw and "cudaLaunchKernel" not in raw
    k = clover.df("kernels")
    assert (k.launch >= 0).all()
    lname = clover.col("launches", "name", decode=True)
    assert {lname[i] for i in k.launch} == {"cudaLaunchKernel"}
    lcorr = clover.col("launches", "correlation")
    assert (lcorr[k.launch] == k.correlation).all()


def test_cloverleaf_memcpy_directions(clover):
    want = dict(_sql(CLOVER, "SELECT copyKind, count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY copyKind"))
    assert want == {1: 58, 2: 7}   # 254 / 25 in the full export
    m = clover.df("memcpy")
    assert Counter(m.direction.astype(str)) == {"HtoD": 58, "DtoH": 7}
    assert int(m.bytes.sum()) == _sql(CLOVER, "SELECT sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0][0]
    assert set(m.kind.astype(str)) == {"memcpy"}


def test_cloverleaf_devices_and_meta(clover):
    devs = clover.meta["ranks"][0]["devices"]
    assert len(devs) == 4
    assert {(d["name"], d["arch"], d["peak_key"], d["vendor"]) for d in devs} == {
        ("NVIDIA A100-SXM4-80GB", "sm_80", "A100", "nvidia")}
    assert set(clover.col("kernels", "device").tolist()) == {0}
    assert clover.meta["command"] == ["cuda-cloverleaf", "--in", "../CloverLeaf-hip/InputDecks/clover_bm32_prof.in"]
    assert "2024.5" in clover.meta["source"]["tool"]
    assert clover.ranks == [0]


def test_saxpy_nvtx_scopes(saxpy):
    want = _sql(SAXPY, "SELECT count(*), count(text), count(textId) FROM NVTX_EVENTS WHERE eventType = 59")[0]
    assert want == (22, 5, 17)  # 'saxpy' ranges carry text, MPI ranges a textId
    s = saxpy.df("scopes")
    assert len(s) == 22
    assert Counter(s.name.astype(str)) == {"MPI_Send": 10, "saxpy": 5, "MPI_Recv": 5, "MPI_Init": 1,
                                           "MPI_Finalize": 1}
    assert set(s.source.astype(str)) == {"nvtx"}
    assert (s.dur_ns > 0).all()
    k = saxpy.df("kernels")
    assert len(k) == 5
    assert set(k.scope.astype(str)) == {"saxpy"}
    assert set(k.name.astype(str)) == {"saxpy(double *, double *, double *, double, int)"}


def test_saxpy_global_tid_decoding_and_backtrace_rows(saxpy):
    (gtid,), = _sql(SAXPY, "SELECT DISTINCT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    assert gtid & 0xFFFFFF == 1230493 and (gtid >> 24) & 0xFFFFFF == 1230493
    assert set(saxpy.col("launches", "tid").tolist()) == {1230493}
    assert saxpy.meta["ranks"][0]["pid"] == 1230493
    # nsys repeats calls as CUDA-backtrace rows (eventClass 67, unsuffixed names): they are not launches
    (n_launch,), = _sql(SAXPY, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                               "WHERE r.eventClass = 0 AND s.value IN ('cudaLaunchKernel_v7000', 'cudaMemcpy_v3020')")
    assert n_launch == 20
    assert saxpy.n("launches") == 20
    assert saxpy.n("memcpy") == 15


def test_saxpy_rank_from_nvtx_thread_name(saxpy):
    assert _sql(SAXPY, "SELECT text FROM NVTX_EVENTS WHERE eventType = 39") == [("MPI Rank 0",)]
    assert saxpy.ranks == [0]
    assert not saxpy.meta.get("warnings")
    assert saxpy.meta["ranks"][0]["devices"][0]["name"] == "NVIDIA A100-SXM4-40GB"


def test_two_files_claiming_rank_zero_is_an_error():
    # CloverLeaf says PMI_RANK="0" in its capture environment; saxpy says "MPI Rank 0"
    with pytest.raises(BadInput, match=r"cloverleaf.*saxpy.*rank 0"):
        import_paths([CLOVER, SAXPY])


def test_rank_from_capture_environment(tmp_path):
    f = tmp_path / "clover.sqlite"
    shutil.copy(CLOVER, f)
    con = sqlite3.connect(f)
    con.execute("UPDATE META_DATA_CAPTURE SET value = 'PMI_RANK=\"3\"' WHERE value = 'PMI_RANK=\"0\"'")
    con.commit()
    con.close()
    # two different runs (A100 40 GB and 80 GB boards): refused unless the user says they are one run
    with pytest.raises(BadInput, match="different runs: they ran on different devices"):
        import_paths([f, SAXPY])
    p = import_paths([f, SAXPY], one_run=True)
    assert p.ranks == [0, 3]
    assert p.n("kernels") == 271 + 5   # CloverLeaf's excerpt + saxpy
    assert set(p.df("kernels")["rank"][p.df("kernels").name.astype(str).str.startswith("saxpy")]) == {0}


def test_missing_tables_are_tolerated(tmp_path):
    f = tmp_path / "lazy.sqlite"
    shutil.copy(SAXPY, f)
    con = sqlite3.connect(f)
    for t in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "TARGET_INFO_GPU",
              "EXPORT_META_DATA"):
        con.execute(f"DROP TABLE {t}")
    con.commit()
    con.close()
    p = import_paths([f])
    assert (p.n("kernels"), p.n("memcpy"), p.n("scopes")) == (5, 0, 0)
    assert p.meta["ranks"][0]["devices"] == []
    # the runtime table is still there: cudaMemcpy calls stay launches, now without a copy to point at
    assert Counter(p.col("launches", "name", decode=True)) == {"cudaLaunchKernel": 5, "cudaMemcpy": 15}
    assert p.meta["source"]["tool"] == "Nsight Systems"


def test_no_gpu_activity_is_bad_input(tmp_path):
    f = tmp_path / "empty.sqlite"
    con = sqlite3.connect(f)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.close()
    with pytest.raises(BadInput, match="no CUDA kernels"):
        import_paths([f])


def test_nccl_kernels_become_collectives(tmp_path):
    from tests.importer_golden import _nsys_nccl  # the saxpy sample plus one NCCL all-reduce kernel row

    (f,) = _nsys_nccl(tmp_path)
    p = import_paths([f])
    c = p.df("collectives")
    assert len(c) == 1
    assert c.name.astype(str).iloc[0] == "allreduce"
    assert (c.start_ns.iloc[0], c.dur_ns.iloc[0], c.bytes_in.iloc[0]) == (2_000_000_000, 50_000, -1)
    assert p.col("kernels", "name", decode=True)[c.kernel.iloc[0]] == "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def test_describe_device_nvidia():
    assert describe_device(name="NVIDIA H200", arch=(9, 0), cus=132, memory_bytes=141 * 10**9)["peak_key"] == "H200"
    assert describe_device(name="NVIDIA H100 80GB HBM3")["peak_key"] == "H100"
    assert describe_device(name="NVIDIA H20")["peak_key"] == "H20"
    assert describe_device(name="NVIDIA B200")["peak_key"] == "B200"
    assert describe_device(name="NVIDIA GB200")["peak_key"] == "GB200"
    assert describe_device(name="NVIDIA L40S")["peak_key"] == "L40S"
    assert describe_device(name="Tesla V100-SXM2-16GB")["peak_key"] == "V100"
    assert describe_device(arch="9.0", cus=132, memory_bytes=80 * 1024**3)["peak_key"] == "H100"
    assert describe_device(arch="sm_90", cus=132, memory_bytes=141 * 1024**3)["peak_key"] == "H200"
    assert describe_device(arch=(8, 0), cus=108) == {"name": None, "vendor": "nvidia", "arch": "sm_80",
                                                     "peak_key": "A100"}
    assert describe_device(name="NVIDIA RTX PRO 6000")["peak_key"] is None
