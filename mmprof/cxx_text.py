"""Scanning demangled C++ text (kernel names): splitting at separators outside all brackets, template arguments,
trailing argument lists, and a signature's qualified function name. Used by `mmprof.names`. Base module."""

from __future__ import annotations

import re

_CLONE_SUFFIX = re.compile(r"(?:\s*(?:\[clone [^\]]*\]|\(\.[\w.$]+\)))+$")

_OPERATOR = r"(?<!\w)operator\s*(?:\(\)|\[\]|->\*?|<<=?|>>=?|<=>?|>=?|<|>)"
_TOKENS = {sep: re.compile(_OPERATOR + r"|[<>(){}\[\]]|" + re.escape(sep)) for sep in (",", "::", " ")}
_OPENERS = "<({["


def split_top(s: str, sep: str) -> list[str]:
    """Split s at `sep` (',', '::' or ' ') where it is outside <>, (), {}, []."""
    if sep not in s:
        return [s]
    out: list[str] = []
    depth = start = 0
    for m in _TOKENS[sep].finditer(s):
        t = m.group(0)
        if t == sep:
            if depth == 0:
                out.append(s[start:m.start()])
                start = m.end()
        elif len(t) > 1:  # an operator name: its brackets are not brackets
            continue
        elif t in _OPENERS:
            depth += 1
        elif depth:
            depth -= 1
    out.append(s[start:])
    return out


def split_template(comp: str) -> tuple[str, str | None]:
    """'Name<args>' -> ('Name', 'args'); 'Name' -> ('Name', None). Tolerates a cut-off name."""
    i = comp.find("<")
    if i <= 0 or comp.startswith("operator"):
        return comp, None
    inner = comp[i + 1:]
    return comp[:i], inner.removesuffix(">")


def strip_call(comp: str) -> str:
    """'name<T>(int, float)' -> 'name<T>': drop a trailing top-level argument list."""
    if not comp.endswith(")"):
        return comp
    depth = 0
    for i in range(len(comp) - 1, -1, -1):
        c = comp[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                return comp[:i] if i > 0 else comp
    return comp


def qualified_name(s: str) -> str | None:
    """The qualified function name of a demangled signature (no return type, no arguments), or None when s
    is not a C++ signature at all (e.g. 'Memcpy HtoD (Pageable -> Device)')."""
    if "[clone " in s or "(." in s:
        s = _CLONE_SUFFIX.sub("", s)
    s = s.replace("operator ()", "operator()")
    if s.endswith(("const", "volatile", "&", "noexcept")):
        s = re.sub(r"(?:\s+(?:const|volatile|&&|&|noexcept))+$", "", s)
    if s.endswith(")"):
        head = strip_call(s)
        if head is s or not head or not (head[-1].isalnum() or head[-1] in "_>$]}'" or head.endswith("operator()")):
            return None
    else:
        head = s
    pieces = [p for p in split_top(head, " ") if p]
    return pieces[-1] if pieces else None
