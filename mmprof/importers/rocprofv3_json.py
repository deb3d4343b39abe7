"""rocprofv3 JSON (`--output-format json`, rocprofiler-sdk `<pid>_results.json`) -> Profile.

Layout (rocprofiler-sdk generateJSON.cpp): {"rocprofiler-sdk-tool": [ one object per process ]}, each with
`metadata` (pid, init/fini time, command), `agents` (the SDK agent struct: id.handle, type 1=CPU 2=GPU,
name=gfx target, product_name, cu_count, node ids), `strings.buffer_records` (indexed by buffer-tracing kind
id: {kind, operations[op id]}), `strings.marker_api` (roctx messages by correlation id), `kernel_symbols`
(kernel_id -> names), and `buffer_records.{kernel_dispatch | kernel_dispatches (older), hip_api, marker_api,
rccl_api, memory_copy, ...}` records with start/end_timestamp in ns and correlation_id.{internal, external}.

The internal correlation id links a dispatch or copy to the HIP call that issued it. No real public sample of
this format exists; the importer follows the writer source and is tested on a conversion of a real rocpd DB.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mmprof.errors import BadInput
from mmprof.fileio import read_bytes
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
)
from mmprof.labels import rank_from_name
from mmprof.profiles.model import Profile, ProfileBuilder

_LAUNCH_API = re.compile(r"(Launch|Memcpy|Memset|StreamBeginCapture|StreamEndCapture)", re.IGNORECASE)


def _parse(path: Path) -> dict[str, Any]:
    import orjson

    data = read_bytes(path)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise BadInput(f"{path}: truncated or malformed JSON ({e}); re-copy the file or re-run the capture") from e
    if not isinstance(doc, dict) or "rocprofiler-sdk-tool" not in doc:
        raise BadInput(f"{path}: not a rocprofv3 JSON file (no 'rocprofiler-sdk-tool' key)")
    return doc


def _handle(v: Any) -> Any:
    return v.get("handle") if isinstance(v, dict) else v


def _corr(rec: dict) -> int:
    c = rec.get("correlation_id")
    if isinstance(c, dict):
        c = c.get("internal")
    return int(c) if c is not None else -1


class _Names:
    """Kind and operation names from strings.buffer_records (a list indexed by kind id, or a dict)."""

    def __init__(self, table: Any) -> None:
        self.kinds: dict[int, tuple[str, list]] = {}
        items = enumerate(table) if isinstance(table, list) else (table or {}).items()
        for k, entry in items:
            if isinstance(entry, dict):
                ops = entry.get("operations") or []
                kind_id = entry.get("value", k) if isinstance(entry.get("value"), int) else k
                self.kinds[int(kind_id)] = (str(entry.get("kind", "")), ops)

    def kind(self, k: Any) -> str:
        return self.kinds.get(int(k), ("", []))[0] if isinstance(k, int) else str(k or "")

    def op(self, k: Any, op: Any) -> str | None:
        if isinstance(op, str):
            return op
        ops = self.kinds.get(int(k), ("", []))[1] if isinstance(k, int) else []
        if isinstance(op, int) and 0 <= op < len(ops):
            o = ops[op]
            return o if isinstance(o, str) else (o.get("name") if isinstance(o, dict) else str(o))
        return None


def _marker_messages(raw: Any) -> dict[int, str]:
    """strings.marker_api: cereal map -> [{key, value}] or a plain dict."""
    out: dict[int, str] = {}
    if isinstance(raw, dict):
        for k, v in raw.items():
            try:
                out[int(k)] = str(v)
            except ValueError:
                pass
    elif isinstance(raw, list):
        for item in raw:
            if isinstance(item, dict) and "key" in item:
                out[int(item["key"])] = str(item.get("value", ""))
    return out


def _import_process(proc: dict[str, Any], rank: int, b: ProfileBuilder) -> tuple[list[str], list[dict]]:
    warnings: list[str] = []
    names = _Names((proc.get("strings") or {}).get("buffer_records"))
    recs = proc.get("buffer_records") or {}
    agents = {}
    devices = []
    for a in proc.get("agents") or []:
        typ = a.get("type")
        is_gpu = typ == 2 or str(typ).upper().endswith("GPU")
        idx = a.get("logical_node_type_id", a.get("gpu_index", -1)) if is_gpu else -1
        agents[_handle(a.get("id"))] = {"gpu": is_gpu, "index": idx if idx is not None else -1}
        if is_gpu:
            d = describe_device(name=a.get("product_name"), arch=a.get("name"), vendor=a.get("vendor_name") or "amd",
                                cus=a.get("cu_count"))
            devices.append({"index": idx, **d})
    devices.sort(key=lambda d: d["index"])
    symbols = {}
    for s in proc.get("kernel_symbols") or []:
        nm = s.get("formatted_kernel_name") or s.get("demangled_kernel_name") or s.get("kernel_name") or ""
        if nm.endswith(".kd"):
            nm = nm[:-3]
        symbols[s.get("kernel_id")] = nm

    # markers -> scopes (message by correlation id; the operation name otherwise)
    messages = _marker_messages((proc.get("strings") or {}).get("marker_api"))
    mk = [r for r in recs.get("marker_api") or [] if r.get("start_timestamp") is not None]
    nest = None
    if mk:
        mk.sort(key=lambda r: r["start_timestamp"])
        nest = add_scopes(b, rank, [int(r.get("thread_id", -1)) for r in mk], [int(r["start_timestamp"]) for r in mk],
                          [int(r.get("end_timestamp", r["start_timestamp"])) for r in mk],
                          [messages.get(_corr(r)) or names.op(r.get("kind"), r.get("operation")) or "" for r in mk],
                          "roctx")

    dispatches = recs.get("kernel_dispatch")
    if dispatches is None:
        dispatches = recs.get("kernel_dispatches") or []
    copies = recs.get("memory_copy") or []
    gpu_corr = {_corr(r) for r in dispatches} | {_corr(r) for r in copies}
    api = sorted((r for r in recs.get("hip_api") or [] if r.get("start_timestamp") is not None),
                 key=lambda r: r["start_timestamp"])
    api_names = [names.op(r.get("kind"), r.get("operation")) or "" for r in api]
    keep = [i for i, r in enumerate(api) if _corr(r) in gpu_corr or _LAUNCH_API.search(api_names[i])]
    first = b.n("launches")
    extend(b, "launches", len(keep), rank=[rank] * len(keep), tid=[int(api[i].get("thread_id", -1)) for i in keep],
           start_ns=[int(api[i]["start_timestamp"]) for i in keep],
           dur_ns=[int(api[i]["end_timestamp"]) - int(api[i]["start_timestamp"]) for i in keep],
           name=[api_names[i] for i in keep], correlation=[_corr(api[i]) for i in keep])
    by_corr: dict[int, int] = {}
    for j, i in enumerate(keep):
        by_corr.setdefault(_corr(api[i]), first + j)
    l_tid, l_start = b.cols["launches"]["tid"], b.cols["launches"]["start_ns"]

    def link(rows: list[dict]) -> tuple:
        launch = [by_corr.get(_corr(r), -1) for r in rows]
        return (launch, *attribute(nest, [l_tid[x] if x >= 0 else -1 for x in launch],
                                   [l_start[x] if x >= 0 else -1 for x in launch]))

    kd = sorted(dispatches, key=lambda r: r.get("start_timestamp", 0))
    n = len(kd)
    if n:
        info = [r.get("dispatch_info") or r for r in kd]
        launch, scope, path, phase, step = link(kd)
        wg = [[int((i.get("workgroup_size") or {}).get(a, -1)) for i in info] for a in "xyz"]
        gr = [[int((i.get("grid_size") or {}).get(a, -1)) for i in info] for a in "xyz"]
        grid = [[(-(-g // w) if g >= 0 and w > 0 else g) for g, w in zip(gr[a], wg[a])] for a in range(3)]
        k_first = b.n("kernels")
        extend(b, "kernels", n, rank=[rank] * n,
               device=[agents.get(_handle(i.get("agent_id")), {}).get("index", -1) for i in info],
               stream=[_handle(r.get("stream_id")) if r.get("stream_id") is not None else _handle(i.get("queue_id"))
                       for r, i in zip(kd, info)],
               start_ns=[int(r["start_timestamp"]) for r in kd],
               dur_ns=[int(r["end_timestamp"]) - int(r["start_timestamp"]) for r in kd],
               name=[symbols.get(i.get("kernel_id")) or f"kernel_{i.get('kernel_id')}" for i in info],
               grid_x=grid[0], grid_y=grid[1], grid_z=grid[2], block_x=wg[0], block_y=wg[1], block_z=wg[2],
               correlation=[_corr(r) for r in kd], launch=launch, scope=scope, scope_path=path, phase=phase,
               step=step)
        missing = sum(1 for x in launch if x < 0)
        if missing and api:
            warnings.append(f"rank {rank}: {missing} of {n} kernels have no HIP call with their correlation id")
    else:
        k_first = b.n("kernels")

    if copies:
        copies = sorted(copies, key=lambda r: r.get("start_timestamp", 0))
        launch, scope, _p, phase, step = link(copies)
        dirs, devs = [], []
        for r in copies:
            op = names.op(r.get("kind"), r.get("operation")) or ""
            src = agents.get(_handle(r.get("src_agent_id")), {})
            dst = agents.get(_handle(r.get("dst_agent_id")), {})
            d = None
            for key, val in (("HOST_TO_DEVICE", "HtoD"), ("DEVICE_TO_HOST", "DtoH"), ("DEVICE_TO_DEVICE", "DtoD"),
                             ("HOST_TO_HOST", "HtoH"), ("PEER", "PtoP")):
                if key in op.upper():
                    d = val
            if d is None and src and dst:
                d = f"{'D' if src['gpu'] else 'H'}to{'D' if dst['gpu'] else 'H'}"
            dirs.append(d)
            devs.append(dst.get("index", -1) if dst.get("gpu") else src.get("index", -1))
        m = len(copies)
        extend(b, "memcpy", m, rank=[rank] * m, device=devs, start_ns=[int(r["start_timestamp"]) for r in copies],
               dur_ns=[int(r["end_timestamp"]) - int(r["start_timestamp"]) for r in copies], kind=["memcpy"] * m,
               direction=dirs, bytes=[int(r.get("bytes", -1)) for r in copies],
               name=[names.op(r.get("kind"), r.get("operation")) for r in copies],
               correlation=[_corr(r) for r in copies], launch=launch, scope=scope, phase=phase, step=step)

    rccl = [r for r in recs.get("rccl_api") or [] if collective_name(names.op(r.get("kind"), r.get("operation")) or "")]
    if rccl:
        _s, _p, ph, st = attribute(nest, [int(r.get("thread_id", -1)) for r in rccl],
                                   [int(r["start_timestamp"]) for r in rccl])
        extend(b, "collectives", len(rccl), rank=[rank] * len(rccl), start_ns=[int(r["start_timestamp"]) for r in rccl],
               dur_ns=[int(r["end_timestamp"]) - int(r["start_timestamp"]) for r in rccl],
               name=[collective_name(names.op(r.get("kind"), r.get("operation")) or "") for r in rccl],
               phase=ph, step=st)
    else:
        add_comm_kernels(b, k_first, n)
    return warnings, devices


def load(files: list[Path], rank: int | None = None) -> Profile:
    """Import rocprofv3 JSON files: one rank per process entry, merged into one Profile."""
    units = []
    for f in files:
        f = Path(f)
        procs = _parse(f)["rocprofiler-sdk-tool"]
        if isinstance(procs, dict):
            procs = [procs]
        if not procs:
            raise BadInput(f"{f}: rocprofv3 JSON with no process entries")
        for i, proc in enumerate(procs):
            pid = (proc.get("metadata") or {}).get("pid")
            label = str(f) if len(procs) == 1 else f"{f} (pid {pid})"
            units.append((f, proc, label, rank_from_name(f) if len(procs) == 1 else None))
    work = [bool((u[1].get("buffer_records") or {}).get("kernel_dispatch")
                 or (u[1].get("buffer_records") or {}).get("kernel_dispatches")
                 or (u[1].get("buffer_records") or {}).get("memory_copy")) for u in units]
    units, idle = drop_idle(units, work, [u[2] for u in units])
    ranks, warnings = assign_ranks([(u[2], u[3]) for u in units], rank, "rocprofv3 JSON")
    warnings = idle + warnings
    profiles = []
    for (f, proc, _label, _h), r in zip(units, ranks):
        b = ProfileBuilder(base_meta("rocprofv3-json", [f], "rocprofv3 (rocprofiler-sdk JSON)"))
        w, devices = _import_process(proc, r, b)
        md = proc.get("metadata") or {}
        node = md.get("node") if isinstance(md.get("node"), dict) else {}
        b.meta["ranks"] = [{"rank": r, "host": node.get("hostname"), "pid": md.get("pid"), "file": str(f),
                            "devices": devices,
                            "command": md.get("command") if isinstance(md.get("command"), str) else None}]
        b.meta["command"] = md.get("command")
        if w:
            b.meta["warnings"] = w
        profiles.append(b.build())
    return finish(profiles, warnings, files, "rocprofv3 JSON holds no dispatches, HIP calls, copies or markers")
