"""The keys of a `kind = "log"` spec assertion (LG001) and their parsing: which facts of the engine's log it names.

    [[assert]]
    id = "moe-config-tuned"
    kind = "log"
    subject = "moe"              # globs on the fact's subject, kind-or-rule-id, value and engine
    fact = "default_config"
    expect = "absent"            # present (default) | absent

Kept apart from spec.py (which only registers the kind and calls `parse_log_query`) so the log assertion is one
small entry point beside the other kinds; `log_checks.py` evaluates it.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

from mmprof.errors import BadInput

LOG_KEYS = frozenset({"fact", "subject", "value", "engine", "expect"})
EXPECT = ("present", "absent")


@dataclass(frozen=True)
class LogQuery:
    """Which facts a log assertion is about (globs; empty: any) and whether they must be present or absent."""

    fact: tuple[str, ...] = ()       # a fact kind (backend, default_config, ...) or a rule id (vllm.moe.*)
    subject: tuple[str, ...] = ()
    value: tuple[str, ...] = ()
    engine: tuple[str, ...] = ()
    expect: str = "present"

    def selects(self, kind: str, rule_id: str, subject: str, engine: str) -> bool:
        """Does a fact of this kind / rule / subject / engine fall under the query (its value aside)?"""
        return ((not self.fact or any(fnmatch.fnmatchcase(kind, g) or fnmatch.fnmatchcase(rule_id, g)
                                      for g in self.fact))
                and (not self.subject or any(fnmatch.fnmatchcase(subject, g) for g in self.subject))
                and (not self.engine or any(fnmatch.fnmatchcase(engine, g) for g in self.engine)))

    def value_ok(self, value: str) -> bool:
        return not self.value or any(fnmatch.fnmatchcase(value, g) for g in self.value)

    def describe(self) -> str:
        parts = [f"{k}={'|'.join(v)}" for k, v in (("fact", self.fact), ("subject", self.subject),
                                                   ("engine", self.engine)) if v]
        return ", ".join(parts) or "any fact"

    def to_dict(self) -> dict[str, Any]:
        return {"fact": list(self.fact), "subject": list(self.subject), "value": list(self.value),
                "engine": list(self.engine), "expect": self.expect}


def _globs(raw: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    v = raw.get(key)
    if v is None:
        return ()
    if isinstance(v, str) and v:
        return (v,)
    if isinstance(v, list) and v and all(isinstance(x, str) and x for x in v):
        return tuple(v)
    raise BadInput(f"{where}: `{key}` must be a non-empty string or a list of them")


def parse_log_query(raw: dict[str, Any], kind: Any, where: str) -> LogQuery | None:
    """The LogQuery of a `kind = "log"` assertion; None for other kinds (which must not use these keys)."""
    used = sorted(LOG_KEYS & set(raw))
    if kind != "log":
        if used:
            raise BadInput(f"{where}: {', '.join(used)} belong to kind = \"log\" assertions")
        return None
    expect = raw.get("expect", "present")
    if expect not in EXPECT:
        raise BadInput(f"{where}: `expect` must be present or absent, not {str(expect)[:20]!r}")
    q = LogQuery(fact=_globs(raw, "fact", where), subject=_globs(raw, "subject", where),
                 value=_globs(raw, "value", where), engine=_globs(raw, "engine", where), expect=expect)
    if not (q.fact or q.subject):
        raise BadInput(f"{where}: a log assertion needs a `fact` (a kind such as backend or default_config, or a "
                       "rule id) or a `subject` (attention, moe, ...)")
    if q.expect == "present" and q.value and not (q.fact or q.subject):
        raise BadInput(f"{where}: `value` needs a `fact` or `subject` to say what has that value")
    bad = [k for k in ("region", "family", "variant", "library", "path", "name", "pattern", "op", "impl", "max",
                       "min_time_share", "within", "layers") if k in raw]
    if bad:
        raise BadInput(f"{where}: {', '.join(bad)} do not apply to a log assertion (it judges the engine's log; "
                       "the kernels each fact concerns come from rules/logs.toml)")
    return q
