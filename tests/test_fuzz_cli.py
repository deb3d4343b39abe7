"""CLI fuzz suite: every command over every input kind, mutated (tests/fuzz_corpus.py), must fail cleanly.

For every run: the exit code is 0 or 1 (the input was usable) or 2; an exit 2 prints exactly one stderr line
"mmprof: error: ..." (never "internal error", never a traceback; `verify-fastpath` may instead print its
NO EVIDENCE verdict on stdout); inputs are byte-for-byte unchanged and nothing is left beside them; cases the
corpus marks valid exit 0/1, cases it marks invalid exit 2. Hostile strings in names must not reach stdout as
raw control bytes.

Speed: runs are in-process through `mmprof.cli.main`; every case runs `import` plus two other commands chosen
round-robin (every command sees every kind of damage across a kind's cases). MMPROF_FUZZ_FULL=1 runs every
command on every case. MMPROF_FUZZ_CORPUS=DIR also runs every command on every file of DIR (a corpus we did not
write): `MMPROF_FUZZ_CORPUS=/path pytest tests/test_fuzz_cli.py -k external`.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import re
import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from mmprof.cli import main
from tests.conftest import ROOT
from tests.fuzz_corpus import Case, build_corpus, kineto_seed

TRACE_COMMANDS = [
    ["import", "{in}", "-o", "{out}/p.json.gz"],
    ["summary", "{in}", "--json"],
    ["summary", "{in}"],
    ["report", "{in}", "--markdown", "{out}/r.md", "--html", "{out}/r.html"],
    ["report", "{in}", "--json"],
    ["classify", "{in}"],
    ["verify-fastpath", "{in}", "--junit", "{out}/j.xml"],
    ["diff", "{in}", "{good}", "--json", "--force"],   # --force: a valid {in} may be the very trace {good} is
    ["diff", "{good}", "{in}", "--force"],
    ["shapes", "--profile", "{in}", "--json"],
]
SPEC_COMMANDS = [["verify-fastpath", "{good}", "--spec", "{in}", "--junit", "{out}/j.xml"],
                 ["verify-fastpath", "{good}", "--spec", "{in}", "--json"]]
CONFIG_COMMANDS = [["shapes", "--model", "{in}", "--tp", "2", "--json"], ["shapes", "--profile", "{good}", "--model", "{in}"]]
RULES_COMMANDS = [["rules"], ["rules", "FP001"], ["rules", "--markdown"], ["rules", "\x1b[31mFP0\x07"],
                  ["classify", "--rules", "{in}", "{good}"]]
FULL = bool(os.environ.get("MMPROF_FUZZ_FULL"))
# raw bytes that must never reach a terminal or a JSON consumer: ESC, BEL, NUL, other C0 controls except \t \n \r,
# DEL, C1 (as UTF-8), bidi marks, overrides and isolates, the Arabic letter mark, U+2028 / U+2029 (a line end to
# JavaScript), the BOM
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\x8e\x8f\xa8-\xae]|\xe2\x81[\xa6-\xa9]"
                      rb"|\xd8\x9c|\xef\xbb\xbf"
                      rb"|\xe2\x80[\x8b-\x8d]|\xe2\x81[\xa0-\xa4]|\xc2\xad|\xf3\xa0\x81[\x80-\xbf]|\xe1\xa0\x8e")  # zero-width, tags


@dataclass
class Run:
    args: list[str]
    code: object
    out: bytes
    err: str


def run_cli(args: list[str]) -> Run:
    """`mmprof ARGS` in this process: exit code, stdout bytes, stderr text."""
    ob, eb = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(ob, encoding="utf-8", errors="backslashreplace", write_through=True)
    err = io.TextIOWrapper(eb, encoding="utf-8", errors="backslashreplace", write_through=True)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
            code: object = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else f"exit {e.code!r}")
        except BaseException as e:  # noqa: BLE001 - anything escaping main() is the failure we look for
            code = f"raised {type(e).__name__}: {e}"[:300]
    return Run(args, code, ob.getvalue(), eb.getvalue().decode("utf-8", "replace"))


def problems(r: Run, valid: bool | None) -> list[str]:
    """What is wrong with one run (empty: fine)."""
    cmd = r.args[0]
    lines = r.err.strip().splitlines()
    out = []
    if r.code not in (0, 1, 2):
        out.append(f"exit {r.code}")
    no_evidence = r.code == 2 and cmd == "verify-fastpath" and not r.err.strip() and b"NO EVIDENCE" in r.out.upper()
    no_evidence |= r.code == 2 and cmd == "verify-fastpath" and "--json" in r.args and not r.err.strip()
    if r.code == 2 and not no_evidence and (len(lines) != 1 or not lines[0].startswith("mmprof: error: ")):
        out.append("not one 'mmprof: error:' line on stderr: " + r.err.strip()[-300:])
    if "Traceback" in r.err or "internal error" in r.err:
        out.append("crash: " + r.err.strip()[-300:])
    if valid is True and r.code not in (0, 1) and not no_evidence and cmd != "shapes":
        out.append(f"a valid input gave exit {r.code}: {r.err.strip()[:200]}")
    if valid is False and r.code != 2:
        out.append(f"an invalid input gave exit {r.code}")
    return out


def digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    good = root / "good.json"
    good.write_text(json.dumps(kineto_seed()))
    prof = root / "good_profile.json"
    r = run_cli(["import", str(good), "-o", str(prof)])
    assert r.code == 0, r.err
    cases = build_corpus(root / "corpus", profile_bytes=prof.read_bytes())
    return root, good, prof, cases


def _commands(case: Case, index: int) -> list[list[str]]:
    cmds = {"spec": SPEC_COMMANDS, "config": CONFIG_COMMANDS}.get(case.kind, TRACE_COMMANDS)
    if FULL or len(cmds) <= 3:
        return cmds
    rest = cmds[1:]
    return [cmds[0]] + [rest[(2 * index + k) % len(rest)] for k in range(2)]


def _fill(tpl: list[str], case_path: Path, out: Path, good: Path) -> list[str]:
    return [a.replace("{in}", str(case_path)).replace("{out}", str(out)).replace("{good}", str(good)) for a in tpl]


def check_cases(cases: list[Case], good: Path, out: Path, commands=None) -> list[str]:
    """Run the cases; return one line per problem found."""
    out.mkdir(parents=True, exist_ok=True)
    found = []
    for i, case in enumerate(cases):
        before = digest(case.path)
        siblings = sorted(os.listdir(case.path.parent))
        for tpl in commands or _commands(case, i):
            r = run_cli(_fill(tpl, case.path, out, good))
            found += [f"{case.name} | {' '.join(tpl[:2])}: {p}" for p in problems(r, case.valid)]
        if digest(case.path) != before:
            found.append(f"{case.name}: INPUT CHANGED")
        if sorted(os.listdir(case.path.parent)) != siblings:
            found.append(f"{case.name}: files appeared or vanished beside the input")
    return found


KINDS = ["kineto", "csv", "rocjson", "profile", "rocpd", "nsys", "config", "spec"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_command_fails_cleanly_on_damaged_inputs(corpus, kind, tmp_path):
    root, good, _prof, cases = corpus
    mine = [c for c in cases if c.kind.split("_")[0] == kind and "hostile" not in c.name]
    assert len(mine) >= 10, f"the corpus has too few {kind} cases"
    found = check_cases(mine, good if kind != "spec" else _good_profile(corpus), tmp_path)
    assert not found, f"{len(found)} problems:\n" + "\n".join(found[:40])


def _good_profile(corpus) -> Path:
    return corpus[2]


def test_the_corpus_covers_what_the_issue_lists(corpus):
    names = {c.name for c in corpus[3]}
    for needle in ("kineto/deep_nesting", "kineto/kernel_ts_18446744073709551616", "kineto/correlation_1844",
                   "kineto/step_2e70", "kineto/world_size_2e41", "kineto/devname_int", "kineto/bom",
                   "csv/start_inf", "csv/start_1e30", "csv/counter_collection", "rocjson/rocprofiler-sdk-tool_dict",
                   "profile/n_-1", "profile/const_name", "profile/neg_durations", "profile/meta_list",
                   "rocpd/drop_", "rocpd/text_", "rocpd/corrupt_page_1", "nsys/drop_", "config/num_key_value_heads_0",
                   "config/hidden_size_None", "config/hidden_size_256.5", "config/num_attention_heads_'8'",
                   'spec/assert_0', "spec/empty", "kineto/kernel_name_repeats_vllm", "kineto/layer_92233720368",
                   "kineto/layer_-1_", "kineto/layer_1e30"):
        assert any(n.startswith(needle) for n in names), needle


# -- hostile strings: never a crash, never raw control bytes on stdout ---------------------------------------
RENDERING = ("escaping trace strings for the terminal/Markdown (Rich markup, control characters, bidi overrides) is "
             "issue 13 item 7, done by the rendering work in mmprof/render/ and the CLI renderers, not here")
# Strict xfails until that work (mmprof.render.safe) is merged in; from then on these are plain assertions.
_UNESCAPED = importlib.util.find_spec("mmprof.render.safe") is None
_RENDER_XFAIL = pytest.mark.xfail(_UNESCAPED, strict=True, reason=RENDERING)
HOSTILE_COMMANDS = {
    "summary": pytest.param(["summary", "{in}"], marks=_RENDER_XFAIL),
    "report": pytest.param(["report", "{in}"], marks=_RENDER_XFAIL),
    "diff": pytest.param(["diff", "{good}", "{in}"], marks=_RENDER_XFAIL),
    "verify-fastpath": pytest.param(["verify-fastpath", "{in}"], marks=_RENDER_XFAIL),
    "summary-json": pytest.param(["summary", "{in}", "--json"]),
    "report-by-shape": pytest.param(["report", "{in}", "--by-shape"]),
    "diff-json": pytest.param(["diff", "{good}", "{in}", "--json"]),
    "verify-json": pytest.param(["verify-fastpath", "{in}", "--json"]),
    "verify-junit": pytest.param(["verify-fastpath", "{in}", "--junit", "{out}/j.xml"]),
    "classify": pytest.param(["classify", "{in}"]),
    "import": pytest.param(["import", "{in}", "-o", "{out}/p.json"]),
}


@pytest.mark.parametrize("tpl", list(HOSTILE_COMMANDS.values()), ids=list(HOSTILE_COMMANDS))
def test_hostile_names_stay_inert(corpus, tpl, tmp_path):
    root, good, prof, cases = corpus
    spec = tpl[0] == "verify-fastpath"  # a hostile spec id reaches verify's output only
    hostile = [c for c in cases if "hostile" in c.name and (spec or c.kind != "spec")]
    assert len(hostile) >= 20
    found = []
    for c in hostile:
        args = _fill(tpl if c.kind != "spec" else ["verify-fastpath", "{good}", "--spec", "{in}"], c.path, tmp_path,
                     good if c.kind != "spec" else prof)
        r = run_cli(args)
        found += [f"{c.name}: {p}" for p in problems(r, c.valid)]
        if _CONTROL.search(r.out):
            found.append(f"{c.name}: raw control bytes on stdout {_CONTROL.search(r.out).group()!r}")
    assert not found, f"{len(found)} problems:\n" + "\n".join(found[:30])


# -- rules and classify --rules ----------------------------------------------------------------------------------
def test_rules_and_rule_files(corpus, tmp_path):
    root, good, prof, cases = corpus
    # TOML of the wrong shape for a rules file: refused or harmless, never a crash
    rule_files = [Case(c.name, c.kind, c.path, None) for c in cases if c.kind == "spec"][:12]
    found = check_cases(rule_files, prof, tmp_path, commands=RULES_COMMANDS)
    assert not found, "\n".join(found[:30])


# -- outputs that are inputs ---------------------------------------------------------------------------------------
def test_no_command_writes_over_its_inputs(corpus, tmp_path):
    root, good, prof, cases = corpus
    trace = next(c.path for c in cases if c.name == "kineto_real/triton_example")
    spec = next(c.path for c in cases if c.name == "spec/valid")
    found = []
    for tpl in (["report", "{p}", "--html", "{p}"], ["report", "{p}", "--markdown", "{p}"],
                ["diff", "{p}", "{t}", "--html", "{p}"], ["diff", "{t}", "{p}", "--markdown", "{t}"],
                ["verify-fastpath", "{p}", "--junit", "{p}"], ["verify-fastpath", "{p}", "--spec", "{s}", "--junit",
                                                              "{s}"], ["import", "{t}", "-o", "{t}"]):
        before = {f: digest(f) for f in (prof, trace, spec)}
        r = run_cli([a.replace("{p}", str(prof)).replace("{t}", str(trace)).replace("{s}", str(spec)) for a in tpl])
        found += [f"{tpl}: {p}" for p in problems(r, False)]
        if "refusing to write over an input" not in r.err:
            found.append(f"{tpl}: not refused ({r.err.strip()[:120]})")
        if {f: digest(f) for f in before} != before:
            found.append(f"{tpl}: AN INPUT WAS OVERWRITTEN")
    assert not found, "\n".join(found)


# -- a held-out corpus -----------------------------------------------------------------------------------------
def external_cases() -> list[Case]:
    d = os.environ.get("MMPROF_FUZZ_CORPUS")
    if not d:
        return []
    files = sorted(p for p in Path(d).rglob("*") if p.is_file())
    out = []
    for p in files:
        head = p.read_bytes()[:4096]
        kind = "spec" if p.suffix == ".toml" else "config" if b"hidden_size" in head or b"text_config" in head else "x"
        out.append(Case(f"external/{p.relative_to(d)}", kind, p, None))
    return out


def test_external_corpus(corpus, tmp_path):
    """Every command on every file of $MMPROF_FUZZ_CORPUS (read-only; without it, on this suite's own damaged
    Kineto cases so the test always checks something)."""
    root, good, prof, cases = corpus
    ext = external_cases() or [c for c in cases if c.kind == "kineto"][:3]
    found = []
    for c in ext:
        cmds = TRACE_COMMANDS + (SPEC_COMMANDS if c.kind == "spec" else CONFIG_COMMANDS if c.kind == "config" else [])
        cmds = [[a if a != "{good}" or t[0] != "verify-fastpath" else str(prof) for a in t] for t in cmds]
        found += check_cases([c], good, tmp_path, commands=cmds)
        for tpl in (["summary", "{in}"], ["report", "{in}"], ["classify", "{in}"]):
            r = run_cli(_fill(tpl, c.path, tmp_path, good))
            if r.code in (0, 1) and _CONTROL.search(r.out):
                found.append(f"{c.name} | {tpl[0]}: raw control bytes on stdout (rendering, issue 13 item 7)")
    if not external_cases():
        found = [f for f in found if "raw control bytes" not in f]
    assert not found, f"{len(found)} problems:\n" + "\n".join(found[:50])


# -- a few real processes: exit codes, one line, no traceback, bounded memory -------------------------------------
def _limit_memory():  # 3 GiB of address space: a blow-up is a MemoryError/kill, not a swapping machine
    resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))


def test_real_processes(corpus, tmp_path):
    root, good, prof, cases = corpus
    by = {c.name: c for c in cases}
    big = kineto_seed()
    big["distributedInfo"]["world_size"] = 2**31
    ws = tmp_path / "ws.json"
    ws.write_text(json.dumps(big))
    runs = [(["summary", str(by["kineto/deep_nesting"].path)], 2), (["summary", str(ws)], 0),
            (["report", str(by["profile/neg_durations"].path)], 2), (["import", str(by["csv/counter_collection"].path),
                                                                       "-o", str(tmp_path / "o.json")], 2),
            (["shapes", "--model", str(by["config/num_key_value_heads_0"].path)], 2)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MMPROF_DEBUG", None)
    for args, want in runs:
        r = subprocess.run([sys.executable, "-m", "mmprof", *args], capture_output=True, cwd=ROOT, env=env,
                           preexec_fn=_limit_memory, timeout=120)
        err = r.stderr.decode("utf-8", "replace")
        assert r.returncode == want, (args, err[-500:])
        if want == 2:
            assert len(err.strip().splitlines()) == 1 and err.startswith("mmprof: error: "), err
        assert "Traceback" not in err and not _CONTROL.search(r.stdout)
