"""Golden summaries of what the range-based importers (rocpd, rocprofv3 CSV / JSON, nsys) make of every real
sample and of the hand-made variants the importer tests build (markers, RCCL calls, several processes).

A summary holds, per table, the row count and a SHA-256 over the decoded column values (strings as text, not
string ids), and a digest of the run metadata. `tests/data/importer_golden/summaries.json` was written by the
importers as they were before their shared skeleton (`importers/_ranges.py`) existed:

    PYTHONPATH=<a checkout of that commit> python tests/importer_golden.py --write

so `tests/test_importer_golden.py` proves that the skeleton changed no row of any table. A deliberate change to
what an importer produces regenerates the file with `python tests/importer_golden.py --write` (and says so in
its commit). The format modules' `load()` are called directly: graph-replay marking (importers/graph_replays.py) runs
after them in `import_paths` and is not part of these summaries.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "data"
GOLDEN = DATA / "importer_golden" / "summaries.json"
MODULES = {"rocpd": "mmprof.importers.rocpd", "csv": "mmprof.importers.rocprofv3_csv",
           "json": "mmprof.importers.rocprofv3_json", "nsys": "mmprof.importers.nsys"}


def summarize(profile, tmp: Path | None = None) -> dict[str, Any]:
    """Row counts and value digests of every table, and a digest of the metadata (temporary paths replaced)."""
    from mmprof.profiles.schema import TABLES

    out: dict[str, Any] = {}
    for table, cols in TABLES.items():
        h = hashlib.sha256()
        for col, ctype, _ in cols:
            arr = profile.tables[table][col]
            h.update(col.encode())
            if ctype == "str":
                h.update(json.dumps([profile.strings[i] if i >= 0 else None for i in arr.tolist()]).encode())
            else:
                h.update(np.ascontiguousarray(arr).tobytes())
        out[table] = {"n": profile.n(table), "sha": h.hexdigest()[:16]}
    meta = json.dumps(profile.meta, sort_keys=True, default=str)
    for p in (str(tmp) if tmp else None, str(DATA)):
        if p:
            meta = meta.replace(p, "<dir>")
    out["meta"] = hashlib.sha256(meta.encode()).hexdigest()[:16]
    return out


def _rocpd_markers(d: Path) -> list[Path]:
    from tests.test_importer_rocpd import DB14, _add_markers

    f = d / "markers.db"
    shutil.copy(DB14, f)
    _add_markers(f)
    return [f]


def _rocpd_merged(d: Path) -> list[Path]:
    from tests.test_importer_rocpd import DB14, DB28

    f = d / "merged.db"
    shutil.copy(DB14, f)
    con = sqlite3.connect(f)
    con.execute(f"ATTACH DATABASE 'file:{DB28}?mode=ro&immutable=1' AS other")
    for (t,) in con.execute("SELECT name FROM other.sqlite_master WHERE type='table' AND name LIKE 'rocpd_%'").fetchall():
        con.execute(f'CREATE TABLE main."{t}" AS SELECT * FROM other."{t}"')
    con.commit()
    con.close()
    return [f]


def _json_handmade(d: Path) -> list[Path]:
    from tests.test_importer_rocprofv3_json import _doc, _proc

    f = d / "4242_results.json"
    f.write_text(json.dumps(_doc([_proc(4242), _proc(4343, "kernel_dispatches")])))
    return [f]


def _csv_run(d: Path) -> list[Path]:
    from tests.test_importer_rocprofv3_csv import _run_dir

    return [_run_dir(d) / "4242_kernel_trace.csv"]


def _csv_rccl(d: Path) -> list[Path]:
    from tests.test_importer_rocprofv3_csv import _run_dir

    run = _run_dir(d)
    with open(run / "4242_rccl_api_trace.csv", "w") as f:
        f.write("Domain,Function,Process_Id,Thread_Id,Correlation_Id,Start_Timestamp,End_Timestamp\n"
                "RCCL_API,ncclAllReduce,4242,4243,21,1000200,1000280\n"
                "RCCL_API,ncclGetVersion,4242,4243,22,1000290,1000295\n")
    return [run / "4242_kernel_trace.csv"]


def _nsys_nccl(d: Path) -> list[Path]:
    from tests.test_importer_nsys import SAXPY

    f = d / "nccl.sqlite"
    shutil.copy(SAXPY, f)
    con = sqlite3.connect(f)
    sid = con.execute("INSERT INTO StringIds (value) VALUES ('ncclDevKernel_AllReduce_Sum_f32_RING_LL')").lastrowid
    cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    row = dict(zip(cols, con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()))
    row.update(start=2_000_000_000, end=2_000_050_000, correlationId=999999, demangledName=sid, shortName=sid)
    con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
                [row[c] for c in cols])
    con.commit()
    con.close()
    return [f]


def _samples(*parts: str) -> Callable[[Path], list[Path]]:
    return lambda d: [DATA.joinpath("samples", *parts)]


CSV = ("rocprofv3", "csv")
CASES: dict[str, tuple[str, Callable[[Path], list[Path]]]] = {
    "rocpd/14": ("rocpd", _samples("rocprofv3", "rocpd", "14_results.db")),
    "rocpd/28": ("rocpd", _samples("rocprofv3", "rocpd", "28_results.db")),
    "rocpd/14+28": ("rocpd", lambda d: [DATA / "samples/rocprofv3/rocpd/14_results.db",
                                        DATA / "samples/rocprofv3/rocpd/28_results.db"]),
    "rocpd/markers": ("rocpd", _rocpd_markers),
    "rocpd/merged": ("rocpd", _rocpd_merged),
    "csv/kernel_trace": ("csv", _samples(*CSV, "kernel_trace.csv")),
    "csv/kernel_trace_truncated": ("csv", _samples(*CSV, "kernel_trace_truncated.csv")),
    "csv/rocpd-to-csv": ("csv", _samples(*CSV, "rocpd-to-csv.csv")),
    "csv/memory_copy": ("csv", _samples(*CSV, "memory_copy_trace.csv")),
    "csv/marker_api": ("csv", _samples(*CSV, "marker_api_trace.csv")),
    "csv/hip_runtime": ("csv", _samples(*CSV, "hip_runtime_trace.csv")),
    "csv/rocm7_run": ("csv", _csv_run),
    "csv/rocm7_run_rccl": ("csv", _csv_rccl),
    "json/14": ("json", lambda d: [DATA / "rocprofv3_json" / "14_results.json"]),
    "json/handmade": ("json", _json_handmade),
    "nsys/cloverleaf": ("nsys", _samples("nsys", "perlmutter-cloverleaf-cuda.sqlite")),
    "nsys/saxpy": ("nsys", _samples("nsys", "saxpy-mpi-cuda_nsys_perlmutter0.sqlite")),
    "nsys/nccl": ("nsys", _nsys_nccl),
}


def summary(case: str) -> dict[str, Any]:
    fmt, files = CASES[case]
    with tempfile.TemporaryDirectory(prefix="mmprof-golden-") as d:
        paths = files(Path(d))
        profile = importlib.import_module(MODULES[fmt]).load(paths)
        return summarize(profile, Path(d))


def main(argv: list[str]) -> int:
    got = {case: summary(case) for case in CASES}
    if "--write" in argv:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN} ({len(got)} cases)")
        return 0
    want = json.loads(GOLDEN.read_text())
    bad = [f"{c}: {k}" for c in CASES for k in got[c] if got[c][k] != want.get(c, {}).get(k)]
    print("\n".join(bad) or f"all {len(got)} cases identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
