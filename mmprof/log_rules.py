"""The log rules (`mmprof/rules/logs.toml`): how a line of an engine's log is read and what it says.

`load_log_rules()` reads and checks the file once: every pattern compiles, every `example` matches its own entry
(a format's example parses, a fact's example yields its `example_value`), every fact names a known kind, and the
`contains` literal of a fact is in its example (the prefilter can never hide a line the pattern would match).

- `LogRules.parse(text)` splits a line into its parts: the process prefix an engine adds (vLLM's
  `(EngineCore pid=123) `), then the first `[[format]]` whose pattern matches (level, stamp, source location,
  message); a line no format knows is plain text (its whole text is the message).
- `LogRules.facts_of(message, format)` gives every `[[fact]]` the message states: rule, value and named fields.
- `LogRules.wanted(text)` says whether any fact rule could match a line (one search of the combined `contains`
  literals): `mmprof.log_text.BoundedLines` keeps such lines from the middle of a huge log.
- `LogRules.backend_kernels(subject, value)` gives the `[[backend]]` entry that says which kernels are that backend.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from mmprof.errors import BadInput
from mmprof.fileio import read_toml
from mmprof.log_text import MAX_LINE_CHARS
from mmprof.regex_safety import BoundedRegex, compile_bounded

LOG_RULES_FILE = Path(__file__).resolve().parent / "rules" / "logs.toml"
KINDS = {
    "backend": "a backend, kernel or implementation the engine chose",
    "config": "a tuned kernel config it loaded",
    "default_config": "no tuned config for a shape: a default config runs",
    "fallback": "it fell back from what was asked or preferred",
    "mode": "the compilation / CUDA-graph / eager mode it resolved",
    "capture": "CUDA graphs it captured",
    "compile": "what it compiled and how long it took",
    "fusion": "fusion passes enabled, or how many patterns a pass replaced",
    "setting": "a setting it resolved (dtype, quantisation, KV cache, scheduler, version)",
}
FALLBACK_KINDS = ("default_config", "fallback")
_FACT_KEYS = {"id", "engine", "formats", "kind", "subject", "contains", "pattern", "value", "says", "source",
              "example", "example_value", "regions", "families", "name", "fallback", "forced", "where"}


@dataclass(frozen=True)
class LineFormat:
    id: str
    engine: str
    rx: BoundedRegex


@dataclass(frozen=True)
class FactRule:
    """One `[[fact]]`: what a message matching `rx` states (docs/logs.md)."""

    id: str
    engine: str
    kind: str
    subject: str
    rx: BoundedRegex
    contains: str
    value: str | None            # a group name or a {group} template; None: the group "value"
    says: str
    source: str
    formats: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    name: str | None = None      # regex on the kernel names the fact concerns
    fallback: bool = False
    forced: bool = False         # the user asked for it (--attention-backend): not the engine's own choice
    where: BoundedRegex | None = None  # regex the line's source location must match (fused_moe.py:1108)

    @property
    def is_fallback(self) -> bool:
        return self.fallback or self.kind in FALLBACK_KINDS

    def value_of(self, m: Any) -> str:
        groups = {k: ("-" if v is None else v) for k, v in m.groupdict().items()}
        if self.value is None:
            v = m.groupdict().get("value")
            return v if v is not None else m.group(0)
        if "{" in self.value:
            return _fill(self.value, groups)
        return groups.get(self.value, self.value)


@dataclass(frozen=True)
class BackendKernels:
    """A `[[backend]]`: the kernels (library globs and / or a name regex) that show backend `values` ran."""

    subject: str
    values: tuple[str, ...]
    library: tuple[str, ...]
    name: BoundedRegex | None
    source: str


@dataclass(frozen=True)
class ParsedLine:
    process: str | None
    pid: int
    format: str | None
    level: str | None
    stamp: str | None
    where: str | None
    message: str


@dataclass
class LogRules:
    prefixes: list[BoundedRegex]
    formats: list[LineFormat]
    facts: list[FactRule]
    backends: list[BackendKernels]
    source: str = str(LOG_RULES_FILE)
    _wanted: re.Pattern | None = field(default=None, repr=False)

    anchors: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        lits = sorted({f.contains for f in self.facts if f.contains}, key=len, reverse=True)
        self._wanted = re.compile("|".join(re.escape(s) for s in lits)) if lits else None
        self.anchors = anchor_words(lits)

    def wanted(self, text: str) -> bool:
        """Could a fact rule match this line? (the combined `contains` literals: a superset of the facts)"""
        return bool(self._wanted and self._wanted.search(text))

    def parse(self, text: str) -> ParsedLine:
        """A line's process prefix, format header and message (a line no format knows: all message)."""
        process, pid = None, -1
        for _ in range(4):  # nested prefixes (a worker's line through the engine core's stream): the last one printed
            m = next((m for m in (rx.match(text) for rx in self.prefixes) if m), None)
            if m is None:
                break
            process = m.groupdict().get("process")
            pid = _int(m.group("pid")) if m.groupdict().get("pid") else -1
            text = text[m.end():]
        for f in self.formats:
            m = f.rx.match(text)
            if m:
                g = m.groupdict()
                if process is None and g.get("process"):
                    process = g["process"].strip()
                if pid < 0 and g.get("pid"):
                    pid = _int(g["pid"])
                return ParsedLine(process, pid, f.id, g.get("level"), g.get("stamp"), g.get("where"),
                                  g.get("message") or "")
        return ParsedLine(process, pid, None, None, None, None, text)

    def facts_of(self, message: str, fmt: str | None, where: str | None = None
                 ) -> list[tuple[FactRule, str, dict[str, str]]]:
        """Every fact the message states: (rule, value, named fields); `where` is the line's source location."""
        if not self.wanted(message):
            return []
        out = []
        for r in self.facts:
            if r.contains and r.contains not in message:
                continue
            if r.formats and fmt not in r.formats and not (fmt is None and "plain" in r.formats):
                continue
            if r.where is not None and not (where and r.where.search(where)):
                continue
            m = r.rx.search(message)
            if m:
                fields = {k: v for k, v in m.groupdict().items() if v is not None and k != "value"}
                out.append((r, r.value_of(m), fields))
        return out

    def backend_kernels(self, subject: str, value: str) -> BackendKernels | None:
        for b in self.backends:
            if b.subject == subject and value in b.values:
                return b
        return None

    def subjects(self) -> list[str]:
        return sorted({f.subject for f in self.facts})


