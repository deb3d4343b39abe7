"""Streaming decode of a Kineto trace: the `traceEvents` array cut into pieces as the file is read, each piece
decoded (in worker processes when the file is large) into compact columns per kind of event.

The document is never held whole, and no Python object per event outlives its piece: the linker
(`mmprof.importers._kineto_columns`) reads numpy columns (times as float64 µs, names and thread ids as codes into
shared dictionaries, ids as int64), about 50-80 bytes per imported event instead of the ~470 of the Struct path.
Events nothing imports (ac2g flows, Python frames other than nn.Module, instant events) are only counted.

Cutting: the parser finds the top-level `"traceEvents": [` by a structural scan of the head (strings skipped
whole), then cuts the array about every PIECE_BYTES at a `}` `,` `{` boundary. A boundary that falls inside a
string or a nested object leaves the piece before it invalid JSON, which the decoder reports: that piece is joined
with the next and decoded again (a wrong cut is never silent). At the end the array's `]` is the last one after
which the rest is the end of the top-level object; the head and that rest are decoded together as the header
(deviceProperties, distributedInfo, ...). A document this does not fit (traceEvents not an array, no traceEvents
in the first HEAD_LIMIT bytes) is read by the whole-document path (`_chrome.decode`).

Event counting: the `"ph"` keys of the bytes as read (`kineto._EventCounter`, the one place the limits apply) and
the decoded events (`check_events` on the running total), so a file past the limits stops while it is read.
"""

from __future__ import annotations

import re
import time
from typing import Any, Iterator

import msgspec
import numpy as np

from mmprof.errors import BadInput
from mmprof.importers._chrome import RARE_KEY, Args, Event, LeanEvent, lenient_events, short_error
from mmprof.importers._kineto_rank import (
    ANN_CATS,
    GPU_ANN_CATS,
    KERNEL_CATS,
    MEMCPY_CATS,
    MEMSET_CATS,
    OP_CATS,
    PY_CATS,
    RUNTIME_CATS,
    direction,
)
from mmprof.importers._nesting import int_array

PIECE_BYTES = 2 << 20        # events text per piece (a piece's Structs live only while it is turned into columns)
HEAD_LIMIT = 256 << 20       # the top-level "traceEvents" key must come within this many bytes
TAIL_LIMIT = 1 << 20         # the text after the array's "]" (traceName, displayTimeUnit, ...) is at most this
MAX_JOINS = 8                # wrong cuts joined with the next piece before the text is called invalid JSON
NO_BOUND_LIMIT = 8 * PIECE_BYTES  # event text without one `},{` between events: bare values, not events

KINDS: dict[str, frozenset] = {"kernel": frozenset(KERNEL_CATS), "runtime": frozenset(RUNTIME_CATS),
                               "op": frozenset(OP_CATS), "ann": frozenset(ANN_CATS),
                               "gpu_ann": frozenset(GPU_ANN_CATS), "memcpy": frozenset(MEMCPY_CATS),
                               "memset": frozenset(MEMSET_CATS), "module": frozenset(PY_CATS)}
KIND_OF = {c: k for k, cats in KINDS.items() for c in cats}
# a kind's categories in one order every process agrees on (set order varies with the hash seed)
CANON = {k: tuple(sorted(cats)) for k, cats in KINDS.items()}
ALLOWED_PH = ("X", "i", "I", "s", "f", "t")
FIRST_PIDS = 1000

_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]]')
_BOUND = re.compile(rb"\}\s*,\s*\{")
_LIST_FULL = msgspec.json.Decoder(list[Event])
_LIST_LEAN = msgspec.json.Decoder(list[LeanEvent])
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_EMPTY = Args()


class WrongCut(Exception):
    """A piece that is not a sequence of complete JSON values (cut inside a string or a nested object)."""


