"""Progress on long work: a bar on stderr only on a terminal, only after the work has gone on for a while; and
`--tp 0` / `--ep 0` refused with exit 2."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from mmprof.cli import main
from mmprof.render.text.progress import progress_bar


def _tty() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=True, width=80), buf


def test_bar_appears_only_after_the_delay():
    con, buf = _tty()
    with progress_bar(True, delay_s=0.05, console=con) as cb:
        assert cb is not None
        cb("importing 3 traces", 0, 2)
        time.sleep(0.4)
        cb("writing out.json.gz", 1, 2)
        time.sleep(0.2)
    assert "importing 3 traces" in buf.getvalue() or "writing out.json.gz" in buf.getvalue()


def test_quick_work_shows_nothing():
    con, buf = _tty()
    with progress_bar(True, delay_s=5, console=con) as cb:
        cb("importing", 0, 1)
    assert buf.getvalue() == ""


def test_no_terminal_no_bar_and_no_callback():
    con = Console(file=io.StringIO(), force_terminal=False)
    with progress_bar(True, delay_s=0, console=con) as cb:
        assert cb is None


def test_clock_starts_at_the_first_callback():
    """`record` enters the bar before the wrapped command runs: nothing may show until the import begins."""
    con, buf = _tty()
    with progress_bar(True, delay_s=0.05, console=con) as cb:
        time.sleep(0.3)  # the wrapped command runs here
        assert buf.getvalue() == ""
        cb("importing", 0, 1)
        time.sleep(0.3)
    assert "importing" in buf.getvalue()


@pytest.mark.parametrize("args", [["--tp", "0"], ["--ep", "0"], ["--tp", "-2"]])
def test_shapes_refuses_zero_sizes(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(["shapes", *args])
    assert e.value.code == 2
    assert "range x>=1" in capsys.readouterr().err


def test_report_gates_only_with_check(tmp_path, capsys):
    """`report` is a diagnostic (exit 0 whatever its checks say); `--check` makes a failing check exit 1."""
    from tests.conftest import ROOT

    sep = str(ROOT / "examples" / "h200" / "m3-rank-slice" / "separate.json.gz")
    for args, code in (([], 0), (["--check"], 1)):
        with pytest.raises(SystemExit) as e:
            main(["report", sep, *args])
        out = capsys.readouterr().out
        assert e.value.code == code and "FP001" in out and "fail" in out
    fused = str(ROOT / "examples" / "h200" / "m3-rank-slice" / "fused.json.gz")
    with pytest.raises(SystemExit) as e:
        main(["report", fused, "--check"])
    assert e.value.code == 0
