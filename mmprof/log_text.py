"""An engine's log as lines mmprof can keep: bytes in, clean lines out, the whole bounded in size.

Used by `mmprof record` (the wrapped command's stdout / stderr, as they arrive) and by `--log FILE` (a log saved
elsewhere, read as a stream). Three pieces, each independent of where the bytes come from:

- `clean(s)`: terminal escape sequences removed (vLLM colours its log on a terminal: `\\x1b[32mINFO\\x1b[0m`); every
  other character stays as printed (renderers make control characters inert: render/safe.py).
- `LineSplitter`: bytes -> lines, incrementally. UTF-8 decoded with U+FFFD for invalid bytes (binary noise never
  stops it), CRLF is a line end, a lone CR returns to the start of the line as a terminal does (a progress bar's
  hundred updates leave its last state), a line longer than `MAX_LINE_CHARS` is cut (its length said), and a
  partial last line is kept. Each line carries the time its first byte arrived.
- `BoundedStream`: keeps one stream's first `head` bytes, its last `tail` bytes, and in between only the lines the
  log rules want (found with bytes.find on their anchor words, then checked: a fallback printed an hour into a run
  is kept), up to `middle` bytes. It works on raw chunks, so passing output through costs no per-line Python work;
  memory stays bounded whatever the log's size.
"""

from __future__ import annotations

import codecs
import re
import threading
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