def anchor_words(literals: list[str], min_len: int = 6) -> tuple[bytes, ...]:
    """A few words such that every literal holds at least one (a greedy set cover over its words of `min_len`+
    characters, case kept, long words preferred: they are rare in the lines around them; a literal without such a
    word is its own anchor): a line that holds none of them holds no literal, so a huge log is searched for these
    alone (bytes.find, C speed) and only the lines holding one are checked."""
    words = {lit: set(re.findall(r"[A-Za-z0-9_]{%d,}" % min_len, lit)) for lit in literals}
    left, out = set(literals), []
    while left:
        counts: dict[str, int] = {}
        for lit in left:
            for w in words[lit]:
                counts[w] = counts.get(w, 0) + 1
        if not counts:
            out += sorted(left)
            break
        best = max(counts, key=lambda w: (counts[w] * min(len(w), 10), len(w), w))
        out.append(best)
        left = {lit for lit in left if best not in words[lit]}
    return tuple(w.encode() for w in out)


def _int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        return -1
    return v if 0 <= v < 2**31 else -1


def _fill(template: str, groups: dict[str, Any]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: str(groups.get(m.group(1), "-")), template)


def _compile(pattern: Any, where: str) -> BoundedRegex:
    """A rule's regex on the bounded engines (regex_safety: RE2 where it takes it, else `re` only for shapes that
    cannot backtrack), seeing a whole kept line (log_text cuts longer ones)."""
    return compile_bounded(pattern, where, "pattern", max_chars=MAX_LINE_CHARS + 64)


def _strs(v: Any, where: str, key: str) -> tuple[str, ...]:
    if v is None:
        return ()
    if isinstance(v, str):
        return (v,)
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return tuple(v)
    raise BadInput(f"{where}: `{key}` must be a string or a list of strings")


