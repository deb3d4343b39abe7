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
from mmprof.importers._ranges import Call, Copy, Kernel, Marker, RangeRows, fill, first_owner, gpu_keys, issuing
from mmprof.importers._timeline import assign_ranks, base_meta, collective_name, drop_idle, finish
from mmprof.labels import rank_from_name
from mmprof.profiles.profile import Profile, ProfileBuilder

_LAUNCH_API = re.compile(r"(Launch|Memcpy|Memset|StreamBeginCapture|StreamEndCapture)", re.IGNORECASE)


def _parse(path: Path) -> dict[str, Any]:
    import orjson

    data = read_bytes(path, json_document=True)
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
    mk = sorted((r for r in recs.get("marker_api") or [] if r.get("start_timestamp") is not None),
                key=lambda r: r["start_timestamp"])
    rows = RangeRows(scope_source="roctx", markers=[
        Marker(int(r.get("thread_id", -1)), int(r["start_timestamp"]),
               int(r.get("end_timestamp", r["start_timestamp"])),
               messages.get(_corr(r)) or names.op(r.get("kind"), r.get("operation")) or "") for r in mk])
    dispatches = recs.get("kernel_dispatch")
    if dispatches is None:
        dispatches = recs.get("kernel_dispatches") or []
    rows.kernels = [_kernel(r, agents, symbols) for r in sorted(dispatches, key=lambda r: r.get("start_timestamp", 0))]
    rows.copies = [_copy(r, agents, names) for r in sorted(recs.get("memory_copy") or [],
                                                            key=lambda r: r.get("start_timestamp", 0))]
    api = sorted((r for r in recs.get("hip_api") or [] if r.get("start_timestamp") is not None),
                 key=lambda r: r["start_timestamp"])
    rows.calls = [Call(int(r.get("thread_id", -1)), int(r["start_timestamp"]), int(r["end_timestamp"]),
                       names.op(r.get("kind"), r.get("operation")) or "", _corr(r)) for r in api]
    # the internal correlation id links a dispatch or copy to its HIP call: every call sharing one is kept, the
    # first is the one that issued it
    rows.keep = issuing(rows.calls, _LAUNCH_API.search, keys=gpu_keys(rows.kernels, rows.copies))
    rows.owner = first_owner(rows.calls, rows.keep, valid=lambda c: True)
    rows.unlinked = "have no HIP call with their correlation id" if api else None
    rccl = [r for r in recs.get("rccl_api") or [] if collective_name(names.op(r.get("kind"), r.get("operation")) or "")]
    if rccl:
        rows.collectives = [Call(int(r.get("thread_id", -1)), int(r["start_timestamp"]), int(r["end_timestamp"]),
                                 collective_name(names.op(r.get("kind"), r.get("operation")) or ""), _corr(r))
                            for r in rccl]
    return fill(b, rank, rows), devices


_DIRECTIONS = (("HOST_TO_DEVICE", "HtoD"), ("DEVICE_TO_HOST", "DtoH"), ("DEVICE_TO_DEVICE", "DtoD"),
               ("HOST_TO_HOST", "HtoH"), ("PEER", "PtoP"))


def _kernel(r: dict, agents: dict[Any, dict], symbols: dict[Any, str]) -> Kernel:
    i = r.get("dispatch_info") or r
    wg = [int((i.get("workgroup_size") or {}).get(a, -1)) for a in "xyz"]
    gr = [int((i.get("grid_size") or {}).get(a, -1)) for a in "xyz"]
    grid = [(-(-g // w) if g >= 0 and w > 0 else g) for g, w in zip(gr, wg)]
    stream = _handle(r.get("stream_id")) if r.get("stream_id") is not None else _handle(i.get("queue_id"))
    return Kernel(int(r["start_timestamp"]), int(r["end_timestamp"]),
                  agents.get(_handle(i.get("agent_id")), {}).get("index", -1), stream, _corr(r),
                  symbols.get(i.get("kernel_id")) or f"kernel_{i.get('kernel_id')}", *grid, *wg)


def _copy(r: dict, agents: dict[Any, dict], names: _Names) -> Copy:
    op = names.op(r.get("kind"), r.get("operation")) or ""
    src = agents.get(_handle(r.get("src_agent_id")), {})
    dst = agents.get(_handle(r.get("dst_agent_id")), {})
    d = None
    for key, val in _DIRECTIONS:
        if key in op.upper():
            d = val
    if d is None and src and dst:
        d = f"{'D' if src['gpu'] else 'H'}to{'D' if dst['gpu'] else 'H'}"
    return Copy(int(r["start_timestamp"]), int(r["end_timestamp"]),
                dst.get("index", -1) if dst.get("gpu") else src.get("index", -1), None, _corr(r), "memcpy", d,
                int(r.get("bytes", -1)), names.op(r.get("kind"), r.get("operation")))


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
