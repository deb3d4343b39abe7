"""Collectives from a Kineto trace: NCCL/RCCL kernels and the record_param_comms ops that describe them.

A row per communication kernel (a kernel whose args carry "Collective name", or whose name starts with
nccl/rccl), with message sizes from the kernel's own args or from the record_param_comms op that encloses
its launch; plus a row per record_param_comms op that launched no kernel (CPU backends such as gloo, or
traces without GPU activity), timed by the op.

Traces with no record_param_comms at all (torch 2.13 on CPU writes none for gloo) get their rows from the
`c10d::*` dispatcher ops instead, timed by the matching `gloo:*` range on gloo's worker thread when there is
one (see host_collectives below and docs/importers.md).
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left

import msgspec
import numpy as np

from mmprof.units import dtype_bytes

_COMM_KERNEL = re.compile(r"^(?:void\s+)?(?:nccl|rccl|ncclDev|ncclKernel)", re.IGNORECASE)
_KERNEL_COLL = re.compile(r"(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|Send|Recv|AllToAll|AlltoAll)",
                          re.IGNORECASE)

# record_param_comms entries that mark a wait on a work handle, not a data transfer
SKIP_NAMES = {"wait", "wait_tensor"}



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


def _nbytes(nelems, dtype) -> int:
    """Message bytes from an element count and a dtype name; -1 when either is unknown."""
    size = dtype_bytes(dtype)
    if nelems is None or size is None:
        return -1
    try:
        n = int(nelems)
    except (TypeError, ValueError, OverflowError):
        return -1
    return n * size if n >= 0 else -1


def _ranks_text(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, msgspec.Raw):  # kept as its JSON text by the decoder (mmprof.importers._chrome.Args)
        text = bytes(v)
        if not text:  # absent
            return None
        if len(text) > 65536:  # no process group lists that many ranks in a trace; a hostile value is not kept
            return None
        try:
            v = msgspec.json.decode(text)
        except msgspec.DecodeError:
            return None
    if isinstance(v, str):
        try:
            return json.dumps(json.loads(v), separators=(", ", ": "))
        except ValueError:
            return v
    return json.dumps(v)


def collectives(imp) -> None:
    """Fill the collectives table of the importer `imp` (a kineto._Importer after kernels are built)."""
    comm = _CommOps(imp)
    for k in imp.comm_kernel_rows():
        _kernel_row(imp, comm, k)
    _op_rows(imp, comm)
    # collectives with no record_param_comms metadata: c10d ops and gloo ranges
    host_collectives(imp, comm.rows)


class _CommOps:
    """The record_param_comms ops of a rank (ops whose args name a collective) and which of them a kernel row has
    used: found as the kernel op's ancestor, else as the first unused one inside it."""

    def __init__(self, imp) -> None:
        self.imp = imp
        self.rows = imp.comm_op_rows()
        self.is_comm = np.zeros(len(imp.op_start), bool)
        self.is_comm[self.rows] = True
        self.parent = imp.op_nest.parent
        self.used: set[int] = set()
        self.idx = np.asarray(self.rows, dtype=np.int64)
        self.lane, self.start, self.end = imp.op_lane[self.idx], imp.op_start[self.idx], imp.op_end[self.idx]
        self.free = np.ones(len(self.idx), bool)
        self.pos = {int(i): j for j, i in enumerate(self.rows)}

    def ancestor(self, op: int) -> int:
        """`op` or its nearest enclosing record_param_comms op (at most 64 levels up), or -1."""
        i, hops = op, 0
        while i >= 0 and hops < 64:
            if self.is_comm[i]:
                return i
            i = int(self.parent[i])
            hops += 1
        return -1

    def descendant(self, op: int) -> int:
        """The first unused record_param_comms inside `op` (it is often a child of the c10d op)."""
        imp = self.imp
        if op < 0 or not len(self.idx):
            return -1
        hit = np.flatnonzero(self.free & (self.lane == imp.op_lane[op]) & (self.start >= imp.op_start[op])
                             & (self.end <= imp.op_end[op]))
        if not len(hit):
            return -1
        self.free[hit[0]] = False
        return int(self.idx[hit[0]])

    def of_kernel_op(self, op: int) -> int:
        """The record_param_comms op describing a kernel launched by `op` (marked used), or -1."""
        c_op = self.ancestor(op) if op >= 0 else -1
        if c_op < 0 and op >= 0:
            c_op = self.descendant(op)
        if c_op >= 0:
            self.used.add(c_op)
            self.free[self.pos[c_op]] = False
        return c_op


