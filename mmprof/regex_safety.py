"""Regexes run with a bound on their work: the one place where mmprof compiles a pattern it did not write itself.

Every pattern a user gives (a spec's `pattern` and `name`, a `--rules` file) and every built-in rule pattern
(`mmprof/rules/*.toml`: kernel rules, roles) is compiled here. Two engines, chosen per pattern:

- **RE2** (google-re2, a linear-time engine: no backtracking, time proportional to the text whatever the pattern)
  for every pattern it accepts. Nested repeats (`(a+)+`), overlapping alternatives (`(a|a)+`) and stacked repeats
  (`a*a*a*b`) are then harmless: they cannot make a match slower.
- **Python's `re`** only for patterns RE2 refuses (lookarounds, backreferences) or where google-re2 is not installed,
  and only when the pattern's shape cannot backtrack beyond a fixed power of the text length (`backtrack_shape`):
  no backreference or conditional, no repeat inside a repeat, no repeated alternatives that can start alike, and
  at most MAX_DEGREE unbounded repeats on any one path through the pattern (each multiplies the work by the length
  of the text). Any other pattern is refused, with the reason, in one line: whether or not the names at hand would
  have triggered it.

Both engines see at most `max_chars` characters of a text (8,192 unless the caller says; kernel names are under
9,000 characters in every trace measured), so even the `re` path has a fixed worst case. Semantics are those of
Python's `re` with ASCII classes (`\\w`, `\\d`, `\\s`, `\\b` match ASCII only, as in RE2), so a pattern means the
same on either engine; RE2 spells `\\Z` as `\\z` (translated here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

try:  # Python 3.11+
    import re._constants as _sre_c  # type: ignore[import-not-found]
    import re._parser as _sre_p  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre_c  # type: ignore[no-redef]
    import sre_parse as _sre_p  # type: ignore[no-redef]

try:
    import re2 as _re2  # google-re2
except ImportError:  # pragma: no cover - an environment without the wheel (the Python-engine path is tested)
    _re2 = None

from mmprof.errors import BadInput

MAX_CHARS = 8192          # characters of a text a pattern sees (callers may pass fewer)
MAX_PATTERN_CHARS = 4096  # a longer pattern is refused (the longest built-in rule is ~400 characters)
MAX_DEGREE = 2            # unbounded repeats on one path allowed on the backtracking engine: work <= len**(D+1)
RE2_MAX_MEM = 8 << 20     # RE2's memory for one compiled pattern (its DFA cache); past that it runs slower, never
                          # longer than linear

ENGINE = "re2" if _re2 is not None else "re"


@dataclass(frozen=True)
class BoundedRegex:
    """A compiled pattern and the engine that runs it; `search` / `match` / `fullmatch` look at the first
    `max_chars` characters of the text and return a match object with `group`, `groups`, `groupdict`, `span`."""

    pattern: str
    engine: str
    regex: Any
    max_chars: int = MAX_CHARS
    ignore_case: bool = False

    def search(self, text: str):
        return self.regex.search(text[:self.max_chars])

    def match(self, text: str):
        return self.regex.match(text[:self.max_chars])

    def fullmatch(self, text: str):
        return self.regex.fullmatch(text[:self.max_chars])


def compile_bounded(pattern: Any, where: str, what: str = "regex", ignore_case: bool = False,
                    max_chars: int = MAX_CHARS) -> BoundedRegex:
    """`pattern` compiled with a bound on its work (module docstring), or one BadInput line saying why not:
    `where: `what` regex '...' <reason>`. Built-in patterns go through here too (a failure there is a bug that the
    tests catch)."""
    if not isinstance(pattern, str) or not pattern:
        raise BadInput(f"{where}: `{what}` must be a non-empty regex string")
    shown = _shown(pattern)
    if len(pattern) > MAX_PATTERN_CHARS:
        raise BadInput(f"{where}: `{what}` regex is {len(pattern):,} characters (at most {MAX_PATTERN_CHARS:,})")
    flags = re.ASCII | (re.IGNORECASE if ignore_case else 0)
    try:
        parsed = _sre_p.parse(pattern, flags)
        py = re.compile(pattern, flags)
    except (re.error, OverflowError, RecursionError, ValueError) as e:
        raise BadInput(f"{where}: bad regex {shown} in `{what}` ({_one_line(e)})") from None
    if _re2 is not None:
        rx = _re2_compile(pattern, ignore_case)
        if rx is not None:
            return BoundedRegex(pattern, "re2", rx, max_chars, ignore_case)
    why = backtrack_shape(parsed)
    if why:
        engine = "the linear-time engine (RE2) does not take it" if _re2 is not None else "RE2 is not installed"
        raise BadInput(f"{where}: `{what}` regex {shown} {why}, which can take exponential or high-polynomial time, "
                       f"and {engine}; write it without that")
    return BoundedRegex(pattern, "re", py, max_chars, ignore_case)


def _shown(pattern: str) -> str:
    return repr(pattern[:60] + ("..." if len(pattern) > 60 else ""))


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())[:160]


_BACKSLASH_Z = re.compile(r"(?<!\\)((?:\\\\)*)\\Z")


def _re2_compile(pattern: str, ignore_case: bool):
    """The RE2 form of a Python pattern, or None when RE2 refuses it (lookarounds, backreferences, ...)."""
    opts = _re2.Options()
    opts.log_errors = False
    opts.case_sensitive = not ignore_case
    opts.max_mem = RE2_MAX_MEM
    translated = _BACKSLASH_Z.sub(r"\1\\z", pattern)  # Python's \Z (end of text) is RE2's \z
    try:
        return _re2.compile(translated, opts)
    except Exception:  # re2.error, or a pattern its parser takes but its compiler refuses (too large)
        return None


# ----------------------------------------------------------------------------- shapes that backtrack
_REPEATS = {_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT, getattr(_sre_c, "POSSESSIVE_REPEAT", None)} - {None}
_GROUPREFS = {_sre_c.GROUPREF, _sre_c.GROUPREF_EXISTS} | (
    {getattr(_sre_c, n) for n in ("GROUPREF_IGNORE", "GROUPREF_LOC_IGNORE", "GROUPREF_UNI_IGNORE")
     if hasattr(_sre_c, n)})
_ATOMIC = getattr(_sre_c, "ATOMIC_GROUP", None)
_ASSERTS = (_sre_c.ASSERT, _sre_c.ASSERT_NOT)
BIG_REPEAT = 16  # a repeat of more than this many is "unbounded" for the degree (a{1,3} is a constant factor)


def backtrack_shape(parsed: Any) -> str | None:
    """Why a pattern (its `re._parser` tree) could backtrack beyond len(text)**(MAX_DEGREE+1) steps, or None.

    Refused: backreferences and conditionals; a repeat (max > 1) containing another repeat; a repeat containing
    alternatives whose first characters overlap (`(a|ab)+`); more than MAX_DEGREE unbounded repeats on one path
    (`a*b*c*`: each multiplies the ways a failing search is retried); lookarounds count their own repeats."""
    try:
        _walk(list(parsed), inside_repeat=False)
    except _Refused as r:
        return str(r)
    seq = list(parsed)
    degree = _degree(seq) + (0 if _anchored(seq) else 1)  # a search tries every start position
    if degree > MAX_DEGREE:
        return (f"can take len(text)**{degree} steps (unbounded repeats one after another, a search from every "
                f"position; at most **{MAX_DEGREE} on this engine)")
    return None


class _Refused(Exception):
    pass


def _items(av: Any) -> list:
    return list(av)


def _children(op: Any, av: Any) -> list[list]:
    if op in _REPEATS:
        return [list(av[2])]
    if op == _sre_c.SUBPATTERN:
        return [list(av[-1])]
    if op == _sre_c.BRANCH:
        return [list(b) for b in av[1]]
    if op in _ASSERTS:
        return [list(av[1])]
    if _ATOMIC is not None and op == _ATOMIC:
        return [list(av)]
    return []


def _repeats(op: Any, av: Any) -> bool:
    return op in _REPEATS and (av[1] is _sre_c.MAXREPEAT or av[1] > 1)


def _walk(seq: list, inside_repeat: bool) -> None:
    for op, av in seq:
        if op in _GROUPREFS:
            raise _Refused("uses a backreference or a conditional group")
        if _repeats(op, av):
            if inside_repeat:
                raise _Refused("nests a repeat inside a repeat (like (a+)+)")
            _walk(list(av[2]), True)
            continue
        if op == _sre_c.BRANCH and inside_repeat:
            firsts = [_first(list(b)) for b in av[1]]
            for i in range(len(firsts)):
                for j in range(i + 1, len(firsts)):
                    if firsts[i] is None or firsts[j] is None or firsts[i] & firsts[j]:
                        raise _Refused("repeats alternatives that can start with the same character (like (a|ab)+)")
        for c in _children(op, av):
            _walk(c, inside_repeat)


def _first(seq: list) -> set[int] | None:
    """The characters a sequence can start with (None: any, or unknown), for the overlap test."""
    for op, av in seq:
        if op == _sre_c.LITERAL:
            return {av, *_case_twins(av)}
        if op == _sre_c.AT:
            continue
        if op == _sre_c.SUBPATTERN:
            f = _first(list(av[-1]))
            return f
        if op == _sre_c.IN:
            out: set[int] = set()
            for iop, iav in av:
                if iop == _sre_c.LITERAL:
                    out |= {iav, *_case_twins(iav)}
                elif iop == _sre_c.RANGE and iav[1] - iav[0] < 4096:
                    out |= set(range(iav[0], iav[1] + 1))
                else:
                    return None
            return out
        return None
    return None  # can match the empty string: ambiguous beside any other alternative inside a repeat


def _case_twins(c: int) -> set[int]:
    ch = chr(c)
    return {ord(x) for x in (ch.lower(), ch.upper()) if len(x) == 1}


def _degree(seq: list) -> int:
    """The power of the text length that bounds the work of matching `seq` at one start position (see `_cost`)."""
    return _cost(seq)[1]


def _cost(seq: list) -> tuple[int, int]:
    """(ways, cost) of a sequence as powers of the text length: `ways` counts the unbounded repeats whose length
    a failing match backtracks over (each multiplies what follows), `cost` the work. An item costs its own work times
    the ways of the items before it; a lookaround or an atomic group is tried once per arrival and adds no ways;
    alternatives take their worst branch."""
    ways = cost = 0
    for op, av in seq:
        if op in _REPEATS:
            w, c = _cost(list(av[2]))
            if av[1] is _sre_c.MAXREPEAT or av[1] > BIG_REPEAT:
                w, c = w + 1, c + 1
        elif op == _sre_c.BRANCH:
            costs = [_cost(list(b)) for b in av[1]]
            w, c = max((x[0] for x in costs), default=0), max((x[1] for x in costs), default=0)
        elif op == _sre_c.SUBPATTERN:
            w, c = _cost(list(av[-1]))
        elif op in _ASSERTS or (_ATOMIC is not None and op == _ATOMIC):
            w, c = 0, _cost(list(av[1] if op in _ASSERTS else av))[1]
        else:
            w, c = 0, 0
        cost = max(cost, ways + c)
        ways += w
    return ways, max(cost, ways)


def _anchored(seq: list) -> bool:
    """The pattern can only match at the start of the text (`^...` or `\\A...`): a search tries one position."""
    for op, av in seq:
        if op == _sre_c.AT:
            return av in (_sre_c.AT_BEGINNING, _sre_c.AT_BEGINNING_STRING)
        if op == _sre_c.SUBPATTERN:
            return _anchored(list(av[-1]))
        return False
    return False