# -- cutting --------------------------------------------------------------------------------------------------
class _HeadScan:
    """Finds the top-level `"traceEvents": [` in a growing buffer, scanning each byte once (strings skipped whole).

    `feed(buf)` returns ('array', offset after '['), ('object', offset after the traceEvents '['), ('more', 0) when
    the key is not read yet, or ('fallback', 0) when the document is not of the streamable shape. A header field
    before the array (deviceProperties, distributedInfo, ...) of more than HEADER_MAX_BYTES of JSON is refused as
    the whole-document path refuses it, while it is read: no header field of a real trace is that large."""

    _FIRST = re.compile(rb"[^ \t\r\n]")
    _NEXT = re.compile(rb'["{}\[\]]')
    _STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')

    def __init__(self, where: str) -> None:
        self.where = where
        self.pos = -1      # next byte to scan; -1 before the first non-blank byte is seen
        self.depth = 0
        self.key = ""      # the last key read at depth 1
        self.value_at = -1  # where the depth-1 value being read (an object, an array or a string) began

    def _too_big(self) -> BadInput:
        from mmprof.importers._chrome import HEADER_MAX_BYTES

        return BadInput(f"{self.where}: the header field {self.key!r} holds more than {HEADER_MAX_BYTES:,} bytes of "
                        f"JSON (a trace's header fields hold a few KB): not a PyTorch profiler (Kineto) trace")

    def feed(self, buf) -> tuple[str, int]:
        from mmprof.importers._chrome import HEADER_MAX_BYTES

        if self.pos < 0:
            first = self._FIRST.search(buf)
            if first is None:
                return "more", 0
            lead = first.start()
            if buf[lead] == 0x5B:  # [
                return "array", lead + 1
            if buf[lead] != 0x7B:  # {
                return "fallback", 0
            self.pos = lead
        while True:
            m = self._NEXT.search(buf, self.pos)
            at = len(buf) if m is None else m.start()
            if self.value_at >= 0 and at - self.value_at > HEADER_MAX_BYTES:  # refused while it is read
                raise self._too_big()
            if m is None:
                self.pos = len(buf)
                return "more", 0
            if buf[at] == 0x22:  # a string: whole, or wait for its end
                sm = self._STRING.match(buf, at)
                if sm is None:
                    if self.depth == 1 and self.value_at < 0:
                        self.value_at = at  # a key or a string value still being read counts against the limit
                    if self.value_at >= 0 and len(buf) - self.value_at > HEADER_MAX_BYTES:
                        raise self._too_big()
                    self.pos = at
                    return "more", 0
                end = sm.end()
                if self.depth == 1:
                    rest = bytes(buf[end:end + 64]).lstrip()
                    if not rest:
                        self.pos = at
                        return "more", 0
                    if rest[:1] == b":":  # a key
                        self.value_at = -1
                        self.key = bytes(buf[at + 1:end - 1]).decode("utf-8", "replace")[:60]
                        if sm.group(0) == b'"traceEvents"':
                            after = rest[1:].lstrip()
                            if not after:
                                self.pos = at
                                return "more", 0
                            if after[:1] != b"[":
                                return "fallback", 0
                            return "object", end + bytes(buf[end:]).index(b"[") + 1
                    elif end - at > HEADER_MAX_BYTES:
                        raise self._too_big()
                    else:
                        self.value_at = -1
                self.pos = end
                continue
            tok = buf[at]
            self.pos = at + 1
            if tok in (0x7B, 0x5B):  # { [
                if self.depth == 1:
                    self.value_at = at
                self.depth += 1
            else:
                self.depth -= 1
                if self.depth <= 0:
                    return "fallback", 0
                if self.depth == 1:
                    if self.pos - self.value_at > HEADER_MAX_BYTES:
                        raise self._too_big()
                    self.value_at = -1


def _tail_ok(tail: bytes, shape: str) -> bool:
    t = tail.strip()
    if shape == "array":
        return t == b""
    if not t.endswith(b"}"):
        return False
    try:
        msgspec.json.decode(b'{"x": null' + t)
    except msgspec.DecodeError:
        return False
    return True


