"""rocprofv3 CSV output (`--output-format csv`, or `rocpd convert -f csv`) -> Profile.

Columns are resolved by name: kernel_trace.csv has had at least four layouts (ROCm 6.2 without Thread_Id /
Dispatch_Id, 6.3+ with them, the 19-column docs layout with Stream_Id, ROCm 7 with LDS_Block_Size /
VGPR columns instead of Private_/Group_Segment_Size, and `rocpd convert` adding a leading `Guid`).

The kernel trace is the anchor; the sibling files of the same run in the same folder (same name with the
kind token swapped: `<pid>_hip_api_trace.csv`, `_marker_api_trace.csv`, `_memory_copy_trace.csv`,
`_agent_info.csv`, ...) are read too. In CSV output the Correlation_Id IS the link between an API call and
the kernel or copy it issued. Grid sizes are in work-items and are converted to workgroups.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mmprof.errors import BadInput
from mmprof.fileio import check_events, read_bytes
from mmprof.importers._devices import describe_device
from mmprof.importers._ranges import Call, Copy, Kernel, Marker, RangeRows, fill, first_owner, issuing
from mmprof.importers._timeline import assign_ranks, base_meta, collective_name, drop_idle, finish
from mmprof.importers._nesting import to_int
from mmprof.labels import rank_from_name
from mmprof.profiles.profile import Profile, ProfileBuilder
from mmprof.profiles.schema import MAX_TIME_NS

_KIND_TOKEN = re.compile(
    r"(kernel_trace|kernel_dispatch|hip_api_trace|hip_runtime_trace|hip_compiler_trace|hip_api|hsa_api_trace|"
    r"marker_api_trace|marker_api|memory_copy_trace|memory_copy|agent_info|rccl_api_trace|rccl_api|"
    r"memory_allocation_trace|memory_allocation|scratch_memory_trace|scratch_memory|counter_collection|"
    r"rocdecode_api_trace|rocjpeg_api_trace|kernel_stats|hip_stats|hsa_stats|memory_copy_stats|marker_api_stats|"
    r"domain_stats|rccl_stats)")
_LAUNCH_API = re.compile(r"(Launch|Memcpy|Memset|StreamBeginCapture|StreamEndCapture)", re.IGNORECASE)
_AGENT_NUM = re.compile(r"(-?\d+)\s*$")


def _read(path: Path) -> Any:
    """The CSV as strings. A file cut inside its last row (capture killed) loses that row, with a note."""
    import io

    import pandas as pd

    opts = dict(dtype=str, keep_default_na=False, na_values=[""])
    data = read_bytes(path)  # gunzipped by content, BOM dropped, within the input size limit
    if b"\x00" in data:
        raise BadInput(f"{path}: holds NUL bytes; not a text CSV file")
    try:
        df = pd.read_csv(io.BytesIO(data), **opts)
    except pd.errors.EmptyDataError as e:
        raise BadInput(f"{path}: empty CSV file") from e
    except UnicodeDecodeError as e:
        raise BadInput(f"{path}: not a text CSV file ({e.reason})") from e
    except pd.errors.ParserError as e:
        text = data.decode("utf-8", errors="replace")
        head, _, _last = text.rstrip("\n").rpartition("\n")
        try:
            df = pd.read_csv(io.StringIO(head + "\n"), **opts)
        except (pd.errors.ParserError, pd.errors.EmptyDataError):
            raise BadInput(f"{path}: malformed CSV ({str(e).splitlines()[0]})") from e
        df.attrs["cut_rows"] = 1
    df.columns = [str(c).strip().lstrip("\ufeff").strip().strip('"') for c in df.columns]
    check_events(len(df), str(path), "rows")
    return df


def _kind(df: Any) -> str:
    cols = set(df.columns)
    if {"Counter_Name", "Counter_Value"} <= cols:
        return "counters"  # one row per dispatch x counter: never kernels
    if ("Sample_Timestamp" in cols and "Instruction" in cols) or ({"Kind", "Operation"} <= cols and (
            "Allocation_Size" in cols or "Alloc_Flags" in cols)):
        return "no-timeline"
    if "Kernel_Name" in cols or ({"Kernel_Id", "Grid_Size_X"} <= cols):
        return "kernel"
    if "Direction" in cols or ({"Source_Agent_Id", "Destination_Agent_Id"} <= cols):
        return "memcpy"
    if {"Domain", "Function", "Start_Timestamp"} <= cols:
        return "api"
    if {"Name", "Calls", "TotalDurationNs"} <= cols:
        return "stats"
    if "Agent_Type" in cols or ("Node_Id" in cols and "Product_Name" in cols):
        return "agents"
    return "other"


def _group_key(p: Path) -> tuple[str, str]:
    return (str(p.resolve().parent), _KIND_TOKEN.sub("", p.name))


def _expand(files: list[Path]) -> list[list[Path]]:
    """Group the given files by run (folder + name without the kind token) and add present siblings."""
    groups: dict[tuple[str, str], list[Path]] = {}
    for f in files:
        groups.setdefault(_group_key(f), [])
        if f not in groups[_group_key(f)]:
            groups[_group_key(f)].append(f)
    for key, members in groups.items():
        if not any(_KIND_TOKEN.search(m.name) for m in members):
            continue
        folder = Path(key[0])
        for sib in sorted(folder.glob("*.csv")):
            if _KIND_TOKEN.search(sib.name) and _group_key(sib) == key and sib not in members \
                    and sib.resolve() not in {m.resolve() for m in members}:
                members.append(sib)
    return list(groups.values())


def _ints(series: Any) -> list[int]:
    import pandas as pd

    v = pd.to_numeric(series, errors="coerce")
    if str(v.dtype) == "int64":
        return v.tolist()
    # blanks, text, floats or values beyond int64: exact per value, -1 where there is no 64-bit integer
    return [to_int(x) if isinstance(x, str) else -1 for x in series.tolist()]


def _agent_nums(series: Any) -> list[int]:
    """Agent ids as ints: 4, "Agent 4", "GPU-0" -> 4, 4, 0."""
    out = []
    for v in series.tolist():
        m = _AGENT_NUM.search(str(v)) if v is not None else None
        out.append(int(m.group(1)) if m else -1)
    return out


def _col(df: Any, *names: str) -> Any:
    for n in names:
        if n in df.columns:
            return df[n]
    return None


def _clean(df: Any, path: Path, warnings: list[str]) -> Any:
    """Drop rows without valid timestamps (a truncated last line), with a warning; never silently."""
    import pandas as pd

    missing = [c for c in ("Start_Timestamp", "End_Timestamp") if c not in df.columns]
    if missing:
        raise BadInput(f"{path}: a rocprofv3 trace CSV without its {' and '.join(missing)} column(s)")
    start = pd.to_numeric(df["Start_Timestamp"], errors="coerce")
    end = pd.to_numeric(df["End_Timestamp"], errors="coerce")
    ok = start.notna() & end.notna()
    dropped = int((~ok).sum()) + int(df.attrs.get("cut_rows", 0))
    if dropped:
        warnings.append(f"{path.name}: dropped {dropped} incomplete row(s) (truncated file?)")
    # inf, 1e30, 2**64: no timestamp a Profile can hold (never a wrapped-around number)
    far = ok & ~(start.astype(float).abs().le(MAX_TIME_NS) & end.astype(float).abs().le(MAX_TIME_NS))
    if far.any():
        warnings.append(f"{path.name}: dropped {int(far.sum())} row(s) whose timestamps are not finite or beyond "
                        f"{MAX_TIME_NS:.0e} ns")
    return df[ok & ~far].reset_index(drop=True)


def _import_group(paths: list[Path], rank: int, b: ProfileBuilder, cache: dict[Path, Any]
                  ) -> tuple[list[str], list[dict]]:
    warnings: list[str] = []
    kernels, apis, copies, agents = [], [], [], []
    for p in paths:
        df = cache[p]
        k = _kind(df)
        if k == "kernel":
            kernels.append(_clean(df, p, warnings))
        elif k == "api":
            apis.append(_clean(df, p, warnings))
        elif k == "memcpy":
            copies.append(_clean(df, p, warnings))
        elif k == "agents":
            agents.append(df)
        elif k == "stats":
            continue
        elif k == "counters":
            warnings.append(f"{p.name}: a counter-collection CSV (--pmc, one row per dispatch x counter); its "
                            "counters are not imported and its rows are not kernels")
        elif k == "no-timeline":
            warnings.append(f"{p.name}: PC samples or memory allocations, not kernels; not imported")
        else:
            warnings.append(f"{p.name}: not a rocprofv3 trace CSV this importer reads; skipped")
    import pandas as pd

    devices, agent_index = _agents(agents)

    def dev(agent_ids: list[int]) -> list[int]:
        return [agent_index.get(x, x) for x in agent_ids]

    rows = RangeRows(scope_source="roctx")
    api = pd.concat(apis, ignore_index=True) if apis else None
    if api is not None and len(api):
        _api_rows(api, rows)
    rows.kernels = _kernels(pd.concat(kernels, ignore_index=True), dev) if kernels else []
    rows.copies = _copies(pd.concat(copies, ignore_index=True), agent_index) if copies else []
    # in CSV output the Correlation_Id IS the link: every call sharing a kernel's or copy's id is kept, the first
    # one (with an id) is the one that issued it
    keys = set()
    for df in kernels + copies:
        if "Correlation_Id" in df.columns:
            keys.update(_ints(df["Correlation_Id"]))
    rows.keep = issuing(rows.calls, _LAUNCH_API.search, keys=keys)
    rows.owner = first_owner(rows.calls, rows.keep, valid=lambda c: c >= 0)
    if api is not None:
        rows.unlinked = "have no API call with their Correlation_Id"
    return warnings + fill(b, rank, rows), devices


def _agents(agents: list[Any]) -> tuple[list[dict], dict[int, int]]:
    """Devices of the agent_info files, and agent id -> GPU index."""
    devices: list[dict] = []
    agent_index: dict[int, int] = {}
    for a in agents:
        node = _ints(_col(a, "Node_Id", "Agent_Id", "Absolute_Index"))
        type_col = _col(a, "Agent_Type", "Type")
        typ = [str(t).upper() for t in type_col.tolist()] if type_col is not None else ["GPU"] * len(a)
        tidx_col = _col(a, "Logical_Node_Type_Id", "Type_Index")
        tidx = _ints(tidx_col) if tidx_col is not None else None
        gpu_seen = 0
        for i, (n, t) in enumerate(zip(node, typ)):
            is_gpu = "GPU" in t or t == "2"
            if is_gpu:
                idx = tidx[i] if tidx is not None and tidx[i] >= 0 else gpu_seen
                gpu_seen += 1
                agent_index[n] = idx
                name = _col(a, "Product_Name", "Marketing_Name")
                arch = _col(a, "Name", "Gfx_Target")
                cus = _col(a, "Cu_Count", "CU_Count")
                devices.append({"index": idx, **describe_device(
                    name=name.iloc[i] if name is not None else None, arch=arch.iloc[i] if arch is not None else None,
                    vendor="amd", cus=int(cus.iloc[i]) if cus is not None and str(cus.iloc[i]).isdigit() else None)})
    return devices, agent_index


def _api_rows(api: Any, rows: RangeRows) -> None:
    """HIP calls, roctx markers and RCCL calls of the API trace files."""
    domain = api["Domain"].fillna("").astype(str).str.upper()
    is_marker = domain.str.startswith("MARKER").tolist()
    is_rccl = domain.str.contains("RCCL|NCCL").tolist()
    tid = _ints(_col(api, "Thread_Id"))
    start = _ints(api["Start_Timestamp"])
    end = _ints(api["End_Timestamp"])
    corr = _ints(_col(api, "Correlation_Id")) if "Correlation_Id" in api.columns else [-1] * len(api)
    func = api["Function"].fillna("").astype(str).tolist()
    for i in range(len(api)):
        if is_marker[i]:
            rows.markers.append(Marker(tid[i], start[i], end[i], func[i]))
        elif is_rccl[i]:
            if collective_name(func[i]):
                rows.collectives = rows.collectives or []
                rows.collectives.append(Call(tid[i], start[i], end[i], collective_name(func[i]), corr[i]))
        else:
            rows.calls.append(Call(tid[i], start[i], end[i], func[i], corr[i]))


def _kernels(k: Any, dev: Any) -> list[Kernel]:
    n = len(k)
    corr = _ints(k["Correlation_Id"]) if "Correlation_Id" in k.columns else [-1] * n
    start, end = _ints(k["Start_Timestamp"]), _ints(k["End_Timestamp"])
    wg = [_ints(_col(k, f"Workgroup_Size_{a}")) if f"Workgroup_Size_{a}" in k.columns else [-1] * n for a in "XYZ"]
    gr = [_ints(_col(k, f"Grid_Size_{a}")) if f"Grid_Size_{a}" in k.columns else [-1] * n for a in "XYZ"]
    grid = [[(-(-g // w) if g >= 0 and w > 0 else g) for g, w in zip(gr[a], wg[a])] for a in range(3)]
    names = k["Kernel_Name"].fillna("").astype(str).tolist() if "Kernel_Name" in k.columns else \
        [f"kernel_{x}" for x in _ints(k["Kernel_Id"])]
    stream = _col(k, "Stream_Id", "Queue_Id")
    device = dev(_agent_nums(k["Agent_Id"])) if "Agent_Id" in k.columns else [-1] * n
    stream = _ints(stream) if stream is not None else [-1] * n
    return list(map(Kernel, start, end, device, stream, corr, names, *grid, *wg))


def _copies(c: Any, agent_index: dict[int, int]) -> list[Copy]:
    n = len(c)
    corr = _ints(c["Correlation_Id"]) if "Correlation_Id" in c.columns else [-1] * n
    start, end = _ints(c["Start_Timestamp"]), _ints(c["End_Timestamp"])
    direction = c["Direction"].fillna("").astype(str).tolist() if "Direction" in c.columns else [""] * n
    src = _agent_nums(c["Source_Agent_Id"]) if "Source_Agent_Id" in c.columns else [-1] * n
    dst = _agent_nums(c["Destination_Agent_Id"]) if "Destination_Agent_Id" in c.columns else [-1] * n
    dirs = [_direction(d) for d in direction]
    devs = [agent_index.get(s_, s_) if d == "DtoH" else agent_index.get(t, t) for d, s_, t in zip(dirs, src, dst)]
    size = _col(c, "Size", "Bytes", "Copy_Bytes")
    stream = _ints(c["Stream_Id"]) if "Stream_Id" in c.columns else [-1] * n
    nbytes = _ints(size) if size is not None else [-1] * n
    return list(map(Copy, start, end, devs, stream, corr, ["memcpy"] * n, dirs, nbytes, [d or None for d in direction]))


def _direction(s: str) -> str | None:
    u = s.upper()
    for key, d in (("HOST_TO_DEVICE", "HtoD"), ("DEVICE_TO_HOST", "DtoH"), ("DEVICE_TO_DEVICE", "DtoD"),
                   ("HOST_TO_HOST", "HtoH"), ("PEER", "PtoP")):
        if key in u:
            return d
    return None


_SAME_RUN_NS = 3600 * 10**9  # files of one run lie within an hour of each other on the boot clock


def _span(df: Any) -> tuple[int, int] | None:
    import pandas as pd

    if "Start_Timestamp" not in df.columns or "End_Timestamp" not in df.columns:
        return None
    s = pd.to_numeric(df["Start_Timestamp"], errors="coerce").dropna()
    e = pd.to_numeric(df["End_Timestamp"], errors="coerce").dropna()
    if s.empty or e.empty:
        return None
    return int(s.min()), int(e.max())


def _split_runs(groups: list[list[Path]], cache: dict[Path, Any], given: set[Path],
                warnings: list[str]) -> list[list[Path]]:
    """Split a name group whose files come from different runs (timestamps far apart) into separate runs.

    Siblings that were not given and belong to another run are left out, with a warning."""
    out: list[list[Path]] = []
    for g in groups:
        spans = {p: _span(cache[p]) for p in g}
        anchor = next((p for p in g if _kind(cache[p]) == "kernel" and spans[p]), None) or \
            next((p for p in g if spans[p]), None)
        if anchor is None:
            out.append(g)
            continue
        a0, a1 = spans[anchor]
        same, other = [], []
        for p in g:
            sp = spans[p]
            far = sp is not None and (sp[0] > a1 + _SAME_RUN_NS or sp[1] < a0 - _SAME_RUN_NS)
            (other if far else same).append(p)
        if any(p in given for p in same):
            out.append(same)
        else:
            names = ", ".join(p.name for p in same)
            warnings.append(f"{names}: beside the given file(s) but from another run; skipped")
        for p in other:
            if p in given:
                warnings.append(f"{p.name}: its timestamps are far from {anchor.name}'s; imported as a separate run")
                out.append([p])
            else:
                warnings.append(f"{p.name}: beside {anchor.name} but from another run (timestamps far apart); skipped")
    return out


def load(files: list[Path], rank: int | None = None) -> Profile:
    """Import rocprofv3 CSV files: one rank per run (kernel trace plus its sibling files)."""
    given = {Path(f).resolve() for f in files}
    groups = [[p.resolve() for p in g] for g in _expand([Path(f) for f in files])]
    cache = {p: _read(p) for g in groups for p in g}
    warnings: list[str] = []
    groups = _split_runs(groups, cache, given, warnings)
    units = []
    for g in groups:
        hint = next((r for r in (rank_from_name(p) for p in g) if r is not None), None)
        anchor = next((p for p in g if _kind(cache[p]) == "kernel"), g[0])
        units.append((str(anchor) if len(g) == 1 else f"{anchor} (+{len(g) - 1} sibling file(s))", hint))
    work = [any(_kind(cache[p]) in ("kernel", "memcpy") for p in g) for g in groups]
    paired, idle = drop_idle(list(zip(groups, units)), work, [u[0] for u in units])
    groups, units = [g for g, _ in paired], [u for _, u in paired]
    warnings += idle
    ranks, rank_warnings = assign_ranks(units, rank, "rocprofv3 CSV")
    warnings += rank_warnings
    profiles = []
    for g, r in zip(groups, ranks):
        b = ProfileBuilder(base_meta("rocprofv3-csv", g, "rocprofv3 (CSV)"))
        w, devices = _import_group(g, r, b, cache)
        b.meta["ranks"] = [{"rank": r, "file": str(g[0]), "devices": devices}]
        if w:
            b.meta["warnings"] = w
        profiles.append(b.build())
    return finish(profiles, warnings, files, "no kernel, API, copy or marker rows in these CSV files")
