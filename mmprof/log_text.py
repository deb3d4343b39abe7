"""An engine's log as lines mmprof can keep: bytes in, clean lines out, the whole bounded in size.

Used by `mmprof record` (the wrapped command's stdout / stderr, as they arrive) and by `--log FILE` (a log saved
elsewhere, read as a stream). Three pieces, each independent of where the bytes come from:

- `clean(s)`: terminal escape sequences removed (vLLM colours its log on a terminal: `\\x1b[32mINFO\\x1b[0m`); every
  other character stays as printed (renderers make control characters inert: render/safe.py).
- `LineSplitter`: bytes -> lines, incrementally. UTF-8 decoded with U+FFFD for invalid bytes (binary noise never
  stops it), CRLF is a line end, a lone CR returns to the start of the line as a terminal does (a progress bar's
  hundred updates leave its last state), a line longer than `MAX_LINE_CHARS` is cut (its length said), and a
  partial last line is kept. Each line carries the time its first byte arrived.
- `BoundedLines`: keeps the first `head` bytes of lines, the last `tail` bytes, and in between only the lines
  `keep(text)` accepts (the log rules' literals: a fallback printed an hour into a run is kept), up to `middle`
  bytes; it counts what it dropped. Memory stays bounded whatever the log's size.
"""

from __future__ import annotations

import codecs
import re
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST), and the two-byte escapes (ESC + one of @-Z \ ] ^ _)
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\^_]|\x9b[0-?]*[ -/]*[@-~]")

MAX_LINE_CHARS = 16384          # a longer line is cut (vLLM's config line is ~4,000 characters)
LIMIT_BYTES = 4 * 2**20         # the default size bound of one log: head + tail + matching middle lines
CHUNK = 2**20


def clean(s: str) -> str:
    """`s` without terminal escape sequences (colours, cursor moves, titles)."""
    return _ESCAPES.sub("", s) if ("\x1b" in s or "\x9b" in s) else s


@dataclass(frozen=True)
class Line:
    """One line of a log: its text (escape sequences removed), stream, number in the stream (from 1) and the
    wall-clock time its first byte arrived (ns, -1 when unknown)."""

    text: str
    stream: str
    number: int
    time_ns: int = -1


_SEP = re.compile(r"(\r|\n)")


class LineSplitter:
    """Bytes of one stream -> `Line`s, incrementally (`feed`, then `close` for the partial last line)."""

    def __init__(self, stream: str, max_chars: int = MAX_LINE_CHARS) -> None:
        self.stream = stream
        self.max_chars = max_chars
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf: list[str] = []   # pieces of the current line
        self._len = 0               # characters in _buf
        self._cut = 0               # characters of the current line dropped beyond max_chars
        self._t = -1                # arrival time of the current line's first byte
        self._open = False          # a line has begun (text, or a carriage return, since the last newline)
        self._overwrite = False     # a carriage return came: the next text replaces the line, as on a terminal
        self.number = 0
        self.bytes = 0

    def feed(self, data: bytes, t_ns: int = -1) -> list[Line]:
        self.bytes += len(data)
        return self._text(self._decoder.decode(data), t_ns)

    def close(self, t_ns: int = -1) -> list[Line]:
        """The lines still held: what the decoder kept and a last line without a newline."""
        out = self._text(self._decoder.decode(b"", final=True), t_ns)
        if self._open:
            out.append(self._emit())
        return out

    def _text(self, text: str, t_ns: int) -> list[Line]:
        out: list[Line] = []
        pieces = _SEP.split(text) if text else []
        for i in range(0, len(pieces), 2):
            if pieces[i]:
                self._add(pieces[i], t_ns)
            if i + 1 < len(pieces):
                if pieces[i + 1] == "\n":
                    out.append(self._emit())
                else:  # CR: CRLF ends the line with what it holds; CR then text shows that text instead
                    if not self._open:
                        self._t, self._open = t_ns, True
                    self._overwrite = True
        return out

    def _add(self, s: str, t_ns: int) -> None:
        if self._overwrite:
            self._buf, self._len, self._cut, self._overwrite = [], 0, 0, False
        if not self._open:
            self._t, self._open = t_ns, True
        room = self.max_chars - self._len
        if room > 0:
            self._buf.append(s[:room])
            self._len += min(len(s), room)
        self._cut += max(0, len(s) - max(room, 0))

    def _emit(self) -> Line:
        self.number += 1
        text = clean("".join(self._buf))
        if self._cut:
            text += f" ...[line cut: {self._len + self._cut:,} characters]"
        line = Line(text, self.stream, self.number, self._t)
        self._buf, self._len, self._cut, self._t = [], 0, 0, -1
        self._open = self._overwrite = False
        return line


class BoundedLines:
    """The lines of a log within a size bound: the first `head` bytes, the last `tail` bytes, and in between the
    lines `keep` accepts (up to `middle` bytes). `lines()` gives them in arrival order; `dropped` counts the rest."""

    def __init__(self, limit: int = LIMIT_BYTES, keep: Callable[[str], bool] | None = None) -> None:
        self.head_budget = limit * 3 // 8
        self.tail_budget = limit * 3 // 8
        self.middle_budget = limit - self.head_budget - self.tail_budget
        self.limit = limit
        self.keep = keep
        self._head: list[Line] = []
        self._head_bytes = 0
        self._middle: list[Line] = []
        self._middle_bytes = 0
        self._tail: deque[Line] = deque()
        self._tail_bytes = 0
        self.seen = 0
        self.dropped = 0
        self.dropped_by: dict[str, int] = {}   # stream -> lines dropped

    @staticmethod
    def _size(line: Line) -> int:
        return len(line.text) + 40  # text plus the row's other columns, roughly

    def add(self, line: Line) -> None:
        self.seen += 1
        size = self._size(line)
        if self._head_bytes + size <= self.head_budget and not self._tail:
            self._head.append(line)
            self._head_bytes += size
            return
        self._tail.append(line)
        self._tail_bytes += size
        while self._tail_bytes > self.tail_budget and len(self._tail) > 1:
            old = self._tail.popleft()
            self._tail_bytes -= self._size(old)
            osize = self._size(old)
            if self.keep is not None and self._middle_bytes + osize <= self.middle_budget and self.keep(old.text):
                self._middle.append(old)
                self._middle_bytes += osize
            else:
                self.dropped += 1
                self.dropped_by[old.stream] = self.dropped_by.get(old.stream, 0) + 1

    def extend(self, lines: list[Line]) -> None:
        for ln in lines:
            self.add(ln)

    def lines(self) -> list[Line]:
        return self._head + self._middle + list(self._tail)


def read_lines(f, stream: str = "file", chunk: int = CHUNK) -> Iterator[Line]:
    """Every line of a binary file object, streamed in chunks (memory does not grow with the file)."""
    sp = LineSplitter(stream)
    while True:
        data = f.read(chunk)
        if not data:
            break
        yield from sp.feed(data)
    yield from sp.close()
