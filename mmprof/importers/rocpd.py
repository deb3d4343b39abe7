"""rocprofv3 rocpd SQLite (ROCm >= 7.0, schema v3 with inline start/end) -> Profile.

Layout notes (docs/importers-rocm-nsys.md has the full mapping):
- Real tables carry a per-process suffix, `rocpd_<name>_<uuid>`; unsuffixed views select from them. We read
  each suffix's tables directly (one table set per profiled process), so merged DBs with several UUIDs work
  and the views' INNER JOINs cannot drop rows.
- `pid` / `tid` / `agent_id` columns are row ids into `rocpd_info_process` / `_thread` / `_agent`.
- Kernel -> HIP launch: the dispatch's event `stack_id` equals the launching API region's event `stack_id`.
  `correlation_id` is the *external* id and is 0 in real DBs, so it is not used. We store the stack id in
  `kernels.correlation` / `launches.correlation`.
- Grid sizes are in work-items; `grid_x..` in the Profile are workgroups (grid / workgroup, rounded up).
- The draft layout with `start_id`/`end_id` -> `rocpd_timestamp` is refused.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any, NamedTuple

from mmprof.errors import BadInput, UnsupportedFormat
from mmprof.fileio import sqlite_connect
from mmprof.importers._devices import describe_device
from mmprof.importers._ranges import Call, Copy, Kernel, Marker, RangeRows, fill, issuing
from mmprof.importers._timeline import assign_ranks, base_meta, collective_name, drop_idle, finish, rank_from_env
from mmprof.labels import rank_from_name
from mmprof.profiles.profile import Profile, ProfileBuilder

_UUID_SUFFIX = r"_[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}"
_LAUNCH_API = re.compile(r"^(hip|hipExt|hipModule|hipHcc|hipGraph|cuda|cu)\w*"
                         r"(Launch|Memcpy|Memset|StreamBeginCapture|StreamEndCapture)", re.IGNORECASE)


def _connect(path: Path) -> sqlite3.Connection:
    try:
        con = sqlite_connect(path)
        con.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.DatabaseError as e:
        raise BadInput(f"{path}: SQLite file cannot be read ({e})") from e
    return con


class _Tables:
    """The table names of one table set (one suffix) and their columns."""

    def __init__(self, con: sqlite3.Connection, suffix: str, names: set[str]) -> None:
        self.con = con
        self.suffix = suffix
        self.names = names
        self._cols: dict[str, set[str]] = {}

    def name(self, base: str) -> str | None:
        n = f"rocpd_{base}{self.suffix}"
        return n if n in self.names else None

    def cols(self, base: str) -> set[str]:
        if base not in self._cols:
            n = self.name(base)
            self._cols[base] = {r[1] for r in self.con.execute(f"PRAGMA table_info(`{n}`)")} if n else set()
        return self._cols[base]

    def q(self, sql: str, *args: Any) -> list[tuple]:
        return self.con.execute(sql, args).fetchall()


def _table_sets(path: Path, con: sqlite3.Connection) -> list[_Tables]:
    rows = con.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table','view')").fetchall()
    tables = {n for n, t in rows if t == "table"}
    suffixes = sorted({m.group(1) for n in tables if (m := re.match(rf"^rocpd_kernel_dispatch({_UUID_SUFFIX})$", n))}
                      | {m.group(1) for n in tables if (m := re.match(rf"^rocpd_region({_UUID_SUFFIX})$", n))})
    if not suffixes and ("rocpd_kernel_dispatch" in tables or "rocpd_region" in tables):
        suffixes = [""]
    if not suffixes:
        if any(re.match(rf"^rocpd_metadata({_UUID_SUFFIX})?$", n) for n in tables):
            raise BadInput(f"{path}: a rocpd database with no kernel_dispatch or region tables "
                           "(was rocprofv3 run with --kernel-trace / --hip-trace?)")
        raise BadInput(f"{path}: not a rocprofv3 rocpd database (no rocpd_kernel_dispatch / rocpd_region tables)")
    sets = [_Tables(con, s, tables) for s in suffixes]
    for ts in sets:
        for base in ("kernel_dispatch", "region", "memory_copy"):
            cols = ts.cols(base)
            if cols and "start" not in cols and "start_id" in cols:
                raise UnsupportedFormat(f"{path}: a draft rocpd layout (start_id/end_id -> rocpd_timestamp) that "
                                        "no released rocprofv3 writes; re-record with rocprofv3 from ROCm >= 7.0")
    views = {n for n, t in rows if t == "view"}
    _check_tables(path, sets, views)
    _check_views(path, con, views)
    return sets


def _check_views(path: Path, con: sqlite3.Connection, views: set[str]) -> None:
    """rocprofv3's unsuffixed `rocpd_*` views select from the suffixed tables: a view whose table was dropped
    (`rocpd_kernel_dispatch` over a missing `rocpd_kernel_dispatch_<uuid>`) means the database lost what the view
    names. Refused in one line, never read as a run without it (a CPU-only run with 0 kernels, issue 33)."""
    for v in sorted(n for n in views if n.startswith("rocpd_")):
        try:
            con.execute(f"SELECT * FROM `{v}` LIMIT 0").fetchall()
        except sqlite3.DatabaseError as e:
            raise BadInput(f"{path}: the view {v} cannot be read ({e}): a table rocprofv3 wrote is missing; a "
                           "damaged or edited database, re-export it from the capture") from None


_READ = ("metadata", "string", "kernel_dispatch", "region", "memory_copy", "event", "info_agent", "info_process",
         "info_thread", "info_node", "info_kernel_symbol")


def _check_tables(path: Path, sets: list[_Tables], views: set[str]) -> None:
    """rocprofv3 writes the suffixed rocpd_* tables as tables (only the unsuffixed names are views): a suffixed
    name that is a view, or a timeline without its string table, is a damaged or edited database. Refused, never
    summarised with empty names (docs/limits.md)."""
    for ts in sets:
        for base in _READ:
            n = f"rocpd_{base}{ts.suffix}"
            if n in views:
                raise BadInput(f"{path}: {n} is a view, not a table (rocprofv3 writes it as a table): a damaged or "
                               "edited database; re-export it from the capture")
        if (ts.name("kernel_dispatch") or ts.name("region")) and not ts.name("string"):
            raise BadInput(f"{path}: rocpd_string{ts.suffix} is missing: kernel and API names cannot be read; "
                           "a damaged or edited database")
        for base in _READ:
            n = ts.name(base)
            if n is None:
                continue
            try:
                ts.con.execute(f"SELECT * FROM `{n}` LIMIT 1").fetchall()
            except sqlite3.DatabaseError as e:
                raise BadInput(f"{path}: table {n} cannot be read ({e})") from None


def _processes(ts: _Tables) -> list[dict[str, Any]]:
    n = ts.name("info_process")
    if not n:
        return []
    cols = ts.cols("info_process")
    sel = ", ".join(c if c in cols else "NULL" for c in ("id", "pid", "command", "environment", "nid"))
    out = []
    for pid_row, os_pid, command, env, nid in ts.q(f'SELECT {sel} FROM `{n}`'):
        try:
            env_d = json.loads(env) if env else {}
        except (TypeError, ValueError):
            env_d = {}
        host = None
        if isinstance(env_d, dict):
            host = env_d.get("HOSTNAME")
        out.append({"id": pid_row, "pid": os_pid, "command": command, "env": env_d if isinstance(env_d, dict) else {},
                    "nid": nid, "host": host})
    nn = ts.name("info_node")
    if nn and "hostname" in ts.cols("info_node"):
        hosts = dict(ts.q(f"SELECT id, hostname FROM `{nn}`"))
        for p in out:
            p["host"] = hosts.get(p["nid"]) or p["host"]
    return out


def _sel(ts: _Tables, base: str, alias: str, cols: list[str]) -> str:
    have = ts.cols(base)
    return ", ".join(f'{alias}."{c}"' if c in have else "NULL" for c in cols)


def _agents(ts: _Tables) -> dict[int, dict[str, Any]]:
    n = ts.name("info_agent")
    if not n:
        return {}
    cols = _sel(ts, "info_agent", "a", ["id", "type", "type_index", "logical_index", "name", "product_name",
                                        "vendor_name", "extdata"])
    rows = ts.q(f"SELECT {cols} FROM `{n}` a")
    out = {}
    for aid, typ, type_index, logical_index, name, product, vendor, extdata in rows:
        try:
            ext = json.loads(extdata) if extdata else {}
        except (TypeError, ValueError):
            ext = {}
        index = type_index if type_index is not None else logical_index
        out[aid] = {"type": (typ or "").upper(), "index": index if index is not None else -1, "arch": name,
                    "product": product, "vendor": vendor, "cus": ext.get("cu_count") if isinstance(ext, dict) else None}
    return out


def _import_unit(ts: _Tables, pids: list[int], rank: int, b: ProfileBuilder) -> list[str]:
    """Fill the builder with the rows of the given processes (info_process row ids) as `rank`."""
    strings = dict(ts.q(f'SELECT id, string FROM `{ts.name("string")}`')) if ts.name("string") else {}
    threads = dict(ts.q(f'SELECT id, tid FROM `{ts.name("info_thread")}`')) if ts.name("info_thread") else {}
    agents = _agents(ts)
    pid_list = ",".join(str(int(p)) for p in pids) or "-1"
    rows = RangeRows(scope_source="roctx", collectives=None,
                     unlinked="have no launching API call (run rocprofv3 with --hip-trace to link them)")
    hip: list[bool] = []  # per call: its event category is a HIP domain
    for r in _regions(ts, pid_list):
        cat = (strings.get(r.category_id) or "").upper()
        tid = threads.get(r.tid, r.tid)
        if cat.startswith("MARKER"):
            rows.markers.append(Marker(tid if tid is not None else -1, r.start, r.end, strings.get(r.name_id) or ""))
        elif "RCCL" in cat or "NCCL" in cat:
            rows.collectives = rows.collectives if rows.collectives is not None else []
            name = collective_name(strings.get(r.name_id) or "")
            if name:
                rows.collectives.append(Call(tid, r.start, r.end, name, r.stack_id))
        else:
            rows.calls.append(Call(tid, r.start, r.end, strings.get(r.name_id), r.stack_id))
            hip.append(cat.startswith("HIP"))
    rows.kernels = [_kernel(r, agents) for r in _dispatches(ts, pid_list)]
    rows.copies = [_copy(r, agents, strings) for r in _copies(ts, pid_list)]
    # a stack id links a dispatch or copy to its API region: HIP regions win over other domains (HSA) sharing it,
    # and among equals the later (inner) one
    for want_hip in (False, True):
        for i, c in enumerate(rows.calls):
            if c.corr and hip[i] == want_hip:
                rows.owner[c.corr] = i
    rows.keep = issuing(rows.calls, _LAUNCH_API.match, owner=rows.owner, rows=rows.kernels + rows.copies)
    return fill(b, rank, rows)


class _Region(NamedTuple):
    tid: int | None
    start: int
    end: int
    name_id: int | None
    stack_id: int | None
    category_id: int | None


class _Dispatch(NamedTuple):
    agent_id: int | None
    stream_id: int | None
    queue_id: int | None
    start: int
    end: int
    grid_size_x: int | None
    grid_size_y: int | None
    grid_size_z: int | None
    workgroup_size_x: int | None
    workgroup_size_y: int | None
    workgroup_size_z: int | None
    kernel_id: int | None
    display_name: str | None
    kernel_name: str | None
    stack_id: int | None


class _MemCopy(NamedTuple):
    start: int
    end: int
    name_id: int | None
    src_agent_id: int | None
    dst_agent_id: int | None
    size: int | None
    stream_id: int | None
    queue_id: int | None
    stack_id: int | None


def _event_join(ts: _Tables, base: str, alias: str) -> tuple[str, str]:
    """LEFT JOIN of the event table (stack / category ids) when `base` rows carry an event id."""
    ev = ts.name("event")
    if ev and "event_id" in ts.cols(base):
        return f"LEFT JOIN `{ev}` e ON e.id = {alias}.event_id", "e.stack_id, e.category_id"
    return "", "NULL, NULL"


def _regions(ts: _Tables, pid_list: str) -> list[_Region]:
    """API regions and markers, by start time."""
    if not ts.name("region"):
        return []
    join, ev_cols = _event_join(ts, "region", "r")
    return [_Region._make(r) for r in ts.q(
        f'SELECT r.tid, r.start, r."end", r.name_id, {ev_cols} FROM `{ts.name("region")}` r {join} '
        f'WHERE r.pid IN ({pid_list}) ORDER BY r.start')]


def _dispatches(ts: _Tables, pid_list: str) -> list[_Dispatch]:
    kd = ts.name("kernel_dispatch")
    if not kd:
        return []
    sym = ts.name("info_kernel_symbol")
    sym_join = f'LEFT JOIN `{sym}` s ON s.id = k.kernel_id' if sym else ""
    sym_cols = _sel(ts, "info_kernel_symbol", "s", ["display_name", "kernel_name"]) if sym else "NULL, NULL"
    join, ev_cols = _event_join(ts, "kernel_dispatch", "k")
    kcols = _sel(ts, "kernel_dispatch", "k", list(_Dispatch._fields[:12]))
    return [_Dispatch._make(r) for r in ts.q(
        f'SELECT {kcols}, {sym_cols}, {ev_cols.split(",")[0]} FROM `{kd}` k {sym_join} {join} '
        f'WHERE k.pid IN ({pid_list}) ORDER BY k.start')]


def _copies(ts: _Tables, pid_list: str) -> list[_MemCopy]:
    mc = ts.name("memory_copy")
    if not mc:
        return []
    join, ev_cols = _event_join(ts, "memory_copy", "m")
    ccols = _sel(ts, "memory_copy", "m", list(_MemCopy._fields[:8]))
    return [_MemCopy._make(r) for r in ts.q(
        f'SELECT {ccols}, {ev_cols.split(",")[0]} FROM `{mc}` m {join} WHERE m.pid IN ({pid_list}) ORDER BY m.start')]


def _workgroups(grid: Any, block: Any) -> int:
    """rocpd grid sizes are work-items: the Profile's grid is workgroups (rounded up)."""
    if grid is None:
        return -1
    if not block:
        return int(grid)
    return -(-int(grid) // int(block))


def _kernel(r: _Dispatch, agents: dict[int, dict[str, Any]]) -> Kernel:
    sym = r.kernel_name[:-3] if r.kernel_name and r.kernel_name.endswith(".kd") else r.kernel_name
    return Kernel(r.start, r.end, agents.get(r.agent_id, {}).get("index", -1),
                  r.stream_id if r.stream_id is not None else r.queue_id, r.stack_id,
                  r.display_name or sym or f"kernel_{r.kernel_id}",
                  _workgroups(r.grid_size_x, r.workgroup_size_x), _workgroups(r.grid_size_y, r.workgroup_size_y),
                  _workgroups(r.grid_size_z, r.workgroup_size_z),
                  r.workgroup_size_x, r.workgroup_size_y, r.workgroup_size_z)


def _copy(r: _MemCopy, agents: dict[int, dict[str, Any]], strings: dict[int, str]) -> Copy:
    src, dst = agents.get(r.src_agent_id, {}), agents.get(r.dst_agent_id, {})
    name = strings.get(r.name_id)
    return Copy(r.start, r.end, dst.get("index", -1) if dst.get("type") == "GPU" else src.get("index", -1),
                r.stream_id if r.stream_id is not None else r.queue_id, r.stack_id, "memcpy",
                _direction(src.get("type"), dst.get("type"), name or ""), r.size, name)


def _direction(src_type: str | None, dst_type: str | None, name: str) -> str | None:
    n = name.upper()
    for key, d in (("HOST_TO_DEVICE", "HtoD"), ("DEVICE_TO_HOST", "DtoH"), ("DEVICE_TO_DEVICE", "DtoD"),
                   ("HOST_TO_HOST", "HtoH"), ("PEER", "PtoP")):
        if key in n:
            return d
    if src_type and dst_type:
        s = "H" if src_type == "CPU" else "D"
        d = "H" if dst_type == "CPU" else "D"
        return f"{s}to{d}"
    return None


def load(files: list[Path], rank: int | None = None) -> Profile:
    """Import rocpd databases: one rank per profiled process (or per file), merged into one Profile."""
    units: list[dict[str, Any]] = []
    for f in files:
        f = Path(f)
        con = _connect(f)
        for ts in _table_sets(f, con):
            procs = _processes(ts)
            if not procs:
                procs = [{"id": None, "pid": None, "command": None, "env": {}, "host": None}]
            # group processes by their rank hint: one rank per distinct hint, several pids under one rank
            groups: dict[Any, list[dict]] = {}
            for p in procs:
                hint = rank_from_env(p["env"])
                groups.setdefault(hint, []).append(p)
            if len(groups) > 1 and None in groups:
                # some processes without a rank: keep them with the file's first rank group
                orphans = groups.pop(None)
                groups[next(iter(groups))].extend(orphans)
            for hint, ps in groups.items():
                if hint is None:
                    hint = rank_from_name(f)
                label = str(f)
                if len(groups) > 1 or len(procs) > 1:
                    label += f" (pid {', '.join(str(p['pid']) for p in ps)})"
                units.append({"file": f, "ts": ts, "procs": ps, "hint": hint, "label": label})
    units, idle = drop_idle(units, [_gpu_work(u) for u in units], [u["label"] for u in units])
    ranks, warnings = assign_ranks([(u["label"], u["hint"]) for u in units], rank, "rocpd")
    warnings = idle + warnings
    profiles = []
    for u, r in zip(units, ranks):
        b = ProfileBuilder(base_meta("rocpd", [u["file"]], _tool(u["ts"])))
        pids = [p["id"] for p in u["procs"] if p["id"] is not None]
        if not pids:
            table = u["ts"].name("kernel_dispatch") or u["ts"].name("region")
            pids = [row[0] for row in u["ts"].q(f"SELECT DISTINCT pid FROM `{table}`")]
        w = _import_unit(u["ts"], pids, r, b)
        agents = _agents(u["ts"])
        devices = []
        for a in sorted((a for aid, a in agents.items() if a["type"] == "GPU"), key=lambda a: a["index"]):
            d = describe_device(name=a["product"], arch=a["arch"], vendor=a["vendor"], cus=a["cus"])
            devices.append({"index": a["index"], **d})
        p0 = u["procs"][0]
        b.meta["ranks"] = [{"rank": r, "host": p0.get("host"), "pid": p0.get("pid"), "file": str(u["file"]),
                            "devices": devices, "pids": [p.get("pid") for p in u["procs"]],
                            "command": p0.get("command") if isinstance(p0.get("command"), str) else None}]
        b.meta["command"] = p0.get("command")
        if w:
            b.meta["warnings"] = w
        profiles.append(b.build())
    return finish(profiles, warnings, files, "rocpd database holds no kernels, API calls, copies or markers")


def _gpu_work(u: dict[str, Any]) -> bool:
    ts = u["ts"]
    pids = ",".join(str(int(p["id"])) for p in u["procs"] if p["id"] is not None)
    where = f"WHERE pid IN ({pids})" if pids else ""
    for base in ("kernel_dispatch", "memory_copy"):
        n = ts.name(base)
        if n and ts.q(f"SELECT 1 FROM `{n}` {where} LIMIT 1"):
            return True
    return False


def _tool(ts: _Tables) -> str:
    ver = None
    n = ts.name("metadata")
    if n:
        meta = dict(ts.q(f'SELECT tag, value FROM `{n}`'))
        ver = meta.get("schema_version")
    return f"rocprofv3 (rocpd schema {ver})" if ver else "rocprofv3 (rocpd)"
