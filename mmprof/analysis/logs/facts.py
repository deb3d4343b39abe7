"""The facts an engine's log states (`log_facts(profile)`), read from the profile's `log` table with the log rules.

A fact is one rule matching one line (`LogFact`): the engine or library that said it, its kind (backend, config,
default_config, fallback, mode, capture, compile, fusion, setting), its subject (attention, moe, cudagraph, ...),
its value and named fields, the process / rank / line / time it came from, and the regions and kernel families it
concerns. The same statement printed by several processes (every TP worker) or several times is one `FactGroup`
with its count, so a report says it once. Pure: reads the Profile, never a file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mmprof.log_rules import FactRule, LogRules, load_log_rules


@dataclass
class LogFact:
    rule: FactRule
    value: str
    fields: dict[str, str]
    rank: int
    pid: int
    process: str | None
    stream: str
    line: int
    time_ns: int
    stamp: str | None
    level: str | None
    where: str | None
    text: str

    def says(self) -> str:
        groups = {"value": self.value, "where": self.where or "-", "process": self.process or "-", **self.fields}
        return _fill(self.rule.says, groups)


def _fill(template: str, groups: dict[str, Any]) -> str:
    out = template
    for k, v in groups.items():
        out = out.replace("{" + k + "}", str(v))
    return out


@dataclass
class FactGroup:
    """One statement (rule + value) with every line that made it: where it was first said, by which processes."""

    facts: list[LogFact]

    @property
    def first(self) -> LogFact:
        return self.facts[0]

    @property
    def rule(self) -> FactRule:
        return self.first.rule

    @property
    def value(self) -> str:
        return self.first.value

    @property
    def kind(self) -> str:
        return self.rule.kind

    @property
    def subject(self) -> str:
        return self.rule.subject

    @property
    def fallback(self) -> bool:
        return self.rule.is_fallback or (self.kind == "fusion" and self.rule.id.endswith("replaced")
                                         and self.value == "0")

    @property
    def ranks(self) -> list[int]:
        return sorted({f.rank for f in self.facts if f.rank >= 0})

    @property
    def processes(self) -> list[str]:
        seen: list[str] = []
        for f in self.facts:
            p = f.process or "main"
            p = f"{p} pid={f.pid}" if f.pid >= 0 else p
            if p not in seen:
                seen.append(p)
        return seen

    def origin(self) -> str:
        """Where it was said: `EngineCore pid=1745, line 57 (12-01 10:23:49)`, and how often beyond that."""
        f = self.first
        who = self.processes[0]
        at = f"line {f.line}" if f.stream == "file" else f"{f.stream} line {f.line}"
        stamp = f" ({f.stamp})" if f.stamp else ""
        more = ""
        if len(self.processes) > 1:
            more = f"; also {len(self.processes) - 1} other process(es)"
        elif len(self.facts) > 1:
            more = f"; {len(self.facts)} times"
        return f"{who}, {at}{stamp}{more}"

    def to_dict(self) -> dict[str, Any]:
        f = self.first
        return {"rule": self.rule.id, "engine": self.rule.engine, "kind": self.kind, "subject": self.subject,
                "value": self.value, "fields": dict(f.fields), "says": f.says(), "fallback": self.fallback,
                "forced": self.rule.forced, "count": len(self.facts), "processes": self.processes,
                "ranks": self.ranks, "line": f.line, "stream": f.stream, "time_ns": f.time_ns, "stamp": f.stamp,
                "level": f.level, "where": f.where, "text": f.text, "source": self.rule.source,
                "regions": list(self.rule.regions), "families": list(self.rule.families), "name": self.rule.name}


@dataclass
class LogFacts:
    """Everything the log states, with what was read: lines, lines per format (engine), what the bound dropped."""

    groups: list[FactGroup]
    lines: int
    formats: dict[str, int]                      # format id -> lines read in it ("plain" for none)
    sources: list[dict[str, Any]] = field(default_factory=list)

    @property
    def present(self) -> bool:
        return self.lines > 0

    @property
    def dropped(self) -> int:
        return sum(int(s.get("dropped") or 0) for s in self.sources)

    @property
    def fallbacks(self) -> list[FactGroup]:
        return [g for g in self.groups if g.fallback]

    def engines(self) -> list[str]:
        return sorted(k for k in self.formats if k != "plain")

    def describe(self) -> str:
        """`412 lines (vllm 380, plain 32), 14 facts, 1 fallback` (and what the size bound dropped)."""
        fmts = ", ".join(f"{k} {v:,}" for k, v in sorted(self.formats.items(), key=lambda kv: -kv[1]))
        drop = f"; {self.dropped:,} lines dropped by the size bound (head, tail and fact lines kept)" \
            if self.dropped else ""
        fb = len(self.fallbacks)
        return (f"{self.lines:,} lines ({fmts or 'none'}), {len(self.groups)} facts, {fb} "
                f"fallback{'s' if fb != 1 else ''}{drop}")

    def to_dict(self) -> dict[str, Any]:
        return {"lines": self.lines, "formats": dict(self.formats), "sources": list(self.sources),
                "dropped": self.dropped, "facts": [g.to_dict() for g in self.groups]}


def log_facts(profile: Any, rules: LogRules | None = None) -> LogFacts:
    """The facts of the profile's log (an empty LogFacts when it holds none)."""
    rules = rules or load_log_rules()
    n = profile.n("log")
    sources = list((profile.meta.get("log") or {}).get("sources", [])) if isinstance(profile.meta.get("log"), dict) \
        else []
    if not n:
        return LogFacts([], 0, {}, sources)
    t = profile.tables["log"]
    text = profile.col("log", "text", decode=True)
    fmt = profile.col("log", "format", decode=True)
    formats: dict[str, int] = {}
    codes, counts = np.unique(t["format"], return_counts=True)
    for c, k in zip(codes.tolist(), counts.tolist()):
        formats["plain" if c < 0 else profile.strings[c]] = int(k)
    decoded = {c: profile.col("log", c, decode=True) for c in ("process", "stream", "stamp", "level", "where")}
    groups: dict[tuple[str, str], FactGroup] = {}
    for i in range(n):
        msg = text[i]
        if not msg or not rules.wanted(msg):
            continue
        for rule, value, fields in rules.facts_of(msg, fmt[i], decoded["where"][i]):
            fact = LogFact(rule=rule, value=value, fields=fields, rank=int(t["rank"][i]), pid=int(t["pid"][i]),
                           process=decoded["process"][i], stream=decoded["stream"][i] or "file",
                           line=int(t["line"][i]), time_ns=int(t["time_ns"][i]), stamp=decoded["stamp"][i],
                           level=decoded["level"][i], where=decoded["where"][i], text=msg)
            key = (rule.id, value)
            if key in groups:
                groups[key].facts.append(fact)
            else:
                groups[key] = FactGroup([fact])
    return LogFacts(list(groups.values()), n, formats, sources)