def parse_log_rules(doc: dict[str, Any], source: str) -> LogRules:
    extra = set(doc) - {"prefix", "format", "fact", "backend"}
    if extra:
        raise BadInput(f"{source}: unknown table(s) {', '.join(sorted(extra))}")
    prefixes = []
    for raw in doc.get("prefix", []):
        w = f"{source}: prefix {raw.get('id')}"
        rx = _compile(raw.get("pattern"), w)
        if raw.get("example") is not None and not rx.match(raw["example"]):
            raise BadInput(f"{w}: its example does not match")
        prefixes.append(rx)
    formats = []
    for raw in doc.get("format", []):
        w = f"{source}: format {raw.get('id')}"
        rx = _compile(raw.get("pattern"), w)
        if "message" not in rx.regex.groupindex:
            raise BadInput(f"{w}: the pattern needs a (?P<message>...) group")
        if raw.get("example") is not None and not rx.match(raw["example"]):
            raise BadInput(f"{w}: its example does not match")
        formats.append(LineFormat(str(raw["id"]), str(raw.get("engine") or raw["id"]), rx))
    known_formats = {f.id for f in formats} | {"plain"}
    facts, seen = [], set()
    for raw in doc.get("fact", []):
        facts.append(_fact(raw, source, seen, known_formats))
    backends = []
    for raw in doc.get("backend", []):
        w = f"{source}: backend {raw.get('subject')}={raw.get('value')}"
        name = raw.get("name")
        backends.append(BackendKernels(subject=str(raw.get("subject")), values=_strs(raw.get("value"), w, "value"),
                                       library=_strs(raw.get("library"), w, "library"),
                                       name=_compile(name, w) if name is not None else None,
                                       source=str(raw.get("source", ""))))
        if not backends[-1].library and backends[-1].name is None:
            raise BadInput(f"{w}: a backend needs a `library` or a `name`")
    return LogRules(prefixes, formats, facts, backends, source)


def _fact(raw: dict[str, Any], source: str, seen: set[str], known_formats: set[str]) -> FactRule:
    fid = raw.get("id")
    w = f"{source}: fact {fid}"
    if not isinstance(fid, str) or not re.fullmatch(r"[\w.-]+", fid):
        raise BadInput(f"{source}: every fact needs an `id` of letters, digits, _ . -")
    if fid in seen:
        raise BadInput(f"{w}: duplicate id")
    seen.add(fid)
    extra = set(raw) - _FACT_KEYS
    if extra:
        raise BadInput(f"{w}: unknown key(s) {', '.join(sorted(extra))}")
    if raw.get("kind") not in KINDS:
        raise BadInput(f"{w}: `kind` must be one of {', '.join(KINDS)}")
    for key in ("engine", "subject", "says", "source"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise BadInput(f"{w}: `{key}` must be a non-empty string")
    rx = _compile(raw.get("pattern"), w)
    formats = _strs(raw.get("formats"), w, "formats")
    unknown = [f for f in formats if f not in known_formats]
    if unknown:
        raise BadInput(f"{w}: unknown format(s) {', '.join(unknown)}")
    name = raw.get("name")
    if name is not None:
        _compile(name, w + " name")
    rule = FactRule(id=fid, engine=raw["engine"], kind=raw["kind"], subject=raw["subject"], rx=rx,
                    contains=str(raw.get("contains") or ""), value=raw.get("value"), says=raw["says"],
                    source=raw["source"], formats=formats, regions=_strs(raw.get("regions"), w, "regions"),
                    families=_strs(raw.get("families"), w, "families"), name=name,
                    fallback=bool(raw.get("fallback", False)), forced=bool(raw.get("forced", False)),
                    where=_compile(raw["where"], w + " where") if raw.get("where") is not None else None)
    if rule.value is None and "value" not in rx.regex.groupindex:
        raise BadInput(f"{w}: no (?P<value>...) group and no `value`")
    ex = raw.get("example")
    if not isinstance(ex, str):
        raise BadInput(f"{w}: every fact needs an `example` (a message it matches)")
    if rule.contains and rule.contains not in ex:
        raise BadInput(f"{w}: `contains` {rule.contains!r} is not in its example (the prefilter would hide it)")
    m = rx.search(ex)
    if not m:
        raise BadInput(f"{w}: its example does not match its pattern")
    want = raw.get("example_value")
    if want is not None and rule.value_of(m) != want:
        raise BadInput(f"{w}: its example yields {rule.value_of(m)!r}, not example_value {want!r}")
    return rule


@lru_cache(maxsize=4)
def _load(path: str) -> LogRules:
    return parse_log_rules(read_toml(Path(path), "log rules"), path)


def load_log_rules(path: str | Path | None = None) -> LogRules:
    """The log rules (default: the built-in rules/logs.toml), read and checked once."""
    return _load(str(path or LOG_RULES_FILE))
