"""Trace strings are inert in every sink: a kernel or op named like a terminal escape, rich markup, a bidi override,
NUL or a newline followed by a fake verdict is shown as visible text in the terminal, Markdown, JUnit and HTML
output of summary, classify, report, diff, verify-fastpath and shapes (mmprof.render.safe)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from rich.console import Console

from mmprof.capture.workflows.shapes import analytic_shapes
from mmprof.cli import main
from mmprof.profiles import load_profile
from mmprof.profiles.io import save_profile
from mmprof.render.safe import cell, markup, visible
from mmprof.render.text.shapes import render_shapes
from mmprof.shapes_model import Finding
from tests.conftest import ROOT

HOSTILE = ["\x1b[31m", "\x1b]0;title\x07", "[bold red]x[/]", "[link=https://e.x]y[/link]", "[/]", "\u202e",
           "\x00", "a\nFP001 ... PASS"]
RAW = ["\x1b", "\x07", "\x00", "\u202e"]  # must never reach the output as themselves
SHOWN = ["\\x1b[31m", "\\x1b]0;title\\x07", "[bold red]x[/]", "[link=https://e.x]y[/link]", "\\u202e", "\\x00",
         "a\\nFP001 ... PASS"]
SOURCE = ROOT / "examples" / "h200" / "m3-rank-slice" / "fused.json.gz"


def _fake_line(text: str) -> bool:
    """True when a line of `text` starts (after table borders) with the injected verdict."""
    return any(re.match(r"^[\s│┃|>*_-]*FP001 \.\.\. PASS", line) for line in text.splitlines())


def _clean(text: str) -> None:
    for ch in RAW:
        assert ch not in text, f"raw {ch!r} in the output"
    assert not _fake_line(text), "a name started an output line of its own"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """The H200 rank-slice profile with its 8 heaviest kernels and its heaviest op renamed to hostile strings."""
    p = load_profile(SOURCE)
    K = p.tables["kernels"]
    ids, inv = np.unique(K["name"], return_inverse=True)
    tot = np.bincount(inv, weights=K["dur_ns"].astype(float))
    for name_id, s in zip(ids[np.argsort(-tot)][: len(HOSTILE)].tolist(), HOSTILE):
        p.strings[name_id] = s
    O = p.tables["ops"]
    oids, oinv = np.unique(O["name"], return_inverse=True)
    p.strings[int(oids[np.argmax(np.bincount(oinv, weights=O["dur_ns"].astype(float)))])] = "[/]\x1b[2J\u202eop"
    out = tmp_path_factory.mktemp("hostile") / "hostile.json.gz"
    save_profile(p, out)
    return out


def run(args: list[str], capsys, monkeypatch, columns: int = 200) -> tuple[int, str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out + out.err


def test_helpers():
    assert visible("a\x1b[31mb\u202ec\x00d\ne\tf\x85g\u2028") == "a\\x1b[31mb\\u202ec\\x00d\\ne\\tf\\x85g\\u2028"
    assert visible("plain C:\\path ünï") == "plain C:\\path ünï"
    assert markup("[bold red]x[/]") == "\\[bold red]x\\[/]"
    con = Console(width=80, record=True, color_system=None)
    con.print(f"[bold]{markup('[/]x[link=https://e.x]y[/link]')}[/]", cell("\x1b[31m"))
    assert "[/]x[link=https://e.x]y[/link] \\x1b[31m" in con.export_text()


@pytest.mark.parametrize("cmd", [["summary"], ["report"], ["classify", "--unclassified"], ["verify-fastpath", "-v"]])
@pytest.mark.parametrize("columns", [80, 200])
def test_terminal_commands(hostile, capsys, monkeypatch, cmd, columns):
    rc, out = run([cmd[0], str(hostile), *cmd[1:]], capsys, monkeypatch, columns)
    assert rc in (0, 1), out
    _clean(out)
    if columns == 200 and cmd[0] in ("summary", "report", "classify"):  # wide enough to show names whole
        for s in SHOWN:
            assert s in out, (s, out)


def test_diff_terminal_and_markdown(hostile, capsys, monkeypatch, tmp_path):
    md = tmp_path / "diff.md"
    rc, out = run(["diff", str(SOURCE), str(hostile), "--phase", "prefill", "--markdown", str(md)], capsys,
                  monkeypatch)
    assert rc == 0, out
    _clean(out)
    assert "[bold red]x[/]" in out or "\\[bold red]x\\[/]" in out  # a vanished/appeared variant, printed literally
    text = md.read_text()
    _clean(text)
    assert "\\\\x1b" in text  # the escape, itself escaped for Markdown


def test_report_markdown_and_html(hostile, capsys, monkeypatch, tmp_path):
    html = tmp_path / "r.html"
    rc, out = run(["report", str(hostile), "--markdown", "-", "--html", str(html)], capsys, monkeypatch)
    assert rc == 0
    _clean(out)
    assert "a\\\\nFP001 ... PASS" in out  # Markdown: the backslash of the visible escape is escaped too
    page = html.read_text()
    _clean(page)
    assert "\\x1b[31m" in page and "&lt;" not in page.split("<body>")[0]
    assert 'title="a\\nFP001 ... PASS"' in page  # the full name on hover, escaped


def test_verify_junit_stays_valid_xml(hostile, capsys, monkeypatch, tmp_path):
    xml = tmp_path / "j.xml"
    spec = tmp_path / "spec.toml"
    # an assertion that fails on the hostile names, so they land in the failure's message and evidence
    spec.write_text('[spec]\nid = "hostile"\nchecks = []\n[[assert]]\nid = "no-hostile"\nkind = "forbid_pattern"\n'
                    'region = "*"\npattern = "x|title|FP001|y|\\\\[/\\\\]"\n')
    rc, out = run(["verify-fastpath", str(hostile), "--spec", str(spec), "--junit", str(xml), "-v"], capsys,
                  monkeypatch, 80)
    assert rc == 1, out
    _clean(out)
    raw = xml.read_text(encoding="utf-8")
    _clean(raw)
    root = ET.fromstring(raw.encode())  # a NUL or ESC would make this raise
    failures = [f for f in root.iter("failure")]
    assert failures and any("\\x1b" in (f.text or "") for f in failures), raw[:2000]


def test_shapes_renderer(capsys):
    res = analytic_shapes("m3", 8, 1, 1, 1024, "decode", "bf16")
    res.model = "m3\x1b[31m[bold]"
    res.findings.append(Finding(code="SH001", severity="warning", title="[link=https://e.x]y[/link]",
                                message="a\nFP001 ... PASS \u202e\x00", layers=[3], ranks=[0]))
    res.notes.append("[/]\x1b]0;title\x07")
    for width in (80, 120):
        con = Console(width=width, record=True, color_system=None)
        render_shapes(res, con)
        text = con.export_text()
        _clean(text)
        for s in ("m3\\x1b[31m[bold]", "[link=https://e.x]y[/link]", "a\\nFP001 ... PASS", "\\u202e\\x00",
                  "[/]\\x1b]0;title\\x07"):
            assert s in text, s
        assert max(len(line) for line in text.splitlines()) <= width


# -- every control class through every sink (issue 25's second corpus) -------------------------------------------
CLASSES = {"OSC 8": "\x1b]8;;https://e.x\x07ln\x1b]8;;\x07", "OSC 52": "\x1b]52;c;aGk=\x07", "C1": "\x9b2J\x85",
           "U+2028/9": "a\u2028b\u2029", "bidi isolate": "\u2066x\u2069\u061c", "CSI": "\x1b[31m",
           "newline row": "a\nFP001 ... PASS",
           # issue 33: text that hides what it says (zero-width space / joiners, word joiner, soft hyphen, a tag
           # character, the Mongolian vowel separator, a Hangul filler)
           "zero width": "a\u200bb\u200cc\u200dd\u2060e", "invisible": "\u00ad\U000e0041\u180e\u3164"}
RAW2 = ["\x1b", "\x07", "\x9b", "\x85", "\u2028", "\u2029", "\u2066", "\u2069", "\u061c", "\u200b", "\u200c",
        "\u200d", "\u2060", "\u00ad", "\U000e0041", "\u180e", "\u3164"]


@pytest.fixture(scope="module")
def hostile2(tmp_path_factory):
    """The rank-slice profile with its heaviest kernels and ops renamed to end in each control class."""
    p = load_profile(SOURCE)
    for table, n in (("kernels", len(CLASSES)), ("ops", len(CLASSES))):
        X = p.tables[table]
        ids, inv = np.unique(X["name"], return_inverse=True)
        tot = np.bincount(inv, weights=X["dur_ns"].astype(float))
        for name_id, s in zip(ids[np.argsort(-tot)][:n].tolist(), CLASSES.values()):
            p.strings[name_id] = p.strings[name_id][:24] + s
    out = tmp_path_factory.mktemp("hostile2") / "hostile2.json.gz"
    save_profile(p, out)
    return out


@pytest.mark.parametrize("cmd", [["summary"], ["summary", "--json"], ["report", "--by-shape"], ["report", "--json"],
                                 ["report", "--by-shape", "--json"], ["verify-fastpath", "--json"],
                                 ["verify-fastpath", "-v", "--junit", "{tmp}/j.xml"], ["diff", "{src}", "--json"],
                                 ["diff", "{src}"], ["classify", "--unclassified"], ["report"],
                                 ["report", "--markdown", "{tmp}/r.md"], ["report", "--html", "{tmp}/r.html"],
                                 ["diff", "{src}", "--markdown", "{tmp}/d.md"], ["diff", "{src}", "--html", "{tmp}/d.html"],
                                 ["export", "-o", "{tmp}/t.json"], ["verify-fastpath"]])
def test_every_control_class_is_inert_in_every_sink(hostile2, capsys, monkeypatch, tmp_path, cmd):
    """Terminal tables (rich, through mmprof.render.safe.SafeConsole) and JSON (mmprof.render.safe.json_text) never
    carry a raw ESC / OSC / C1 / U+2028 / bidi control, and a name's newline never starts a row; the JSON still
    holds the names exactly (the escapes are JSON escapes)."""
    args = [a.replace("{tmp}", str(tmp_path)).replace("{src}", str(SOURCE)) for a in cmd]
    if cmd[0] == "diff":
        args = ["diff", args[1], str(hostile2), *args[2:]]
    else:
        args = [args[0], str(hostile2), *args[1:]]
    rc, out = run(args, capsys, monkeypatch, 200)
    assert rc in (0, 1), out
    files = sorted(tmp_path.glob("*.*"))  # every file output (Markdown, HTML, JUnit, the Perfetto trace) too
    for ch in RAW2:
        assert ch not in out, f"raw {ch!r} in {cmd}"
        for f in files:
            assert ch not in f.read_text(encoding="utf-8"), f"raw {ch!r} in {f.name} of {cmd}"
    assert not _fake_line(out)
    if "--json" in cmd and cmd[0] in ("summary", "report"):
        import json

        text = json.dumps(json.loads(out))
        assert any(s[:6].encode("unicode_escape").decode() in text or "\\u001b" in text for s in CLASSES.values())


def test_safe_console_keeps_styles_and_the_renderers_own_lines():
    from rich.table import Table
    from rich.text import Text

    from mmprof.render.safe import SafeConsole, json_text

    con = SafeConsole(width=100, record=True, color_system="truecolor", force_terminal=True)
    t = Table("name", "n")
    t.add_row("k\x1b]52;c;aGk=\x07" + markup("\nFP001 ... PASS"), "1")  # a name through markup(): newline shown
    t.add_row(Text("x\u2028y", style="bold"), "[green]2[/]\nsecond line")  # the renderer's own line break stays
    con.print(t)
    con.print("line one\nline two \x9b")
    raw = con.export_text(styles=True, clear=False)
    assert "\x1b]52" not in raw and "\x9b" not in raw and "\u2028" not in raw
    text = con.export_text()
    assert "\\x1b]52;c;aGk=\\x07\\nFP001 ... PASS" in text and "\\u2028" in text
    assert not _fake_line(text) and any("second line" in ln and "2" not in ln for ln in text.splitlines())
    assert "line one\nline two \\x9b" in text  # the renderer's own newline stays a newline
    assert json_text('"a\u2028b\u202ec\x85"') == '"a\\u2028b\\u202ec\\u0085"'


def test_progress_bar_on_a_terminal_shows_names_inert():
    """The import progress bar (shown on a TTY only) describes its stage with a file or rank name: through
    `markup()` and SafeConsole, no OSC 52 / OSC 8, no U+2028, no forged line, markup printed literally."""
    import io
    import threading

    from mmprof.render.safe import SafeConsole
    from mmprof.render.text.progress import progress_bar

    buf = io.StringIO()
    con = SafeConsole(file=buf, force_terminal=True, width=120)
    shown = threading.Event()
    with progress_bar(console=con, delay_s=0.0) as cb:
        cb("importing k\x1b]52;c;aGk=\x07\nFP001 ... PASS [bold]x\u2028", 1, 3)
        for _ in range(200):  # the bar starts on a timer thread: wait for its first frame (no clock asserted)
            if "importing" in buf.getvalue():
                shown.set()
                break
            threading.Event().wait(0.05)
        cb("importing k\x1b]8;;http://e\x07y", 2, 3)
    out = buf.getvalue()
    assert shown.is_set()
    assert "\x1b]52" not in out and "\x1b]8;;http" not in out and "\u2028" not in out and "\nFP001" not in out
    assert "\\x1b]52;c;aGk=\\x07\\nFP001 ... PASS [bold]x\\u2028" in out


def test_every_format_character_is_escaped():
    """Unicode category Cf (format characters: zero-width, joiners, bidi, tags, ...), by the running Python's
    unicodedata: visible() shows each as an escape and json_text() writes each as \\uXXXX (the same JSON value)."""
    import json
    import unicodedata

    from mmprof.render.safe import json_text, visible

    cf = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"]
    assert len(cf) > 150
    for ch in cf:
        shown = visible("a" + ch + "b")
        assert ch not in shown and shown.startswith("a\\") and shown.endswith("b"), hex(ord(ch))
        doc = json_text(json.dumps("a" + ch + "b", ensure_ascii=False))
        assert ch not in doc and json.loads(doc) == "a" + ch + "b", hex(ord(ch))
