"""The README's example sessions on examples/ print what the README shows.

Each `$ mmprof ...` line of a ```text block of README.md that names a file under examples/ is run; every line
shown under it must appear in what the command printed (whitespace and line wrapping aside; `...` marks what the
README leaves out, so each piece between two `...` is looked for on its own), and `(exit code N)` must be the exit
code. The README is the truth here: when an excerpt under examples/ changes (examples/trim.py), its printed
numbers must be changed in the README too, or this fails.
"""

from __future__ import annotations

import re
import shlex

import pytest

from mmprof.cli import main
from tests.conftest import ROOT


def _sessions() -> list[tuple[list[str], list[str]]]:
    text = (ROOT / "README.md").read_text()
    out = []
    for block in re.findall(r"```text\n(.*?)```", text, flags=re.S):
        cur = None
        for line in block.splitlines():
            if line.startswith("$ mmprof "):
                args = shlex.split(line[2:].split("#", 1)[0])[1:]
                cur = (args, []) if any(a.startswith("examples/") for a in args) else None
                if cur:
                    out.append(cur)
            elif cur is not None and line.strip():
                cur[1].append(line)
    return out


SESSIONS = _sessions()


def _norm(s: str) -> str:
    return " ".join(s.split())


def test_the_readme_shows_sessions_on_the_examples():
    assert len(SESSIONS) >= 4 and all(shown for _, shown in SESSIONS)


@pytest.mark.parametrize("args,shown", SESSIONS, ids=[" ".join(a[:2]) for a, _ in SESSIONS])
def test_readme_session_prints_what_the_readme_shows(args, shown, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # no wrapping inside table cells: a shown row is one printed line
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as e:
        main(args)
    printed = _norm(capsys.readouterr().out)
    for line in shown:
        m = re.search(r"\(exit code (\d+)\)\s*$", line)
        if m:
            assert e.value.code == int(m.group(1)), (args, e.value.code)
            line = line[:m.start()]
        for piece in line.split("..."):
            piece = _norm(piece).strip(" ;,")
            if piece:
                assert piece in printed, (args, piece)
