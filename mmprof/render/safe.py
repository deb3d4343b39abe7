"""Strings taken from a trace, made inert for the sink they are written to. Every renderer goes through here.

A kernel, op, region or file name is data: it must never restyle, hide or fake output. The sinks and their rules:

- `visible(s)`: control and invisible characters shown as escapes, for every sink. C0 (NUL, ESC, BEL, newline,
  tab, ...), DEL and C1, every Unicode format character (category Cf: the zero-width space and joiners
  U+200B-U+200D, the word joiner U+2060, the bidirectional marks, overrides and isolates U+200E/F, U+202A-U+202E,
  U+2066-U+2069, the soft hyphen, tag characters, ...), other invisible ones (Hangul fillers, variation selectors,
  the combining grapheme joiner), the line and paragraph separators (U+2028/2029), the BOM and the code points XML
  1.0 cannot carry (U+FFFE/FFFF, lone surrogates) become `\\x1b`, `\\n`, `\\u200b`, `\\u202e`, ... So a name can
  neither send a terminal escape sequence, nor hide or reorder what follows it, nor start an output line of its
  own (`a\\nFP001 ... PASS` stays on one line).
- `markup(s)`: `visible` plus rich's markup escaping, for text printed through rich's markup
  (`[bold red]x[/]`, `[link=...]` or `[/]` in a name print literally).
- `cell(s)`: a rich `Text` of `visible(s)`: no markup is parsed at all (table cells).
- Markdown (`mmprof.render.markdown.md_escape`), JUnit XML and HTML apply `visible` before their own escaping.
- `json_text(s)`: a JSON document with every character of the same set written as a `\\uXXXX` escape (the same
  JSON value; the encoder already escapes C0, this adds DEL, C1, bidi controls and U+2028/U+2029, which JSON
  allows raw but a terminal acts on and JavaScript treats as line ends).
- `SafeConsole`: the rich Console every command prints through (`mmprof.cli._common.console`, the progress bar).
  Whatever reaches it is made inert at the last step, whatever the renderer did: every text segment and table cell
  shows the set above as escapes. Newlines excepted: at the sink they cannot be told from the renderer's own line
  breaks (`layout.fold` breaks long names into cell lines), so a name's newline is shown where the name enters the
  output: `visible` / `markup` / `cell`, which every renderer applies to names (`fit_table` does for its cells). A closed stdout raises BrokenPipeError (one error line and
  exit 2 in `mmprof.cli.main`), never rich's SystemExit(1), which would read as "violations".

Backslashes themselves are kept (Windows paths stay readable): the point is inertness, not a reversible encoding.
"""

from __future__ import annotations

import re

from rich.console import Console
from rich.markup import escape as _rich_escape
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

# Unicode's format characters (category Cf, Unicode 14 as in Python 3.11's unicodedata: tests/test_render_safe.py
# checks the list against the running Python's): zero-width space / joiners U+200B-U+200D, word joiner and invisible
# operators U+2060-U+2064, bidi marks, embeddings, overrides and isolates U+200E/F, U+202A-E, U+2066-9, the soft
# hyphen, the BOM, tag characters U+E0001, U+E0020-E007F, ...: text that hides or reorders what it says.
_FORMAT = ("\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
           "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438"
           "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f")
