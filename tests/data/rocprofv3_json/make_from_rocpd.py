"""Convert a real rocprofv3 rocpd database into the rocprofiler-sdk JSON layout (`--output-format json`).

No real public rocprofv3 `results.json` exists (docs/formats.md 2.2), so the JSON importer's test data is made
by converting the real rocpd sample: the same dispatches, HIP calls and agents, written in the layout of
rocprofiler-sdk's generateJSON.cpp / serialization.hpp. It is a conversion, not tool output.

Mapping choices (the rocpd DB lacks a few JSON fields):
- correlation_id.internal = the rocpd event stack_id (the id that links a dispatch to its HIP call);
  correlation_id.external = 0 (as in the DB).
- strings.buffer_records is indexed by buffer-tracing kind id; operation ids index its `operations` list
  (here: the API names sorted, not the SDK's enum order).
- agent records are the `extdata` JSON of rocpd_info_agent, which is the SDK's serialized agent struct.

Usage: python make_from_rocpd.py ../samples/rocprofv3/rocpd/14_results.db 14_results.json
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

# rocprofiler_buffer_tracing_kind_t values (rocprofiler-sdk/fwd.h)
KIND_IDS = {"HIP_RUNTIME_API": 5, "HIP_COMPILER_API": 6, "MARKER_CORE_API": 7, "MEMORY_COPY": 10,
            "KERNEL_DISPATCH": 11, "RCCL_API": 15, "HIP_RUNTIME_API_EXT": 22, "HIP_COMPILER_API_EXT": 23}


def one(con, base):
    return con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE ?",
                       (f"rocpd_{base}_%",)).fetchone()[0]


def main(src: str, dst: str) -> None:
    con = sqlite3.connect(f"file:{src}?mode=ro&immutable=1", uri=True)
    T = {b: one(con, b) for b in ("string", "info_process", "info_thread", "info_agent", "info_kernel_symbol",
                                  "kernel_dispatch", "region", "event")}
    strings = dict(con.execute(f"SELECT id, string FROM {T['string']}"))
    threads = dict(con.execute(f"SELECT id, tid FROM {T['info_thread']}"))
    pid, init, fini, command = con.execute(f'SELECT pid, init, fini, command FROM {T["info_process"]}').fetchone()
    agents, handle = [], {}
    for aid, ext in con.execute(f"SELECT id, extdata FROM {T['info_agent']} ORDER BY id"):
        a = json.loads(ext)
        agents.append({k: a[k] for k in ("size", "id", "type", "cpu_cores_count", "simd_count", "wave_front_size",
                                         "cu_count", "num_xcc", "name", "vendor_name", "product_name", "model_name",
                                         "node_id", "logical_node_id", "logical_node_type_id") if k in a})
        handle[aid] = a["id"]["handle"]
    symbols = []
    for kid, kname, dname, gss, pss, sgpr, vgpr, agpr in con.execute(
            f"SELECT id, kernel_name, display_name, group_segment_size, private_segment_size, sgpr_count, "
            f"arch_vgpr_count, accum_vgpr_count FROM {T['info_kernel_symbol']} ORDER BY id"):
        symbols.append({"kernel_id": kid, "kernel_name": kname, "formatted_kernel_name": dname,
                        "demangled_kernel_name": dname, "truncated_kernel_name": dname.split("(")[0],
                        "group_segment_size": gss, "private_segment_size": pss, "sgpr_count": sgpr,
                        "arch_vgpr_count": vgpr, "accum_vgpr_count": agpr})
    regions = con.execute(
        f"SELECT r.tid, r.start, r.\"end\", r.name_id, e.stack_id, e.category_id FROM {T['region']} r "
        f"JOIN {T['event']} e ON e.id = r.event_id ORDER BY r.start").fetchall()
    ops: dict[str, set[str]] = {}
    for _t, _s, _e, name_id, _st, cat in regions:
        ops.setdefault(strings[cat], set()).add(strings[name_id])
    ops["KERNEL_DISPATCH"] = {"KERNEL_DISPATCH_ENQUEUE", "KERNEL_DISPATCH_COMPLETE"}
    buffer_names = [{"kind": "NONE", "operations": []} for _ in range(max(KIND_IDS.values()) + 1)]
    for kind, names in ops.items():
        buffer_names[KIND_IDS[kind]] = {"kind": kind, "operations": sorted(names)}
    hip_api = []
    for tid, start, end, name_id, stack, cat in regions:
        kind = strings[cat]
        hip_api.append({"size": 64, "kind": KIND_IDS[kind], "correlation_id": {"internal": stack, "external": 0},
                        "operation": buffer_names[KIND_IDS[kind]]["operations"].index(strings[name_id]),
                        "start_timestamp": start, "end_timestamp": end, "thread_id": threads[tid]})
    kd_op = buffer_names[KIND_IDS["KERNEL_DISPATCH"]]["operations"].index("KERNEL_DISPATCH_COMPLETE")
    dispatches = []
    for (tid, agent, kid, did, queue, stream, start, end, pss, gss, wx, wy, wz, gx, gy, gz, stack) in con.execute(
            f"SELECT k.tid, k.agent_id, k.kernel_id, k.dispatch_id, k.queue_id, k.stream_id, k.start, k.\"end\", "
            f"k.private_segment_size, k.group_segment_size, k.workgroup_size_x, k.workgroup_size_y, "
            f"k.workgroup_size_z, k.grid_size_x, k.grid_size_y, k.grid_size_z, e.stack_id "
            f"FROM {T['kernel_dispatch']} k JOIN {T['event']} e ON e.id = k.event_id ORDER BY k.start"):
        dispatches.append({
            "size": 120, "kind": KIND_IDS["KERNEL_DISPATCH"], "operation": kd_op, "thread_id": threads[tid],
            "correlation_id": {"internal": stack, "external": 0}, "start_timestamp": start, "end_timestamp": end,
            "stream_id": {"handle": stream},
            "dispatch_info": {"size": 88, "agent_id": {"handle": handle[agent]}, "queue_id": {"handle": queue},
                              "kernel_id": kid, "dispatch_id": did, "private_segment_size": pss,
                              "group_segment_size": gss, "workgroup_size": {"x": wx, "y": wy, "z": wz},
                              "grid_size": {"x": gx, "y": gy, "z": gz}}})
    doc = {"rocprofiler-sdk-tool": [{
        "metadata": {"pid": pid, "init_time": init, "fini_time": fini, "command": command.split(),
                     "config": {"kernel_trace": True, "hip_runtime_api_trace": True}},
        "agents": agents, "counters": [],
        "strings": {"callback_records": [], "buffer_records": buffer_names, "marker_api": [],
                    "correlation_id": {"external": []}, "counters": {"dimension_ids": []}},
        "code_objects": [], "kernel_symbols": symbols, "host_functions": [], "summary": [],
        "callback_records": {"counter_collection": []},
        "buffer_records": {"kernel_dispatch": dispatches, "hip_api": hip_api, "hsa_api": [], "marker_api": [],
                           "rccl_api": [], "memory_copy": [], "memory_allocation": [], "scratch_memory": []},
    }]}
    Path(dst).write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"{dst}: {len(dispatches)} dispatches, {len(hip_api)} HIP calls, {len(agents)} agents")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
