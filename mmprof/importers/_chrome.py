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

from typing import Annotated, Any, Union

import msgspec

from mmprof.errors import BadInput
from mmprof.fileio import EventBudget, check_density, check_events
from mmprof.importers._json_windows import array_windows, raw_span

# Fields a hostile file could fill with one huge array (issue 33: a 130 KB gzip made 40M objects): scalars, or a
# short list (grid / block are [x, y, z]), or the raw JSON text, interned by content (`_Interner`), so an event costs
# at most its own bytes; any other shape sends the event through the per-event fallback (`_lenient_events`).
Scalar = Union[str, int, float, bool, None]
Dims = Union[Annotated[list[Union[int, float, str, None]], msgspec.Meta(max_length=8)], int, float, str, None]

Num = Union[int, float]
IntOrStr = Union[int, str]


class Args(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    external_id: Union[int, str, None] = msgspec.field(default=None, name="External id")
    external_id_old: Union[int, str, None] = msgspec.field(default=None, name="external id")
    correlation: Union[int, str, None] = None
    device: Union[int, str, None] = None
    stream: Union[int, str, None] = None
    grid: Dims = None
    block: Dims = None
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
    pg_ranks: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Process Group Ranks")  # its JSON text
    # metadata events (ph "M")
    name: Scalar = None
    labels: Scalar = None


class Event(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    ph: Union[str, None] = None
    cat: Union[str, None] = None
    name: Scalar = None
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


_HEADER_FIELDS = tuple(f for f in Trace.__struct_fields__ if f != "traceEvents")
# The document with every field as its raw JSON text (a view of the bytes: nothing is built): the header fields are
# decoded one by one (each at most HEADER_MAX_BYTES), the event array is split in windows (mmprof.importers._json_windows)
_RawTrace = msgspec.defstruct("_RawTrace", [(f, msgspec.Raw, msgspec.Raw(b"")) for f in Trace.__struct_fields__],
                              forbid_unknown_fields=False)
HEADER_MAX_BYTES = 1 << 20  # a header field (deviceProperties, distributedInfo, ...) is a few KB in real traces
EVENT_MAX_BYTES = 1 << 20   # an event decoded generically (the per-event fallback): real ones are < 64 KB


_TRACE = msgspec.json.Decoder(_RawTrace)
_ANY = msgspec.json.Decoder()
_WHOLE = msgspec.json.Decoder(msgspec.Raw)
_EVENT = msgspec.json.Decoder(Event)
_LEAN_EVENT = msgspec.json.Decoder(LeanEvent)


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
            trace = Trace()
            span = raw_span(data, _WHOLE.decode(data))  # checks the JSON syntax, builds nothing
        else:
            rt = _TRACE.decode(data)
            trace = Trace(**{f: _header(getattr(rt, f), f, where) for f in _HEADER_FIELDS})
            span = _events_span(data, rt.traceEvents, where)
    except msgspec.ValidationError as e:
        raise BadInput(f"{where}: JSON that is not a Chrome trace ({short_error(e)})") from e
    except msgspec.DecodeError as e:
        raise BadInput(f"{where}: not valid JSON ({short_error(e)}); is the file complete?") from e
    budget = EventBudget(where, compressed)  # every element counts, whatever its shape (the "ph" count may not)
    trace.traceEvents, bad = _decode_events(array_windows(data, *span, budget, where), where,
                                            lean=RARE_KEY not in data)
    return trace, bad


def _header(raw: msgspec.Raw, field: str, where: str) -> Any:
    """One header field's value, decoded from its raw text (at most HEADER_MAX_BYTES: no header is that large)."""
    if not raw:  # absent
        return None
    if len(memoryview(raw)) > HEADER_MAX_BYTES:
        raise BadInput(f"{where}: the header field {field!r} holds {len(memoryview(raw)):,} bytes of JSON (a trace's "
                       f"header fields hold a few KB): not a PyTorch profiler (Kineto) trace")
    return _ANY.decode(raw)


def _events_span(data: bytes, raw: msgspec.Raw, where: str) -> tuple[int, int]:
    if not raw:
        raise BadInput(f"{where}: a JSON object without \"traceEvents\"; not a PyTorch profiler (Kineto) trace")
    start, end = raw_span(data, raw)
    if data[start:start + 1] != b"[":
        kind = {b"{": "an object", b'"': "a string", b"n": "null"}.get(data[start:start + 1], "a number or boolean")
        if kind == "null":
            raise BadInput(f"{where}: a JSON object without \"traceEvents\"; not a PyTorch profiler (Kineto) trace")
        raise BadInput(f"{where}: \"traceEvents\" is {kind}, not a list of events; not a PyTorch profiler (Kineto) "
                       "trace")
    return start, end


def _decode_events(windows, where: str, lean: bool) -> tuple[list[Event], int]:
    """Events of the windows of Raws (mmprof.importers._json_windows: one window's Raws exist at a time, counted
    against the event limits before the next is split), and the number dropped because they did not fit the types.
    `lean`: no event holds a collective key, so the lean args decode the same."""
    dec = (_LEAN_EVENT if lean else _EVENT).decode
    out: list[Event] = []
    bad = 0
    intern = _Interner()
    for chunk in windows:
        try:
            evs = [dec(r) for r in chunk]  # one call per event: no joined copy of the chunk
        except msgspec.ValidationError:
            evs, b = lenient_events(chunk, dec)
            bad += b
        except msgspec.DecodeError as e:
            raise BadInput(f"{where}: not valid JSON ({short_error(e)}); is the file complete?") from e
        del chunk
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
                v = getattr(a, "pg_ranks", None)  # a class attribute of the lean args (None)
                if v:
                    a.pg_ranks = self._raw(v)

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


def lenient_events(raws: list, dec=None) -> tuple[list[Event], int]:
    """One event at a time: those that fit (typed, else after `_coerce`), and how many did not. An element that is
    not an object, or larger than EVENT_MAX_BYTES, is counted without being decoded."""
    dec = dec or _EVENT.decode
    events = []
    bad = 0
    for r in raws:
        try:
            events.append(dec(r))
            continue
        except msgspec.ValidationError:
            pass
        except msgspec.DecodeError:
            bad += 1
            continue
        view = memoryview(r)
        if len(view) > EVENT_MAX_BYTES or view[:1] != b"{":  # not an event object, or too big to decode generically
            bad += 1
            continue
        fixed = _coerce(_ANY.decode(r))
        if fixed is None:
            bad += 1
        else:
            events.append(fixed)
    return events, bad


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
        e["args"] = args = None
    ranks = None
    if isinstance(args, dict) and "Process Group Ranks" in args:  # a Raw field: msgspec.convert cannot fill it
        e["args"] = args = dict(args)
        ranks = args.pop("Process Group Ranks")
    try:
        ev = msgspec.convert(e, Event)
        if ranks is not None and ev.args is not None:
            ev.args.pg_ranks = msgspec.Raw(msgspec.json.encode(ranks))
        return ev
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
