"""Issue 33's bad-input corpus, generated here: every class the issue names and more, each through the command line
as a user would meet it: one `mmprof: error:` line and exit 2 (or the verdict), never a hang, a traceback, a raw
invisible character, a blow-up or debris. Peak memory is measured in benchmarks/bomb_memory.py, not here; these
tests check that each shape is counted (refused under a low event limit) before anything is built from it."""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import msgspec
import pytest

from mmprof.cli import main
from tests.conftest import ROOT

SAMPLES = ROOT / "tests" / "data" / "samples"
H200 = ROOT / "examples" / "h200" / "m3-rank-slice" / "separate.json.gz"


def _cli(args, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def _one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mmprof: error:") and "Traceback" not in err, err
    return lines[0]


# -- special files --------------------------------------------------------------------------------------------
@pytest.fixture()
def specials(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock_path))
    d = tmp_path / "adir.json"
    d.mkdir()
    yield {"FIFO": fifo, "socket": sock_path, "character device": Path("/dev/zero"), "directory": d}
    s.close()


COMMANDS_READING = [
    ["import", "--format", "kineto", "{f}", "-o", "{tmp}/o.json"], ["import", "--format", "rocpd", "{f}", "-o", "{tmp}/o.json"],
    ["import", "--format", "rocprofv3-csv", "{f}", "-o", "{tmp}/o.json"],
    ["import", "--format", "rocprofv3-json", "{f}", "-o", "{tmp}/o.json"],
    ["import", "--format", "nsys-sqlite", "{f}", "-o", "{tmp}/o.json"], ["import", "{f}", "-o", "{tmp}/o.json"],
    ["summary", "{f}"], ["report", "{f}"], ["ranks", "{f}"], ["export", "{f}", "-o", "{tmp}/t.json"],
    ["diff", str(H200), "{f}"], ["classify", "{f}"], ["verify-fastpath", "{f}"],
    ["verify-fastpath", str(H200), "--spec", "{f}"], ["verify-fastpath", str(H200), "--rules", "{f}"],
    ["classify", "--rules", "{f}", "--name", "x"], ["shapes", "--tp", "2", "--model", "{f}"],
    ["shapes", "--profile", "{f}"], ["report", str(H200), "--graph-ref", "{f}"],
    ["import", str(H200), "--inductor-provenance", "{f}", "-o", "{tmp}/o.json"],
]


@pytest.mark.parametrize("kind", ["FIFO", "socket", "character device"])
@pytest.mark.parametrize("cmd", COMMANDS_READING, ids=[" ".join(c[:3]) for c in COMMANDS_READING])
def test_special_files_are_refused_before_reading(specials, kind, cmd, tmp_path, capsys):
    """`import --format kineto FIFO` blocked forever (issue 33): the one opener (mmprof.fileio.open_input) refuses a
    FIFO, socket or device on its open descriptor, naming what it is. A FIFO with no writer here: any read of it
    would block this test forever, so a pass means nothing read it."""
    f = specials[kind]
    code, _, err = _cli([a.replace("{f}", str(f)).replace("{tmp}", str(tmp_path)) for a in cmd], capsys)
    line = _one_error(err)
    assert code == 2 and (f"is {kind if kind != 'character device' else 'a character device'}" in line
                          or f"is a {kind}" in line or "not a regular file" in line), line


def test_a_directory_given_as_a_file_is_refused(specials, capsys):
    for args in (["verify-fastpath", H200, "--spec", specials["directory"]],
                 ["classify", "--rules", specials["directory"], "--name", "x"]):
        code, _, err = _cli(args, capsys)
        assert code == 2 and "directory" in _one_error(err)


# -- numeric options --------------------------------------------------------------------------------------------
def _numeric_options():
    from mmprof.cli import COMMANDS, cli

    ctx = click.Context(cli)
    out = []
    for name in COMMANDS:
        cmd = cli.get_command(ctx, name)
        for p in cmd.params:
            if isinstance(p, click.Option) and isinstance(p.type, (click.types.IntParamType, click.types.FloatParamType)):
                out.append((name, p))
    return out


NUMERIC = _numeric_options()


