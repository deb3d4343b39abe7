"""A rich progress bar on stderr for work that takes more than a moment: shown only on a terminal, and only once
the work has gone on for `DELAY_S` seconds (quick work shows nothing; piped or redirected output never does)."""

from __future__ import annotations

import threading

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from mmprof.render.safe import SafeConsole, markup

DELAY_S = 2.0


def _stderr() -> Console:
    return SafeConsole(stderr=True, highlight=False, soft_wrap=False)


class progress_bar:
    """Context manager giving a `progress(stage, done, total)` callback (None when disabled).

    The clock starts at the first callback, not at `with`: `mmprof record` passes it to work that begins only
    after the wrapped command (whose own output is on the terminal) has ended."""

    def __init__(self, enabled: bool = True, delay_s: float = DELAY_S, console: Console | None = None):
        self.console = console or _stderr()
        self.enabled = enabled and self.console.is_terminal
        self.delay_s = delay_s
        self._p: Progress | None = None
        self._task = None
        self._timer: threading.Timer | None = None
        self._state: tuple[str, int, int | None] = ("starting", 0, None)
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self):
        return self if self.enabled else None

    def __call__(self, stage: str, done: int, total: int | None) -> None:
        with self._lock:
            self._state = (stage, done, total)
            if self._p is not None:
                self._p.update(self._task, description=markup(stage), completed=done, total=total)
            elif self._timer is None and not self._closed:
                self._timer = threading.Timer(self.delay_s, self._show)
                self._timer.daemon = True
                self._timer.start()

    def _show(self) -> None:
        with self._lock:
            if self._closed:
                return
            stage, done, total = self._state
            self._p = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                               console=self.console, transient=True)
            self._p.start()
            self._task = self._p.add_task(markup(stage), total=total, completed=done)  # a name: inert, one line

    def __exit__(self, *exc):
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
            if self._p is not None:
                self._p.stop()
        return False
