"""A JSON array split into windows of its elements, with the event limits applied per window (issue 33).

Splitting a whole `traceEvents` array into one `msgspec.Raw` per element costs ~56 bytes per element before a
single event is decoded: a gzip of 130 KB that inflates to 128 MiB of `1,1,1,...` or `{},{},...` made 40 million of
them (3.8 GB) before the "too many events" error, because those shapes hold no `"ph"` key to count on the bytes.
Here the array is split a window (about WINDOW bytes) at a time, and each window's element count goes to the
input's `EventBudget` (mmprof.fileio) before the next window is split: a file of too many elements of any shape
stops after one window, and no more than one window's Raws exist at a time.

A window ends at an element boundary found without parsing byte by byte: the first `}` `,` `{` (Kineto's event
separator, any whitespace between) or else the first `,` after the target size, confirmed by decoding the window
as a JSON array (a candidate inside a string or a nested value makes that decode fail: the JSON grammar then
could not have ended an element there). A failed candidate makes the window grow (double) up to MAX_WINDOW, so a
file built to defeat the candidates costs at most twice its decode, never a quadratic search; past MAX_WINDOW
without a boundary the array is refused (an element over 32 MiB is no trace event).

Shared by the Kineto decoder (`mmprof.importers._chrome`); a streaming or parallel decoder can use the same
windows (each is an independent JSON array).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import msgspec

from mmprof.errors import BadInput

WINDOW = 4 << 20          # bytes a window aims at (a few thousand real events; at most 2M elements of `1,`)
MAX_WINDOW = 32 << 20     # a window that finds no element boundary in this many bytes: refused
_SEP = re.compile(rb"\}\s*,\s*\{")  # built-in and linear (no nested repeat); matched from a position, never on names
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_WS = b" \t\r\n"


def raw_span(data: bytes, raw: msgspec.Raw) -> tuple[int, int]:
    """Where a Raw (a view into `data`, as msgspec decodes it) lies in `data`: (start, end)."""
    import numpy as np

    a = np.frombuffer(data, dtype=np.uint8)
    view = memoryview(raw)
    n = len(view)
    if n == 0:
        return 0, 0
    b = np.frombuffer(view, dtype=np.uint8)
    start = b.__array_interface__["data"][0] - a.__array_interface__["data"][0]
    if not (0 <= start and start + n <= len(data)):
        raise ValueError("the Raw is not a view of this buffer")
    return start, start + n


def array_windows(data: bytes, start: int, end: int, budget, where: str) -> Iterator[list[msgspec.Raw]]:
    """The elements of the JSON array `data[start:end]` (its `[` ... `]`, already known to be valid JSON), as lists
    of Raws, one list per window; `budget.add(n)` sees each window's count before it is yielded."""
    if data[start:start + 1] != b"[" or data[end - 1:end] != b"]":
        raise BadInput(f"{where}: expected a JSON array of events")
    p = start + 1
    last = end - 1  # the closing ]
    while True:
        while p < last and data[p] in _WS:
            p += 1
        if p >= last:
            return
        size = WINDOW
        while True:
            target = p + size
            if target >= last:
                raws = _decode(data, p, last, where)
                budget.add(len(raws))
                yield raws
                return
            cand = _candidate(data, target, last)
            raws = None if cand is None else _try(data, p, cand)
            if raws is not None:
                budget.add(len(raws))
                yield raws
                p = cand + 1
                break
            if size >= MAX_WINDOW:
                raise BadInput(f"{where}: no element boundary in {MAX_WINDOW >> 20} MiB of the event array at byte "
                               f"{p:,}: one element larger than that, or a damaged file")
            size *= 2


def _candidate(data: bytes, target: int, last: int) -> int | None:
    """The position of a `,` that likely ends an element, at or after `target` (within one window's reach)."""
    reach = min(last, target + WINDOW)
    m = _SEP.search(data, target, reach)
    if m is not None:
        return data.index(b",", m.start(), m.end())
    c = data.find(b",", target, reach)
    return None if c < 0 else c


def _try(data: bytes, p: int, cand: int) -> list[msgspec.Raw] | None:
    buf = bytearray(cand - p + 2)
    buf[0] = 0x5B  # [
    buf[1:-1] = memoryview(data)[p:cand]
    buf[-1] = 0x5D  # ]
    try:
        return _RAWS.decode(buf)
    except msgspec.DecodeError:
        return None


def _decode(data: bytes, p: int, last: int, where: str) -> list[msgspec.Raw]:
    raws = _try(data, p, last)
    if raws is None:
        raise BadInput(f"{where}: the event array is not valid JSON after byte {p:,}; is the file complete?")
    return raws
