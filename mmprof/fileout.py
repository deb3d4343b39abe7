"""Writing files safely: outputs that never destroy an input, atomic writes, temporary files removed on any exit.

Outputs: `check_output` is the one guard (docs/limits.md). Inside a command (`track_inputs()`), every input file is
noted by inode, and no output may be one of them. A symlink is never replaced (its target is written atomically),
character devices and FIFOs with a reader are written into (never replaced), a FIFO without reader, a block device
or a missing folder is refused (mmprof creates no folders), `-` is stdout. Temporary files are removed on errors
and on SIGTERM / SIGINT (`remove_temporaries`, called by the CLI). Every failure is one BadInput line.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from mmprof.errors import BadInput
from mmprof.fileio import input_named

# -- writing ------------------------------------------------------------------------------------------------
_pending: set[str] = set()  # temporary files being written: removed on any exit, SIGTERM and SIGINT included


def pending_temporaries() -> set[str]:
    """The temporary files of writes in progress (the CLI's SIGTERM handler removes them; tests look)."""
    return set(_pending)


def remove_temporaries() -> None:
    """Remove every temporary file of a write in progress (called on SIGTERM / SIGHUP before exiting)."""
    for tmp in list(_pending):
        try:
            os.unlink(tmp)
        except OSError:
            pass
        _pending.discard(tmp)


def check_output(path: str | os.PathLike) -> tuple[Path, os.stat_result | None]:
    """The one guard for output paths. Returns (the path to write, its stat or None when it does not exist).

    Refused with one BadInput line: an input of the running command (same inode, so also through a hard link or a
    symlink; `record` registers its wrapped script and every file named on its command line the same way), a
    directory, a block device, a missing folder (never created silently), a path whose folder is a file, a FIFO no
    process reads (it would hang). A symlink is followed (the link stays, its target is written); a character device
    or a FIFO is written into, never replaced by a regular file."""
    p = Path(path)
    if p.is_symlink():
        p = Path(os.path.realpath(p))  # write the link's target; the link itself stays
    same = input_named(p)
    if same is not None:
        raise BadInput(f"{path}: refusing to write over an input of this command ({same}); choose another "
                       "output path")
    try:
        st = p.stat()
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise BadInput(f"{path}: cannot write: a file is in the way of its folder {p.parent}") from None
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: cannot write: {getattr(e, 'strerror', None) or e}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise BadInput(f"{path}: is a directory; give a file name to write")
        if stat.S_ISBLK(st.st_mode):
            raise BadInput(f"{path}: is a block device; refusing to write a report onto it")
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            raise BadInput(f"{path}: is not a regular file, a character device or a FIFO; cannot write it")
        return p, st
    folder = p.parent
    try:
        fst = folder.stat()
    except FileNotFoundError:
        raise BadInput(f"{path}: its folder {folder} does not exist; create it first (mmprof creates no "
                       "folders for outputs)") from None
    except NotADirectoryError:
        raise BadInput(f"{path}: cannot write: a file is in the way of its folder {folder}") from None
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: cannot write in {folder}: {getattr(e, 'strerror', None) or e}") from None
    if not stat.S_ISDIR(fst.st_mode):
        raise BadInput(f"{path}: cannot write: its folder {folder} is a file")
    return p, None


@contextlib.contextmanager
def _maybe_gzip(raw, compress: bool, level: int) -> Iterator:
    """`raw` itself, or a deterministic gzip stream over it (mtime 0) when `compress`."""
    if compress:
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=level, mtime=0) as g:
            yield g
    else:
        yield raw


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, compress: bool | None = None, level: int = 6) -> Iterator:
    """A binary file to write `path` through, guarded by `check_output`; see `atomic_write`. Streams: nothing is
    held in memory. An error inside the block (or SIGTERM / SIGINT) removes the temporary file; OS errors (disk
    full, file too large, read-only folder, permission denied) are one BadInput line."""
    if str(path) == "-":
        out = sys.stdout.buffer
        with _write_errors(path):
            with _maybe_gzip(out, compress, level) as g:
                yield g
            out.flush()
        return
    p, st = check_output(path)
    if compress is None:
        compress = p.suffix == ".gz"
    if st is not None and not stat.S_ISREG(st.st_mode):
        with _write_errors(path), _open_special(p, st, path) as raw, _maybe_gzip(raw, compress, level) as g:
            yield g
        return
    sweep_stale_temporaries(p)
    fd, tmp = _unnamed_temporary(p.parent)  # Linux: O_TMPFILE, nothing on disk until it is linked into place
    if fd is None:
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.{os.getpid()}.", suffix=".tmp", dir=p.parent)
        except (OSError, ValueError) as e:
            raise BadInput(f"{path}: cannot write in {p.parent}: {getattr(e, 'strerror', None) or e}") from None
        _pending.add(tmp)
    named = tmp
    try:
        with _write_errors(path):
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, (st.st_mode & 0o7777) if st is not None else 0o666 & ~umask)  # keep an old file's mode
            with os.fdopen(fd, "wb") as raw:
                with _maybe_gzip(raw, compress, level) as g:
                    yield g
                raw.flush()
                os.fsync(raw.fileno())
                if tmp is None:  # link the unnamed file under a temporary name, then rename it over the output
                    named = f"{p.parent}/.{p.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
                    _pending.add(named)
                    os.link(f"/proc/self/fd/{raw.fileno()}", named)
            os.replace(named, p)
    finally:
        if named is not None:
            if os.path.lexists(named):
                try:
                    os.unlink(named)
                except OSError:
                    pass
            _pending.discard(named)


