"""Reading and writing files safely: gzip detection, size limits, clear errors, writes that never destroy inputs.

Limits (docs/limits.md): an input is read at most `max_input_bytes()` bytes (after gunzip; a gzip is also refused
when it expands more than GZIP_RATIO times its size, the mark of a decompression bomb), and importers refuse more
than `max_events()` events or rows. Both can be raised: `MMPROF_MAX_INPUT_BYTES` / `MMPROF_MAX_EVENTS` (or
`mmprof --max-input-bytes/--max-events`); 0 means no limit.

Limits are checked while reading: a gzip's expansion against the compressed bytes read so far (a bomb stops at
GZIP_RATIO_FLOOR), and the Kineto importer counts events on the raw bytes before parsing (`check_events`,
`check_density`). Inputs are regular files only: `open_input` is the one opener, and refuses a FIFO, socket, device or
directory on the open descriptor before reading (never blocking on a FIFO).

Outputs: mmprof.fileout (`check_output`, `atomic_output`, `atomic_write`), which asks `input_named` whether a
path is one of the command's inputs.
"""

from __future__ import annotations

import contextlib
import gzip
import lzma
import os
import re
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path

from mmprof.errors import BadInput

GZIP_MAGIC = b"\x1f\x8b"
XZ_MAGIC = b"\xfd7zXZ\x00"  # the xz container (lzma's FORMAT_XZ): .json.xz traces and profiles


def _compressed(head: bytes) -> str | None:
    """'gzip' / 'xz' when the first bytes are that container's magic, else None (detected by content, not name)."""
    return "gzip" if head[:2] == GZIP_MAGIC else "xz" if head[:6] == XZ_MAGIC else None
UTF8_BOM = b"\xef\xbb\xbf"

DEFAULT_MAX_INPUT_BYTES = 16 * 2**30   # 16 GiB of (decompressed) input per file
DEFAULT_MAX_EVENTS = 50_000_000        # events / rows per file
GZIP_RATIO = 64                        # real traces expand 4-20x; a bomb 1000x
EVENTS_PER_GZIP_BYTE = 0.2             # real Kineto traces: at most 0.1 event per gzipped byte
EVENTS_DENSITY_FLOOR = 1_000_000       # ... but any gzip may hold a million events
GZIP_RATIO_FLOOR = 256 * 2**20         # ... but any gzip may expand to 256 MiB
ENV_MAX_BYTES = "MMPROF_MAX_INPUT_BYTES"
ENV_MAX_EVENTS = "MMPROF_MAX_EVENTS"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(text: str, what: str) -> int:
    """'16G', '500M', '1000000' -> bytes; 0 means no limit. A bad value is a BadInput naming `what`."""
    m = _SIZE.match(str(text))
    if not m:
        raise BadInput(f"{what}: {text!r} is not a size (e.g. 16G, 500M, 0 for no limit)")
    n = float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " ")
    if n > 2**62:
        raise BadInput(f"{what}: {text!r} is too large")
    return int(n)


def _limit(env: str, default: int, what: str) -> int | None:
    raw = os.environ.get(env)
    if raw is None or raw == "":
        return default
    n = parse_size(raw, env) if env == ENV_MAX_BYTES else _count(raw, env)
    return None if n == 0 else n


def _count(raw: str, what: str) -> int:
    try:
        n = int(str(raw).replace("_", "").strip())
    except ValueError:
        raise BadInput(f"{what}: {raw!r} is not a whole number (0 for no limit)") from None
    if n < 0 or n > 2**62:
        raise BadInput(f"{what}: {raw!r} is out of range")
    return n


def max_input_bytes() -> int | None:
    """Bytes one input may hold after decompression (None: no limit)."""
    return _limit(ENV_MAX_BYTES, DEFAULT_MAX_INPUT_BYTES, "input size")


def max_events() -> int | None:
    """Events (or table rows) one input may hold (None: no limit)."""
    return _limit(ENV_MAX_EVENTS, DEFAULT_MAX_EVENTS, "events")


def check_events(n: int, where: str, what: str = "events") -> None:
    """Refuse an input with more than max_events() events, with the way to raise the limit."""
    cap = max_events()
    if cap is not None and n > cap:
        raise BadInput(f"{where}: {n:,} {what} exceed the limit of {cap:,}; raise it with {ENV_MAX_EVENTS}=N "
                       "(or mmprof --max-events N, 0 for no limit) if the file is genuine")


