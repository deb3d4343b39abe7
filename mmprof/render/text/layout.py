"""Tables that fit the terminal: no line wider than the console, no word split inside a cell.

rich squeezes every column proportionally when a table is too wide, which splits words (`PyTorc│h`). `fit_table`
decides the widths itself instead:

1. each column's natural width (its widest line) and its narrowest useful width: the longest word for text
   that may wrap at spaces, the whole text for `no_wrap` columns, `min` for name columns;
2. while even the narrowest widths do not fit, the column with the lowest `keep` is dropped (a caption says
   which; `--json` has everything);
3. the widest flexible columns give up width until the table fits;
4. name columns (kernels, ops, variants) are shortened to their width by `mmprof.names.display_name` (base name
   plus the template arguments that identify the variant), and folded only at chosen break points (`::`, `<`,
   `, `, `_`, ...) when even that is too long.

Cells are plain strings taken as text (never markup: `mmprof.render.safe.cell` shows control characters) or
rich `Text` objects the renderer styled itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from rich import box as _box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from mmprof.names import display_name
from mmprof.names_distinct import distinct_display_names
from mmprof.render.safe import cell, markup, visible

NEVER_DROP = 10
DISPLAY_MAX = 60  # longest display name asked for (mmprof.names.DEFAULT_MAX_LEN)
_STRONG = re.compile(r"::|[<(\[,/ ]|(?=[>)\]])")  # break after these (or before a closing bracket)
_WEAK = re.compile(r"[_.-]")                          # inside an identifier, when no strong break fits


@dataclass
class Col:
    """One column: header, alignment, how it wraps, and how readily it is dropped (`keep`: lowest goes first)."""

    header: str
    justify: str = "left"
    keep: int = 5
    wrap: bool = False       # may wrap at spaces (its narrowest width is its longest word)
    name: bool = False       # a kernel / op / variant name: shortened to fit (see `fit_name`)
    fold: bool = False       # text with long identifiers: wrapped at spaces, long words folded (see `wrap_fold`)
    min: int = 12            # narrowest width of a name or fold column
    max: int | None = None   # widest width (names: display names are asked for at most this)


def fold(s: str, width: int) -> str:
    """`s` broken into lines of at most `width` cells at chosen break points: after `::`, `<`, `(`, `,`, `/` or
    a space (before a closing bracket), or, when none of those leaves the line at least 60% full, after `_`, `.`
    or `-` inside an identifier. Only a piece longer than the width is cut."""
    if width <= 0 or cell_len(s) <= width:
        return s
    tail = len(s.rstrip(">)] "))  # never leave a line of closing brackets only
    strong = sorted(p for p in {m.end() for m in _STRONG.finditer(s)} if 0 < p < tail)
    weak = sorted(p for p in {m.end() for m in _WEAK.finditer(s)} if p < tail)
    lines, start = [], 0
    while cell_len(s[start:]) > width:
        lim = start + width
        q = max((p for p in strong if start < p <= lim), default=None)
        p = max((p for p in strong + weak if start < p <= lim), default=None)
        cut = q if q is not None and q - start >= 0.6 * width else (p or q or lim)
        lines.append(s[start:cut].rstrip())
        start = cut
        while start < len(s) and s[start] == " ":
            start += 1
    lines.append(s[start:])
    return "\n".join(x for x in lines if x)


def wrap_fold(s: str, width: int) -> str:
    """Text wrapped at spaces to `width` (an indented line keeps its indent as a hanging indent), a word longer
    than the line folded at its break points (`fold`)."""
    out = []
    for para in s.split("\n"):
        body = para.lstrip(" ")
        indent = para[: min(len(para) - len(body), width // 4)]
        avail = max(width - len(indent), 1)
        lines, cur = [], ""
        for word in body.split(" "):
            if not word:
                continue
            if cur and cell_len(cur) + 1 + cell_len(word) <= avail:
                cur += " " + word
                continue
            if cur:
                lines.append(cur)
            parts = fold(word, avail).split("\n")
            lines += parts[:-1]
            cur = parts[-1]
        lines.append(cur)
        out += [indent + x for x in lines]
    return "\n".join(out)


def _longest_piece(s: str, cap: int = 30) -> int:
    """The longest run of `s` between break points (spaces included): the narrowest width that folds `s` without a
    cut, capped (a longer unbreakable run is cut rather than widening the column without bound)."""
    pieces = re.split(r"(?<=::)|(?<=[<(\[,/ _.-])|(?=[>)\]])", s)
    return min(max((cell_len(p.strip()) for p in pieces), default=0), cap)


def _fold_styled(t: Text, width: int) -> Text:
    """`wrap_fold` of a styled Text, keeping each character's style (folding only moves whitespace)."""
    plain = t.plain
    folded = wrap_fold(plain, width)
    if not t.spans:
        return Text(folded, style=t.style)
    styles: list[list] = [[] for _ in plain]
    for sp in t.spans:
        for k in range(sp.start, min(sp.end, len(plain))):
            styles[k].append(sp.style)
    out, i = Text(style=t.style), 0
    for ch in folded:
        if ch in " \n":
            out.append(ch)
            continue
        while i < len(plain) and plain[i] != ch:
            i += 1
        st = styles[i] if i < len(plain) else []
        out.append(ch, style=" ".join(str(x) for x in st) if st else None)
        i += 1
    return out


