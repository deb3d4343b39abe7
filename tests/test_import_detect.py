"""Format sniffing by content, and refusals of legacy / foreign formats (library and `mmprof import`)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from mmprof.errors import BadInput, UnsupportedFormat
from mmprof.importers import detect, import_paths
from tests.conftest import data_file

LEGACY = data_file("samples", "rocprofv3", "legacy_rocprof_v1")
ROCPD = data_file("samples", "rocprofv3", "rocpd", "14_results.db")
NSYS = data_file("samples", "nsys", "saxpy-mpi-cuda_nsys_perlmutter0.sqlite")
CSV = data_file("samples", "rocprofv3", "csv", "kernel_trace.csv")

# The rocmProfileData (RPD) schema, as in ROCm/rocmProfileData's schema file (rocpd_* names, schema_version 2).
RPD_SCHEMA = """
CREATE TABLE "rocpd_kernelcodeobject" ("id" integer NOT NULL PRIMARY KEY AUTOINCREMENT, "vgpr" integer NOT NULL,
    "sgpr" integer NOT NULL, "fbar" integer NOT NULL);
CREATE TABLE "rocpd_string" ("id" integer NOT NULL PRIMARY KEY AUTOINCREMENT, "string" varchar(4096) NOT NULL);
CREATE TABLE "rocpd_op" ("id" integer NOT NULL PRIMARY KEY AUTOINCREMENT, "gpuId" integer NOT NULL,
    "queueId" integer NOT NULL, "sequenceId" integer NOT NULL, "completionSignal" varchar(18) NOT NULL,
    "start" integer NOT NULL, "end" integer NOT NULL, "description_id" integer NOT NULL, "opType_id" integer NOT NULL);
CREATE TABLE "rocpd_api" ("id" integer NOT NULL PRIMARY KEY AUTOINCREMENT, "pid" integer NOT NULL,
    "tid" integer NOT NULL, "start" integer NOT NULL, "end" integer NOT NULL, "apiName_id" integer NOT NULL,
    "args_id" integer NOT NULL);
CREATE TABLE "rocpd_api_ops" ("id" integer NOT NULL PRIMARY KEY AUTOINCREMENT, "api_id" integer NOT NULL,
    "op_id" integer NOT NULL);
CREATE TABLE "rocpd_kernelapi" ("api_ptr_id" integer NOT NULL PRIMARY KEY, "stream" varchar(18) NOT NULL,
    "gridX" integer NOT NULL, "gridY" integer NOT NULL, "gridZ" integer NOT NULL, "workgroupX" integer NOT NULL,
    "workgroupY" integer NOT NULL, "workgroupZ" integer NOT NULL, "groupSegmentSize" integer NOT NULL,
    "privateSegmentSize" integer NOT NULL, "kernelArgAddress" varchar(18) NOT NULL, "aquireFence" varchar(8) NOT NULL,
    "releaseFence" varchar(8) NOT NULL, "codeObject_id" integer NOT NULL, "kernelName_id" integer NOT NULL);
CREATE TABLE "rocpd_copyapi" ("api_ptr_id" integer NOT NULL PRIMARY KEY, "stream" varchar(18) NOT NULL,
    "size" integer NOT NULL, "width" integer NOT NULL, "height" integer NOT NULL, "kind" integer NOT NULL,
    "dst" varchar(18) NOT NULL, "src" varchar(18) NOT NULL, "dstDevice" integer NOT NULL, "srcDevice" integer NOT NULL,
    "sync" bool NOT NULL, "pinned" bool NOT NULL);
CREATE TABLE "rocpd_metadata" ("id" integer NOT NULL PRIMARY KEY AUTOINCREMENT, "tag" varchar(4096) NOT NULL,
    "value" varchar(4096) NOT NULL);
CREATE TABLE "rocpd_monitor" ("id" integer NOT NULL PRIMARY KEY AUTOINCREMENT, "deviceType" varchar(16) NOT NULL,
    "deviceId" integer NOT NULL, "monitorType" varchar(16) NOT NULL, "start" integer NOT NULL, "end" integer NOT NULL,
    "value" varchar(255) NOT NULL);
INSERT INTO "rocpd_metadata"(tag, value) VALUES ('schema_version', '2');
INSERT INTO "rocpd_string"(string) VALUES ('hipLaunchKernel'), ('KernelExecution'), ('Cijk_Ailk_Bljk');
INSERT INTO "rocpd_api"(pid, tid, start, "end", apiName_id, args_id) VALUES (7, 7, 100, 200, 1, 1);
INSERT INTO "rocpd_op"(gpuId, queueId, sequenceId, completionSignal, start, "end", description_id, opType_id)
    VALUES (0, 0, 0, '0x0', 300, 900, 3, 2);