def test_every_numeric_option_has_one_of_the_shared_ranged_types():
    """One shared click type (mmprof.cli._common.Real / count): no option is a bare INT or FLOAT, which would pass
    NaN, inf or a negative count on (`ranks --threshold nan` was accepted)."""
    from mmprof.cli._common import Count, Real

    assert len(NUMERIC) >= 20
    bare = [f"{n} {p.opts[-1]}" for n, p in NUMERIC if not isinstance(p.type, (Real, Count, click.IntRange))]
    assert not bare, bare
    from mmprof.cli._common import RANK
    from mmprof.profiles.schema import MAX_RANK

    assert RANK.max == MAX_RANK
    floats = [(n, p) for n, p in NUMERIC if isinstance(p.type, click.types.FloatParamType)]
    assert floats and all(isinstance(p.type, Real) for _, p in floats)


@pytest.mark.parametrize("name, opt", [(n, p.opts[-1]) for n, p in NUMERIC], ids=[f"{n} {p.opts[-1]}" for n, p in NUMERIC])
def test_nan_inf_and_negative_values_are_one_usage_line(name, opt, capsys):
    p = next(p for n, p in NUMERIC if n == name and p.opts[-1] == opt)
    lo = getattr(p.type, "min", None)
    bad = ["nan", "inf", "-inf", "1e999"] + (["-1"] if lo is not None and lo >= 0 else [])
    needs = {"verify-fastpath": [str(H200)], "ranks": [str(H200)], "report": [str(H200)], "summary": [str(H200)],
             "diff": [str(H200), str(H200)], "export": [str(H200), "-o", "/dev/null"], "import": [str(H200), "-o", "/dev/null"],
             "classify": [str(H200)], "record": ["--", "true"]}.get(name, [])
    for v in bad:
        args = [name, opt, v, *needs] if name == "record" else [name, *needs, opt, v]  # record: options before --
        code, out, err = _cli(args, capsys)
        assert code == 2 and "Invalid value" in _one_error(err) and opt in err, (name, opt, v)


# -- bad databases and profiles -----------------------------------------------------------------------------------
def test_a_rocpd_view_over_a_dropped_table_is_refused(tmp_path, capsys):
    """Read as a CPU-only run with 0 kernels and exit 0 before (issue 33): rocprofv3's `rocpd_kernel_dispatch` view
    selects from `rocpd_kernel_dispatch_<uuid>`; with that table dropped the database lost its kernels."""
    src = SAMPLES / "rocprofv3" / "rocpd" / "14_results.db"
    f = tmp_path / "dropped.db"
    shutil.copy(src, f)
    con = sqlite3.connect(f)
    (table,) = [n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE "
                                           "'rocpd_kernel_dispatch_%'")]
    con.execute(f"DROP TABLE {table}")
    con.commit()
    con.close()
    for cmd in (["summary", f], ["import", f, "-o", tmp_path / "o.json"], ["verify-fastpath", f]):
        code, out, err = _cli(cmd, capsys)
        assert code == 2 and "rocpd_kernel_dispatch cannot be read" in _one_error(err) and "CPU-only" not in out


@pytest.mark.parametrize("tables", [[], {}, None, "x", {"kernels": {"n": 0}}], ids=["list", "empty", "null", "str", "zero rows"])
def test_a_profile_with_list_or_empty_tables_is_refused(tables, tmp_path, capsys):
    """Imported and given to `shapes --profile` with exit 0 before (issue 33)."""
    from mmprof.profiles.schema import FORMAT_NAME, SCHEMA_VERSION

    doc = {"format": FORMAT_NAME, "schema_version": SCHEMA_VERSION, "meta": {}, "strings": [""]}
    if tables is not None:
        doc["tables"] = tables
    f = tmp_path / "p.json"
    f.write_text(json.dumps(doc))
    for cmd in (["import", f, "-o", tmp_path / "o.json"], ["shapes", "--profile", f], ["summary", f]):
        code, _, err = _cli(cmd, capsys)
        line = _one_error(err)
        assert code == 2 and ("must be an object of tables" in line or "every table is empty" in line), line
    assert not (tmp_path / "o.json").exists()


# -- decoding limits for every shape -------------------------------------------------------------------------------
SHAPES = {
    "empty objects": b"{}", "bare integers": b"1", "empty arrays": b"[]", "short strings": b'"a"', "nulls": b"null",
    "events without ph": b'{"ts":1}', "minimal events": b'{"ph":"X"}', "nested arrays": b"[[[]]]",
}