def _unnamed_temporary(folder: Path) -> tuple[int | None, None]:
    """A file in `folder` with no name (Linux O_TMPFILE): a SIGKILL mid-write leaves nothing behind. (None, None)
    where the OS or the filesystem has none (or /proc, needed to link it, is not mounted): then a named temporary
    file, which `sweep_stale_temporaries` removes on a later run if its writer was killed."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None or not os.path.isdir("/proc/self/fd"):
        return None, None
    try:
        dev = os.stat(folder).st_dev
        fd = os.open(folder, flag | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError:  # EOPNOTSUPP (a filesystem without it), EISDIR / EINVAL (an old kernel), EACCES ...
        return None, None
    if dev not in _LINKABLE:  # can this filesystem (and kernel, or sandbox) link such a file? asked once per device
        probe = f"{folder}/.mmprof-probe.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        try:
            os.link(f"/proc/self/fd/{fd}", probe)
            os.unlink(probe)
            _LINKABLE[dev] = True
        except OSError:
            _LINKABLE[dev] = False
    if not _LINKABLE[dev]:
        os.close(fd)
        return None, None
    return fd, None


_LINKABLE: dict[int, bool] = {}


_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d{1,10})\.[A-Za-z0-9_]{8}\.tmp$")
_OLD_TEMP = re.compile(r"^\.(?P<name>.+)\.[A-Za-z0-9_]{8}\.tmp$")  # mmprof before 0.2: no pid in the name
STALE_OLD_TEMP_S = 3600


def sweep_stale_temporaries(path: str | os.PathLike) -> list[str]:
    """Remove the temporary files of earlier writes of `path` whose writer is gone (killed by SIGKILL, the machine
    lost power): `.NAME.PID.XXXXXXXX.tmp` beside it, of a PID no longer running (or, named the older way without a
    PID, not touched for an hour). A write in progress by a live process is never touched. Returns what was removed."""
    p = Path(path)
    gone: list[str] = []
    try:
        entries = list(os.scandir(p.parent))
    except OSError:
        return gone
    now = None
    for e in entries:
        if not e.name.startswith(f".{p.name}.") or not e.name.endswith(".tmp"):
            continue
        m = _TEMP.match(e.name)
        try:
            if not e.is_file(follow_symlinks=False):
                continue
            if m is not None and m.group("name") == p.name:
                if _alive(int(m.group("pid"))):
                    continue
            else:
                m = _OLD_TEMP.match(e.name)
                if m is None or m.group("name") != p.name:
                    continue
                import time

                now = now or time.time()
                if now - e.stat(follow_symlinks=False).st_mtime < STALE_OLD_TEMP_S:
                    continue
            os.unlink(e.path)
            gone.append(e.path)
        except OSError:
            continue
    return gone


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # someone else's process (or not ours to tell): left alone
    return True


@contextlib.contextmanager
def _write_errors(path) -> Iterator[None]:
    try:
        yield
    except OSError as e:
        raise BadInput(f"{path}: cannot write: {e.strerror or e}") from None


@contextlib.contextmanager
def _open_special(p: Path, st: os.stat_result, path) -> Iterator:
    """A character device or FIFO, opened for writing without truncating or replacing it. A FIFO is opened
    non-blocking first: with no reader that is one line, never a hang."""
    if stat.S_ISFIFO(st.st_mode):
        try:
            fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno == errno.ENXIO:
                raise BadInput(f"{path}: a FIFO that no process is reading; start the reader first") from None
            raise
        os.set_blocking(fd, True)
    else:
        fd = os.open(p, os.O_WRONLY)
    with os.fdopen(fd, "wb") as f:
        yield f
        f.flush()


def atomic_write(path: str | os.PathLike, data: bytes, compress: bool | None = None) -> Path:
    """Write `data` to `path` without ever leaving a half-written file or destroying an input.

    A regular file is written through a temporary file in the same folder, then renamed into place: a crash
    mid-write leaves the old file (or nothing). `path` may not be an input of the running command (same inode).
    A symlink stays a symlink: its target is written. A character device or FIFO (or `-`, stdout) is written
    into. A missing folder is refused (`check_output`). `compress` defaults to "the name ends in .gz".
    """
    with atomic_output(path, compress) as f:
        f.write(data)
    if str(path) == "-":
        return Path("-")
    p = Path(path)
    return Path(os.path.realpath(p)) if p.is_symlink() else p
