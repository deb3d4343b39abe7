"""Collectives from a Kineto trace: NCCL/RCCL kernels and the record_param_comms ops that describe them.

A row per communication kernel (a kernel whose args carry "Collective name", or whose name starts with
nccl/rccl), with message sizes from the kernel's own args or from the record_param_comms op that encloses
its launch; plus a row per record_param_comms op that launched no kernel (CPU backends such as gloo, or
traces without GPU activity), timed by the op.
"""

from __future__ import annotations

import json
import re

import numpy as np

_COMM_KERNEL = re.compile(r"^(?:void\s+)?(?:nccl|rccl|ncclDev|ncclKernel)", re.IGNORECASE)
_KERNEL_COLL = re.compile(r"(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|Send|Recv|AllToAll|AlltoAll)",
                          re.IGNORECASE)

# record_param_comms entries that mark a wait on a work handle, not a data transfer
SKIP_NAMES = {"wait", "wait_tensor"}

DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "long": 8, "int64": 8, "int": 4, "int32": 4, "short": 2, "int16": 2, "char": 1, "int8": 1,
    "byte": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1, "complexfloat": 8, "complexdouble": 16, "uint16": 2, "uint32": 4, "uint64": 8,
}


def normalize_collective(name: str | None) -> str | None:
    """'_allgather_base' -> 'allgather', 'all_to_allv' -> 'all_to_all', 'AllReduce' -> 'allreduce'."""
    if not name:
        return None
    s = name.lower().replace("-", "_")
    flat = s.replace("_", "")
    for key, out in (("allreduce", "allreduce"), ("reducescatter", "reduce_scatter"), ("allgather", "allgather"),
                     ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("barrier", "barrier"),
                     ("sendrecv", "sendrecv"), ("send", "send"), ("recv", "recv"), ("gather", "gather"),
                     ("scatter", "scatter"), ("reduce", "reduce")):
        if key in flat:
            return out
    return s.strip("_")


def dtype_bytes(dtype: str | None) -> int:
    if not dtype:
        return -1
    return DTYPE_BYTES.get(dtype.lower().replace("c10::", "").replace("torch.", ""), -1)


def _nbytes(nelems, dtype) -> int:
    size = dtype_bytes(dtype)
    try:
        n = int(nelems)
    except (TypeError, ValueError):
        return -1
    return n * size if size > 0 and n >= 0 else -1


def _ranks_text(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, str):
        try:
            return json.dumps(json.loads(v), separators=(", ", ": "))
        except ValueError:
            return v
    return json.dumps(v)


def collectives(imp) -> None:
    """Fill the collectives table of the importer `imp` (a kineto._Importer after kernels are built)."""
    b = imp.builder
    rank = imp.rank
    ops = imp.op_events
    comm_ops = [i for i, e in enumerate(ops) if e.args is not None and e.args.coll_name is not None]
    is_comm_op = np.zeros(len(ops), bool)
    is_comm_op[comm_ops] = True
    parent = imp.op_nest.parent
    used_ops: set[int] = set()

    def comm_ancestor(op: int) -> int:
        i, hops = op, 0
        while i >= 0 and hops < 64:
            if is_comm_op[i]:
                return i
            i = int(parent[i])
            hops += 1
        return -1

    c_idx = np.asarray(comm_ops, dtype=np.int64)
    c_lane, c_start, c_end = imp.op_lane[c_idx], imp.op_start[c_idx], imp.op_end[c_idx]
    c_free = np.ones(len(c_idx), bool)
    c_pos = {int(i): j for j, i in enumerate(comm_ops)}

    def descendant_comm(op: int) -> int:
        """The first unused record_param_comms inside `op` (it is often a child of the c10d op)."""
        if op < 0 or not len(c_idx):
            return -1
        hit = np.flatnonzero(c_free & (c_lane == imp.op_lane[op]) & (c_start >= imp.op_start[op])
                             & (c_end <= imp.op_end[op]))
        if not len(hit):
            return -1
        c_free[hit[0]] = False
        return int(c_idx[hit[0]])

    kernel_rows = []
    for k, (a, name) in enumerate(zip(imp.k_args, imp.k_names)):
        if a.coll_name is not None or (isinstance(name, str) and _COMM_KERNEL.match(name)):
            kernel_rows.append(k)
    for k in kernel_rows:
        a = imp.k_args[k]
        op = int(imp.k_op[k])
        c_op = comm_ancestor(op) if op >= 0 else -1
        if c_op < 0 and op >= 0:
            c_op = descendant_comm(op)
        meta = a if a.coll_name is not None else (ops[c_op].args if c_op >= 0 else None)
        if c_op >= 0:
            used_ops.add(c_op)
            c_free[c_pos[c_op]] = False
        if meta is not None:
            name = normalize_collective(meta.coll_name)
            dtype = meta.dtype
            bin_, bout = _nbytes(meta.in_nelems, dtype), _nbytes(meta.out_nelems, dtype)
            group = meta.pg_desc or (str(meta.pg_name) if meta.pg_name is not None else None) or (
                str(meta.pg_id) if meta.pg_id is not None else None)
            gsize = int(meta.group_size) if isinstance(meta.group_size, (int, str)) and str(meta.group_size).isdigit() else -1
            granks = _ranks_text(meta.pg_ranks)
        else:
            # old traces: no args; c10d wraps the launch in a "nccl:all_reduce"-style annotation
            scope = imp.k_scope[k]
            sname = imp.st.strings[scope] if scope >= 0 else ""
            m = _KERNEL_COLL.search(imp.k_names[k] or "")
            if sname.startswith(("nccl:", "rccl:", "gloo:")):
                name = normalize_collective(sname.split(":", 1)[1])
            else:
                name = normalize_collective(m.group(1)) if m else None
            dtype = group = granks = None
            bin_ = bout = gsize = -1
        b.row("collectives", rank=rank, start_ns=int(imp.k_start[k]), dur_ns=int(imp.k_dur[k]), name=name,
              bytes_in=bin_, bytes_out=bout, dtype=dtype, group=group, group_size=gsize, group_ranks=granks,
              kernel=k, op=c_op if c_op >= 0 else op, phase=imp.st.strings[imp.k_phase[k]] if imp.k_phase[k] >= 0 else None,
              step=int(imp.k_step[k]))
    # comm ops with no kernel (gloo / CPU-only traces, or kernels not captured)
    if comm_ops:
        _, _, phase, step = imp._scope_cols(imp.ann.enclosing(imp.op_lane[comm_ops], imp.op_start[comm_ops]))
        for j, i in enumerate(comm_ops):
            if i in used_ops:
                continue
            # a comm op nested in another comm op that was already counted is the same collective
            if comm_ancestor(int(parent[i])) in used_ops:
                continue
            a = ops[i].args
            if (a.coll_name or "").lower() in SKIP_NAMES:
                continue
            gsize = int(a.group_size) if isinstance(a.group_size, (int, str)) and str(a.group_size).isdigit() else -1
            b.row("collectives", rank=rank, start_ns=int(imp.op_start[i]), dur_ns=int(imp.op_end[i] - imp.op_start[i]),
                  name=normalize_collective(a.coll_name), bytes_in=_nbytes(a.in_nelems, a.dtype),
                  bytes_out=_nbytes(a.out_nelems, a.dtype), dtype=a.dtype,
                  group=a.pg_desc or (str(a.pg_name) if a.pg_name is not None else None),
                  group_size=gsize, group_ranks=_ranks_text(a.pg_ranks), kernel=-1, op=i,
                  phase=imp.st.strings[phase[j]] if phase[j] >= 0 else None, step=int(step[j]))
