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
from typing import Any

from mmprof.errors import BadInput, UnsupportedFormat
from mmprof.fileio import sqlite_connect
from mmprof.importers._devices import describe_device
from mmprof.importers._timeline import (
    add_comm_kernels,
    add_scopes,
    assign_ranks,
    attribute,
    base_meta,
    collective_name,
    drop_idle,
    extend,
    finish,
    rank_from_env,
)
from mmprof.labels import rank_from_name
from mmprof.profiles.model import Profile, ProfileBuilder

_UUID_SUFFIX = r"_[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}"
_LAUNCH_API = re.compile(r"^(hip|hipExt|hipModule|hipHcc|hipGraph|cuda|cu)\w*(Launch|Memcpy|Memset|StreamBeginCapture|StreamEndCapture)", re.IGNORECASE)


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
    _check_tables(path, sets, {n for n, t in rows if t == "view"})
    return sets


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
    warnings: list[str] = []
    strings = dict(ts.q(f'SELECT id, string FROM `{ts.name("string")}`')) if ts.name("string") else {}
    threads = {}
    if ts.name("info_thread"):
        threads = dict(ts.q(f'SELECT id, tid FROM `{ts.name("info_thread")}`'))
    agents = _agents(ts)
    ev = ts.name("event")
    pid_list = ",".join(str(int(p)) for p in pids) or "-1"

    # ---- API regions and markers ------------------------------------------------------------------------
    reg_rows: list[tuple] = []
    if ts.name("region"):
        ev_join = f'LEFT JOIN `{ev}` e ON e.id = r.event_id' if ev and "event_id" in ts.cols("region") else ""
        ev_cols = "e.stack_id, e.category_id" if ev_join else "NULL, NULL"
        reg_rows = ts.q(f'SELECT r.tid, r.start, r."end", r.name_id, {ev_cols} FROM `{ts.name("region")}` r {ev_join} '
                        f'WHERE r.pid IN ({pid_list}) ORDER BY r.start')
    m_tid, m_start, m_end, m_name = [], [], [], []
    launch_idx: list[int] = []
    rccl_idx: list[int] = []
    for i, (tid, start, end, name_id, stack, cat_id) in enumerate(reg_rows):
        cat = strings.get(cat_id) or ""
        if cat.upper().startswith("MARKER"):
            m_tid.append(threads.get(tid, tid if tid is not None else -1))
            m_start.append(start)
            m_end.append(end)
            m_name.append(strings.get(name_id) or "")
        elif "RCCL" in cat.upper() or "NCCL" in cat.upper():
            rccl_idx.append(i)
        else:
            launch_idx.append(i)
    nest = add_scopes(b, rank, m_tid, m_start, m_end, m_name, "roctx") if m_start else None

    # ---- kernels ----------------------------------------------------------------------------------------
    kd = ts.name("kernel_dispatch")
    k_rows: list[tuple] = []
    if kd:
        sym = ts.name("info_kernel_symbol")
        sym_join = f'LEFT JOIN `{sym}` s ON s.id = k.kernel_id' if sym else ""
        sym_cols = _sel(ts, "info_kernel_symbol", "s", ["display_name", "kernel_name"]) if sym else "NULL, NULL"
        ev_join = f'LEFT JOIN `{ev}` e ON e.id = k.event_id' if ev and "event_id" in ts.cols("kernel_dispatch") else ""
        ev_cols = "e.stack_id" if ev_join else "NULL"
        kcols = _sel(ts, "kernel_dispatch", "k", ["agent_id", "stream_id", "queue_id", "start", "end", "grid_size_x",
                                                  "grid_size_y", "grid_size_z", "workgroup_size_x", "workgroup_size_y",
                                                  "workgroup_size_z", "kernel_id"])
        k_rows = ts.q(f'SELECT {kcols}, {sym_cols}, {ev_cols} FROM `{kd}` k {sym_join} {ev_join} '
                      f'WHERE k.pid IN ({pid_list}) ORDER BY k.start')

    # ---- memory copies ----------------------------------------------------------------------------------
    mc = ts.name("memory_copy")
    c_rows: list[tuple] = []
    if mc:
        ev_join = f'LEFT JOIN `{ev}` e ON e.id = m.event_id' if ev and "event_id" in ts.cols("memory_copy") else ""
        ev_cols = "e.stack_id" if ev_join else "NULL"
        ccols = _sel(ts, "memory_copy", "m", ["start", "end", "name_id", "src_agent_id", "dst_agent_id", "size",
                                              "stream_id", "queue_id"])
        c_rows = ts.q(f'SELECT {ccols}, {ev_cols} FROM `{mc}` m {ev_join} WHERE m.pid IN ({pid_list}) ORDER BY m.start')

    # ---- launches: API regions that issued GPU work (linked by stack id) or are launch/copy calls --------
    by_stack: dict[int, int] = {}
    # HIP regions win over other domains (HSA) sharing a stack id; among equals the later (inner) one wins
    for want_hip in (False, True):
        for i in launch_idx:
            stack = reg_rows[i][4]
            if stack and (strings.get(reg_rows[i][5]) or "").upper().startswith("HIP") == want_hip:
                by_stack[stack] = i
    used = {by_stack[r[-1]] for rows in (k_rows, c_rows) for r in rows if r[-1] in by_stack}
    keep = [i for i in launch_idx if i in used or _LAUNCH_API.match(strings.get(reg_rows[i][3]) or "")]
    first_launch = b.n("launches")
    launch_row = {i: first_launch + j for j, i in enumerate(keep)}
    extend(b, "launches", len(keep), rank=[rank] * len(keep),
           tid=[threads.get(reg_rows[i][0], reg_rows[i][0]) for i in keep],
           start_ns=[reg_rows[i][1] for i in keep], dur_ns=[reg_rows[i][2] - reg_rows[i][1] for i in keep],
           name=[strings.get(reg_rows[i][3]) for i in keep], correlation=[reg_rows[i][4] for i in keep])

    def _launch_of(stack: int | None) -> int:
        i = by_stack.get(stack) if stack else None
        return launch_row.get(i, -1) if i is not None else -1

    # kernels
    nk = len(k_rows)
    if nk:
        k_launch = [_launch_of(r[-1]) for r in k_rows]
        linked = sum(1 for x in k_launch if x >= 0)
        if linked < nk:
            warnings.append(f"rank {rank}: {nk - linked} of {nk} kernels have no launching API call "
                            "(run rocprofv3 with --hip-trace to link them)")
        l_tid = b.cols["launches"]["tid"]
        l_start = b.cols["launches"]["start_ns"]
        scope, path, phase, step = attribute(nest, [l_tid[x] if x >= 0 else -1 for x in k_launch],
                                             [l_start[x] if x >= 0 else -1 for x in k_launch])

        def wg(grid: Any, block: Any) -> int:
            if grid is None:
                return -1
            if not block:
                return int(grid)
            return -(-int(grid) // int(block))

        extend(b, "kernels", nk, rank=[rank] * nk,
               device=[agents.get(r[0], {}).get("index", -1) for r in k_rows],
               stream=[r[1] if r[1] is not None else r[2] for r in k_rows],
               start_ns=[r[3] for r in k_rows], dur_ns=[r[4] - r[3] for r in k_rows],
               name=[(r[12] or (r[13][:-3] if r[13] and r[13].endswith(".kd") else r[13]) or f"kernel_{r[11]}")
                     for r in k_rows],
               grid_x=[wg(r[5], r[8]) for r in k_rows], grid_y=[wg(r[6], r[9]) for r in k_rows],
               grid_z=[wg(r[7], r[10]) for r in k_rows],
               block_x=[r[8] for r in k_rows], block_y=[r[9] for r in k_rows], block_z=[r[10] for r in k_rows],
               correlation=[r[-1] for r in k_rows], launch=k_launch, scope=scope, scope_path=path, phase=phase,
               step=step)

    # memcpy
    nc = len(c_rows)
    if nc:
        c_launch = [_launch_of(r[-1]) for r in c_rows]
        l_tid = b.cols["launches"]["tid"]
        l_start = b.cols["launches"]["start_ns"]
        scope, _path, phase, step = attribute(nest, [l_tid[x] if x >= 0 else -1 for x in c_launch],
                                              [l_start[x] if x >= 0 else -1 for x in c_launch])
        dirs, devs = [], []
        for r in c_rows:
            src, dst = agents.get(r[3], {}), agents.get(r[4], {})
            d = _direction(src.get("type"), dst.get("type"), strings.get(r[2]) or "")
            dirs.append(d)
            devs.append(dst.get("index", -1) if dst.get("type") == "GPU" else src.get("index", -1))
        extend(b, "memcpy", nc, rank=[rank] * nc, device=devs,
               stream=[r[6] if r[6] is not None else r[7] for r in c_rows],
               start_ns=[r[0] for r in c_rows], dur_ns=[r[1] - r[0] for r in c_rows], kind=["memcpy"] * nc,
               direction=dirs, bytes=[r[5] for r in c_rows], name=[strings.get(r[2]) for r in c_rows],
               correlation=[r[-1] for r in c_rows], launch=c_launch, scope=scope, phase=phase, step=step)

    # collectives: RCCL API regions when traced, else communication kernels by name
    k_first = b.n("kernels") - nk
    if rccl_idx:
        rows = [(i, collective_name(strings.get(reg_rows[i][3]) or "")) for i in rccl_idx]
        rows = [(i, c) for i, c in rows if c]
        tids = [threads.get(reg_rows[i][0], reg_rows[i][0]) for i, _ in rows]
        starts = [reg_rows[i][1] for i, _ in rows]
        _s, _p, phase, step = attribute(nest, tids, starts)
        extend(b, "collectives", len(rows), rank=[rank] * len(rows), start_ns=starts,
               dur_ns=[reg_rows[i][2] - reg_rows[i][1] for i, _ in rows], name=[c for _, c in rows],
               phase=phase, step=step)
    else:
        add_comm_kernels(b, k_first, nk)
    return warnings


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