@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
@pytest.mark.parametrize("bare", [False, True], ids=["object", "bare array"])
def test_every_shape_of_element_is_counted_against_the_event_limit(shape, bare, tmp_path, capsys, monkeypatch):
    """A small gzip of tens of millions of `{}` or bare integers reached 3.8 GiB before the limit (issue 33): the
    `"ph"` count on the bytes does not see them. Every element of the event array counts, whatever its shape: with
    the limit at 1,000, 5,000 elements of each shape are refused (in the first window, before the rest is split)."""
    items = b",".join([SHAPES[shape]] * 5000)
    body = b"[" + items + b"]" if bare else b'{"traceEvents":[' + items + b"]}"
    f = tmp_path / "t.json.gz"
    f.write_bytes(gzip.compress(body))
    monkeypatch.setenv("MMPROF_MAX_EVENTS", "1000")
    code, _, err = _cli(["import", "--format", "kineto", f, "-o", tmp_path / "o.json"], capsys)
    assert code == 2 and _one_error(err)  # the default (streaming, issue 35) import: refused, one line
    monkeypatch.setenv("MMPROF_KINETO_REFERENCE", "1")  # the Struct decoder: every element counted in its window
    code, _, err = _cli(["import", "--format", "kineto", f, "-o", tmp_path / "o.json"], capsys)
    assert code == 2 and "exceed the limit of 1,000" in _one_error(err)


@pytest.mark.parametrize("doc, needle", [
    (b'{"traceEvents":[],"deviceProperties":[' + b",".join([b"[]"] * 600_000) + b"]}", "header field 'deviceProperties'"),
    # before the array, in Kineto's own order: the streaming reader refuses it while reading the head (a 64 MiB
    # one exited 0 at 1.8 GiB before: benchmarks/bomb_memory.py kineto_header_array)
    (b'{"schemaVersion":1,"deviceProperties":[' + b",".join([b"[]"] * 600_000) + b'],"traceEvents":[]}',
     "header field 'deviceProperties'"),
    (b'{"traceName":"' + b"a" * 1_100_000 + b'","traceEvents":[]}', "header field 'traceName'"),
    (b'{"traceEvents":7}', '"traceEvents" is a number'),
    (b'{"traceEvents":{"a":1}}', '"traceEvents" is an object'),
    (b'{"x":1}', 'without "traceEvents"'),
])
def test_header_and_container_shapes_are_refused_before_decoding(doc, needle, tmp_path, capsys):
    f = tmp_path / "t.json.gz"
    f.write_bytes(gzip.compress(doc))
    code, _, err = _cli(["import", "--format", "kineto", f, "-o", tmp_path / "o.json"], capsys)
    assert code == 2 and needle in _one_error(err)


def test_streaming_import_counts_elements_without_ph_against_the_density_bound(tmp_path, capsys, monkeypatch):
    """`{"ts":1}` elements carry no "ph" key, so the byte counter never sees them: the streaming import read 20M
    of them and exited 0 with an empty profile (benchmarks/bomb_memory.py kineto_events_without_ph). The decoded
    elements now count against the events-per-compressed-byte bound as they are decoded."""
    monkeypatch.delenv("MMPROF_MAX_EVENTS", raising=False)
    from mmprof import fileio

    n = 2 * fileio.EVENTS_DENSITY_FLOOR + 1000
    f = tmp_path / "t.json.gz"
    f.write_bytes(gzip.compress(b'{"traceEvents":[' + b",".join([b'{"ts":1}'] * n) + b"]}", 9))
    code, _, err = _cli(["import", "--format", "kineto", f, "-o", tmp_path / "o.json"], capsys)
    assert code == 2 and "per compressed byte" in _one_error(err)
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("item", [b"1", b"[]", b'"a"'])
def test_streaming_reader_hands_bare_values_to_the_counting_path(item, monkeypatch):
    """`{"traceEvents":[1,1,...]}` has no `},{` between its elements: the streaming reader once decoded all of it
    as one piece (4.1 GiB for 128 MiB of JSON, benchmarks/bomb_memory.py kineto_bare_ints); past NO_BOUND_LIMIT of
    such text it now gives the document to the whole-document path, which counts elements in windows."""
    from mmprof.importers import _kineto_stream as ks

    monkeypatch.setattr(ks, "PIECE_BYTES", 1024)
    monkeypatch.setattr(ks, "NO_BOUND_LIMIT", 8 * 1024)
    body = b'{"traceEvents":[' + b",".join([item] * 20_000) + b"]}"
    chunks = [body[i:i + 4096] for i in range(0, len(body), 4096)]
    out = list(ks.pieces(iter(chunks)))
    assert out[-1] == ("fallback", b"")
    assert all(len(d) <= 16 * 1024 for k, d in out if k == "head")
    # a real-shaped array of the same size is cut into pieces, never handed over
    events = b'{"traceEvents":[' + b",".join([b'{"ph":"X","ts":1}'] * 5_000) + b"]}"
    kinds = [k for k, _ in ks.pieces(iter([events[i:i + 4096] for i in range(0, len(events), 4096)]))]
    assert kinds[0] == "head" and kinds[-1] == "tail" and kinds.count("events") > 5