def fit_name(raw: str, width: int, lines: int = 2, shown: str | None = None) -> str:
    """A kernel / op name for a cell `width` wide: its display name (visible escapes) at up to `lines` times the
    width, so that a narrow column keeps the template arguments that tell variants apart, folded at break
    points. `shown` is the display name already chosen for it (`fit_names`)."""
    short = visible(shown if shown is not None else display_name(raw, _name_len(width, lines)))
    return fold(short, width)


def _name_len(width: int, lines: int = 2) -> int:
    return max(min(DISPLAY_MAX, lines * width - 2), 16)


def fit_names(raws: Sequence[str], width: int, lines: int = 2) -> list[str]:
    """`fit_name` for a whole column: two different names never show as the same text (a suffix tells them apart,
    `mmprof.names_distinct`)."""
    return [fit_name(r, width, lines, s) for r, s in zip(raws, distinct_display_names(list(raws), _name_len(width, lines)))]


def _lines(t: Text) -> list[str]:
    return t.plain.split("\n") or [""]


def _longest_word(t: Text) -> int:
    return max((cell_len(w) for line in _lines(t) for w in line.split()), default=0)


def _natural(t: Text) -> int:
    return max((cell_len(x) for x in _lines(t)), default=0)


def fit_table(con: Console, cols: Sequence[Col], rows: Sequence[Sequence[object]], title: str | None = None,
              sections: Sequence[int] = (), width: int | None = None, **table_kw) -> Table:
    """A rich Table of `rows` under `cols` that fits `width` (default: the console's width).

    `title` is taken as text (escaped); `sections` are row indexes after which a separator line goes."""
    width = width or con.width
    raw = [list(r) + [""] * (len(cols) - len(r)) for r in rows]
    names = [[r[j] if isinstance(r[j], str) else str(r[j]) for r in raw] if c.name or c.fold else None
             for j, c in enumerate(cols)]
    cells = [[x if isinstance(x, Text) else cell(x) for x in r] for r in raw]
    nat, low = [], []
    for j, c in enumerate(cols):
        head = Text(c.header)
        if c.name:
            full = max([_natural(head)] + [cell_len(visible(d)) for d in distinct_display_names(names[j], c.max or DISPLAY_MAX)])
            nat.append(min(full, c.max) if c.max else full)
            low.append(min(nat[-1], max(c.min, _longest_word(head))))
        elif c.fold:
            texts = [x.plain if isinstance(x, Text) else visible(n) for x, n in zip((r[j] for r in raw), names[j])]
            full = max([_natural(head)] + [_natural(Text(x)) for x in texts])
            nat.append(min(full, c.max) if c.max else full)
            unbreakable = max((_longest_piece(x) for x in texts), default=0)
            low.append(min(nat[-1], max(c.min, _longest_word(head), unbreakable)))
        else:
            col = [head] + [r[j] for r in cells]
            nat.append(max(_natural(t) for t in col))
            low.append(max(_longest_word(t) for t in col) if c.wrap else nat[-1])
            if c.wrap and c.max:
                nat[-1] = max(min(nat[-1], c.max), low[-1])
    live = list(range(len(cols)))

    def overhead(n: int) -> int:
        return 3 * n + 1  # padding of 1 on each side and one border per column, plus the last border

    while len(live) > 1 and sum(low[j] for j in live) + overhead(len(live)) > width:
        cand = [j for j in live if cols[j].keep < NEVER_DROP]
        if not cand:
            break
        drop = min(cand, key=lambda j: (cols[j].keep, -j))
        live.remove(drop)
    w = {j: nat[j] for j in live}
    excess = sum(w.values()) + overhead(len(live)) - width
    while excess > 0:
        flex = [j for j in live if w[j] > low[j]]
        if not flex:
            break
        j = max(flex, key=lambda k: (w[k] - low[k], w[k]))
        w[j] -= 1
        excess -= 1
    dropped = [cols[j].header for j in range(len(cols)) if j not in live]
    caption = f"(not shown at this width: {', '.join(dropped)}; see --json)" if dropped else None
    t = Table(title=markup(title) if title else None, title_justify="left", caption=caption, caption_justify="left",
              box=table_kw.pop("box", _box.HEAVY_HEAD), **table_kw)
    for j in live:
        c = cols[j]
        t.add_column(c.header, justify=c.justify, width=w[j], no_wrap=not (c.wrap or c.name or c.fold), overflow="fold")
    fitted = {j: fit_names(names[j], w[j]) for j in live if cols[j].name}
    for i, r in enumerate(cells):
        out = []
        for j in live:
            x = raw[i][j]
            if cols[j].name and not isinstance(x, Text):
                out.append(Text(fitted[j][i]))
            elif cols[j].fold:
                out.append(_fold_styled(x, w[j]) if isinstance(x, Text) else Text(wrap_fold(visible(names[j][i]), w[j])))
            else:
                out.append(r[j])
        t.add_row(*out, end_section=i in sections)
    return t