def is_comm_kernel_name(name) -> bool:
    """A kernel name that is NCCL / RCCL's."""
    return isinstance(name, str) and _COMM_KERNEL.match(name) is not None


def _group_size(v) -> int:
    return int(v) if isinstance(v, (int, str)) and str(v).isdigit() else -1


def _described(meta) -> dict:
    """Name, sizes and group of a collective from the args that describe it (the kernel's or its op's)."""
    dtype = meta.dtype
    group = meta.pg_desc or (str(meta.pg_name) if meta.pg_name is not None else None) or (
        str(meta.pg_id) if meta.pg_id is not None else None)
    return dict(name=normalize_collective(meta.coll_name), bytes_in=_nbytes(meta.in_nelems, dtype),
                bytes_out=_nbytes(meta.out_nelems, dtype), dtype=dtype, group=group,
                group_size=_group_size(meta.group_size), group_ranks=_ranks_text(meta.pg_ranks))


def _undescribed(imp, k: int) -> dict:
    """Old traces: no args; c10d wraps the launch in a "nccl:all_reduce"-style annotation, else the kernel's name
    says the collective."""
    scope = imp.k_scope[k]
    sname = imp.st.strings[scope] if scope >= 0 else ""
    m = _KERNEL_COLL.search(imp.k_names[k] or "")
    if sname.startswith(("nccl:", "rccl:", "gloo:")):
        name = normalize_collective(sname.split(":", 1)[1])
    else:
        name = normalize_collective(m.group(1)) if m else None
    return dict(name=name, bytes_in=-1, bytes_out=-1, dtype=None, group=None, group_size=-1, group_ranks=None)


def _kernel_row(imp, comm: _CommOps, k: int) -> None:
    """The row of communication kernel `k`."""
    a = imp.k_args[k]
    op = int(imp.k_op[k])
    c_op = comm.of_kernel_op(op)
    meta = a if a.coll_name is not None else (imp.op_events[c_op].args if c_op >= 0 else None)
    what = _described(meta) if meta is not None else _undescribed(imp, k)
    imp.builder.row("collectives", rank=imp.rank, start_ns=int(imp.k_start[k]), dur_ns=int(imp.k_dur[k]), **what,
                    kernel=k, op=c_op if c_op >= 0 else op,
                    phase=imp.st.strings[imp.k_phase[k]] if imp.k_phase[k] >= 0 else None, step=int(imp.k_step[k]))


def _op_rows(imp, comm: _CommOps) -> None:
    """Rows of the record_param_comms ops no kernel row used (gloo / CPU-only traces, or kernels not captured)."""
    rows = comm.rows
    if not rows:
        return
    ops = imp.op_events
    _, _, phase, step = imp._scope_cols(imp.ann.enclosing(imp.op_lane[rows], imp.op_start[rows]))
    phase, step = imp._by_time(phase, step, imp.op_start[rows])
    for j, i in enumerate(rows):
        if i in comm.used:
            continue
        # a comm op nested in another comm op that was already counted is the same collective
        if comm.ancestor(int(comm.parent[i])) in comm.used:
            continue
        a = ops[i].args
        if (a.coll_name or "").lower() in SKIP_NAMES:
            continue
        imp.builder.row("collectives", rank=imp.rank, start_ns=int(imp.op_start[i]),
                        dur_ns=int(imp.op_end[i] - imp.op_start[i]),
                        name=normalize_collective(a.coll_name), bytes_in=_nbytes(a.in_nelems, a.dtype),
                        bytes_out=_nbytes(a.out_nelems, a.dtype), dtype=a.dtype,
                        group=a.pg_desc or (str(a.pg_name) if a.pg_name is not None else None),
                        group_size=_group_size(a.group_size), group_ranks=_ranks_text(a.pg_ranks), kernel=-1, op=i,
                        phase=imp.st.strings[phase[j]] if phase[j] >= 0 else None, step=int(step[j]))


# -- collectives without record_param_comms (gloo on CPU; any trace lacking the metadata) --------------------
# c10d dispatcher ops that are collectives, by base name ("c10d::_allgather_base_" -> "allgather_base")
C10D_KINDS = {"allreduce", "allreduce_coalesced", "allgather", "allgather_base", "allgather_coalesced",
              "allgather_into_tensor_coalesced", "reduce_scatter", "reduce_scatter_base",
              "reduce_scatter_tensor_coalesced", "broadcast", "reduce", "gather", "scatter", "alltoall",
              "alltoall_base", "barrier", "monitored_barrier", "send", "recv", "recv_any_source"}
