"""The wrapped command's stdout and stderr, kept as the run's log while passing through unchanged (`mmprof record`).

`OutputCapture` sits between the command and mmprof's own stdout / stderr:

- every byte the command writes goes on to where it would have gone (our fd 1 / fd 2), unchanged and unbuffered,
  as it arrives; a copy is kept within a size bound (`mmprof.log_text.BoundedStream`: head, tail and the lines the
  log rules want, 4 MiB by default, as raw chunks stamped with the wall-clock time they arrived) and split into
  lines only when the log is taken (`snapshot`: escape sequences removed, CR / CRLF, partial lines);
- what the command sees stays what it would have seen: where our stdout (stderr) is a terminal, the command gets
  a pseudo-terminal of the same size (kept in step on SIGWINCH) with output post-processing off, so `isatty()` is
  true, colours and progress bars are the terminal ones, and the bytes reaching the terminal are the same; where
  ours is a pipe or a file, the command gets a pipe (`isatty()` false as before; a file becomes a pipe: it cannot
  seek its stdout); where ours is closed, the command's stays closed and nothing is captured from it;
- if the reader of our stdout goes away (`| head`), the command's pipe is closed too, so it gets the EPIPE /
  SIGPIPE it would have got.

The forwarding thread keeps running after the command ends (orphaned workers may still print) until mmprof exits;
`snapshot()` takes the lines kept so far. `record --no-log` runs the command with inherited stdio instead.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from typing import Any

from mmprof.capture.command import closed_at_start
from mmprof.importers.logs import log_profile, pid_ranks, with_log
from mmprof.log_text import LIMIT_BYTES, BoundedStream, Line, merge_streams

READ_CHUNK = 65536
STREAMS = (("stdout", 1), ("stderr", 2))


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


class OutputCapture:
    """Tee the command's stdout / stderr to ours and keep a bounded, timestamped copy of their lines."""

    def __init__(self, limit: int = LIMIT_BYTES, anchors: tuple[bytes, ...] = (), wanted=None,
                 use_pty: bool | None = None) -> None:
        self.limit = limit
        self.anchors, self.wanted = anchors, wanted
        self.use_pty = use_pty          # None: a pty exactly where our stream is a terminal
        self.child: dict[str, int | None] = {}     # stream -> the fd the command gets (None: inherit ours)
        self._read: dict[int, tuple[str, int]] = {}  # our read end -> (stream, our fd to forward to)
        self._keep: dict[str, BoundedStream] = {}
        self._pty_for: dict[int, int] = {}          # read end (pty master) -> our terminal fd (window size)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._keeper: threading.Thread | None = None
        self._done = threading.Event()
        self._work = threading.Event()              # the forwarder pushed chunks the keeper may search
        self._last_push = 0.0
        self._old_winch: Any = None
        self.broken: list[str] = []                 # streams whose reader went away (we closed the command's end)

    # -- set-up, before the command starts ----------------------------------------------------------------
    def open(self) -> dict[str, int | None]:
        """The fds to give the command as stdout / stderr (None: leave that stream inherited)."""
        closed = closed_at_start()
        for stream, ours in STREAMS:
            if ours in closed or not _fd_open(ours):
                self.child[stream] = None  # ours is closed: the command's stays closed, nothing to keep
                continue
            tty = _isatty(ours) if self.use_pty is None else self.use_pty
            if tty:
                master, slave = os.openpty()
                self._pty_setup(ours, slave)
                self._pty_for[master] = ours
                r, w = master, slave
            else:
                r, w = os.pipe()
            self._read[r] = (stream, ours)
            self.child[stream] = w
        n = max(1, len(self._read))  # one bound over the streams captured
        for stream, _ in self._read.values():
            self._keep[stream] = BoundedStream(stream, self.limit // n, self.anchors, self.wanted)
        return dict(self.child)

    @staticmethod
    def _pty_setup(ours: int, slave: int) -> None:
        """The pseudo-terminal as the command's terminal would be: our terminal's modes (output processing off, so
        the bytes reach our terminal as the command wrote them and it does its own newline translation) and size."""
        try:
            import termios

            if _isatty(ours):
                attrs = termios.tcgetattr(ours)
                attrs[1] &= ~termios.OPOST
                termios.tcsetattr(slave, termios.TCSANOW, attrs)
            else:
                attrs = termios.tcgetattr(slave)
                attrs[1] &= ~termios.OPOST
                termios.tcsetattr(slave, termios.TCSANOW, attrs)
        except (ImportError, OSError):
            pass
        _copy_winsize(ours, slave)

    def started(self) -> None:
        """The command runs: close our copies of its ends, start forwarding."""
        for fd in self.child.values():
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        if self._pty_for and threading.current_thread() is threading.main_thread():
            try:
                self._old_winch = signal.signal(signal.SIGWINCH, self._winch)
            except (ValueError, AttributeError, OSError):
                self._old_winch = None
        self._thread = threading.Thread(target=self._forward, name="mmprof-output", daemon=True)
        self._thread.start()
        self._keeper = threading.Thread(target=self._search, name="mmprof-log-search", daemon=True)
        self._keeper.start()

    def _winch(self, signum, frame) -> None:
        for master, ours in self._pty_for.items():
            _copy_winsize(ours, master)
        if callable(self._old_winch):
            self._old_winch(signum, frame)

    # -- forwarding ----------------------------------------------------------------------------------------
    def _forward(self) -> None:
        open_fds = set(self._read)
        while open_fds:
            try:
                ready, _, _ = select.select(list(open_fds), [], [], 0.5)
            except (OSError, ValueError):
                break
            for r in ready:
                try:
                    data = os.read(r, READ_CHUNK)
                except OSError:  # EIO: every writer of the pty has closed it
                    data = b""
                stream, ours = self._read[r]
                if not data:
                    open_fds.discard(r)
                    self._close(r)
                    continue
                t = time.time_ns()
                if not self._write(ours, data):
                    self.broken.append(stream)  # our reader is gone: so is the command's (EPIPE / SIGPIPE for it)
                    open_fds.discard(r)
                    self._close(r)
                with self._lock:
                    self._keep[stream].push(data, t)  # no search here: the keeper thread does it
                self._last_push = time.monotonic()
                self._work.set()
        self._done.set()
        self._work.set()

    def _search(self) -> None:
        """Search what leaves the kept tail for the lines the log rules want, off the forwarding path (a backlog
        beyond BoundedStream.BACKLOG_MAX is dropped unsearched rather than slowing the command)."""
        while True:
            self._work.wait(0.5)
            self._work.clear()
            for k in list(self._keep.values()):
                k.scan(pause=self._yield)
            if self._done.is_set():
                return

    @staticmethod
    def _write(fd: int, data: bytes) -> bool:
        view = memoryview(data)
        while view:
            try:
                n = os.write(fd, view)
            except InterruptedError:
                continue
            except BlockingIOError:
                select.select([], [fd], [], 1.0)
                continue
            except OSError:
                return False
            view = view[n:]
        return True

    @staticmethod
    def _close(fd: int) -> None:
        try:
            os.close(fd)
        except OSError:
            pass

    def _yield(self) -> None:
        """Between two searched chunks: while output is streaming, let the forwarding thread have the GIL (the
        search catches up when the command pauses or ends; a backlog past its bound is dropped unsearched)."""
        time.sleep(0.0005)
        while not self._done.is_set() and time.monotonic() - self._last_push < 0.005:
            time.sleep(0.005)

    # -- after the command ----------------------------------------------------------------------------------
    def drain(self, timeout: float = 1.0) -> bool:
        """Wait up to `timeout` s for every writer to close its end (the command and its children exited);
        True when all have."""
        if self._thread is None:
            return True
        return self._done.wait(timeout)

    def restore(self) -> None:
        if self._old_winch is not None:
            try:
                signal.signal(signal.SIGWINCH, self._old_winch)
            except (ValueError, OSError):
                pass
            self._old_winch = None

    def snapshot(self) -> tuple[list[Line], list[dict[str, Any]]]:
        """The lines kept so far, in arrival order, and one source entry per captured stream."""
        with self._lock:
            keeps = list(self._keep.values())
            lines = merge_streams(keeps)
            counts: dict[str, int] = {}
            for ln in lines:
                counts[ln.stream] = counts.get(ln.stream, 0) + 1
            terminal = {self._read[r][0] for r in self._pty_for}
            sources = [{"stream": k.stream, "file": None, "lines": k.total_lines, "bytes": k.bytes,
                        "kept": counts.get(k.stream, 0), "dropped": k.dropped(counts.get(k.stream, 0)),
                        "unsearched": k.unsearched, "terminal": k.stream in terminal} for k in keeps]
        return lines, sources


    def attach(self, profile, warnings: list[str]):
        """(the profile with the kept output as its log, a summary of what was kept); lines of a captured process
        get its rank by pid. What went wrong on the way (a reader gone, a backlog dropped) is added to `warnings`."""
        lines, sources = self.snapshot()
        summary = {"streams": sources, "kept": len(lines), "limit_bytes": self.limit}
        if self.broken:
            warnings.append(f"the reader of mmprof's {' and '.join(self.broken)} went away: the command's was closed "
                            "too (as without record); the log holds what came before")
        lost = sum(s.get("unsearched", 0) for s in sources)
        if lost:
            warnings.append(f"the command printed faster than its log could be searched: {lost:,} bytes of the "
                            "middle of its output were not searched for log facts (the head and tail are kept)")
        if not lines:
            return profile, summary
        return with_log(profile, log_profile(lines, sources, pid_ranks(profile), limit=self.limit)), summary


def _copy_winsize(src: int, dst: int) -> None:
    try:
        import fcntl
        import termios

        size = fcntl.ioctl(src, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(dst, termios.TIOCSWINSZ, size)
    except (ImportError, OSError):
        pass
