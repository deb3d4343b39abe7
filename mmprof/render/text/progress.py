"""A rich progress bar on stderr for work that takes more than a moment (shown only on a terminal)."""

from __future__ import annotations

from rich.console import Console


def _stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=False)


class progress_bar:
    """A rich progress bar on stderr driven by `progress(stage, done, total)` callbacks."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled and _stderr().is_terminal
        self._p = None
        self._task = None

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.progress import (
            BarColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self._p = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                           console=_stderr(), transient=True)
        self._p.__enter__()
        self._task = self._p.add_task("starting", total=None)
        return self

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self._p is not None:
            self._p.update(self._task, description=stage, completed=done, total=total)

    def __exit__(self, *exc):
        if self._p is not None:
            self._p.__exit__(*exc)
        return False