# collectives whose c10d schema takes one tensor (list) that is both sent and received: argument 0 both ways.
# Every other collective takes (outputs, inputs) as arguments 0 and 1.
IN_PLACE = {"allreduce", "broadcast", "reduce", "send", "recv"}
# record_shapes writes C++ type names; the Profile stores torch's names
_CPP_DTYPE = {"float": "float32", "double": "float64", "half": "float16", "c10::half": "float16",
              "c10::bfloat16": "bfloat16", "long int": "int64", "long": "int64", "int": "int32",
              "short int": "int16", "short": "int16", "signed char": "int8", "unsigned char": "uint8",
              "bool": "bool", "c10::complex<float>": "complex64", "c10::complex<double>": "complex128"}
_LOOKAHEAD = 16  # gloo ranges scanned past the first candidate when sizes disagree


def torch_dtype(cpp: str | None) -> str | None:
    """'float' -> 'float32', 'c10::BFloat16' -> 'bfloat16'; None when it names no tensor element type."""
    if not isinstance(cpp, str) or not cpp.strip():
        return None
    k = cpp.strip().lower()
    name = _CPP_DTYPE.get(k) or k.replace("c10::", "")
    return name if dtype_bytes(name) else None


def _prod(shape) -> int | None:
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        return None
    n = 1
    for d in shape:
        n *= d
    return n


def tensor_arg(dims: list, types: list, i: int) -> tuple[int | None, str | None]:
    """(elements, dtype) of argument `i` of an op: a Tensor (its shape) or a TensorList (sum over its tensors;
    record_shapes gives no dtype for a list). (None, None) for anything else or an unrecorded list of lists."""
    if i >= len(dims) or i >= len(types):
        return None, None
    t, d = types[i], dims[i]
    if t == "TensorList":
        if isinstance(d, list) and d and all(isinstance(x, list) for x in d):
            sizes = [_prod(x) for x in d]
            return (sum(sizes) if None not in sizes else None), None
        return None, None
    dt = torch_dtype(t)
    if dt is None:
        return None, None
    return _prod(d), dt


def _args(e) -> tuple[list, list]:
    """Input Dims and Input type of an event as lists ([] when absent or malformed)."""
    out = []
    for raw in (e.args.input_dims, e.args.input_type) if e.args is not None else ():
        try:
            v = json.loads(bytes(raw)) if bytes(raw) else []
        except ValueError:
            v = []
        out.append(v if isinstance(v, list) else [])
    return (out[0], out[1]) if out else ([], [])


def group_of(dist: dict, rank: int) -> tuple[str | None, int, str | None]:
    """(group name, size, ranks JSON) for collectives whose process group the trace does not name.

    The c10d op does not say which group it ran on, so this is only exact when the rank belongs to one group
    (pg_config) or every group it belongs to has the same size (then the name stays unknown)."""
    dist = dist if isinstance(dist, dict) else {}
    pgs = [p for p in dist.get("pg_config") or [] if isinstance(p, dict)]
    pgs = [p for p in pgs if not isinstance(p.get("ranks"), list) or rank in p["ranks"]]
    size = lambda p: p.get("pg_size") if type(p.get("pg_size")) is int else (  # noqa: E731
        len(p["ranks"]) if isinstance(p.get("ranks"), list) else -1)
    if len(pgs) == 1:
        p = pgs[0]
        desc = p.get("pg_desc") if p.get("pg_desc") not in (None, "", "undefined") else None
        name = desc or (str(p["pg_name"]) if p.get("pg_name") is not None else None)
        return name, size(pgs[0]), _ranks_text(p.get("ranks")) if isinstance(p.get("ranks"), list) else None
    sizes = {size(p) for p in pgs}
    if len(sizes) == 1:
        return None, sizes.pop(), None
    if not pgs and dist.get("pg_count") in (None, 1) and type(dist.get("world_size")) is int:
        return None, dist["world_size"], None
    return None, -1, None


def _sizes(name: str, dims: list, types: list) -> tuple[int | None, int | None, str | None]:
    """(elements in, elements out, dtype) of a c10d collective from its recorded arguments."""
    if name == "barrier":
        return 0, 0, None
    if name in IN_PLACE:
        n, dt = tensor_arg(dims, types, 0)
        return n, n, dt
    n_out, dt_out = tensor_arg(dims, types, 0)
    n_in, dt_in = tensor_arg(dims, types, 1)
    return n_in, n_out, dt_in or dt_out