class BoundedStream:
    """One stream's bytes within a size bound, kept as raw chunks so the hot path does no per-line work: the first
    `head` bytes, the last `tail` bytes, and in between the lines holding one of `anchors` (byte strings, searched
    with bytes.find: C speed) for which `wanted(text)` is true, up to `middle` bytes. `lines()` splits what is kept
    into `Line`s (numbered by their place in the whole stream, timed by the chunk their first byte came in).

    `push` (cheap) and `scan` (the search of what left the tail) may run on two threads: `mmprof record` forwards
    output on one and searches on another, so the command is never slowed by the search; a backlog beyond
    BACKLOG_MAX is dropped unsearched (counted in `unsearched`). `feed` does both on one thread (--log FILE)."""

    CARRY_MAX = 4 * MAX_LINE_CHARS  # a line in the searched middle longer than this is not looked at
    BACKLOG_MAX = 64 * 2**20        # middle bytes waiting to be searched beyond this are dropped unsearched

    def __init__(self, stream: str, limit: int = LIMIT_BYTES, anchors: tuple[bytes, ...] = (),
                 wanted: Callable[[str], bool] | None = None) -> None:
        self.stream = stream
        self.head_budget, self.tail_budget = limit * 3 // 8, limit * 3 // 8
        self.middle_budget = limit - self.head_budget - self.tail_budget
        self.anchors, self.wanted = anchors, wanted
        self._head: list[tuple[int, bytes]] = []    # (t, chunk)
        self._head_bytes = 0
        self._tail: deque[tuple[int, bytes]] = deque()
        self._tail_bytes = 0
        # left the tail, not yet searched: (t, chunk, 0, True), or a gap (t, None, newlines, ended on one)
        self._pending: deque[tuple[int, bytes | None, int, bool]] = deque()
        self._pending_bytes = 0
        self._lock = threading.Lock()               # push (the forwarding thread) against scan (the keeper's)
        self._scan_lock = threading.Lock()          # one scan at a time (the keeper thread, or lines())
        self._middle: list[tuple[int, int, bytes]] = []  # (line number, t, raw line)
        self._middle_bytes = 0
        self._carry, self._carry_t = b"", -1        # the searched region's unfinished last line
        self._evicted = False                       # something left the tail (the head and tail are not one text)
        self._started = False
        self._skip_partial = False                  # the next bytes continue a line whose start is gone
        self._lines_before = 0                      # newlines in the head and in the region searched so far
        self.unsearched = 0
        self.bytes = 0
        self.newlines = 0
        self.ends_open = False                      # the last byte is not a newline

    def feed(self, data: bytes, t_ns: int = -1) -> None:
        """Take a chunk and search what it pushes out of the tail (one thread)."""
        self.push(data, t_ns)
        self.scan()

    def push(self, data: bytes, t_ns: int = -1) -> None:
        """Take a chunk; what leaves the tail waits for `scan` (no per-line work and no search here)."""
        if not data:
            return
        self.bytes += len(data)
        self.newlines += data.count(b"\n")
        self.ends_open = not data.endswith(b"\n")
        if not self._evicted and self._head_bytes < self.head_budget:
            room = self.head_budget - self._head_bytes
            self._head.append((t_ns, data[:room]))
            self._head_bytes += min(room, len(data))
            data = data[room:]
            if not data:
                return
        if len(data) > self.tail_budget:  # a chunk bigger than the tail: its front goes straight to the search
            self._tail.append((t_ns, data[:-self.tail_budget]))
            self._tail_bytes += len(data) - self.tail_budget
            data = data[-self.tail_budget:]
        self._tail.append((t_ns, data))
        self._tail_bytes += len(data)
        while len(self._tail) > 1 and self._tail_bytes - len(self._tail[0][1]) >= self.tail_budget:
            t, chunk = self._tail.popleft()
            self._tail_bytes -= len(chunk)
            with self._lock:
                self._evicted = True
                self._pending.append((t, chunk, 0, True))
                self._pending_bytes += len(chunk)
                if self._pending_bytes > self.BACKLOG_MAX:
                    self._drop_backlog()

    def _drop_backlog(self) -> None:
        """The oldest waiting chunks dropped unsearched, leaving one gap marker in front that says how many newlines
        they held and whether they ended on one (so the numbering stays right)."""
        t_first, nl, end_nl = None, 0, True
        while self._pending and (self._pending_bytes > self.BACKLOG_MAX or self._pending[0][1] is None):
            t0, old, n, e = self._pending.popleft()
            t_first = t0 if t_first is None else t_first
            if old is None:
                nl, end_nl = nl + n, e
                continue
            self._pending_bytes -= len(old)
            self.unsearched += len(old)
            nl, end_nl = nl + old.count(b"\n"), old.endswith(b"\n")
        if t_first is not None:
            self._pending.appendleft((t_first, None, nl, end_nl))

    def scan(self, pause: Callable[[], None] | None = None) -> None:
        """Search the chunks that left the tail (the keeper thread, `feed`, or `lines`); `pause()` after each chunk
        lets another thread run (the forwarding one: the search never holds it up for long)."""
        with self._scan_lock:
            while True:
                with self._lock:
                    if not self._pending:
                        return
                    t, chunk, nl, end_nl = self._pending.popleft()
                    if chunk is not None:
                        self._pending_bytes -= len(chunk)
                self._start()
                if chunk is None:  # a gap of `nl` newlines: a line open before it ended inside it
                    self._lines_before += nl
                    self._carry, self._carry_t, self._skip_partial = b"", -1, not end_nl
                    continue
                self._search(t, chunk)
                if pause is not None:
                    pause()

    def _start(self) -> None:
        """Once, before the first search: the head keeps complete lines only; its unfinished last line moves to
        the carry, so the search sees it whole with its continuation."""
        if self._started:
            return
        self._started = True
        partial: list[tuple[int, bytes]] = []
        while self._head and not self._head[-1][1].endswith(b"\n"):
            t, c = self._head.pop()
            k = c.rfind(b"\n")
            if k >= 0:
                self._head.append((t, c[:k + 1]))
                partial.insert(0, (t, c[k + 1:]))
                break
            partial.insert(0, (t, c))
        self._lines_before = sum(c.count(b"\n") for _, c in self._head)
        carry = b"".join(c for _, c in partial)
        if len(carry) <= self.CARRY_MAX:
            self._carry, self._carry_t = carry, (partial[0][0] if partial else -1)
        else:
            self._skip_partial = True

    def _search(self, t: int, chunk: bytes) -> None:
        text = self._carry + chunk
        t0 = self._carry_t if self._carry else t
        cut = text.rfind(b"\n")
        if cut < 0:  # no line ends here: the line goes on (or, too long, is not looked at)
            if len(text) <= self.CARRY_MAX:
                self._carry, self._carry_t = text, t0
            else:
                self._carry, self._carry_t, self._skip_partial = b"", -1, True
            return
        complete, self._carry, self._carry_t = text[:cut + 1], text[cut + 1:], t
        if self._skip_partial:  # the end of a line that began where we no longer have it
            complete = complete[complete.find(b"\n") + 1:]
            self._lines_before += 1
            self._skip_partial = False
        if self.anchors and self._middle_bytes < self.middle_budget:
            spans = set()
            for a in self.anchors:
                i = complete.find(a)
                while i >= 0:
                    s = complete.rfind(b"\n", 0, i) + 1
                    e = complete.find(b"\n", i)
                    spans.add((s, e))
                    i = complete.find(a, e)
            for s, e in sorted(spans):
                raw = complete[s:e]
                if self._middle_bytes + len(raw) > self.middle_budget:
                    break
                if self.wanted is None or self.wanted(clean(raw.decode("utf-8", "replace"))):
                    number = self._lines_before + complete.count(b"\n", 0, s) + 1
                    self._middle.append((number, t0 if s == 0 else t, raw))
                    self._middle_bytes += len(raw)
        self._lines_before += complete.count(b"\n")

    @property
    def total_lines(self) -> int:
        return self.newlines + (1 if self.ends_open else 0)

    def lines(self) -> list[Line]:
        """What is kept, as lines: the head's, the searched middle's, then the tail's (numbered in the stream)."""
        self.scan()
        out: list[Line] = []
        sp = LineSplitter(self.stream)
        for t, c in self._head:
            out += sp.feed(c, t)
        if not self._evicted:
            for t, c in self._tail:
                out += sp.feed(c, t)
            return out + sp.close()
        out += sp.close()  # complete lines only once the search started (the unfinished one moved on)
        for number, t, raw in self._middle:
            one = LineSplitter(self.stream)
            one.number = number - 1
            out += one.feed(raw + b"\n", t)
        sp = LineSplitter(self.stream)
        sp.number = self._lines_before
        chunks = list(self._tail)
        if self._skip_partial:  # the tail starts inside a line whose start is gone: from its end on
            for i, (t, c) in enumerate(chunks):
                k = c.find(b"\n")
                if k >= 0:
                    chunks = [(t, c[k + 1:])] + chunks[i + 1:]
                    sp.number += 1
                    break
            else:
                chunks = []
        elif self._carry:
            chunks = [(self._carry_t, self._carry)] + chunks
        for t, c in chunks:
            out += sp.feed(c, t)
        return out + sp.close()

    def dropped(self, kept: int) -> int:
        return max(0, self.total_lines - kept)


def merge_streams(streams: list[BoundedStream]) -> list[Line]:
    """The kept lines of several streams in arrival order (time, then stream order, then number)."""
    order = {s.stream: i for i, s in enumerate(streams)}
    lines = [ln for s in streams for ln in s.lines()]
    return sorted(lines, key=lambda ln: (ln.time_ns, order[ln.stream], ln.number)) if len(streams) > 1 else lines


def read_lines(f, stream: str = "file", chunk: int = CHUNK) -> Iterator[Line]:  # every line, unbounded
    """Every line of a binary file object, streamed in chunks (memory does not grow with the file)."""
    sp = LineSplitter(stream)
    while True:
        data = f.read(chunk)
        if not data:
            break
        yield from sp.feed(data)
    yield from sp.close()