def test_head_scan_finds_the_event_array_whatever_the_chunking():
    """The streaming reader's head scan (mmprof.importers._kineto_stream._HeadScan) fed a real trace's head in
    chunks of 1-7 bytes finds the same offset as fed the whole head at once; strings holding brackets, braces,
    escaped quotes and a "traceEvents" value are skipped whole."""
    import random

    from mmprof.importers._kineto_stream import _HeadScan

    head = (b' {"schemaVersion": 1, "note": "a [ { \\" ] } \\\\", "deviceProperties": [{"id": 0, "name": "H200"}],'
            b' "distributedInfo": {"rank": 3}, "x": "traceEvents", "traceEvents"  :  [ {"ph": "X"}]}')
    want = _HeadScan("t").feed(head)
    assert want[0] == "object" and head[want[1] - 1:want[1]] == b"[" and head[:want[1]].endswith(b":  [")
    rng = random.Random(0)
    for _ in range(50):
        scan, buf, got = _HeadScan("t"), bytearray(), ("more", 0)
        i = 0
        while got[0] == "more" and i < len(head):
            n = rng.randint(1, 7)
            buf += head[i:i + n]
            i += n
            got = scan.feed(buf)
        assert got == want


def test_whole_document_json_is_refused_past_its_values_bound(tmp_path, capsys):
    """Profiles, rocprofv3 JSON and config.json are decoded whole: a compressed one holding far more values than a
    real file of its size is refused before decoding (mmprof.fileio.check_json_values)."""
    arrays = b",".join([b"[]"] * 9_000_000)
    for name, head, cmd in (("p.json.gz", b'{"format":"mmprof-profile","x":[', ["summary"]),
                            ("c.json.gz", b'{"model_type":"minimax_m3","x":[', ["shapes", "--tp", "2", "--model"]),
                            ("r.json.gz", b'{"rocprofiler-sdk-tool":[{"x":[', ["summary"])):
        f = tmp_path / name
        f.write_bytes(gzip.compress(head + arrays + b"]}" + (b"]}" if name.startswith("r") else b""), 9))
        code, _, err = _cli([*cmd, f], capsys)
        assert code == 2 and "JSON values in a" in _one_error(err), name


def test_event_windows_split_any_array_exactly_as_one_parse():
    """mmprof.importers._json_windows on random arrays (objects, strings holding `},{` and `,`, nested arrays,
    scalars, whitespace) at window sizes down to 1 byte: the windows hold exactly the elements of one msgspec parse,
    each with the same bytes."""
    from mmprof.importers import _json_windows as jw

    class Count:
        n = 0

        def add(self, k):
            self.n += k

    rng = random.Random(33)
    atoms = [b"{}", b'{"a":"},{"}', b'{"s":","}', b"[1,[2,{}]]", b"7", b'"x,y"', b"null", b'{"n":{"m":[{}, {}]}}',
             b' { "ph" : "X" , "args" : { "grid" : [ 1 , 2 , 3 ] } } ', b'"\\"},{\\""']
    for trial in range(300):
        els = [rng.choice(atoms) for _ in range(rng.randrange(0, 40))]
        data = b"[" + b",\n ".join(els) + b"]"
        want = [bytes(r) for r in msgspec.json.decode(data, type=list[msgspec.Raw])]
        for w in (1, 2, 5, 17, 64, 1 << 20):
            old = jw.WINDOW
            jw.WINDOW = w
            try:
                budget = Count()
                got = [bytes(r) for win in jw.array_windows(data, 0, len(data), budget, "x") for r in win]
            finally:
                jw.WINDOW = old
            assert [g.strip() for g in got] == [x.strip() for x in want] and budget.n == len(want), (trial, w)