def pieces(chunks: Iterator[bytes], where: str = "trace") -> Iterator[tuple[str, bytes]]:
    """('head', bytes), ('events', (text of whole events, the separator after it)), ..., ('tail', bytes); or
    ('fallback', b'') when the document is not of the streamable shape."""
    head = bytearray()  # grows in place: each byte is copied and scanned once
    scan = _HeadScan(where)
    shape, off = "more", 0
    for chunk in chunks:
        head += chunk
        shape, off = scan.feed(head)
        if shape != "more" or len(head) > HEAD_LIMIT:
            break
    if shape in ("more", "fallback"):
        yield "fallback", b""
        return
    yield "head", bytes(head[:off - 1])
    buf = bytes(head[off:])
    del head
    for chunk in chunks:
        buf += chunk
        while len(buf) >= 2 * PIECE_BYTES:
            m = _BOUND.search(buf, PIECE_BYTES)
            if m is None:
                if len(buf) > NO_BOUND_LIMIT:  # no `},{` in this much text: not an array of events; the
                    yield "fallback", b""   # whole-document path counts its elements in windows and says why
                    return
                break
            yield "events", (buf[:m.start() + 1], buf[m.start() + 1:m.end() - 1])
            buf = buf[m.end() - 1:]
    end = len(buf)
    floor = max(0, len(buf) - TAIL_LIMIT)
    while True:
        end = buf.rfind(b"]", floor, end)
        if end < 0:
            yield "fallback", b""  # no closing bracket near the end: the caller reads the file whole (and says why)
            return
        if _tail_ok(buf[end + 1:], shape):
            break
    body = buf[:end].rstrip()
    while len(body) > 2 * PIECE_BYTES:  # the text read after the last cut, in pieces of their own
        m = _BOUND.search(body, PIECE_BYTES)
        if m is None:
            if len(body) > NO_BOUND_LIMIT:
                yield "fallback", b""
                return
            break
        yield "events", (body[:m.start() + 1], body[m.start() + 1:m.end() - 1])
        body = body[m.end() - 1:]
    if body.strip():
        yield "events", (body, b"")
    yield "tail", buf[end + 1:]


# -- one piece -> columns -------------------------------------------------------------------------------------
class Codes:
    """A worker-local dictionary: value -> dense code, in first-seen order."""

    __slots__ = ("ids", "values")

    def __init__(self) -> None:
        self.ids: dict = {}
        self.values: list = []

    def codes(self, vals: list) -> np.ndarray:
        ids, values = self.ids, self.values
        out = np.empty(len(vals), np.int32)
        for i, v in enumerate(vals):
            if v is None:
                out[i] = -1
                continue
            try:
                c = ids.get(v)
                key = v
            except TypeError:  # an unhashable value (a list as a name): by its text
                key = ("\x00unhashable", str(v))
                c = ids.get(key)
            if c is None:
                c = ids[key] = len(values)
                values.append(v)
            out[i] = c
        return out


def _floats(vals: list) -> tuple[np.ndarray, np.ndarray | None]:
    """float64 of `vals` (NaN for None and for what is not a number) and the mask of the None ones (or None)."""
    try:
        a = np.array(vals, dtype=np.float64)
        return a, None
    except (TypeError, ValueError, OverflowError):
        pass
    none = np.array([v is None for v in vals], bool)
    a = np.array([float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 1e300 else np.nan
                  for v in vals], dtype=np.float64)
    return a, (none if none.any() else None)


def _dims(vals: list) -> np.ndarray:
    from mmprof.importers._kineto_rank import RankImporter

    return RankImporter._dims(vals)


_I32 = np.iinfo(np.int32)


def narrow(a: np.ndarray) -> np.ndarray:
    """An int64 column as int32 when every value fits (ids, devices, grid sizes nearly always do): half the bytes
    while the trace is gathered; the Profile's columns are int64 again (`ProfileBuilder.build`)."""
    if a.dtype == np.int64 and a.size and _I32.min <= a.min() and a.max() <= _I32.max:
        return a.astype(np.int32)
    return a


def _ext(args: list) -> np.ndarray:
    return int_array([a.external_id if a.external_id is not None else a.external_id_old for a in args])


