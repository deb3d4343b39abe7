"""Issue 25's "Smaller" list and the OS-error classes of its second corpus that had no test of their own, each
through the CLI as a user runs it. The truths: docs/limits.md (one line, exit 2, the way out named), the
README's promise of display names, and the checks' own texts (mmprof/rules/checks.toml)."""

from __future__ import annotations

import builtins
import json
import os
import tempfile

import pytest

from mmprof.cli import main
from mmprof.fileio import read_bytes
from mmprof.errors import BadInput
from tests.conftest import ROOT
from tests.fuzz_corpus import kineto_seed


def _cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    cap = capsys.readouterr()
    return e.value.code, cap.out, cap.err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mmprof: error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def trace(tmp_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps(kineto_seed()))
    return f


def test_export_into_proc_is_one_line_not_an_internal_error(trace, capsys):
    """`export -o /proc/x.json` was an "internal error": a folder nothing can be created in is a plain error."""
    code, _, err = _cli(["export", trace, "-o", "/proc/x.json"], capsys)
    assert code == 2 and "internal error" not in _one_line(err) and "/proc" in err


def test_permission_denied_on_an_input_is_one_line(trace, monkeypatch, capsys):
    """Permission denied on an input (simulated: the suite may run as root, whom permissions do not stop)."""
    real_open = builtins.open

    def deny(path, *a, **k):
        if str(path) == str(trace):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    real_os_open = os.open

    def deny_fd(path, *a, **k):  # mmprof.fileio.open_input opens by descriptor (non-blocking, then fstat)
        if str(path) == str(trace):
            raise PermissionError(13, "Permission denied", str(path))
        return real_os_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", deny)
    monkeypatch.setattr(os, "open", deny_fd)
    with pytest.raises(BadInput, match="cannot read: Permission denied"):
        read_bytes(trace)
    code, _, err = _cli(["summary", trace], capsys)
    assert code == 2 and "Permission denied" in _one_line(err)


def test_an_output_folder_that_refuses_writes_is_one_line(trace, tmp_path, monkeypatch, capsys):
    """A read-only output folder (simulated the same way: the temporary file beside the output cannot be made) is
    one line naming the output, and nothing is left behind."""
    out = tmp_path / "ro"
    out.mkdir()

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied", str(out))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    code, _, err = _cli(["import", trace, "-o", out / "p.json"], capsys)
    assert code == 2 and "internal error" not in _one_line(err) and "ermission denied" in err
    assert list(out.iterdir()) == []


def test_rules_texts_read_right(capsys):
    """"1 checks" and a rule text that says an unannotated trace "gives FP000" were wrong: one check is "1 check",
    and FP001 says such a trace gets NO EVIDENCE (docs/fastpath.md)."""
    code, out, _ = _cli(["rules", "FP001"], capsys)
    assert code == 0 and "1 check " in out and "1 checks" not in out
    assert "gives FP000" not in out and "NO EVIDENCE" in out


def test_a_forbid_with_no_region_says_in_the_profile(tmp_path, trace, capsys):
    """A forbid assertion without a region read "no family=gemm in anywhere": it says "in the profile"."""
    spec = tmp_path / "s.toml"
    spec.write_text('[spec]\nid = "s"\nchecks = ["FP000"]\n\n[[assert]]\nid = "no-copies"\nkind = "forbid"\n'
                    'family = "copy"\n')
    code, out, err = _cli(["verify-fastpath", trace, "--spec", spec, "--json"], capsys)
    assert code in (0, 1), err
    text = json.dumps(json.loads(out))
    assert "in anywhere" not in text and "among 6 events in the profile" in text


def test_the_demo_folder_is_ignored_by_git():
    """`mmprof demo` writes ./mmprof-demo/ (docs/demo.md); in a clone it must not show as untracked."""
    lines = (ROOT / ".gitignore").read_text().splitlines()
    assert "/mmprof-demo/" in lines or "mmprof-demo/" in lines


def test_kineto_usdt_lines_are_hidden_and_other_lines_kept(capfd):
    """Kineto writes `USDT: ... profiler_start` / `STAGE:` lines to fd 2 (torch 2.13 CPU builds, no switch turns
    them off); record and run hide those two kinds and pass every other line written meanwhile."""
    from mmprof.capture.session import _kineto_log_filtered

    with _kineto_log_filtered(True):
        os.write(2, b"USDT: profiler_start\nSTAGE:2026 stage\nreal warning\n")
    err = capfd.readouterr().err
    assert "USDT" not in err and "STAGE" not in err and "real warning" in err
