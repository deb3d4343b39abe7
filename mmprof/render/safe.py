"""Strings taken from a trace, made inert for the sink they are written to. Every renderer goes through here.

A kernel, op, region or file name is data: it must never restyle, hide or fake output. The sinks and their rules:

- `visible(s)`: control characters shown as escapes, for every sink. C0 (NUL, ESC, BEL, newline, tab, ...),
  DEL and C1, the bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069, plus LRM/RLM/ALM), the
  line and paragraph separators (U+2028/2029), the BOM and the code points XML 1.0 cannot carry (U+FFFE/FFFF,
  lone surrogates) become `\\x1b`, `\\n`, `\\u202e`, ... So a name can neither send a terminal escape sequence,
  nor reorder what follows it, nor start an output line of its own (`a\\nFP001 ... PASS` stays on one line).
- `markup(s)`: `visible` plus rich's markup escaping, for text printed through rich's markup
  (`[bold red]x[/]`, `[link=...]` or `[/]` in a name print literally).
- `cell(s)`: a rich `Text` of `visible(s)`: no markup is parsed at all (table cells).
- Markdown (`mmprof.render.markdown.md_escape`), JUnit XML and HTML apply `visible` before their own escaping;
  JSON needs nothing: the encoder escapes control characters.

Backslashes themselves are kept (Windows paths stay readable): the point is inertness, not a reversible encoding.
"""

from __future__ import annotations

import re

from rich.markup import escape as _rich_escape
from rich.text import Text

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                     "\ufeff\ufffe\uffff\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _show(m: re.Match) -> str:
    c = m.group(0)
    o = ord(c)
    return _NAMED.get(c) or (f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}")


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
