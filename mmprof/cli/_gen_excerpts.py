"""Output excerpts in README.md and docs/*.md that cannot drift from what the commands print.

An excerpt is a fenced block whose lines start with `$ mmprof ...`: each command (as a user types it from the top of
a clone: committed files only; `COLUMNS=N` before `mmprof` sets the width, 100 otherwise; `# ...` is a comment) is
run, and every line under it up to the next `$` line must match a line of its output, in order:

- text is compared exactly (trailing spaces aside);
- `...` inside a line stands for any text (`│ FP001 │ ... │ FAIL │ the shared expert ran ...`);
- a line that is only `...` stands for any number of output lines (it may be left out between lines too: the
  lines of an excerpt are a subsequence of the output);
- a trailing `(exit code N)`, after two spaces or more, is the command's exit code.

`python -m mmprof.cli._gen_excerpts` checks every excerpt and lists the lines that differ (exit 1);
`--write` rewrites them where only numbers changed (an excerpt line whose words still match an output line takes
that line's numbers: "18 of 270 events" -> "6 of 90 events"), and lists what it could not (changed wording: edit by
hand). The integrator runs `--write` once after merging branches that change outputs, then commits the diff;
tests/test_doc_excerpts.py fails whenever an excerpt and its command disagree.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_COLUMNS = 100
_FENCE = re.compile(r"^```")
_EXIT = re.compile(r"\s{2,}\(exit code (\d+)\)\s*$")
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


@dataclass
class Excerpt:
    file: Path
    line: int           # 1-based line of the `$` line
    command: str        # as written (without the `$ `)
    lines: list[str] = field(default_factory=list)  # the excerpt lines under it
    first: int = 0      # 1-based line number of lines[0]


def excerpts(path: Path) -> list[Excerpt]:
    """Every `$ mmprof` command of a Markdown file's fenced blocks, with the lines under it."""
    out: list[Excerpt] = []
    inside = False
    cur: Excerpt | None = None
    for i, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(raw):
            inside, cur = not inside, None
            continue
        if not inside:
            continue
        if raw.startswith("$ ") and re.match(r"^\$ (?:COLUMNS=\d+ )?mmprof\b", raw):
            cur = Excerpt(path, i, raw[2:], [], i + 1)
            out.append(cur)
        elif cur is not None:
            cur.lines.append(raw)
    return out


def argv_of(command: str) -> tuple[list[str], int]:
    """The argv and the width of a documented command (`COLUMNS=N` prefix, `# comment` dropped)."""
    words = shlex.split(command, comments=True)
    columns = DEFAULT_COLUMNS
    if words and words[0].startswith("COLUMNS="):
        columns = int(words.pop(0).split("=", 1)[1])
    return words, columns


def run(command: str, root: Path = ROOT) -> tuple[int, list[str]]:
    """(exit code, output lines: stdout then stderr) of a documented command, run from `root`."""
    argv, columns = argv_of(command)
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(root), "NO_COLOR": "1", "TERM": "dumb"}
    p = subprocess.run([sys.executable, "-m", "mmprof", *argv[1:]], capture_output=True, text=True, cwd=root,
                       env=env, stdin=subprocess.DEVNULL)
    return p.returncode, [ln.rstrip() for ln in (p.stdout + p.stderr).splitlines()]


def _pattern(line: str, numbers: bool = False) -> re.Pattern:
    """An excerpt line as a regex over one output line (`...` = any text; numbers as any number if `numbers`)."""
    parts = line.rstrip().split("...")
    parts = [x.rstrip() if i < len(parts) - 1 else x for i, x in enumerate(parts)]  # `text ...` also ends a line
    rx = []
    for part in parts:
        if numbers:
            pieces = _NUMBER.split(part)
            rx.append(r"(\d[\d,]*(?:\.\d+)?)".join(re.escape(x) for x in pieces))
        else:
            rx.append(re.escape(part))
    return re.compile(".*?".join(rx) + r"\s*$")


def compare(ex: Excerpt, rc: int, output: list[str], write: bool = False) -> tuple[list[str], list[str]]:
    """(problems, the excerpt lines as they should read). Lines are matched in order, as a subsequence."""
    problems: list[str] = []
    new = list(ex.lines)
    j = 0
    for k, line in enumerate(ex.lines):
        text = line
        m = _EXIT.search(text)
        if m:
            text = text[:m.start()]
            if int(m.group(1)) != rc:
                problems.append(f"{ex.file.name}:{ex.first + k}: says exit code {m.group(1)}, the command exits {rc}")
                if write:
                    new[k] = line[:m.start(1)] + str(rc) + line[m.end(1):]
        if text.strip() in ("...", ""):
            continue
        rx = _pattern(text)
        hit = next((i for i in range(j, len(output)) if rx.fullmatch(output[i].rstrip())), None)
        if hit is not None:
            j = hit + 1
            continue
        loose = _pattern(text, numbers=True)
        near = next(((i, mm) for i in range(j, len(output)) if (mm := loose.fullmatch(output[i].rstrip()))), None)
        if near is not None and write:
            i, mm = near
            vals = iter(mm.groups())
            new[k] = _NUMBER.sub(lambda _m: next(vals), text) + (line[len(text):] if m else "")
            j = i + 1
            continue
        how = "its numbers differ" if near is not None else "no output line matches it"
        problems.append(f"{ex.file.name}:{ex.first + k}: `{ex.command}`: {how}: {line.strip()[:100]}")
    return problems, new


def check_files(files: list[Path], write: bool = False) -> list[str]:
    problems: list[str] = []
    for f in files:
        text = f.read_text(encoding="utf-8").splitlines()
        changed = False
        for ex in excerpts(f):
            rc, out = run(ex.command)
            got, new = compare(ex, rc, out, write=write)
            if write and new != ex.lines:
                text[ex.first - 1:ex.first - 1 + len(ex.lines)] = new
                changed = True
                got, _ = compare(Excerpt(ex.file, ex.line, ex.command, new, ex.first), rc, out)
            problems += got
        if changed:
            f.write_text("\n".join(text) + "\n", encoding="utf-8")
    return problems


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    write = "--write" in args
    files = [Path(a) for a in args if not a.startswith("--")] or doc_files()
    problems = check_files(files, write=write)
    for p in problems:
        print(p)
    n = sum(len(excerpts(f)) for f in files)
    print(f"{n} excerpts in {len(files)} files: {len(problems)} lines differ from their commands"
          + (" (after --write: edit these by hand)" if write and problems else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