# Invisible characters of other categories: the combining grapheme joiner, Hangul fillers, variation selectors
_INVISIBLE = "\u034f\u115f\u1160\u3164\uffa0\ufe00-\ufe0f\U000e0100-\U000e01ef"
# Controls (C0, DEL, C1), the line and paragraph separators, non-characters XML cannot carry, lone surrogates
_CONTROL = "\x00-\x1f\x7f-\x9f\u2028\u2029\ufffe\uffff\ud800-\udfff"
_UNSAFE = re.compile(f"[{_CONTROL}{_FORMAT}{_INVISIBLE}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _show(m: re.Match) -> str:
    c = m.group(0)
    o = ord(c)
    return _NAMED.get(c) or (f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")


def visible(s: object) -> str:
    """`s` as text with every control, bidi-override and separator character shown as an escape."""
    text = s if isinstance(s, str) else str(s)
    return _UNSAFE.sub(_show, text) if _UNSAFE.search(text) else text


def markup(s: object) -> str:
    """`s` for a rich markup string: control characters shown, markup tags printed literally."""
    return _rich_escape(visible(s))


def cell(s: object, style: str = "") -> Text:
    """`s` as a rich Text (markup never parsed), control characters shown."""
    return Text(visible(s), style=style)


_UNSAFE_JSON = re.compile(f"[\x7f-\x9f\u2028\u2029\ufffe\uffff{_FORMAT}{_INVISIBLE}]")  # the encoder escapes C0
_UNSAFE_LINES = re.compile(_UNSAFE.pattern.replace("\x00-\x1f", "\x00-\x09\x0b-\x1f"))  # all but newline


def _json_escape(m: re.Match) -> str:
    o = ord(m.group())
    if o < 0x10000:
        return f"\\u{o:04x}"
    o -= 0x10000  # beyond the BMP: JSON's surrogate pair
    return f"\\u{0xd800 + (o >> 10):04x}\\u{0xdc00 + (o & 0x3ff):04x}"


def json_text(text: str) -> str:
    """A JSON document with the characters a terminal or a JavaScript parser acts on, and every invisible one,
    written as \\uXXXX escapes (outside strings JSON has only ASCII, so only string contents change, and to the
    same value)."""
    return _UNSAFE_JSON.sub(_json_escape, text) if _UNSAFE_JSON.search(text) else text


def _lines_visible(s: str) -> str:
    return _UNSAFE_LINES.sub(_show, s) if _UNSAFE_LINES.search(s) else s


def safe_text(t: Text, newlines: bool = True) -> Text:
    """A copy of a rich Text whose control characters are escapes, each keeping the style it had."""
    pat = _UNSAFE if newlines else _UNSAFE_LINES
    plain = t.plain
    if not pat.search(plain):
        return t
    cuts = sorted({i for m in pat.finditer(plain) for i in (m.start(), m.end())})
    out = Text(style=t.style, justify=t.justify, overflow=t.overflow, no_wrap=t.no_wrap, end=t.end,
               tab_size=t.tab_size)
    for part in t.divide(cuts):
        if pat.fullmatch(part.plain):
            style = part.spans[0].style if part.spans else ""
            out.append(_show(pat.fullmatch(part.plain)), style=style)
        else:
            out.append_text(part)
    return out


def _safe_cell(c):
    # newlines stay: they are the renderer's own (layout.fold breaks long names into lines); a name's newline is
    # escaped where the name enters the table (visible / cell / fit_table), every other control character here
    if isinstance(c, str):
        return _lines_visible(c)  # markup of the renderer's own (`[green]PASS[/]`) stays
    if isinstance(c, Text):
        return safe_text(c, newlines=False)
    return c


def _safe_table(table: Table) -> None:
    if getattr(table, "_mmprof_safe", False):
        return
    for col in table.columns:
        col._cells = [_safe_cell(c) for c in col._cells]
        if isinstance(col.header, (str, Text)):
            col.header = _safe_cell(col.header)
    for attr in ("title", "caption"):
        v = getattr(table, attr, None)
        if isinstance(v, (str, Text)):
            setattr(table, attr, _safe_cell(v))
    table._mmprof_safe = True


class SafeConsole(Console):
    """A rich Console that never sends a control character it was given as text (see the module docstring)."""

    def render(self, renderable, options=None):
        if isinstance(renderable, Table):
            _safe_table(renderable)
        elif isinstance(renderable, Text):
            renderable = safe_text(renderable, newlines=False)
        for seg in super().render(renderable, options):
            if seg.control is None and seg.text and _UNSAFE_LINES.search(seg.text):
                yield Segment(_lines_visible(seg.text), seg.style, None)
            else:
                yield seg

    def render_str(self, text: str, *args, **kwargs) -> Text:
        return super().render_str(_lines_visible(text), *args, **kwargs)

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(32, "Broken pipe")