INSERT INTO "rocpd_api_ops"(api_id, op_id) VALUES (1, 1);
"""


def test_legacy_tables_really_are_the_v1_layout():
    con = sqlite3.connect(f"file:{LEGACY / 'results.db'}?mode=ro&immutable=1", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert {"HIP", "OPS", "COPY", "KERN"} <= tables
    assert (LEGACY / "results.json").read_bytes().lstrip().startswith(b'{ "traceEvents":[{}')


@pytest.mark.parametrize("name,pattern", [
    ("results.db", r"legacy rocprof \(v1/v2\) results\.db"),
    ("results.json", r"legacy rocprof \(v1/v2\) results\.json"),
    ("results.stats.csv", r"rocprof statistics summary"),
])
def test_legacy_files_are_refused(name, pattern):
    with pytest.raises(UnsupportedFormat, match=pattern):
        detect(LEGACY / name)
    with pytest.raises(UnsupportedFormat, match=pattern):
        import_paths([LEGACY / name])


def test_legacy_directory_has_nothing_importable():
    with pytest.raises(BadInput, match="no importable traces"):
        import_paths([LEGACY])


def _rpd(tmp_path: Path) -> Path:
    f = tmp_path / "trace.rpd"
    con = sqlite3.connect(f)
    con.executescript(RPD_SCHEMA)
    con.close()
    return f


def test_rpd_database_is_refused_naming_the_tool(tmp_path):
    f = _rpd(tmp_path)
    with pytest.raises(UnsupportedFormat, match="rocmProfileData \\(RPD\\)"):
        detect(f)
    with pytest.raises(UnsupportedFormat, match="rpd2tracing"):
        import_paths([f])


def test_rocpd_draft_layout_is_refused(tmp_path):
    f = tmp_path / "draft.db"
    con = sqlite3.connect(f)
    con.executescript("""
        CREATE TABLE rocpd_metadata (id INTEGER PRIMARY KEY, tag TEXT, value TEXT);
        INSERT INTO rocpd_metadata (tag, value) VALUES ('schema_version', '3');
        CREATE TABLE rocpd_timestamp (id INTEGER PRIMARY KEY, value BIGINT);
        CREATE TABLE rocpd_kernel_dispatch (id INTEGER PRIMARY KEY, track_id INTEGER, start_id INTEGER,
                                            end_id INTEGER, kernel_id INTEGER);
    """)
    con.close()
    with pytest.raises(UnsupportedFormat, match="start_id/end_id"):
        import_paths([f])


def test_empty_sqlite_database(tmp_path):
    f = tmp_path / "empty.db"
    sqlite3.connect(f).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(BadInput, match="neither rocprofv3 rocpd nor an Nsight Systems export"):
        import_paths([f])


def test_zero_byte_file(tmp_path):
    f = tmp_path / "results.db"
    f.write_bytes(b"")
    with pytest.raises(BadInput, match="empty file"):
        import_paths([f])


def test_corrupt_sqlite(tmp_path):
    f = tmp_path / "bad.sqlite"
    f.write_bytes(b"SQLite format 3\x00" + b"\x00" * 50)
    with pytest.raises(BadInput):
        import_paths([f])


def test_stats_csv_refused(tmp_path):
    f = tmp_path / "kernel_stats.csv"
    f.write_text('"Name","Calls","TotalDurationNs","AverageNs","Percentage","MinNs","MaxNs","StdDev"\n'
                 '"gemm",3,300,100,100.0,90,110,8.1\n')
    with pytest.raises(UnsupportedFormat, match="statistics summary"):
        import_paths([f])


def test_detect_by_content_not_name(tmp_path):
    for src, fmt in ((ROCPD, "rocpd"), (NSYS, "nsys-sqlite"), (CSV, "rocprofv3-csv")):
        renamed = tmp_path / f"renamed_{fmt}.bin"
        shutil.copy(src, renamed)
        assert detect(renamed) == fmt


# ---- through the CLI (`mmprof import`, written by another helper) --------------------------------------------
def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    from mmprof.cli import main

    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return int(e.value.code or 0), out.out, out.err


@pytest.mark.parametrize("name,pattern", [("results.db", "legacy rocprof"), ("results.json", "legacy rocprof"),
                                          ("results.stats.csv", "statistics summary")])
def test_cli_refuses_legacy_with_exit_2(name, pattern, tmp_path, capsys):
    rc, _out, err = _cli(["import", str(LEGACY / name), "-o", str(tmp_path / "p.json")], capsys)
    assert rc == 2
    assert err.startswith("mmprof: error:") and pattern in err
    assert "Traceback" not in err
    assert not (tmp_path / "p.json").exists()


def test_cli_refuses_rpd_with_exit_2(tmp_path, capsys):
    rc, _out, err = _cli(["import", str(_rpd(tmp_path)), "-o", str(tmp_path / "p.json")], capsys)
    assert rc == 2 and "rocmProfileData" in err


def test_cli_imports_rocpd(tmp_path, capsys):
    from mmprof.profiles import load_profile

    out = tmp_path / "p.json.gz"
    rc, _o, err = _cli(["import", str(ROCPD), "-o", str(out)], capsys)
    assert rc == 0, err
    p = load_profile(out)
    assert p.n("kernels") == 301 and p.meta["source"]["format"] == "rocpd"
    assert p.meta["ranks"][0]["devices"][0]["peak_key"] == "MI300X"


def test_imported_profiles_validate_and_round_trip(tmp_path):
    import json

    import jsonschema

    from mmprof.profiles import load_profile, save_profile
    from mmprof.profiles.schema import json_schema

    for src in (ROCPD, NSYS, CSV):
        p = import_paths([src])
        out = save_profile(p, tmp_path / "p.json")
        jsonschema.validate(json.loads(Path(out).read_text()), json_schema())
        q = load_profile(out)
        assert q.n("kernels") == p.n("kernels") > 0
        assert list(q.col("kernels", "name", decode=True)) == list(p.col("kernels", "name", decode=True))
        assert q.meta["ranks"][0]["devices"] == p.meta["ranks"][0]["devices"]


def test_missing_ranks_of_a_multi_rank_run_are_named():
    from mmprof.importers import import_paths
    from mmprof.units import fmt_ranges
    from tests.conftest import data_file

    p = import_paths([data_file("samples", "kineto", "sampled_rank-0.json.gz"),
                      data_file("samples", "kineto", "sampled_rank-1.json.gz")])
    assert p.ranks == [0, 1] and p.meta["parallel"]["world_size"] == 128
    assert any("126 of 128 ranks have no trace" in w and "missing: 2-127" in w for w in p.meta["warnings"])
    assert fmt_ranges([0, 1, 2, 5, 7, 8], sep=", ") == "0-2, 5, 7-8" and fmt_ranges([]) == "-"
