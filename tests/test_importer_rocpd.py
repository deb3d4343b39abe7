"""rocpd SQLite importer on the two real rocprofv3 databases (ROCm 7.1, MI300X x8).

Expected numbers are recomputed here with plain sqlite3 queries on the sample files, not copied from the
importer's output.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from mmprof.errors import BadInput, UnsupportedFormat
from mmprof.importers import detect, import_paths
from mmprof.importers._devices import describe_device
from tests.conftest import sql_rows as _sql, data_file

DB14 = data_file("samples", "rocprofv3", "rocpd", "14_results.db")
DB28 = data_file("samples", "rocprofv3", "rocpd", "28_results.db")




@pytest.fixture(scope="module")
def p14():
    return import_paths([DB14])


@pytest.fixture(scope="module")
def p28():
    return import_paths([DB28])


def test_detected_as_rocpd():
    assert detect(DB14) == "rocpd"
    assert detect(DB28) == "rocpd"


@pytest.mark.parametrize("db,expected", [(DB14, 301), (DB28, 151)])
def test_dispatch_counts(db, expected):
    (n,), = _sql(db, "SELECT count(*) FROM rocpd_kernel_dispatch")
    assert n == expected
    assert import_paths([db]).n("kernels") == expected


def test_kernel_names_match_symbols(p14):
    want = {r[0] for r in _sql(DB14, "SELECT s.display_name FROM rocpd_kernel_dispatch k "
                                     "JOIN rocpd_info_kernel_symbol s ON s.id = k.kernel_id")}
    got = set(p14.col("kernels", "name", decode=True))
    assert got == want
    assert "__amd_rocclr_fillBufferAligned" in got
    assert any(n.startswith("void batched_matrix_multiplication_matrix_core_128x128x16") for n in got)
    assert not any(n.endswith(".kd") for n in got)


def test_known_kernel_duration_and_geometry(p14):
    (start, end, gx, wx), = _sql(DB14, "SELECT start, \"end\", grid_size_x, workgroup_size_x FROM rocpd_kernel_dispatch "
                                       "WHERE id = 1")
    assert (end - start, gx, wx) == (9181, 77824, 256)
    k = p14.df("kernels")
    row = k[k.start_ns == start].iloc[0]
    assert row.dur_ns == 9181
    assert row["name"] == "__amd_rocclr_fillBufferAligned"
    # grid sizes in rocprofv3 are work-items; the Profile stores workgroups
    assert row.grid_x == 77824 // 256 == 304
    assert row.block_x == 256


def test_durations_equal_sql(p28):
    want = sorted(e - s for s, e in _sql(DB28, 'SELECT start, "end" FROM rocpd_kernel_dispatch'))
    assert sorted(p28.col("kernels", "dur_ns").tolist()) == want
    assert p28.col("kernels", "dur_ns").min() > 0


def test_devices_are_eight_mi300x(p14):
    devs = p14.meta["ranks"][0]["devices"]
    assert len(devs) == 8
    assert [d["index"] for d in devs] == list(range(8))
    assert {(d["vendor"], d["arch"], d["peak_key"], d["name"]) for d in devs} == {
        ("amd", "gfx942", "MI300X", "AMD Instinct MI300X")}
    (type_index,), = _sql(DB14, "SELECT DISTINCT a.type_index FROM rocpd_kernel_dispatch k "
                                "JOIN rocpd_info_agent a ON a.id = k.agent_id")
    assert set(p14.col("kernels", "device").tolist()) == {type_index}


@pytest.mark.parametrize("db", [DB14, DB28])
def test_launch_linked_through_stack_id(db):
    p = import_paths([db])
    # independent: the HIP region whose event shares the dispatch event's stack_id
    rows = _sql(db, """SELECT k.start, rs.string, r.start, ke.stack_id, ke.correlation_id
                       FROM rocpd_kernel_dispatch k JOIN rocpd_event ke ON ke.id = k.event_id
                       JOIN rocpd_event re ON re.stack_id = ke.stack_id AND re.id != ke.id
                       JOIN rocpd_region r ON r.event_id = re.id JOIN rocpd_string rs ON rs.id = r.name_id""")
    assert len(rows) == p.n("kernels")
    assert {r[4] for r in rows} == {0}  # correlation_id is useless in real DBs, hence stack_id
    k = p.df("kernels")
    assert (k.launch >= 0).mean() == 1.0
    lnames = p.col("launches", "name", decode=True)
    lstart = p.col("launches", "start_ns")
    by_start = {r[0]: (r[1], r[2], r[3]) for r in rows}
    for ks, launch, corr in zip(k.start_ns, k.launch, k.correlation):
        name, rstart, stack = by_start[ks]
        assert lnames[launch] == name
        assert lstart[launch] == rstart <= ks
        assert corr == stack


def test_launch_kinds_14(p14):
    k = p14.df("kernels")
    lnames = p14.col("launches", "name", decode=True)
    via = [lnames[i] for i in k.launch]
    assert via.count("hipLaunchKernel") == 150
    assert via.count("hipMemset") == 151  # hipMemset runs the rocclr fill kernel
    assert set(k.name[np.array(via) == "hipMemset"].astype(str)) == {"__amd_rocclr_fillBufferAligned"}


def test_meta(p14):
    r = p14.meta["ranks"][0]
    assert r["host"] == "banff-cyxtera-s73-1"
    assert r["pid"] == 14
    assert p14.meta["command"] == "./batched_gemm"
    assert p14.meta["source"]["format"] == "rocpd"
    assert "schema 3" in p14.meta["source"]["tool"]
    assert p14.n("memcpy") == 0 and p14.n("scopes") == 0


def test_two_files_two_ranks_in_file_order():
    # the two samples are different runs (other hosts, other programs): refused together unless the user says
    # they are one run
    with pytest.raises(BadInput, match="different runs: they ran different programs"):
        import_paths([DB14, DB28])
    p = import_paths([DB14, DB28], one_run=True)
    assert p.ranks == [0, 1]
    assert p.n("kernels") == 452
    k = p.df("kernels")
    assert (k["rank"] == 0).sum() == 301 and (k["rank"] == 1).sum() == 151
    assert any("assumed rank" in w for w in p.meta["warnings"])
    # launch refs of rank 1 point at rank-1 launches after merging
    lr = p.col("launches", "rank")
    assert (lr[k.launch[k["rank"] == 1]] == 1).all()


def test_rank_option_needs_one_file():
    with pytest.raises(BadInput, match="--rank"):
        import_paths([DB14, DB28], rank=3)
    assert import_paths([DB14], rank=3).ranks == [3]


def _copy_with_env(src: Path, dst: Path, env: dict) -> Path:
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    (table,), = con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'rocpd_info_process_%'")
    old = json.loads(con.execute(f"SELECT environment FROM `{table}`").fetchone()[0])
    old.update(env)
    con.execute(f"UPDATE `{table}` SET environment = ?", (json.dumps(old),))
    con.commit()
    con.close()
    return dst


def test_rank_from_process_environment(tmp_path):
    a = _copy_with_env(DB14, tmp_path / "a.db", {"RANK": "5"})
    b = _copy_with_env(DB28, tmp_path / "b.db", {"OMPI_COMM_WORLD_RANK": "2"})
    p = import_paths([a, b], one_run=True)
    assert p.ranks == [2, 5]
    assert set(p.df("kernels")["rank"][p.df("kernels").dur_ns > 0]) == {2, 5}
    assert not any("assumed" in w for w in p.meta.get("warnings", []))


def test_same_rank_twice_names_both(tmp_path):
    a = _copy_with_env(DB14, tmp_path / "a.db", {"RANK": "1"})
    b = _copy_with_env(DB28, tmp_path / "b.db", {"RANK": "1"})
    with pytest.raises(BadInput, match=r"a\.db.*b\.db.*rank 1"):
        import_paths([a, b])


def test_rank_from_file_name(tmp_path):
    f = tmp_path / "trace_rank3.db"
    shutil.copy(DB28, f)
    assert import_paths([f]).ranks == [3]


def _add_markers(dst: Path) -> tuple[int, int]:
    """Wrap the 2nd..4th hipLaunchKernel calls in roctx ranges: decode > step 7 > layers.0.moe.routed."""
    con = sqlite3.connect(dst)
    names = {n.split("_00")[0]: n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    S, E, R = names["rocpd_string"], names["rocpd_event"], names["rocpd_region"]
    ids = {}
    for s in ("MARKER_CORE_RANGE_API", "mmprof.decode", "mmprof.step.7", "layers.0.moe.routed"):
        con.execute(f"INSERT OR IGNORE INTO `{S}` (string) VALUES (?)", (s,))
        ids[s] = con.execute(f"SELECT id FROM `{S}` WHERE string = ?", (s,)).fetchone()[0]
    launches = con.execute(f"""SELECT r.start, r."end", r.nid, r.pid, r.tid FROM `{R}` r JOIN `{S}` s ON s.id = r.name_id
                               WHERE s.string = 'hipLaunchKernel' ORDER BY r.start LIMIT 4""").fetchall()
    t0, t1 = launches[1][0] - 10, launches[3][1] + 10
    nid, pid, tid = launches[0][2:]
    for depth, (name, a, b) in enumerate([("mmprof.decode", t0 - 30, t1 + 30), ("mmprof.step.7", t0 - 20, t1 + 20),
                                          ("layers.0.moe.routed", t0, t1)]):
        cur = con.execute(f"INSERT INTO `{E}` (category_id, stack_id, parent_stack_id, correlation_id) "
                          f"VALUES (?, ?, 0, 0)", (ids["MARKER_CORE_RANGE_API"], 900000 + depth))
        con.execute(f'INSERT INTO `{R}` (nid, pid, tid, start, "end", name_id, event_id) VALUES (?,?,?,?,?,?,?)',
                    (nid, pid, tid, a, b, ids[name], cur.lastrowid))
    con.commit()
    con.close()
    return t0, t1


def test_roctx_ranges_become_scopes(tmp_path):
    f = tmp_path / "markers.db"
    shutil.copy(DB14, f)
    t0, t1 = _add_markers(f)
    p = import_paths([f])
    (expected,), = _sql(f, f"""SELECT count(*) FROM rocpd_kernel_dispatch k JOIN rocpd_event ke ON ke.id = k.event_id
                               JOIN rocpd_event re ON re.stack_id = ke.stack_id AND re.id != ke.id
                               JOIN rocpd_region r ON r.event_id = re.id WHERE r.start BETWEEN {t0} AND {t1}""")
    assert expected >= 3
    s = p.df("scopes")
    assert list(s.name.astype(str)) == ["mmprof.decode", "mmprof.step.7", "layers.0.moe.routed"]
    assert list(s.depth) == [0, 1, 2]
    assert list(s.parent) == [-1, 0, 1]
    assert set(s.source.astype(str)) == {"roctx"}
    k = p.df("kernels")
    inside = k[k.scope.astype(str) == "layers.0.moe.routed"]
    assert len(inside) == expected  # kernels whose launch call lies inside the innermost range
    assert set(inside.scope_path.astype(str)) == {"mmprof.decode > mmprof.step.7 > layers.0.moe.routed"}
    assert set(inside.phase.astype(str)) == {"decode"} and set(inside.step) == {7}
    assert k.scope.isna().sum() == p.n("kernels") - expected
    assert (k.step[k.scope.isna()] == -1).all()


def test_draft_layout_refused(tmp_path):
    f = tmp_path / "draft.db"
    con = sqlite3.connect(f)
    con.executescript("""
        CREATE TABLE rocpd_metadata (id INTEGER PRIMARY KEY, tag TEXT, value TEXT);
        INSERT INTO rocpd_metadata (tag, value) VALUES ('schema_version', '3');
        CREATE TABLE rocpd_string (id INTEGER PRIMARY KEY, string TEXT);
        CREATE TABLE rocpd_timestamp (id INTEGER PRIMARY KEY, value BIGINT);
        CREATE TABLE rocpd_region (id INTEGER PRIMARY KEY, track_id INTEGER, start_id INTEGER, end_id INTEGER,
                                   name_id INTEGER, event_id INTEGER);
    """)
    con.close()
    assert detect(f) == "rocpd"
    with pytest.raises(UnsupportedFormat, match="draft rocpd layout"):
        import_paths([f])


def test_rocpd_without_timeline_tables(tmp_path):
    f = tmp_path / "meta_only.db"
    con = sqlite3.connect(f)
    con.executescript("CREATE TABLE rocpd_metadata (id INTEGER PRIMARY KEY, tag TEXT, value TEXT);")
    con.close()
    with pytest.raises(BadInput, match="no kernel_dispatch or region tables"):
        import_paths([f])


def test_describe_device_amd():
    assert describe_device(name="AMD Instinct MI355X", arch="gfx950")["peak_key"] == "MI355X"
    assert describe_device(name="AMD Instinct MI350X")["peak_key"] == "MI350X"
    assert describe_device(arch="gfx942", cus=304)["peak_key"] == "MI300X"
    assert describe_device(arch="gfx942", cus=304, memory_bytes=256 * 1024**3)["peak_key"] == "MI325X"
    assert describe_device(arch="gfx942", cus=228)["peak_key"] == "MI300A"
    assert describe_device(arch="gfx90a", cus=110)["peak_key"] == "MI250X"
    d = describe_device(name="AMD Radeon Graphics", arch="gfx950")
    assert d == {"name": "AMD Radeon Graphics", "vendor": "amd", "arch": "gfx950", "peak_key": None}
    assert describe_device(name="gfx942")["arch"] == "gfx942"


def test_two_processes_in_one_database(tmp_path):
    """A DB holding two processes' suffixed table sets (as `rocpd merge` writes): one rank per process."""
    f = tmp_path / "merged.db"
    shutil.copy(DB14, f)
    con = sqlite3.connect(f)
    con.execute(f"ATTACH DATABASE 'file:{DB28}?mode=ro&immutable=1' AS other")
    tables = [n for (n,) in con.execute("SELECT name FROM other.sqlite_master WHERE type='table' AND name LIKE 'rocpd_%'")]
    for t in tables:
        con.execute(f'CREATE TABLE main."{t}" AS SELECT * FROM other."{t}"')
    con.commit()
    con.close()
    p = import_paths([f])
    assert len(p.meta["ranks"]) == 2
    assert sorted(r["pid"] for r in p.meta["ranks"]) == [14, 28]
    k = p.df("kernels")
    assert p.n("kernels") == 301 + 151
    by_rank = {r["pid"]: r["rank"] for r in p.meta["ranks"]}
    assert (k["rank"] == by_rank[14]).sum() == 301 and (k["rank"] == by_rank[28]).sum() == 151
    assert (k.launch >= 0).all()


def test_process_without_gpu_work_is_left_out(tmp_path):
    """vLLM's API-server process writes its own DB with HIP calls but no dispatches: not a rank."""
    idle = tmp_path / "server.db"
    shutil.copy(DB14, idle)
    con = sqlite3.connect(idle)
    (table,), = con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'rocpd_kernel_dispatch_%'")
    con.execute(f"DELETE FROM `{table}`")
    con.commit()
    con.close()
    p = import_paths([idle, DB28])
    assert p.ranks == [0]
    assert p.n("kernels") == 151
    assert any("server.db" in w and "left out" in w for w in p.meta["warnings"])
    alone = import_paths([idle])  # on its own it still imports (its HIP calls), with no kernels
    assert alone.n("kernels") == 0 and alone.n("launches") > 0