# -- debris ------------------------------------------------------------------------------------------------------
def test_a_write_killed_by_sigkill_leaves_nothing_that_outlives_the_next_run(tmp_path):
    """SIGKILL during export / import / report --html left `.NAME.*.tmp` beside the output (issue 33). Where the
    filesystem links unnamed files (Linux O_TMPFILE) nothing is ever named; elsewhere the temporary file carries
    its writer's PID and the next write of the same output removes it once that process is gone."""
    out = tmp_path / "out.json"
    script = textwrap.dedent(f"""
        import os, signal
        from mmprof.fileio import atomic_output
        with atomic_output({str(out)!r}) as f:
            f.write(b"x" * 100000)
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    p = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.wait() == -signal.SIGKILL
    left = sorted(x.name for x in tmp_path.iterdir())
    assert not out.exists()
    assert left == [] or (len(left) == 1 and left[0].startswith(f".out.json.{p.pid}.") and left[0].endswith(".tmp"))
    from mmprof.fileio import atomic_write

    atomic_write(out, b"{}")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out.json"]


def test_a_live_writers_temporary_file_is_never_swept(tmp_path):
    from mmprof.fileio import sweep_stale_temporaries

    mine = tmp_path / f".o.json.{os.getpid()}.abcd1234.tmp"
    mine.write_bytes(b"x")
    other = tmp_path / ".unrelated.json.99999999.abcd1234.tmp"
    other.write_bytes(b"x")
    assert sweep_stale_temporaries(tmp_path / "o.json") == [] and mine.exists() and other.exists()


# -- a closed stdout ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, code", [(["verify-fastpath", str(H200)], 1), (["summary", str(H200)], 0),
                                        (["verify-fastpath", str(H200), "--json"], 1), (["rules"], 0)])
def test_a_reader_that_goes_away_ends_the_command_quietly_with_its_verdict(args, code):
    """`mmprof summary X | head -1` printed "error: stdout: ... (the reader closed the pipe)" and exited 2."""
    cmd = " ".join([sys.executable, "-m", "mmprof", *args]) + " | head -1 >/dev/null; echo ${PIPESTATUS[0]}"
    p = subprocess.run(["bash", "-c", cmd], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"})
    assert p.stderr == "" and p.stdout.strip() == str(code), (p.stdout, p.stderr)


# -- names ----------------------------------------------------------------------------------------------------------
def test_a_name_cut_by_the_profiler_shows_its_readable_prefix():
    """issue 33: verify's evidence showed `_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9x...`
    raw, a name Kineto cut and the demangler refuses. Its readable prefix, marked as cut."""
    from mmprof.names import demangle, display_name

    cut = "_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9x"
    assert demangle(cut) == cut  # LLVM's demangler refuses the cut name
    assert display_name(cut, 80) == "cutlass::device_kernel<at::cuda::detail::enable_3x_kernel_for_sm9x..."
    short = display_name(cut, 40)
    assert short.endswith("...") and short.startswith("cutlass::device_kernel<") and "_ZN" not in short
    whole = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
    assert not display_name(whole).endswith("...")  # a name that demangles is not marked cut


def test_every_cut_of_real_mangled_names_shows_no_raw_mangling():
    """Every prefix of the real mangled names the rules carry as examples (a profiler may cut anywhere): mostly a
    readable prefix ending in `...`, never raw mangling past the first identifier."""
    from mmprof.names import display_name

    from mmprof.analysis.attribution.classify import builtin_rules

    names = [r.example for r in builtin_rules() if r.example and r.example.startswith("_ZN")]  # real mangled names
    assert len(names) >= 10
    readable = 0
    total = 0
    for n in names[:60]:
        for cut in range(12, min(len(n), 200), 7):
            total += 1
            d = display_name(n[:cut], 100)
            if d.endswith("...") and not d.startswith("_Z"):
                readable += 1
    assert readable / total > 0.8, (readable, total)


def test_folding_breaks_real_names_only_between_tokens():
    """Tables fold a long name only after `::`, `<`, `,`, `_` or a space (or `.`, `-`, `/`, `(` and before a closing
    bracket), never inside a run of letters and digits, unless that run alone is wider than the column."""
    import lzma
    import re

    from mmprof.render.text.layout import fold

    names = [ln.split("\t")[0] for ln in lzma.open(ROOT / "tests/data/kernel_corpus/corpus.tsv.xz", "rt")
             .read().splitlines()[1:]] + ["nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"]
    for n in names[:300]:
        n = n[:400]
        for w in (12, 20, 27, 33, 40, 60):
            lines = fold(n, w).split("\n")
            pos = 0
            for a, b in zip(lines, lines[1:]):
                pos += len(a)
                while pos < len(n) and n[pos] == " ":
                    pos += 1
                left, right = n[pos - 1:pos], n[pos:pos + 1]
                if re.match(r"\w", left) and re.match(r"\w", right) and left != "_" and right != "_":
                    run = re.search(r"[A-Za-z0-9]+$", n[:pos]).group(0) + re.match(r"[A-Za-z0-9]*", n[pos:]).group(0)
                    assert len(run) > w, (n, w, a, b)