def _kind_columns(kind: str, evs: list, cat: list, names: Codes, vals: Codes, raws: Codes) -> dict[str, Any]:
    """The columns of one kind's X events (in file order); see the module docstring."""
    canon = CANON[kind]
    c: dict[str, Any] = {"cat": np.array([canon.index(x) for x in cat], np.int8)}
    c["ts"], c["ts_none"] = _floats([e.ts for e in evs])
    c["dur"], _ = _floats([e.dur or 0 for e in evs])
    c["name"] = names.codes([e.name for e in evs])
    c["pid"] = vals.codes([e.pid for e in evs])
    c["tid"] = vals.codes([e.tid for e in evs])
    c["tid_int"] = narrow(int_array([e.tid for e in evs]))
    args = [e.args or _EMPTY for e in evs]
    if kind in ("kernel", "memcpy", "memset", "gpu_ann"):
        c["device"] = narrow(int_array([a.device if a.device is not None else e.pid for a, e in zip(args, evs)]))
        c["stream"] = narrow(int_array([a.stream if a.stream is not None else e.tid for a, e in zip(args, evs)]))
    if kind in ("kernel", "memcpy", "memset", "runtime"):
        c["corr"] = narrow(int_array([a.correlation for a in args]))
        c["ext"] = narrow(_ext(args))
    if kind in ("kernel", "runtime"):
        c["grid"] = narrow(_dims([a.grid for a in args]))
        c["block"] = narrow(_dims([a.block for a in args]))
    if kind == "runtime":
        c["size"] = narrow(int_array([a.size if a.size is not None else a.bytes for a in args]))
    if kind in ("memcpy", "memset"):
        c["bytes"] = narrow(int_array([a.bytes for a in args]))
        c["direction"] = names.codes([direction(e.name, a.kind) if kind == "memcpy" else None
                                      for e, a in zip(evs, args)])
    if kind == "op":
        c["ext"] = narrow(_ext(args))
    if kind in ("op", "ann"):
        c["dims"] = raws.codes([bytes(a.input_dims) or None for a in args])
        c["types"] = raws.codes([bytes(a.input_type) or None for a in args])
    if kind in ("op", "kernel"):  # the collective metadata, kept whole for the few events that carry it
        c["coll"] = {i: _own(a) for i, a in enumerate(args) if getattr(a, "coll_name", None) is not None}
    if kind in ("op", "runtime"):
        first: dict[int, list] = {}
        for x, e in zip(c["cat"].tolist(), evs):
            lst = first.setdefault(x, [])
            if len(lst) < FIRST_PIDS:
                lst.append(e.pid)
        c["first_pids"] = {canon[x]: vals.codes(v) for x, v in first.items()}
    return c


def _own(a):
    """The Args with its raw shape texts copied (a Raw is a view that would keep the whole piece alive)."""
    a.input_dims, a.input_type = a.input_dims.copy(), a.input_type.copy()
    return a


def decode_piece(text: bytes) -> dict[str, Any]:
    """One piece of the events array -> its columns per kind, its dictionaries and counts. Raises WrongCut when
    the text is not a sequence of complete JSON values."""
    cpu0 = time.process_time()
    doc = b"[" + text + b"]"
    bad = 0
    try:
        evs = (_LIST_LEAN if RARE_KEY not in text else _LIST_FULL).decode(doc)
    except msgspec.ValidationError:
        try:
            evs, bad = lenient_events(_RAWS.decode(doc))
        except msgspec.DecodeError as e:
            raise WrongCut(short_error(e)) from None
    except msgspec.DecodeError as e:
        raise WrongCut(short_error(e)) from None
    del doc
    counts: dict = {}
    buckets: dict[str, tuple[list, list]] = {}
    odd = 0
    kind_of = KIND_OF
    for e in evs:
        c = e.cat
        counts[c] = counts.get(c, 0) + 1
        k = kind_of.get(c)
        if k is None:
            continue
        if e.ph != "X":
            if e.ph not in ALLOWED_PH:
                odd += k != "module"
            continue
        if k == "module" and not (isinstance(e.name, str) and e.name.startswith("nn.Module: ")):
            continue
        b = buckets.get(k)
        if b is None:
            b = buckets[k] = ([], [])
        b[0].append(e)
        b[1].append(c)
    n = len(evs)
    del evs
    names, vals, raws = Codes(), Codes(), Codes()
    kinds = {k: _kind_columns(k, evs_k, cats, names, vals, raws) for k, (evs_k, cats) in buckets.items()}
    return {"kinds": kinds, "names": names.values, "vals": vals.values, "raws": raws.values, "counts": counts,
            "odd": odd, "bad": bad, "events": n, "cpu_s": time.process_time() - cpu0}


def decode_header(head: bytes, tail: bytes, shape_array: bool, where: str):
    """The trace's top-level fields (a `_chrome.Trace` without events) from the text around the array."""
    from mmprof.importers._chrome import Trace

    if shape_array:
        return Trace()
    try:
        return msgspec.json.decode(head + b" null" + tail, type=Trace)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise BadInput(f"{where}: not valid JSON ({short_error(e)}); is the file complete?") from None
