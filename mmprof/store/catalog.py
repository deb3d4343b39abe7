"""Adding runs to a store: each Profile's tables as Parquet partitioned by run and rank, its metadata as a `runs`
row, and the analyses' views (`mmprof.store.derive`) beside them (the layout: `mmprof.store`).

Every table of `profiles.schema.TABLES` is written, column by column from the schema, so a table or column added
to the schema is stored with no change here. Column types: int -> int64 (-1 unknown, as in the Profile), float ->
float64, str -> dictionary-encoded UTF-8 (NULL for null), ref:<table> -> int64 (NULL for none) naming the `row`
column of the target table in the same run (`row`: the row's index in the Profile). `rank` is the partition key
(a folder, not a column in the file). A run id is `<date>-<hash>`: re-adding the same profile replaces its run.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mmprof.errors import BadInput
from mmprof.profiles.schema import TABLES, column_kind, ref_target
from mmprof.store.derive import CLASS_COLUMNS, derived_tables

RUN_COLUMNS = ("run", "date", "added", "model", "engine", "tp", "ep", "world_size", "ranks", "batch", "git_rev",
               "label", "source_format", "source_files", "mmprof_version", "kernels", "notes", "meta_json")
VIEWS = ("steps", "regions", "variants", "checks")


def _pa():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise BadInput("the profile store needs pyarrow and duckdb: pip install 'mmprof[store]'") from None
    return pa, pq


@dataclass
class RunInfo:
    """What `store add` wrote for one run."""

    run: str
    profile: str
    rows: dict[str, int]
    meta: dict[str, Any]
    replaced: bool = False
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "profile": self.profile, "rows": self.rows, "replaced": self.replaced,
                "meta": {k: v for k, v in self.meta.items() if k != "meta_json"}, "notes": self.notes}


def store_dir(path: str | os.PathLike, create: bool = False) -> Path:
    """The store folder; created when `create` (with its parent required to exist), else it must exist."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise BadInput(f"{p}: is a file, not a store folder")
    if not p.exists():
        if not create:
            raise BadInput(f"{p}: no such store (add runs first: mmprof store add PROFILE --store {p})")
        if not p.parent.is_dir():
            raise BadInput(f"{p.parent}: no such folder (the store's parent must exist)")
        p.mkdir()
    return p


def run_id(profile: Any, date: _dt.datetime) -> str:
    """`YYYYmmddTHHMMSS-<10 hex>`: the date orders runs; the hash of the profile's metadata and columns tells two
    runs of one second apart and makes re-adding a profile replace its run."""
    h = hashlib.sha1(json.dumps(profile.meta, sort_keys=True, default=str).encode())
    for t in TABLES:
        for c in ("start_ns", "dur_ns", "name"):
            if c in profile.tables[t]:
                h.update(np.ascontiguousarray(profile.tables[t][c]).tobytes())
    return f"{date.strftime('%Y%m%dT%H%M%S')}-{h.hexdigest()[:10]}"


def _date(meta: dict) -> _dt.datetime:
    try:
        d = _dt.datetime.fromisoformat(str(meta.get("created")))
        return d if d.tzinfo else d.replace(tzinfo=_dt.timezone.utc)
    except ValueError:
        return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)


def _git_rev() -> str | None:
    """The revision being measured: $MMPROF_GIT_REV, CI's commit variables, else HEAD of the working folder."""
    for k in ("MMPROF_GIT_REV", "GITHUB_SHA", "CI_COMMIT_SHA", "GIT_COMMIT"):
        if os.environ.get(k):
            return os.environ[k][:40]
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _int(v) -> int | None:
    return v if type(v) is int else None


def run_meta(profile: Any, overrides: dict[str, Any]) -> dict[str, Any]:
    """The run's row of the `runs` table: from the Profile's metadata, `overrides` (the command's options) first."""
    from mmprof.analysis.timeline.engine_steps import engine_steps

    meta = profile.meta
    run = meta.get("run") if isinstance(meta.get("run"), dict) else {}
    model = meta.get("model") if isinstance(meta.get("model"), dict) else {}
    par = meta.get("parallel") if isinstance(meta.get("parallel"), dict) else {}
    src = meta.get("source") if isinstance(meta.get("source"), dict) else {}
    steps = engine_steps(profile)
    engine = (str(steps["engine"].iloc[0]) if len(steps) else
              {"mmprof-run": "mmprof-runtime"}.get(src.get("format"), src.get("format")))
    workload = run.get("workload") if isinstance(run.get("workload"), dict) else {}
    date = _date(meta)
    out = {
        "date": date, "added": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0),
        "model": model.get("name") or run.get("preset"), "engine": engine, "tp": _int(par.get("tp")),
        "ep": _int(par.get("ep")), "world_size": _int(par.get("world_size")) or len(profile.ranks),
        "ranks": len(profile.ranks), "batch": _int(workload.get("batch")), "git_rev": None, "label": None,
        "source_format": src.get("format"), "source_files": json.dumps(src.get("files") or []),
        "mmprof_version": meta.get("mmprof_version"), "kernels": profile.n("kernels"),
        "meta_json": json.dumps(meta, sort_keys=True, default=str),
    }
    out.update({k: v for k, v in overrides.items() if v is not None})
    if out["git_rev"] is None:
        out["git_rev"] = _git_rev()
    out["run"] = run_id(profile, out["date"])
    return out


