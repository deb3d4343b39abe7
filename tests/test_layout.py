"""Terminal layouts at 80, 120 and 200 columns: no line wider than the console, no word split inside a table cell,
low-value columns dropped first (mmprof.render.text.layout), on the committed examples and real traces."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from rich.cells import cell_len
from rich.console import Console

from mmprof.cli import main
from mmprof.render.text.layout import Col, fit_table, fold, wrap_fold
from tests.conftest import DATA, ROOT

H200 = ROOT / "examples" / "h200" / "m3-rank-slice" / "fused.json.gz"
CPU_TP = ROOT / "examples" / "cpu-tp" / "tp2_fused.json.gz"
HF = DATA / "hf_moe" / "m3_grouped_stack.json.gz"
LADDER = ROOT / "examples" / "h200" / "ladder"
WIDTHS = (80, 120, 200)
_TOKEN = re.compile(r"[A-Za-z0-9]+")


def run(args: list[str], capsys, monkeypatch, columns: int) -> tuple[int, str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out


def vocabulary(*texts: str) -> set[str]:
    return {t for text in texts for t in _TOKEN.findall(text)}


def split_words(text: str, vocab: set[str]) -> list[str]:
    """Words a table split across lines: the last token of a cell's line and the first token of the same column's
    next line join into a known word that is not itself a known token on both sides (`PyTorc│h`). The next line
    must continue the row: a wrapped row leaves blank the cells that did not wrap, while the next row of a table
    fills them (two rows `2.5` / `0.2` of a number column are not the word `50` split)."""
    bad = []
    lines = text.splitlines()
    for a, b in zip(lines, lines[1:]):
        ca, cb = re.split(r"[│┃]", a), re.split(r"[│┃]", b)
        if len(ca) < 3 or len(ca) != len(cb):
            continue
        if not any(x.strip() and not y.strip() for x, y in zip(ca[1:-1], cb[1:-1])):
            continue  # a new row, not the continuation of this one
        for x, y in zip(ca[1:-1], cb[1:-1]):
            x, y = x.rstrip(), y.lstrip()
            if not x or not y or not (x[-1].isalnum() and y[0].isalnum()):
                continue
            left, right = _TOKEN.findall(x)[-1], _TOKEN.findall(y)[0]
            if left + right in vocab and (left not in vocab or right not in vocab):
                bad.append(f"{left}|{right}")
    return bad


def test_split_words_finds_a_wrapped_word_and_not_two_rows():
    vocab = {"PyTorch", "cuBLAS", "50", "0", "2", "x"}
    wrapped = "│ PyTorc │ 12 │\n│ h      │    │\n"   # one row, its first cell wrapped mid-word
    assert split_words(wrapped, vocab) == ["PyTorc|h"]
    rows = "│ x │ 2.5 │\n│ x │ 0.2 │\n"              # two rows: every cell of the second one is filled
    assert split_words(rows, vocab) == []


def check(text: str, width: int, vocab: set[str]) -> None:
    too_wide = [line for line in text.splitlines() if cell_len(line) > width]
    assert not too_wide, f"{len(too_wide)} lines wider than {width}: {too_wide[0]!r}"
    assert not split_words(text, vocab), split_words(text, vocab)


def test_fold_breaks_only_at_break_points():
    assert fold("aten::scaled_dot_product_attention", 27) == "aten::scaled_dot_product_\nattention"
    assert fold("indexFuncLargeIndex<bf16, long, ReduceAdd>", 23) == "indexFuncLargeIndex<\nbf16, long, ReduceAdd>"
    assert fold("unrolled_elementwise_kernel<direct_copy_kernel_cuda, float>", 30) == (
        "unrolled_elementwise_kernel<\ndirect_copy_kernel_cuda,\nfloat>")  # never a line of closing brackets only
    assert fold("short", 10) == "short"
    assert fold("x" * 25, 10) == "x" * 10 + "\n" + "x" * 10 + "\n" + "x" * 5  # no break point: the one cut
    assert wrap_fold("a b\n  - evidence words here", 12) == "a b\n  - evidence\n  words here"


def test_fit_table_drops_lowest_keep_first_and_says_so():
    cols = [Col("name", name=True, keep=10, min=20), Col("family", keep=7), Col("detail one", keep=1),
            Col("detail two", keep=2), Col("time", "right", keep=9)]
    rows = [["void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
             "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
             "elementwise", "0123456789abcdef", "0123456789abcdef", "1.23 ms"]]
    for width, dropped in ((120, []), (70, ["detail one"]), (50, ["detail one", "detail two"])):
        con = Console(width=width, record=True, color_system=None)
        con.print(fit_table(con, cols, rows, title="t"))
        text = con.export_text()
        assert max(cell_len(line) for line in text.splitlines()) <= width
        for c in cols:
            shown = c.header in text.split("\n(not shown")[0]
            assert shown == (c.header not in dropped), (width, c.header)
        assert ("not shown at this width: " + ", ".join(dropped)) in text if dropped else "not shown" not in text
        assert "FillFunctor" in text and "vectorized_" in text


CASES = [
    ("summary", [str(H200)]), ("summary", [str(CPU_TP)]), ("report", [str(H200)]), ("report", [str(CPU_TP)]),
    ("report", [str(HF)]), ("verify-fastpath", [str(H200)]), ("verify-fastpath", [str(CPU_TP)]),
    ("verify-fastpath", [str(HF)]), ("classify", [str(H200), "--unclassified"]), ("classify", [str(HF)]),
    ("diff", [str(LADDER / "baseline.json.gz"), str(LADDER / "grouped.json.gz")]),
    ("diff", [str(ROOT / "examples" / "cpu-tp" / "tp2_separate.json.gz"), str(CPU_TP)]),
    ("shapes", ["--tp", "8"]), ("shapes", ["--profile", str(CPU_TP)]), ("rules", []), ("rules", ["FP001"]),
    ("rules", ["--kernels"]),
]


@pytest.mark.parametrize("cmd,args", CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(CASES)])
def test_commands_fit(cmd, args, capsys, monkeypatch):
    rc, js = run([cmd, *args, "--json"], capsys, monkeypatch, 200)
    vocab = vocabulary(js)
    data = json.loads(js)
    vocab |= vocabulary(json.dumps(data))
    for width in WIDTHS:
        rc, out = run([cmd, *args], capsys, monkeypatch, width)
        assert rc in (0, 1), out
        check(out, width, vocab)


def test_report_drops_low_value_columns_at_80(capsys, monkeypatch):
    _, narrow = run(["report", str(H200)], capsys, monkeypatch, 80)
    _, wide = run(["report", str(H200)], capsys, monkeypatch, 200)
    head = [line for line in narrow.splitlines() if line.startswith("┃ kernel")]
    assert head and "FLOP/B" not in head[0] and "not shown at this width: FLOP/B" in narrow
    assert any(line.startswith("┃ kernel") and "FLOP/B" in line for line in wide.splitlines())
    for kept in ("kernel", "family", "time", "share", "bound"):
        assert kept in narrow
    # display names, never a raw mangled name; the template arguments that tell variants apart survive
    assert "_ZN7cutlass" not in narrow and "cutlass sm90 grouped" in narrow
    assert "p99" in narrow
    _, summ = run(["summary", str(H200)], capsys, monkeypatch, 160)
    assert "void at::native::unrolled_ele" not in summ and "direct_copy_kernel_cuda" in summ


def test_real_cli_reads_columns():
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "mmprof", "verify-fastpath", str(H200)], capture_output=True,
                         text=True, env=env, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(cell_len(line) for line in lines) <= 80
    assert len(lines) < 160  # was 212 with split words (140 before each verdict named what it was judged from)
    assert "PyTorch" in out.stdout and "PyTorc│" not in out.stdout


def _render(fn, width: int, *args) -> str:
    con = Console(width=width, record=True, color_system=None)
    fn(*args, con)
    return con.export_text()


def test_run_record_import_renderers_fit():
    from mmprof.analysis.timeline.runinfo import RunSummary
    from mmprof.capture.record import RecordResult
    from mmprof.profiles import load_profile
    from mmprof.render.text.imports import render_import
    from mmprof.render.text.record import render_record
    from mmprof.render.text.run import render_run

    run_sum = RunSummary.of(load_profile(CPU_TP), "/a/rather/long/output/directory/for/the/profile/run.json.gz")
    path = "/scratch/user/experiments/2026-12-01/vllm-m3-tp8/traces/rank3.pt.trace.json.gz"
    rec = RecordResult(command=["torchrun"], exit_code=0, backend="torch", mode="full", window={}, trace_dir="/t",
                       out="/scratch/user/experiments/m3.json.gz", world_size=4,
                       ranks=[{"rank": r, "pid": 4000 + r, "file": path, "status": "complete"} for r in range(3)],
                       missing_ranks=[3], warnings=["rank 3 did not write a trace"])
    imp = {"output": "/scratch/user/out.json.gz", "format": "kineto", "ranks": [0, 1], "world_size": 2,
           "rows": {t: 1234 for t in ("kernels", "ops", "launches", "memcpy", "collectives", "scopes")},
           "warnings": ["a warning"], "import_s": 1.0, "save_s": 0.5}
    for width in WIDTHS:
        texts = [_render(render_run, width, run_sum), _render(render_record, width, rec),
                 _render(lambda r, c: render_import(r, 2, c), width, imp)]
        for text in texts:
            assert max(cell_len(line) for line in text.splitlines()) <= width, text
        assert "missing" in texts[1] and "rank3.pt.trace.json.gz" in texts[1].replace("\n", "").replace("│", "") \
            .replace(" ", "")


def test_no_function_in_importers_is_over_80_lines():
    """Issue 21's Done-when: no function over 80 lines in mmprof/importers/ (counted by ast from `def` to its last
    line, docstring and comments included); a longer one is split into named steps."""
    import ast

    long = []
    for f in sorted((ROOT / "mmprof" / "importers").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 80:
                    long.append(f"{f.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, long
