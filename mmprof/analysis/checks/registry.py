"""The check registry: stable codes with their documentation, and the functions that implement them.

Every check mmprof runs has a code, as in ruff: `FP` for fast-path checks and assertion kinds, `SH` for shape
findings. The text of each (name, status, severity, summary, what / why / example / known problems) is data in
`mmprof/rules/checks.toml`; the code that implements it registers with `@check("FP001")`. Codes never change
meaning; new checks get new codes. `mmprof rules` lists them all (also as JSON).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from mmprof.fileio import read_toml

CHECKS_FILE = Path(__file__).resolve().parent.parent.parent / "rules" / "checks.toml"
_FIELDS = ("code", "name", "status", "severity", "summary", "what", "why", "example", "known_problems", "evidence",
           "formerly")


@dataclass(frozen=True)
class CheckInfo:
    code: str
    name: str
    status: str
    severity: str
    summary: str
    what: str
    why: str
    example: str
    known_problems: str
    evidence: str = ""  # what evidence makes the check pass (a check never passes on absence)
    formerly: str = ""  # the name / meaning it had before, for a migration

    @property
    def family(self) -> str:
        return self.code[:2]

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in _FIELDS} | {"implemented_by": sorted(implementations(self.code))}


_IMPL: dict[str, dict[str, Callable]] = {}


def check(code: str, role: str = "check") -> Callable[[Callable], Callable]:
    """Register `fn` as the implementation of `code` (role: `check` for a stand-alone check or finding, or an
    assertion kind such as `require`). The code must be documented in rules/checks.toml."""

    def register(fn: Callable) -> Callable:
        if code not in load_info():
            raise KeyError(f"{fn.__module__}.{fn.__qualname__} registers {code}, which rules/checks.toml does not define")
        _IMPL.setdefault(code, {})[role] = fn
        return fn

    return register


def implementation(code: str, role: str = "check") -> Callable | None:
    return _IMPL.get(code, {}).get(role)


def implementations(code: str) -> dict[str, Callable]:
    return dict(_IMPL.get(code, {}))


@lru_cache(maxsize=1)
def load_info() -> dict[str, CheckInfo]:
    """code -> CheckInfo, in file order."""
    doc = read_toml(CHECKS_FILE, "check registry")
    out = {}
    for c in doc.get("check", []):
        out[c["code"]] = CheckInfo(**{f: str(c.get(f, "")) for f in _FIELDS})
    return out


def info(code: str) -> CheckInfo:
    return load_info()[code]