def _too_big(p: Path, limit: int, gz: bool) -> BadInput:
    how = "decompresses to" if gz else "holds"
    return BadInput(f"{p}: {how} more than {limit:,} bytes (the input limit); raise it with {ENV_MAX_BYTES}=SIZE "
                    "(or mmprof --max-input-bytes SIZE, 0 for no limit) if the file is genuine")


# -- inputs of the running command ---------------------------------------------------------------------------
_inputs: dict[tuple[int, int], str] | None = None


@contextlib.contextmanager
def track_inputs() -> Iterator[None]:
    """Within this block, every file read through this module (or noted with `note_input`) is an input, and
    `atomic_write` refuses to write over it. The CLI wraps each command in it."""
    global _inputs
    saved, _inputs = _inputs, {}
    try:
        yield
    finally:
        _inputs = saved


def note_input(path: str | os.PathLike) -> None:
    """Record a file as an input of the running command (no-op outside `track_inputs`)."""
    if _inputs is None:
        return
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return
    if stat.S_ISREG(st.st_mode):
        _inputs.setdefault((st.st_dev, st.st_ino), str(path))


def input_named(path: Path) -> str | None:
    if not _inputs:
        return None
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return _inputs.get((st.st_dev, st.st_ino))


# -- reading ------------------------------------------------------------------------------------------------
def _kind_of(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a socket"
            if stat.S_ISSOCK(mode) else "a character device" if stat.S_ISCHR(mode) else "a block device"
            if stat.S_ISBLK(mode) else "not a regular file")


def _not_regular(p: Path, mode: int) -> BadInput:
    if stat.S_ISDIR(mode):
        return BadInput(f"{p}: is a directory, expected a file")
    # /dev/zero would be read to the size limit, a FIFO or a terminal could block forever
    return BadInput(f"{p}: is {_kind_of(mode)}, not a regular file; save the data to a file first")