def _compatible(c10d: str, gloo: str) -> bool:
    """gloo runs reduce_scatter_base as an all_reduce of the input, so that pair matches too."""
    return c10d == gloo or (c10d == "reduce_scatter" and gloo == "allreduce")


def _gloo_ranges(imp) -> list[tuple[int, str, int | None, str | None]]:
    """(annotation row, collective, elements, dtype) of every `gloo:*` range, in start order."""
    out = []
    for j in imp.gloo_ann_rows():
        e = imp.ann_events[j]
        if isinstance(e.name, str) and e.name.startswith("gloo:"):
            dims, types = _args(e)
            parts = [tensor_arg(dims, types, i) for i in range(len(dims))]
            parts = [p for p in parts if p[0] is not None]
            n = sum(p[0] for p in parts) if parts else None
            out.append((j, normalize_collective(e.name.split(":", 1)[1]), n, parts[0][1] if parts else None))
    return out


def host_collectives(imp, comm_ops: list[int]) -> None:
    """Rows for collectives that have no record_param_comms metadata and no communication kernel.

    One row per outermost `c10d::*` collective op that neither encloses nor sits inside a record_param_comms
    op nor encloses the op of a row already made. Timing: the `gloo:*` range that ran it (the actual
    transfer on gloo's worker thread), matched in start order, by collective and by message size, to the first
    unused range that starts at or after the op; the op's own span (for async ops only the enqueue) when none
    matches. When a rank has no c10d collective op and no other collective at all (older torch called the
    process group directly), each `gloo:*` range becomes a row by itself.
    """
    rows = imp.builder.cols["collectives"]["op"]  # rows made so far (kernels, record_param_comms)
    seeds = [int(o) for o in rows if o >= 0]
    covered = _covered(imp.op_nest.parent, seeds + list(comm_ops))
    kinds = c10d_kinds(imp.c10d_op_names())
    group = group_of(imp.dist, imp.rank)
    gloo = _GlooRanges(imp)
    described = set(seeds) | set(comm_ops)
    n_rows = n_untimed = n_nodtype = 0
    for i in sorted(kinds, key=lambda i: (int(imp.op_start[i]), i)):
        if i in covered or _inside_collective(imp.op_nest.parent, i, kinds, described):
            continue
        timed, has_dtype = _c10d_row(imp, i, kinds[i], gloo, group)
        n_untimed += not timed
        n_nodtype += not has_dtype
        n_rows += 1
    if not kinds and not comm_ops and not rows:
        _gloo_rows(imp, gloo, group)
    left = gloo.used.count(False)
    if n_rows and left:
        imp.warnings.append(f"{left} gloo:* ranges matched no c10d collective op and were not counted")
    if n_untimed:
        imp.warnings.append(f"{n_untimed} collectives timed by their c10d op (no matching gloo:* range): for "
                            "async ops that is the enqueue, not the transfer")
    if n_nodtype:
        imp.warnings.append(f"{n_nodtype} collectives from c10d ops have no recorded dtype: their sizes are unknown")


def _covered(parent: np.ndarray, seeds: list[int]) -> set[int]:
    """Ops that are, or enclose, an already described collective (at most 64 levels up from each seed)."""
    covered: set[int] = set()
    for i in seeds:
        hops = 0
        while i >= 0 and hops < 64 and i not in covered:
            covered.add(i)
            i, hops = int(parent[i]), hops + 1
    return covered


def c10d_kinds(ops) -> dict[int, str]:
    """Op row -> collective, for the `c10d::*` dispatcher ops that are collectives; `ops`: (row, name) of the ops
    whose name starts with `c10d::` (the importer's `c10d_op_names`)."""
    kinds: dict[int, str] = {}
    for i, nm in ops:
        if isinstance(nm, str) and nm.startswith("c10d::") and nm[6:].strip("_") in C10D_KINDS:
            kinds[i] = normalize_collective(nm[6:].strip("_"))
    return kinds


def _inside_collective(parent: np.ndarray, i: int, kinds: dict, described: set) -> bool:
    """Is op i nested in another c10d collective, a record_param_comms op or an op already described?"""
    i, hops = int(parent[i]), 0
    while i >= 0 and hops < 64:
        if i in kinds or i in described:
            return True
        i, hops = int(parent[i]), hops + 1
    return False


