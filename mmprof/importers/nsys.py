"""Nsight Systems SQLite export (`nsys export --type sqlite`) -> Profile.

- Names are ids into `StringIds`; kernels prefer demangledName, then shortName, then mangledName.
- Runtime API names lose their `_v\\d+` version suffix (`cudaLaunchKernel_v7000` -> `cudaLaunchKernel`).
  Rows of the CUDA *backtrace* event class (67; nsys repeats each call with a backtrace) are dropped.
- Any table may be missing (exports are lazy): each absence just leaves that Profile table empty.
- `globalTid` / `globalPid` pack the OS pid and tid: pid = (g >> 24) & 0xFFFFFF, tid = g & 0xFFFFFF.
- Kernel/copy <-> runtime call through `correlationId` within one process.
- One rank per process that did GPU work; a report holding several processes gives several ranks.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any, NamedTuple

from mmprof.errors import BadInput
from mmprof.fileio import sqlite_connect
from mmprof.importers._devices import describe_device
from mmprof.importers._ranges import Call, Copy, Kernel, Marker, RangeRows, fill, first_owner, issuing
from mmprof.importers._timeline import assign_ranks, base_meta, finish, rank_from_env
from mmprof.labels import rank_from_name, rank_from_text
from mmprof.profiles.profile import Profile, ProfileBuilder

_VSUFFIX = re.compile(r"_v\d+$")
_LAUNCH_API = re.compile(r"(Launch|Memcpy|Memset|GraphLaunch|StreamBeginCapture|StreamEndCapture)", re.IGNORECASE)
_MASK = 0xFFFFFF
_COPY_KIND = {0: None, 1: "HtoD", 2: "DtoH", 3: "HtoD", 4: "DtoH", 5: "DtoD", 6: "DtoD", 7: "DtoD", 8: "DtoD",
              9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
_ENUM_DIR = {"HTOD": "HtoD", "DTOH": "DtoH", "HTOA": "HtoD", "ATOH": "DtoH", "ATOA": "DtoD", "ATOD": "DtoD",
             "DTOA": "DtoD", "DTOD": "DtoD", "HTOH": "HtoH", "PTOP": "PtoP"}


class _Db:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.con = sqlite_connect(path)
            rows = self.con.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')").fetchall()
        except sqlite3.DatabaseError as e:
            raise BadInput(f"{path}: SQLite file cannot be read ({e})") from e
        self.tables = {r[0] for r in rows}
        self._cols: dict[str, set[str]] = {}

    def has(self, t: str) -> bool:
        return t in self.tables

    def cols(self, t: str) -> set[str]:
        if t not in self._cols:
            self._cols[t] = {r[1] for r in self.con.execute(f'PRAGMA table_info("{t}")')} if t in self.tables else set()
        return self._cols[t]

    def q(self, sql: str) -> list[tuple]:
        return self.con.execute(sql).fetchall()

    def sel(self, t: str, alias: str, cols: list[str]) -> str:
        have = self.cols(t)
        return ", ".join(f'{alias}."{c}"' if c in have else "NULL" for c in cols)

    def name_expr(self, t: str, alias: str, cols: list[str]) -> tuple[str, str]:
        """SELECT expression for the first available StringIds-backed name column, plus its joins."""
        joins, exprs = [], []
        for i, c in enumerate(cols):
            if c in self.cols(t):
                if self.has("StringIds"):
                    joins.append(f'LEFT JOIN StringIds s{i} ON s{i}.id = {alias}."{c}"')
                    exprs.append(f"s{i}.value")
        if not exprs:
            return "NULL", ""
        return (f"COALESCE({', '.join(exprs)})" if len(exprs) > 1 else exprs[0]), " ".join(joins)


def _meta_kv(db: _Db, table: str) -> list[tuple[str, str]]:
    if not db.has(table) or not {"name", "value"} <= db.cols(table):
        return []
    return [(str(k), str(v)) for k, v in db.q(f'SELECT name, value FROM "{table}"')]


def _capture_env(db: _Db) -> dict[str, str]:
    env = {}
    for k, v in _meta_kv(db, "META_DATA_CAPTURE"):
        if k.endswith("ENVIRONMENT_VARIABLE") and "=" in v:
            key, val = v.split("=", 1)
            env[key.strip()] = val.strip().strip('"')
    return env


def _command(db: _Db) -> list[str] | None:
    kv = _meta_kv(db, "META_DATA_CAPTURE")
    cmd = [v for k, v in kv if k == "PROCESS_0:COMMAND"]
    args = sorted(((int(k.rsplit("_", 1)[1]), v) for k, v in kv
                   if re.match(r"PROCESS_0:ARGUMENT_\d+$", k)), key=lambda t: t[0])
    return (cmd + [v for _, v in args]) if cmd else None


def _tool(db: _Db) -> str:
    kv = dict(_meta_kv(db, "META_DATA_EXPORT") or _meta_kv(db, "EXPORT_META_DATA"))
    ver = kv.get("EXPORT_PRODUCT_VERSION") or kv.get("PRODUCT_VERSION")
    schema = kv.get("EXPORT_SCHEMA_VERSION")
    out = "Nsight Systems"
    if ver:
        out += f" {ver}"
    if schema:
        out += f" (export schema {schema})"
    return out


def _enum_ids(db: _Db, table: str) -> dict[str, int]:
    if not db.has(table) or not {"id", "name"} <= db.cols(table):
        return {}
    return {str(n): int(i) for i, n in db.q(f'SELECT id, name FROM "{table}"')}


def _devices(db: _Db) -> list[dict[str, Any]]:
    if not db.has("TARGET_INFO_GPU"):
        return []
    cols = db.sel("TARGET_INFO_GPU", "g", ["id", "name", "totalMemory", "smCount", "computeMajor", "computeMinor"])
    rows = db.q(f"SELECT {cols} FROM TARGET_INFO_GPU g")
    out = {}
    for gid, name, mem, sms, major, minor in rows:
        arch = (major, minor) if major is not None and minor is not None else None
        out[gid if gid is not None else len(out)] = {"index": gid if gid is not None else len(out),
                                                     **describe_device(name=name, arch=arch, vendor="nvidia", cus=sms,
                                                                       memory_bytes=mem)}
    return [out[k] for k in sorted(out)]


def _rank_hint(db: _Db, pid: int, single: bool) -> int | None:
    """Rank of one process: capture environment (launched process only), NVTX/thread names, file name."""
    if single:
        r = rank_from_env(_capture_env(db))
        if r is not None:
            return r
    texts: list[str] = []
    if db.has("NVTX_EVENTS") and "text" in db.cols("NVTX_EVENTS"):
        texts += [t for (t,) in db.q(f"SELECT text FROM NVTX_EVENTS WHERE eventType = 39 AND text IS NOT NULL "
                                     f"AND ((globalTid >> 24) & {_MASK}) = {int(pid)}")]
    for t in texts:
        r = rank_from_text(t)
        if r is not None:
            return r
    return rank_from_name(db.path) if single else None


def _gpu_pids(db: _Db) -> list[int]:
    pids: set[int] = set()
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if db.has(t) and "globalPid" in db.cols(t):
            pids.update(p for (p,) in db.q(f'SELECT DISTINCT ((globalPid >> 24) & {_MASK}) FROM "{t}"'))
    if not pids and db.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        pids.update(p for (p,) in db.q(f"SELECT DISTINCT ((globalTid >> 24) & {_MASK}) "
                                       "FROM CUPTI_ACTIVITY_KIND_RUNTIME"))
    return sorted(pids)


def _import_process(db: _Db, pid: int, rank: int, b: ProfileBuilder) -> list[str]:
    rows = RangeRows(scope_source="nvtx", markers=_nvtx(db, pid), calls=_runtime_calls(db, pid))
    rows.kernels = [k if k.name else k._replace(name="<unknown kernel>") for k in _gpu_rows(
        db, pid, "CUPTI_ACTIVITY_KIND_KERNEL", ["gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"],
        ["demangledName", "shortName", "mangledName"], Kernel)]
    kinds = {}
    enum = _enum_ids(db, "ENUM_CUDA_MEMCPY_OPER")
    for name, i in enum.items():
        kinds[i] = _ENUM_DIR.get(name.rsplit("_", 1)[-1].upper())
    for r in _gpu_rows(db, pid, "CUPTI_ACTIVITY_KIND_MEMCPY", ["bytes", "copyKind"], None, _Memcpy):
        d = kinds.get(r.copy_kind) if enum else _COPY_KIND.get(r.copy_kind)
        rows.copies.append(Copy(r.start, r.end, r.device, r.stream, r.corr, "memcpy", d, r.bytes,
                                f"Memcpy {d}" if d else "Memcpy"))
    for r in _gpu_rows(db, pid, "CUPTI_ACTIVITY_KIND_MEMSET", ["bytes"], None, _Memset):
        rows.copies.append(Copy(r.start, r.end, r.device, r.stream, r.corr, "memset", None, r.bytes, "Memset"))
    # kernel / copy <-> runtime call through the correlation id within one process: the first call with the id
    rows.owner = first_owner(rows.calls)
    rows.keep = issuing(rows.calls, _LAUNCH_API.search, owner=rows.owner, rows=rows.kernels + rows.copies)
    rows.unlinked = "have no matching runtime call" if rows.calls else None
    return fill(b, rank, rows)


class _Memcpy(NamedTuple):
    start: int
    end: int
    device: int | None
    stream: int | None
    corr: int | None
    name: None
    bytes: int | None
    copy_kind: int | None


class _Memset(NamedTuple):
    start: int
    end: int
    device: int | None
    stream: int | None
    corr: int | None
    name: None
    bytes: int | None


def _nvtx(db: _Db, pid: int) -> list[Marker]:
    """NVTX push/pop and start/end ranges and marks of one process, by start time."""
    if not db.has("NVTX_EVENTS"):
        return []
    types = _enum_ids(db, "ENUM_NSYS_EVENT_TYPE")
    rng = [types.get("NvtxPushPopRange", 59), types.get("NvtxStartEndRange", 60)]
    mark = types.get("NvtxMark", 34)
    cols = db.cols("NVTX_EVENTS")
    text = "n.text" if "text" in cols else "NULL"
    if "textId" in cols and db.has("StringIds"):
        text = f"COALESCE({text}, st.value)"
        join = "LEFT JOIN StringIds st ON st.id = n.textId"
    else:
        join = ""
    rows = db.q(f'SELECT (n.globalTid & {_MASK}), n.start, n."end", {text} FROM NVTX_EVENTS n {join} '
                f'WHERE n.eventType IN ({rng[0]}, {rng[1]}, {mark}) '
                f'AND ((n.globalTid >> 24) & {_MASK}) = {int(pid)} '
                f'ORDER BY n.start')
    return [Marker(tid, start, end if end is not None else start, text or "") for tid, start, end, text in rows]


def _runtime_calls(db: _Db, pid: int) -> list[Call]:
    """CUDA runtime / driver calls of one process by start time, without the backtrace rows nsys repeats them as."""
    if not db.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return []
    classes = _enum_ids(db, "ENUM_NSYS_EVENT_CLASS")
    bt = classes.get("TRACE_PROCESS_EVENT_CUDABACKTRACE", 67)
    name, join = db.name_expr("CUPTI_ACTIVITY_KIND_RUNTIME", "r", ["nameId"])
    cls = "r.eventClass" if "eventClass" in db.cols("CUPTI_ACTIVITY_KIND_RUNTIME") else "0"
    rows = db.q(f'SELECT (r.globalTid & {_MASK}), r.start, r."end", r.correlationId, {name}, {cls} '
                f'FROM CUPTI_ACTIVITY_KIND_RUNTIME r {join} WHERE ((r.globalTid >> 24) & {_MASK}) = {int(pid)} '
                f'AND {cls} != {bt} ORDER BY r.start')
    return [Call(tid, start, end, _VSUFFIX.sub("", nm) if nm else None, corr) for tid, start, end, corr, nm, _c in rows]


def _gpu_rows(db: _Db, pid: int, table: str, extra: list[str], names: list[str] | None, row: type) -> list:
    """start, end, device, stream, correlation id, name (or NULL) and `extra` columns of one process's rows of
    `table`, by start time, as `row` named tuples."""
    if not db.has(table):
        return []
    cols = db.cols(table)
    where = f"((t.globalPid >> 24) & {_MASK}) = {int(pid)}" if "globalPid" in cols else "1"
    name, join = db.name_expr(table, "t", names) if names else ("NULL", "")
    base = db.sel(table, "t", ["start", "end", "deviceId", "streamId", "correlationId"])
    ext = (", " + db.sel(table, "t", extra)) if extra else ""
    return [row._make(r) for r in db.q(f'SELECT {base}, {name}{ext} FROM "{table}" t {join} WHERE {where} '
                                       'ORDER BY t.start')]


def load(files: list[Path], rank: int | None = None) -> Profile:
    """Import nsys SQLite exports: one rank per process with GPU work, merged into one Profile."""
    units = []
    for f in files:
        db = _Db(Path(f))
        if not db.has("StringIds"):
            raise BadInput(f"{f}: not an Nsight Systems SQLite export (no StringIds table)")
        pids = _gpu_pids(db)
        if not pids:
            raise BadInput(f"{f}: the nsys export holds no CUDA kernels, copies or runtime calls "
                           "(was it captured with -t cuda, and exported without EXPORT_PARAM_LAZY filters?)")
        for pid in pids:
            label = str(f) if len(pids) == 1 else f"{f} (pid {pid})"
            units.append({"db": db, "pid": pid, "hint": _rank_hint(db, pid, len(pids) == 1), "label": label})
    ranks, warnings = assign_ranks([(u["label"], u["hint"]) for u in units], rank, "nsys")
    profiles = []
    for u, r in zip(units, ranks):
        db = u["db"]
        b = ProfileBuilder(base_meta("nsys-sqlite", [db.path], _tool(db)))
        w = _import_process(db, u["pid"], r, b)
        host = dict(_meta_kv(db, "META_DATA_CAPTURE")).get("DEVICE_DISPLAY_NAME")
        b.meta["ranks"] = [{"rank": r, "host": host, "pid": u["pid"], "file": str(db.path), "devices": _devices(db)}]
        b.meta["command"] = _command(db)
        if w:
            b.meta["warnings"] = w
        profiles.append(b.build())
    return finish(profiles, warnings, files)