def regular_file(p: str | os.PathLike) -> os.stat_result:
    """The stat of a regular file, or one BadInput line naming what it is instead (missing, a FIFO, a device...)."""
    p = Path(p)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise BadInput(f"{p}: no such file") from None
    except (OSError, ValueError) as e:
        raise BadInput(f"{p}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(p, st.st_mode)
    return st


@contextlib.contextmanager
def open_input(path: str | os.PathLike) -> Iterator:
    """The one way mmprof opens an input file: a binary file object of a regular file, or one BadInput line.

    Opened non-blocking and checked on the open descriptor (fstat), so a FIFO, a socket, a terminal, /dev/zero or a
    directory is refused before a byte is read, and never blocks the open (a FIFO with no writer would), whatever the
    name said a moment before. The file is then read as usual (blocking)."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise BadInput(f"{p}: no such file") from None
    except IsADirectoryError:
        raise BadInput(f"{p}: is a directory, expected a file") from None
    except (OSError, ValueError) as e:
        try:  # a socket cannot be opened at all (ENXIO): say what it is
            mode = os.stat(p).st_mode
        except (OSError, ValueError):
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            raise _not_regular(p, mode) from None
        raise BadInput(f"{p}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(p, st.st_mode)
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    note_input(p)
    with f:
        yield f


def read_bytes(path: str | os.PathLike, watch=None, json_document: bool = False) -> bytes:
    """The file's bytes, gunzipped when it is gzip (by content, not name), within the size limits. A UTF-8 BOM
    before the content is dropped. Errors are BadInput, one line. `watch(chunk, gzipped)`, when given, sees each
    (decompressed) chunk as it is read and may raise to stop the read: limits on the content (the Kineto
    importer's event count) then apply before decompression finishes. `json_document`: the caller decodes the
    whole text into Python objects; a compressed one holding far more JSON values than real files is refused first
    (`check_json_values`)."""
    p = Path(path)
    limit = max_input_bytes()
    try:
        with open_input(p) as f:
            st = os.fstat(f.fileno())
            head = f.read(6)
            kind = _compressed(head)
            if kind:
                f.seek(0)
                data = _gunzip(p, f, limit, st.st_size, watch, kind)
            else:
                if limit is not None and st.st_size > limit:
                    raise _too_big(p, limit, False)
                if watch is not None:
                    watch(head, False)
                data = head + _read_capped(f, limit, watch=None if watch is None else lambda b: watch(b, False))
                if limit is not None and len(data) > limit:  # a file that grew while read
                    raise _too_big(p, limit, False)
    except OSError as e:
        raise BadInput(f"{p}: cannot read: {e.strerror or e}") from None
    if not data:
        raise BadInput(f"{p}: empty file")
    data = data.removeprefix(UTF8_BOM)
    if json_document:
        check_json_values(data, str(p), st.st_size * (2 if kind == "xz" else 1) if kind else None)
    return data


def iter_bytes(path: str | os.PathLike, watch=None, chunk: int = 16 * 2**20) -> Iterator[bytes]:
    """The file's (decompressed) bytes in chunks of about `chunk` bytes, within the same limits as `read_bytes`
    (input size, gzip expansion) checked as they are read; `watch(chunk, gzipped)` sees each chunk. A UTF-8 BOM
    before the content is dropped. For readers that never hold the whole content (the streaming Kineto import)."""
    p = Path(path)
    st = regular_file(p)  # a FIFO or a device: refused, never opened for reading (open_input checks again)
    limit = max_input_bytes()
    first = True
    try:
        with open_input(p) as f:
            kind = _compressed(f.read(6))
            f.seek(0)
            ratio = kind is not None and not os.environ.get(ENV_MAX_BYTES)
            cap = limit
            if ratio:
                ratio_cap = max(GZIP_RATIO_FLOOR, GZIP_RATIO * st.st_size)
                cap = ratio_cap if cap is None else min(cap, ratio_cap)
            src = _decompressor(f, kind) if kind else contextlib.nullcontext(f)
            total = 0
            with src as g:
                while True:
                    b = g.read(chunk)
                    if not b:
                        break
                    total += len(b)
                    if cap is not None and total > cap:
                        if kind is None or (limit is not None and cap == limit):
                            raise _too_big(p, limit, kind is not None)
                        raise BadInput(f"{p}: gzip expands more than {GZIP_RATIO}x its size (beyond "
                                       f"{GZIP_RATIO_FLOOR // 2**20} MiB): a decompression bomb, or an unusual file; "
                                       f"set {ENV_MAX_BYTES}=SIZE (or mmprof --max-input-bytes SIZE, 0 for no limit) "
                                       "to read it anyway")
                    if first:
                        b = b.removeprefix(UTF8_BOM)
                        first = False
                    if watch is not None:
                        watch(b, kind is not None)
                    yield b
    except (EOFError, zlib.error, lzma.LZMAError) as e:
        raise BadInput(f"{p}: truncated or corrupt {kind} ({e}); re-copy the file or re-run the capture") from None
    except OSError as e:
        if kind:
            raise BadInput(f"{p}: truncated or corrupt {kind} ({e}); re-copy the file or re-run the capture") from None
        raise BadInput(f"{p}: cannot read: {e.strerror or e}") from None
    if first:
        raise BadInput(f"{p}: empty file")


def _gunzip(p: Path, f, limit: int | None, size: int, watch=None, kind: str = "gzip") -> bytes:
    """Decompress (gzip, or xz) within the limits, checked while streaming (never after): the byte limit, and the
    expansion ratio against the compressed bytes read so far, so a bomb stops at GZIP_RATIO_FLOOR, not at its end."""
    ratio = not os.environ.get(ENV_MAX_BYTES)  # a limit the user set replaces the ratio check
    cap = limit
    if ratio:
        ratio_cap = max(GZIP_RATIO_FLOOR, GZIP_RATIO * size)
        cap = ratio_cap if cap is None else min(cap, ratio_cap)

    def expands_too_much(n: int) -> bool:
        return ratio and n > GZIP_RATIO_FLOOR and n > GZIP_RATIO * max(1, f.tell())

    try:
        with _decompressor(f, kind) as g:
            data = _read_capped(g, cap, stop=expands_too_much,
                                watch=None if watch is None else lambda b: watch(b, True))
    except (EOFError, OSError, zlib.error, lzma.LZMAError) as e:
        raise BadInput(f"{p}: truncated or corrupt {kind} ({e}); re-copy the file or re-run the capture") from None
    if data is None or (cap is not None and len(data) > cap):
        if data is not None and limit is not None and cap == limit:
            raise _too_big(p, limit, True)
        raise BadInput(f"{p}: gzip expands more than {GZIP_RATIO}x its size (beyond {GZIP_RATIO_FLOOR // 2**20} "
                       f"MiB): a decompression bomb, or an unusual file; set {ENV_MAX_BYTES}=SIZE (or mmprof "
                       "--max-input-bytes SIZE, 0 for no limit) to read it anyway")
    if not data:
        raise BadInput(f"{p}: gzip holds an empty file")
    return data


def _decompressor(f, kind: str):
    return gzip.GzipFile(fileobj=f, mode="rb") if kind == "gzip" else lzma.LZMAFile(f, mode="rb", format=lzma.FORMAT_XZ)


def _read_capped(f, cap: int | None, chunk: int = 16 * 2**20, stop=None, watch=None) -> bytes | None:
    """Everything left in `f`, or the first cap + 1 bytes when there is more (None when `stop(bytes so far)` says
    so): read in chunks into one growing buffer, so that a large cap is never one allocation of that size.
    `watch(chunk)` sees every chunk read."""
    buf = bytearray()
    while cap is None or len(buf) <= cap:
        want = chunk if cap is None else min(chunk, cap + 1 - len(buf))
        b = f.read(want)
        if not b:
            break
        if watch is not None:
            watch(b)
        buf += b
        if stop is not None and stop(len(buf)):
            return None
    return bytes(buf)


def check_density(n_events: int, compressed_size: int, where: str) -> None:
    """Refuse a gzip that holds far more events per compressed byte than any real trace (real Kineto traces hold
    at most about 0.1 event per gzipped byte; the parsed events take about 500 bytes each): a small file that
    would take gigabytes. Setting MMPROF_MAX_EVENTS (or --max-events) replaces this check by that limit."""
    if os.environ.get(ENV_MAX_EVENTS):
        return
    cap = max(EVENTS_DENSITY_FLOOR, int(EVENTS_PER_GZIP_BYTE * compressed_size))
    if n_events > cap:
        raise BadInput(f"{where}: about {n_events:,} events in a {compressed_size:,}-byte gzip, more than "
                       f"{EVENTS_PER_GZIP_BYTE} per compressed byte (real traces hold at most 0.1): parsing them "
                       f"would take about {n_events * 500 // 2**20:,} MiB; set {ENV_MAX_EVENTS}=N (or mmprof "
                       "--max-events N, 0 for no limit) to read it anyway")


class EventBudget:
    """The event limits of one input, applied as a decoder counts: `add(n)` after each batch of n events (or JSON
    elements that would become events) and before the next batch is built, so a file of too many events of any
    shape stops after one batch (`max_events`, and for a compressed input of `compressed` bytes `check_density`).
    The Kineto decoder counts the elements of its event array per window (mmprof.importers._json_windows); a
    streaming decoder counts the same way."""

    def __init__(self, where: str, compressed: int | None = None) -> None:
        self.where, self.compressed, self.n = where, compressed, 0

    def add(self, n: int) -> None:
        self.n += n
        check_events(self.n, self.where)
        if self.compressed is not None:
            check_density(self.n, self.compressed, self.where)


VALUES_DENSITY_FLOOR = 8_000_000  # JSON values any compressed document may hold (~64 B each once decoded)
VALUES_PER_GZIP_BYTE = 4          # real Profiles / rocprofv3 JSON / configs hold well under 1 per compressed byte


def check_json_values(data: bytes, where: str, compressed: int | None) -> None:
    """Before a whole JSON document is decoded into Python objects (a Profile, rocprofv3 JSON, a config.json):
    refuse a compressed one that holds far more values than real files of its size (an upper bound counted on the
    bytes: every value but the first follows a `,` or opens a container), so a small gzip of `[[],[],...]` cannot
    take gigabytes (each decoded value costs 30-70 bytes). MMPROF_MAX_EVENTS (or --max-events) replaces the
    density bound by that limit."""
    if compressed is None:
        return
    n = data.count(b",") + data.count(b"[") + data.count(b"{") + 1
    if os.environ.get(ENV_MAX_EVENTS):
        cap = max_events()
        if cap is not None and n > cap:
            check_events(n, where, "JSON values")
        return
    cap = max(VALUES_DENSITY_FLOOR, VALUES_PER_GZIP_BYTE * compressed)
    if n > cap:
        raise BadInput(f"{where}: up to {n:,} JSON values in a {compressed:,}-byte compressed file, more than "
                       f"{VALUES_PER_GZIP_BYTE} per compressed byte (real files hold less than 1): decoding them "
                       f"could take {n * 64 // 2**20:,} MiB; set {ENV_MAX_EVENTS}=N (or mmprof --max-events N, 0 for "
                       "no limit) to read it anyway")


def gzip_size(path: str | os.PathLike) -> int | None:
    """The on-disk size of `path` when it is a gzip (by content), else None: for `check_density`. An xz counts
    twice its size (xz -9 packs real traces 1.4-1.9x tighter than gzip -9: measured on this project's fixtures), so
    the events-per-byte bound means the same for both."""
    try:
        with open_input(path) as f:
            kind = _compressed(f.read(6))
            size = os.fstat(f.fileno()).st_size
            return None if kind is None else size * (2 if kind == "xz" else 1)
    except (OSError, BadInput):  # the read that follows names the problem
        return None


def head_bytes(path: str | os.PathLike, n: int = 4096) -> bytes:
    """The first n bytes of the (decompressed) content, for format sniffing without reading everything (a UTF-8
    BOM is dropped)."""
    p = Path(path)
    kind = None  # an open that fails (permission denied) leaves nothing read: a plain "cannot read"
    try:
        with open_input(p) as f:
            kind = _compressed(f.read(6))
            f.seek(0)
            if kind:
                with _decompressor(f, kind) as g:
                    data = g.read(n)
            else:
                data = f.read(n)
    except (EOFError, OSError, zlib.error, lzma.LZMAError) as e:
        if kind:
            raise BadInput(f"{p}: truncated or corrupt {kind} ({e}); re-copy the file or re-run the capture") from None
        raise BadInput(f"{p}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    return data.removeprefix(UTF8_BOM)


def stream_chunks(path: str | os.PathLike, chunk: int = 2**20) -> Iterator[bytes]:
    """The (decompressed) content in chunks, for inputs read as a stream (an engine's log: memory stays bounded
    whatever its size): a regular file only, gzip / xz by content, at most `max_input_bytes()` bytes; errors are
    one BadInput line."""
    p = Path(path)
    limit, kind, n = max_input_bytes(), None, 0
    try:
        with open_input(p) as raw:
            kind = _compressed(raw.read(6))
            raw.seek(0)
            f = _decompressor(raw, kind) if kind else raw
            with contextlib.closing(f):
                while True:
                    b = f.read(chunk)
                    if not b:
                        return
                    n += len(b)
                    if limit is not None and n > limit:
                        raise _too_big(p, limit, kind is not None)
                    yield b
    except (EOFError, OSError, zlib.error, lzma.LZMAError) as e:
        if kind:
            raise BadInput(f"{p}: truncated or corrupt {kind} ({e}); re-copy the file") from None
        raise BadInput(f"{p}: cannot read: {getattr(e, 'strerror', None) or e}") from None


def read_toml(path: str | os.PathLike, what: str) -> dict:
    """A TOML file as a dict; a missing file or bad TOML is a one-line BadInput naming `what` it should be."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    p = Path(path)
    if not os.path.lexists(p):
        raise BadInput(f"{p}: no such {what} file")
    with open_input(p) as f:  # a FIFO or a device is refused before it is read (open_input)
        empty = os.fstat(f.fileno()).st_size == 0
    text = b"" if empty else read_bytes(p)
    try:
        return tomllib.loads(text.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{p}: not valid TOML ({e})") from None
    except RecursionError:
        raise BadInput(f"{p}: not valid TOML (nested too deep)") from None


def sqlite_connect(path: str | os.PathLike):
    """A read-only connection to an SQLite file (never modified: immutable=1), within the input size limit; a file
    SQLite cannot read is a one-line BadInput."""
    import sqlite3
    import urllib.parse

    p = Path(path)
    st = regular_file(p)
    note_input(p)
    limit = max_input_bytes()
    if limit is not None and st.st_size > limit:
        raise _too_big(p, limit, False)
    uri = "file:" + urllib.parse.quote(str(p.resolve())) + "?mode=ro&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True)
        con.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.Error as e:
        raise BadInput(f"{p}: SQLite file cannot be read ({e})") from None
    return con