# -- Arrow conversion -----------------------------------------------------------------------------------------
def _str_array(pa, codes: np.ndarray, strings: list[str]):
    """A dictionary array of the strings `codes` name (-1 -> NULL), holding only the strings used."""
    used, inv = np.unique(codes, return_inverse=True)
    valid = used >= 0
    dictionary = pa.array([strings[i] for i in used[valid]], pa.string())
    # indices into the used strings; the null code (-1, first when present) becomes a NULL index
    shift = 0 if valid.all() else 1
    idx = inv.astype(np.int32) - shift
    mask = idx < 0
    return pa.DictionaryArray.from_arrays(pa.array(np.where(mask, 0, idx), pa.int32(), mask=mask), dictionary)


def _obj_str_array(pa, vals: np.ndarray):
    return pa.array([None if v is None else str(v) for v in vals], pa.string()).dictionary_encode()


def table_arrow(profile: Any, table: str, rows: np.ndarray, extra: dict[str, np.ndarray] | None = None):
    """Rows `rows` of a Profile table as an Arrow table (without `rank`: the partition key), `row` first."""
    pa, _ = _pa()
    arrays, names = [pa.array(rows.astype(np.int64), pa.int64())], ["row"]
    for col, ctype, _doc in TABLES[table]:
        if col == "rank":
            continue
        a = profile.tables[table][col][rows]
        kind = column_kind(ctype)
        if ctype == "str":
            arr = _str_array(pa, a, profile.strings)
        elif ref_target(ctype) is not None:
            arr = pa.array(a.astype(np.int64), pa.int64(), mask=a < 0)
        elif kind == "float":
            arr = pa.array(a.astype(np.float64), pa.float64())
        else:
            arr = pa.array(a.astype(np.int64), pa.int64())
        arrays.append(arr)
        names.append(col)
    for col, vals in (extra or {}).items():
        v = vals[rows]
        arrays.append(pa.array(v.astype(np.int64), pa.int64()) if v.dtype.kind == "i" else _obj_str_array(pa, v))
        names.append(col)
    return pa.Table.from_arrays(arrays, names=names)


# the string, float and bool columns of each derived view; every other column is int64
VIEW_TYPES = {
    "steps": ({"phase"}, set(), set()),
    "regions": ({"phase", "region", "role"}, set(), set()),
    "variants": ({"phase", "pattern", "family", "variant", "library", "path"}, {"share"}, {"dominant"}),
    "checks": ({"code", "id", "kind", "status", "message"}, set(), set()),
}


def frame_arrow(df, view: str):
    """A derived view's DataFrame as Arrow with its fixed types (an empty or all-NULL column keeps its type)."""
    pa, _ = _pa()
    strs, floats, bools = VIEW_TYPES[view]
    arrays = []
    for c in df.columns:
        v = df[c].to_numpy(dtype=object)
        if c in strs:
            arr = pa.array([None if x is None or (isinstance(x, float) and x != x) else str(x) for x in v],
                           pa.string())
        elif c in floats:
            arr = pa.array([float(x) for x in v], pa.float64())
        elif c in bools:
            arr = pa.array([bool(x) for x in v], pa.bool_())
        else:
            arr = pa.array([int(x) if x is not None and x == x else -1 for x in v], pa.int64())
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, names=[str(c) for c in df.columns])


def _runs_arrow(row: dict[str, Any]):
    pa, _ = _pa()
    ints = {"tp", "ep", "world_size", "ranks", "batch", "kernels"}
    ts = pa.timestamp("us", tz="UTC")
    arrays = []
    for c in RUN_COLUMNS:
        v = row.get(c)
        typ = ts if c in ("date", "added") else pa.int64() if c in ints else pa.string()
        arrays.append(pa.array([v if v is None or typ != pa.string() else str(v)], typ))
    return pa.Table.from_arrays(arrays, names=list(RUN_COLUMNS))


# -- writing --------------------------------------------------------------------------------------------------
def _write(pq, table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def remove_run(root: Path, run: str) -> bool:
    """Delete every partition of `run`; True when there was one."""
    found = False
    for sub in ("runs", *(f"tables/{t}" for t in TABLES), *(f"derived/{v}" for v in VIEWS)):
        d = root / sub / f"run={run}"
        if d.exists():
            shutil.rmtree(d)
            found = True
    return found


def add_profile(store: str | os.PathLike, profile: Any, name: str, overrides: dict[str, Any] | None = None) -> RunInfo:
    """Write one Profile into the store as a run (replacing a run of the same id); returns what was written. The
    `runs` row is written last, so a run listed in `runs` is complete."""
    _pa_mod, pq = _pa()
    root = store_dir(store, create=True)
    meta = run_meta(profile, overrides or {})
    run = meta["run"]
    replaced = remove_run(root, run)
    views, classes, notes = derived_tables(profile)
    rows: dict[str, int] = {}
    for t in TABLES:
        n = profile.n(t)
        rows[t] = n
        if not n:
            continue
        rank = profile.tables[t]["rank"]
        for r in np.unique(rank).tolist():
            sel = np.flatnonzero(rank == r)
            extra = {c: classes[c] for c in CLASS_COLUMNS} if t == "kernels" else None
            _write(pq, table_arrow(profile, t, sel, extra), root / "tables" / t / f"run={run}" / f"rank={r}" / "part-0.parquet")
    for v in VIEWS:
        df = views[v]
        rows[v] = len(df)
        _write(pq, frame_arrow(df, v), root / "derived" / v / f"run={run}" / "part-0.parquet")
    meta["notes"] = "; ".join(notes) or None
    _write(pq, _runs_arrow(meta), root / "runs" / f"run={run}" / "part-0.parquet")
    return RunInfo(run=run, profile=name, rows=rows, meta=meta, replaced=replaced, notes=notes)
