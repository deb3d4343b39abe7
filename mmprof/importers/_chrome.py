"""Decoding Chrome-trace JSON (PyTorch profiler / Kineto) fast, into typed msgspec Structs.

Only the fields the importer uses are declared; msgspec skips every other key without building it, which
is what makes this faster than a generic JSON parse into dicts. Keys with spaces ("External id") are
mapped by `name=`; shapes ("Input Dims", "Input type") stay `msgspec.Raw` so they can be interned as the
exact JSON text without re-serialising. Fields whose JSON type varies between builds (pid/tid int or
string, ROCm's "stream": "0x0", "size": "2560") are unions.

If a file does not fit these types (a tool that writes `ts` as a string, say), `decode` falls back to a
per-event conversion that keeps every event that fits and counts the rest, so the importer can warn.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

from mmprof.errors import BadInput
from mmprof.fileio import check_density, check_events

Num = Union[int, float]
IntOrStr = Union[int, str]


class Args(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    external_id: Union[int, str, None] = msgspec.field(default=None, name="External id")
    external_id_old: Union[int, str, None] = msgspec.field(default=None, name="external id")
    correlation: Union[int, str, None] = None
    device: Union[int, str, None] = None
    stream: Union[int, str, None] = None
    grid: Any = None
    block: Any = None
    bytes: Union[int, float, str, None] = None
    size: Union[int, float, str, None] = None
    kind: Union[int, str, None] = None
    kernel: Union[str, None] = None
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    # collective metadata (record_param_comms ops and the NCCL/RCCL kernels they launch)
    coll_name: Union[str, None] = msgspec.field(default=None, name="Collective name")
    dtype: Union[str, None] = None
    in_nelems: Union[int, float, str, None] = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Union[int, float, str, None] = msgspec.field(default=None, name="Out msg nelems")
    group_size: Union[int, str, None] = msgspec.field(default=None, name="Group size")
    pg_name: Union[str, int, None] = msgspec.field(default=None, name="Process Group Name")
    pg_desc: Union[str, None] = msgspec.field(default=None, name="Process Group Description")
    pg_id: Union[str, int, None] = msgspec.field(default=None, name="Process Group ID")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    # metadata events (ph "M")
    name: Any = None
    labels: Any = None


class Event(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    ph: Union[str, None] = None
    cat: Union[str, None] = None
    name: Any = None
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: Union[int, float, None] = None
    dur: Union[int, float, None] = None
    args: Union[Args, None] = None


# Args without the collective metadata: one Struct slot per field (8 bytes each), so an event's args cost 128
# bytes instead of 208. A trace in which the "Collective name" key occurs nowhere (checked on its bytes) is
# decoded with these; the rare fields then read None.
# The collective fields are read only from args whose `coll_name` is set (mmprof.importers._kineto_comm), so the
# "Collective name" key alone decides: a chunk without it decodes the same with the lean args. `kernel` is read
# by nothing.
_RARE_FIELDS = ("coll_name", "dtype", "in_nelems", "out_nelems", "group_size", "pg_name", "pg_desc", "pg_id",
                "pg_ranks", "kernel")
RARE_KEY = b'"Collective name"'


def _lean(struct: type, name: str, drop: tuple[str, ...] = (), **types: Any) -> type:
    """`struct` without the fields `drop` (class attributes reading None instead: no slot) and with some field
    types replaced: derived, so a field added to Args or Event is in its lean twin too."""
    fields = [(f.name, types.get(f.name, f.type), msgspec.field(default=f.default, name=f.encode_name))
              for f in msgspec.structs.fields(struct) if f.name not in drop]
    return msgspec.defstruct(name, fields, namespace=dict.fromkeys(drop), forbid_unknown_fields=False, gc=False)


LeanArgs = _lean(Args, "LeanArgs", _RARE_FIELDS)
LeanEvent = _lean(Event, "LeanEvent", args=Union[LeanArgs, None])


class Trace(msgspec.Struct, forbid_unknown_fields=False):
    traceEvents: Union[list[Event], None] = None
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    displayTimeUnit: Any = None
    baseTimeNanoseconds: Any = None
    traceName: Any = None
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    record_shapes: Any = None
    hip_runtime_version: Any = None
    roctracer_version: Any = None


class _RawTrace(Trace, forbid_unknown_fields=False):
    traceEvents: Union[list[msgspec.Raw], None] = None  # type: ignore[assignment]


_TRACE = msgspec.json.Decoder(_RawTrace)
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_EVENT = msgspec.json.Decoder(Event)
_LEAN_EVENT = msgspec.json.Decoder(LeanEvent)
CHUNK_EVENTS = 65_536  # events decoded into Structs at a time (then their repeated strings are shared)


def decode(data: bytes, where: str, compressed: int | None = None, counted: bool = False) -> tuple[Trace, int]:
    """Decode a Chrome trace (object with traceEvents, or a bare event array).

    Returns the Trace and the number of events that had to be dropped because they did not fit the types
    (0 on the fast path). Raises BadInput for anything that is not a trace. The event limits (mmprof.fileio:
    `max_events`, and for a gzip of `compressed` bytes the events per compressed byte) are checked on a count of
    the `"ph"` keys before anything is parsed: the parsed events, not the bytes, are what takes the memory.

    Memory: the document is first split into one `msgspec.Raw` per event (a view of the bytes, no copy), then
    decoded CHUNK_EVENTS events at a time (into LeanEvent when no event names a collective); each chunk's repeated
    values (ph, cat, name, pid, tid, grid and block triples, shape texts) become one shared object (`_Interner`),
    so an event costs its Struct and its numbers, not a copy of every string it names (docs/limits.md;
    benchmarks/import_memory.py).
    """
    if not counted:  # `counted`: the caller applied these limits to the same count while reading the bytes
        n = data.count(b'"ph"')
        check_events(n, where)
        if compressed is not None:
            check_density(n, compressed, where)
    head = data[:64].lstrip()
    try:
        if head.startswith(b"["):
            trace, raws = Trace(), _RAWS.decode(data)
        else:
            rt = _TRACE.decode(data)
            raws = rt.traceEvents
            trace = Trace(**{f: getattr(rt, f) for f in Trace.__struct_fields__ if f != "traceEvents"})
    except msgspec.ValidationError:
        return _decode_lenient(data, where)
    except msgspec.DecodeError as e:
        raise BadInput(f"{where}: not valid JSON ({short_error(e)}); is the file complete?") from e
    if raws is None:
        raise BadInput(f"{where}: a JSON object without \"traceEvents\"; not a PyTorch profiler (Kineto) trace")
    trace.traceEvents, bad = _decode_events(raws, where, lean=RARE_KEY not in data)
    return trace, bad


def _decode_events(raws: list, where: str, lean: bool) -> tuple[list[Event], int]:
    """Events of `raws` (consumed: the list is emptied chunk by chunk, so the Raw views and the Structs never
    all exist at once), and the number dropped because they did not fit the types. `lean`: no event holds a
    collective key, so the lean args decode the same."""
    dec = (_LEAN_EVENT if lean else _EVENT).decode
    out: list[Event] = []
    bad = 0
    intern = _Interner()
    raws.reverse()  # chunks are taken from the end: each `del` is O(chunk), never a shift of the whole list
    while raws:
        chunk = raws[-CHUNK_EVENTS:]
        del raws[-CHUNK_EVENTS:]
        chunk.reverse()
        try:
            evs = [dec(r) for r in chunk]  # one call per event: no joined copy of the chunk
        except msgspec.ValidationError:
            evs, b = lenient_events(chunk)
            bad += b
        except msgspec.DecodeError as e:
            raise BadInput(f"{where}: not valid JSON ({short_error(e)}); is the file complete?") from e
        intern(evs)
        out += evs
    return out, bad


class _Interner:
    """Makes equal strings and grid / block triples of decoded events one object (msgspec builds a new object for
    each occurrence): the table only grows with distinct values."""

    def __init__(self) -> None:
        self.seen: dict = {}

    def __call__(self, evs: list[Event]) -> None:
        get = self.seen.setdefault
        for e in evs:
            e.ph = get(e.ph, e.ph)
            e.cat = get(e.cat, e.cat)
            v = e.name
            if v.__class__ is str:
                e.name = get(v, v)
            v = e.pid
            if v.__class__ is str:
                e.pid = get(v, v)
            v = e.tid
            if v.__class__ is str:
                e.tid = get(v, v)
            a = e.args
            if a is not None:
                v = a.grid
                if v.__class__ is list and len(v) == 3:
                    a.grid = self._triple(v)
                v = a.block
                if v.__class__ is list and len(v) == 3:
                    a.block = self._triple(v)
                if a.input_dims:  # a Raw is a view of the chunk's bytes: a shared copy lets the chunk go
                    a.input_dims = self._raw(a.input_dims)
                if a.input_type:
                    a.input_type = self._raw(a.input_type)

    def _raw(self, v: msgspec.Raw) -> msgspec.Raw:
        b = bytes(v)
        got = self.seen.get(b)
        if got is None:
            got = self.seen[b] = v.copy()
        return got

    def _triple(self, v: list):
        try:
            return self.seen.setdefault(tuple(v), v)  # a tuple key never equals a str or bytes key
        except TypeError:  # an unhashable member (a list): left as it is
            return v


def lenient_events(raws: list) -> tuple[list[Event], int]:
    """One event at a time: those that fit (after `_coerce`), and how many did not."""
    events = []
    bad = 0
    for r in raws:
        try:
            e = msgspec.json.decode(r)
        except msgspec.DecodeError:
            bad += 1
            continue
        try:
            events.append(msgspec.convert(e, Event))
        except msgspec.ValidationError:
            fixed = _coerce(e)
            if fixed is None:
                bad += 1
            else:
                events.append(fixed)
    return events, bad


def _decode_lenient(data: bytes, where: str) -> tuple[Trace, int]:
    """Slow path: decode generically, then convert event by event, dropping (and counting) misfits."""
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        raise BadInput(f"{where}: not valid JSON ({short_error(e)}); is the file complete?") from e
    if isinstance(doc, list):
        raw_events, header = doc, {}
    elif isinstance(doc, dict):
        raw_events = doc.get("traceEvents")
        header = {k: v for k, v in doc.items() if k != "traceEvents"}
        if not isinstance(raw_events, list):
            raise BadInput(f"{where}: a JSON object without a \"traceEvents\" list; not a PyTorch profiler (Kineto) trace")
    else:
        raise BadInput(f"{where}: JSON {type(doc).__name__}, not a PyTorch profiler (Kineto) trace")
    events = []
    bad = 0
    for e in raw_events:
        try:
            events.append(msgspec.convert(e, Event))
        except msgspec.ValidationError:
            fixed = _coerce(e)
            if fixed is None:
                bad += 1
            else:
                events.append(fixed)
    trace = msgspec.convert({k: v for k, v in header.items() if k in Trace.__struct_fields__}, Trace)
    trace.traceEvents = events
    return trace, bad


def _coerce(e: Any) -> Event | None:
    """Rescue an event whose ts/dur are numeric strings (some converters write them so)."""
    if not isinstance(e, dict):
        return None
    e = dict(e)
    for k in ("ts", "dur"):
        v = e.get(k)
        if isinstance(v, str):
            try:
                e[k] = float(v)
            except ValueError:
                return None
    args = e.get("args")
    if args is not None and not isinstance(args, dict):
        e["args"] = None
    try:
        return msgspec.convert(e, Event)
    except msgspec.ValidationError:
        if isinstance(args, dict):
            e["args"] = None  # keep the event itself; its args were unusable
            try:
                return msgspec.convert(e, Event)
            except msgspec.ValidationError:
                return None
        return None


def short_error(e: Exception) -> str:
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    return msg[:160]