class _GlooRanges:
    """The `gloo:*` ranges of a rank (`_gloo_ranges`), which are used, and the matching of a c10d op to one."""

    def __init__(self, imp) -> None:
        self.ranges = _gloo_ranges(imp)
        self.used = [False] * len(self.ranges)
        self.by_kind: dict[str, tuple[list[int], list[int]]] = {}  # collective -> (start_ns, index), by start
        for k, (j, gcoll, _, _) in enumerate(self.ranges):
            starts, idx = self.by_kind.setdefault(gcoll, ([], []))
            starts.append(int(imp.ann_start[j]))
            idx.append(k)

    def match(self, name: str, start: int, n_in: int | None) -> int:
        """The earliest unused compatible gloo range starting at or after `start` (-1 if none); up to
        _LOOKAHEAD ranges of each compatible kind are looked at, so a long trace stays linear."""
        best, best_start = -1, None
        for gcoll, (starts, idx) in self.by_kind.items():
            if not _compatible(name, gcoll):
                continue
            pos = bisect_left(starts, start)
            for q in range(pos, min(pos + _LOOKAHEAD, len(idx))):
                k, gn = idx[q], self.ranges[idx[q]][2]
                if not self.used[k] and (gn is None or n_in is None or gn == n_in or name == "barrier"):
                    if best_start is None or starts[q] < best_start:
                        best, best_start = k, starts[q]
                    break
        return best


def _c10d_row(imp, i: int, name: str, gloo: _GlooRanges, group: tuple) -> tuple[bool, bool]:
    """The row of c10d collective op `i`, timed by its gloo range when one matches; returns (timed by a gloo
    range, has a dtype)."""
    gname, gsize, granks = group
    dims, types = _args(imp.op_events[i])
    n_in, n_out, dtype = _sizes(name, dims, types)
    start, dur = int(imp.op_start[i]), int(imp.op_end[i] - imp.op_start[i])
    k = gloo.match(name, start, n_in)
    if k >= 0:
        gloo.used[k] = True
        j = gloo.ranges[k][0]
        start, dur = int(imp.ann_start[j]), int(imp.ann_end[j] - imp.ann_start[j])
        dtype = dtype or gloo.ranges[k][3]
    if name == "allgather" and n_out is None and n_in is not None and gsize > 0:
        n_out = n_in * gsize
    if name == "reduce_scatter" and n_in is None and n_out is not None and gsize > 0:
        n_in = n_out * gsize
    nbytes = lambda n: 0 if n == 0 else _nbytes(n, dtype)  # noqa: E731
    ocols = imp.builder.cols["ops"]
    phase = int(ocols["phase"][i]) if "phase" in ocols else -1
    imp.builder.row("collectives", rank=imp.rank, start_ns=start, dur_ns=dur, name=name, bytes_in=nbytes(n_in),
                    bytes_out=nbytes(n_out), dtype=dtype, group=gname, group_size=gsize, group_ranks=granks,
                    kernel=-1, op=i, phase=imp.st.strings[phase] if phase >= 0 else None,
                    step=int(ocols["step"][i]) if "step" in ocols else -1)
    return k >= 0, name == "barrier" or dtype is not None


def _gloo_rows(imp, gloo: _GlooRanges, group: tuple) -> None:
    """A rank with no c10d collective op and no other collective (older torch called the process group
    directly): each `gloo:*` range is a row by itself."""
    gname, gsize, granks = group
    strings = imp.st.strings
    for k, (j, gcoll, gn, gdt) in enumerate(gloo.ranges):
        n_out = gn * gsize if gcoll == "allgather" and gn is not None and gsize > 0 else (
            gn if gcoll in IN_PLACE else None)
        nb = lambda n: _nbytes(n, gdt)  # noqa: E731
        lane, t0 = imp.ann_lane[j:j + 1], imp.ann_start[j:j + 1]
        op = int(imp.op_nest.enclosing(lane, t0)[0]) if len(imp.op_start) else -1
        imp.builder.row("collectives", rank=imp.rank, start_ns=int(imp.ann_start[j]),
                        dur_ns=int(imp.ann_end[j] - imp.ann_start[j]), name=gcoll,
                        bytes_in=nb(gn) if gcoll != "barrier" else 0, bytes_out=nb(n_out) if gcoll != "barrier" else 0,
                        dtype=gdt, group=gname, group_size=gsize, group_ranks=granks, kernel=-1, op=op,
                        phase=strings[imp.ann_phase[j]] if imp.ann_phase[j] >= 0 else None, step=int(imp.ann_step[j]))
        gloo.used[k] = True
