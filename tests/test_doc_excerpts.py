"""Issue 33: docs that cannot drift. Every `$ mmprof ...` command in README.md and docs/*.md runs as written from the
top of a clone (committed files only), and every output excerpt under it matches what the command prints
(mmprof/cli/_gen_excerpts.py; `python -m mmprof.cli._gen_excerpts --write` regenerates the numbers). Nothing
generated is committed at the top of the repository."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from mmprof.cli import _gen_excerpts as gx
from tests.conftest import ROOT


def _tracked() -> set[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return set(out.splitlines())


ALL = [ex for f in gx.doc_files(ROOT) for ex in gx.excerpts(f)]


def test_the_docs_hold_excerpts():
    assert len(ALL) >= 10 and any(ex.file.name == "README.md" for ex in ALL)


@pytest.mark.parametrize("ex", ALL, ids=[f"{ex.file.name}:{ex.line}" for ex in ALL])
def test_every_excerpt_is_what_its_command_prints(ex):
    rc, out = gx.run(ex.command)
    problems, _ = gx.compare(ex, rc, out)
    assert not problems, "\n".join(problems) + "\n(run: python -m mmprof.cli._gen_excerpts --write)"


@pytest.mark.parametrize("ex", ALL, ids=[f"{ex.file.name}:{ex.line}" for ex in ALL])
def test_every_documented_command_names_committed_files(ex):
    """The issue found README lines naming bare files from other folders and a file the tests generate (ignored
    by git): from a fresh clone they do not exist. Every argument that looks like a path is a tracked file."""
    argv, _ = gx.argv_of(ex.command)
    tracked = _tracked()
    for a in argv[1:]:
        if a.startswith("-") or "/" not in a and not a.endswith((".gz", ".xz", ".json", ".toml", ".db", ".sqlite")):
            continue
        assert a in tracked, f"{ex.file.name}:{ex.line}: {a} is not a committed file (a fresh clone lacks it)"


def test_a_drifted_excerpt_is_caught_and_its_numbers_regenerated(tmp_path):
    """The machinery itself: a number that changed is reported and `--write` takes the command's; changed words
    are reported and left for a person; `...` elides text and lines; the exit code annotation is checked."""
    out = ["verdict: 6 of 90 events (12.5%)", "table row │ FP001 │ FAIL │ detail text", "FAIL: 1 passed, 1 failed"]
    doc = tmp_path / "d.md"
    doc.write_text("x\n```text\n$ mmprof rules\nverdict: 18 of 270 events (12.5%)\n...\n"
                   "table row │ FP001 │ FAIL │ ...\nFAIL: 1 passed, 1 failed   (exit code 0)\n```\n")
    (ex,) = gx.excerpts(doc)
    problems, _ = gx.compare(ex, 1, out)
    assert any("numbers differ" in p for p in problems) and any("exit code 0" in p for p in problems)
    problems, new = gx.compare(ex, 1, out, write=True)
    assert all("numbers differ" not in p for p in problems)
    assert new[0] == "verdict: 6 of 90 events (12.5%)" and new[-1].endswith("(exit code 1)")
    ex2 = gx.Excerpt(doc, ex.line, ex.command, new, ex.first)
    assert gx.compare(ex2, 1, out)[0] == []
    worded = gx.Excerpt(doc, ex.line, ex.command, ["verdict: 6 of 90 kernels"], ex.first)
    problems, same = gx.compare(worded, 1, out, write=True)
    assert problems and same == ["verdict: 6 of 90 kernels"]


def test_write_mode_rewrites_a_file_in_place(tmp_path, monkeypatch):
    doc = tmp_path / "d.md"
    doc.write_text("```text\n$ mmprof rules FP001\nFP001 ...\n```\n")
    monkeypatch.setattr(gx, "run", lambda command, root=gx.ROOT: (0, ["FP001 shared-expert-separate (3 checks)"]))
    doc.write_text("```text\n$ mmprof rules FP001\nFP001 shared-expert-separate (2 checks)\n```\n")
    assert gx.check_files([doc], write=True) == []
    assert "(3 checks)" in doc.read_text()


def test_nothing_generated_is_committed_at_the_top():
    """`mmprof-run.json.gz` was committed at the top: a run's output. `mmprof run` / `record` write there by default
    from a clone, so the names are ignored (.gitignore), and the top holds sources only."""
    top = sorted(f for f in _tracked() if "/" not in f)
    assert top == [".gitignore", "DEVELOPERS.md", "README.md", "pyproject.toml"], top
    ignored = subprocess.run(["git", "check-ignore", "mmprof-run.json.gz", "mmprof-record.json.gz", "mmprof-demo/x"],
                             cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert ignored == ["mmprof-run.json.gz", "mmprof-record.json.gz", "mmprof-demo/x"]


def test_the_live_shapes_refusal_does_not_advise_the_refused_model(capsys):
    """`shapes --live --model small` said "needs 12.2 GiB ... use --model tiny (or small) on CPU"."""
    from mmprof.cli import main

    with pytest.raises(SystemExit) as e:
        main(["shapes", "--live", "--model", "small"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert "small on CPU needs" in err and "(or small)" not in err and "--model tiny" in err
