"""The fast-path spec language (TOML): assertions about which kernel variants dispatched in which op regions,
plus the built-in checks to run. `load_spec()` reads one; `mmprof.analysis.checks.verify` evaluates it.

Assertion kinds (docs/fastpath.md has the full reference; each kind has a code in rules/checks.toml):
    require         region must dispatch family / variant / library in every layer of every step (FP007;
                    `min_step_share`, `min_time_share` set how much of the region it must cover)
    forbid          region must not dispatch a selector (or must not exist, when no selector is given) (FP009)
    max_launches    at most `max` events per rank, step and layer in the region (FP005)
    forbid_pattern  no device event whose name matches `pattern`, anywhere (FP006)
    dispatch        the dispatch log must show implementation `impl` for op `op` (FP008)
    log             the engine's log must state a fact, or must not (log_query.py; LG001)
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.checks.log_query import LOG_KEYS, LogQuery, parse_log_query
from mmprof.analysis.checks.selectors import bounded_search, compile_bounded, nearest_names
from mmprof.errors import BadInput
from mmprof.fileio import read_toml

RULES_DIR = Path(__file__).resolve().parent.parent.parent / "rules"
MAX_LAYER = 65535  # a layer index above this is not a layer of any model
BUILTIN_SPEC = RULES_DIR / "builtin_fastpath.toml"  # the reference runtime (it writes a dispatch log)
GENERIC_SPEC = RULES_DIR / "builtin_fastpath_generic.toml"  # any other runtime
# each assertion kind reports under a code of its own (rules/checks.toml; until 2026-12 require and dispatch shared
# FP003 with the built-in check and forbid shared FP004: docs/fastpath.md "Migration")
KINDS = {"require": "FP007", "forbid": "FP009", "max_launches": "FP005", "forbid_pattern": "FP006", "dispatch": "FP008",
         "log": "LG001"}
BUILTIN_CHECKS = ("FP000", "FP001", "FP002", "FP003", "FP004")
PHASES = ("prefill", "decode", "mixed")  # mixed: an engine step with prefill and decode requests (engine steps)
_ASSERT_KEYS = {"id", "kind", "code", "description", "region", "phase", "layers", "family", "variant", "library",
                "path", "name", "every_layer", "min_time_share", "min_step_share", "max", "pattern", "op", "impl",
                "within"} | LOG_KEYS
_SPEC_KEYS = {"id", "description", "checks", "sparse_layers", "moe_layers", "example", "device"}


def _as_list(v: Any, where: str, key: str) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return list(v)
    raise BadInput(f"{where}: `{key}` must be a string or a list of strings")


def _parse_layers(v: Any, where: str) -> frozenset[int] | None:
    """`layers = "3-59"`, `"3-5,8"`, or a list of ints."""
    if v is None:
        return None
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        if any(not 0 <= x <= MAX_LAYER for x in v):
            raise BadInput(f"{where}: layer indices must be in 0..{MAX_LAYER}")
        return frozenset(v)
    if isinstance(v, str):
        spans: list[tuple[int, int]] = []
        for part in v.split(","):
            part = part.strip()
            m = re.fullmatch(r"(\d{1,9})(?:\s*-\s*(\d{1,9}))?", part)
            if not m:
                raise BadInput(f"{where}: bad layer range {part[:40]!r} (use e.g. \"3-59\" or \"0,2,4-6\")")
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if hi > MAX_LAYER or lo > hi:
                raise BadInput(f"{where}: bad layer range {part[:40]!r} (layers are 0..{MAX_LAYER}, low to high)")
            spans.append((lo, hi))
        return frozenset(_union(spans))
    raise BadInput(f"{where}: `layers` must be a range string like \"3-59\" or a list of integers")


def _union(spans: list[tuple[int, int]]):
    """The layers of possibly overlapping ranges, each layer once: `"0-65535,"` repeated 100,000 times costs a sort
    of the ranges and 65,536 layers, not 6.5 billion set insertions."""
    end = -1
    for lo, hi in sorted(spans):
        yield from range(max(lo, end + 1), hi + 1)
        end = max(end, hi)


@dataclass(frozen=True)
class Selector:
    """Which events an assertion is about: globs on family / variant / library / path, a regex on the name."""

    family: tuple[str, ...] = ()
    variant: tuple[str, ...] = ()
    library: tuple[str, ...] = ()
    path: tuple[str, ...] = ()
    name: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.family or self.variant or self.library or self.path or self.name)

    def describe(self) -> str:
        parts = [f"{k}={'|'.join(v)}" for k, v in (("family", self.family), ("variant", self.variant),
                                                    ("library", self.library), ("path", self.path)) if v]
        if self.name:
            parts.append(f"name~/{self.name}/")
        return ", ".join(parts) or "any kernel"

    def mask(self, df: Any) -> Any:
        m = np.ones(len(df), dtype=bool)
        for col, globs in (("family", self.family), ("variant", self.variant), ("library", self.library),
                           ("path", self.path)):
            if globs:
                m = m & glob_mask(df[col], globs, lower=True)
        if self.name:
            rx = compile_bounded(self.name, "spec", "name")  # validated when the spec was read (validate_assertion)
            m = m & unique_map(df["name"], lambda s: bounded_search(rx, s))
        return m


def unique_map(series: Any, fn: Any) -> Any:
    """Apply a str -> bool predicate once per distinct value (events have ~1M rows but few distinct names)."""
    vals = series.astype(object).where(series.notna(), None).to_numpy()
    codes, uniq = pd.factorize(vals, use_na_sentinel=True)
    lut = np.array([bool(fn(str(u))) for u in uniq] + [False], dtype=bool)
    return lut[np.where(codes < 0, len(uniq), codes)]


def glob_mask(series: Any, globs: tuple[str, ...] | list[str], lower: bool = False) -> Any:
    """Rows whose value matches any of the fnmatch globs (None never matches)."""
    pats = [g.lower() if lower else g for g in globs]
    return unique_map(series, lambda s: any(fnmatch.fnmatchcase(s.lower() if lower else s, p) for p in pats))


@dataclass(frozen=True)
class Assertion:
    id: str
    kind: str
    code: str
    description: str = ""
    region: tuple[str, ...] = ()
    phase: str | None = None
    layers: frozenset[int] | None = None
    selector: Selector = field(default_factory=Selector)
    every_layer: bool = True
    min_time_share: float | None = None
    min_step_share: float = 1.0  # require: the share of the phase's steps the fast path must cover
    max: int | None = None
    pattern: str | None = None
    op: str | None = None
    impl: tuple[str, ...] = ()
    within: tuple[str, ...] = ()
    log: LogQuery | None = None  # kind = "log": the facts of the engine's log it names

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "code": self.code, "description": self.description,
                "region": list(self.region), "phase": self.phase,
                "layers": sorted(self.layers) if self.layers is not None else None,
                "selector": self.selector.describe(), "every_layer": self.every_layer,
                "min_time_share": self.min_time_share, "min_step_share": self.min_step_share, "max": self.max,
                "pattern": self.pattern, "op": self.op,
                "impl": list(self.impl), **({"log": self.log.to_dict()} if self.log else {})}


@dataclass
class Spec:
    id: str
    description: str
    source: str
    checks: tuple[str, ...]
    assertions: list[Assertion]
    sparse_layers: Any = None
    moe_layers: Any = None
    example: bool = False
    device: str | None = None  # the device the spec is for (a substring of the profile's device name, e.g. MI355X)


def _parse_assertion(raw: Any, where: str, seen: set[str]) -> Assertion:
    if not isinstance(raw, dict):
        raise BadInput(f"{where}: each [[assert]] must be a table")
    aid = raw.get("id")
    if not isinstance(aid, str) or not re.fullmatch(r"[A-Za-z0-9_.:-]+", aid or ""):
        raise BadInput(f"{where}: every assertion needs an `id` of letters, digits and - _ . :")
    w = f"{where}: assertion {aid}"
    if aid in seen:
        raise BadInput(f"{w}: duplicate id")
    seen.add(aid)
    extra = set(raw) - _ASSERT_KEYS
    if extra:
        raise BadInput(f"{w}: unknown key(s) {', '.join(sorted(extra))}")
    kind = raw.get("kind")
    if kind not in KINDS:
        near = f"; {nearest_names(kind, KINDS)}" if isinstance(kind, str) else ""
        raise BadInput(f"{w}: `kind` must be one of {', '.join(KINDS)} (got {str(kind)[:40]!r}{near})")
    for key in ("description", "phase", "pattern", "op", "name", "code"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise BadInput(f"{w}: `{key}` must be a string")
    for key in ("every_layer",):
        if raw.get(key) is not None and not isinstance(raw[key], bool):
            raise BadInput(f"{w}: `{key}` must be true or false")
    if raw.get("max") is not None and (not isinstance(raw["max"], int) or isinstance(raw["max"], bool)):
        raise BadInput(f"{w}: `max` must be an integer")
    for key in ("min_time_share", "min_step_share"):
        share = raw.get(key)
        if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float))
                                  or not 0 < float(share) <= 1):
            raise BadInput(f"{w}: `{key}` must be a number in (0, 1]")
    sel = Selector(family=tuple(_as_list(raw.get("family"), w, "family")),
                   variant=tuple(_as_list(raw.get("variant"), w, "variant")),
                   library=tuple(_as_list(raw.get("library"), w, "library")),
                   path=tuple(_as_list(raw.get("path"), w, "path")), name=raw.get("name"))
    if sel.name is not None:
        compile_bounded(sel.name, w, "name")
    region = tuple(_as_list(raw.get("region"), w, "region"))
    a = Assertion(id=aid, kind=kind, code=str(raw.get("code") or KINDS[kind]), description=raw.get("description", ""),
                  region=region, phase=raw.get("phase"), layers=_parse_layers(raw.get("layers"), w), selector=sel,
                  every_layer=bool(raw.get("every_layer", True)), min_time_share=raw.get("min_time_share"),
                  min_step_share=float(raw.get("min_step_share", 1.0)), max=raw.get("max"),
                  pattern=raw.get("pattern"), op=raw.get("op"),
                  impl=tuple(_as_list(raw.get("impl"), w, "impl")), within=tuple(_as_list(raw.get("within"), w, "within")),
                  log=parse_log_query(raw, kind, w))
    if a.phase not in (None, *PHASES):
        raise BadInput(f"{w}: phase {a.phase[:40]!r} is not a phase ({nearest_names(a.phase, PHASES)}; phases are "
                       f"{', '.join(PHASES)})")
    if raw.get("min_step_share") is not None and kind != "require":
        raise BadInput(f"{w}: `min_step_share` applies to require assertions only")
    if kind == "require":
        if not region:
            raise BadInput(f"{w}: require needs a `region`")
        if sel.empty:
            raise BadInput(f"{w}: require needs at least one of family / variant / library / path / name")
    elif kind == "forbid":
        if not region and sel.empty:
            raise BadInput(f"{w}: forbid needs a `region`, a selector, or both")
    elif kind == "max_launches":
        if not region or not isinstance(a.max, int) or a.max < 0:
            raise BadInput(f"{w}: max_launches needs a `region` and an integer `max` >= 0")
    elif kind == "forbid_pattern":
        if not isinstance(a.pattern, str) or not a.pattern:
            raise BadInput(f"{w}: forbid_pattern needs a `pattern` (a regex)")
        compile_bounded(a.pattern, w, "pattern")
    elif kind == "dispatch":
        if not a.op or not a.impl:
            raise BadInput(f"{w}: dispatch needs `op` (e.g. moe.experts) and `impl` (e.g. grouped_mm)")
    return a


def parse_spec(doc: dict[str, Any], source: str) -> Spec:
    head = doc.get("spec", {})
    if not isinstance(head, dict):
        raise BadInput(f"{source}: [spec] must be a table")
    extra_top = set(doc) - {"spec", "assert"}
    if extra_top:
        raise BadInput(f"{source}: unknown top-level key(s) {', '.join(sorted(extra_top))}; use [spec] and [[assert]]")
    extra = set(head) - _SPEC_KEYS
    if extra:
        raise BadInput(f"{source}: [spec] has unknown key(s) {', '.join(sorted(extra))}")
    checks = tuple(_as_list(head.get("checks", list(BUILTIN_CHECKS)), f"{source}: [spec]", "checks"))
    bad = [c for c in checks if c not in BUILTIN_CHECKS]
    if bad:
        kinds = {c: k for k, c in KINDS.items()}
        why = "; ".join(f"{c} is the code of `{kinds[c]}` assertions (write one in [[assert]])" if c in kinds else
                        f"{c[:20]!r} is no check ({nearest_names(c, BUILTIN_CHECKS)})" for c in bad)
        raise BadInput(f"{source}: [spec] checks: {why}; the built-in checks are {', '.join(BUILTIN_CHECKS)}")
    if not doc:
        raise BadInput(f"{source}: the spec file is empty (expected a [spec] table and/or [[assert]] tables); "
                       "leave out --spec to use the built-in spec")
    raw = doc.get("assert", [])
    if not isinstance(raw, list):
        raise BadInput(f"{source}: assertions go in [[assert]] tables")
    seen: set[str] = set()
    assertions = [_parse_assertion(r, source, seen) for r in raw]
    if not assertions and not checks:
        raise BadInput(f"{source}: the spec has no assertions and no checks; nothing to verify")
    for key in ("id", "description", "device"):
        if head.get(key) is not None and not isinstance(head[key], str):
            raise BadInput(f"{source}: [spec] `{key}` must be a string")
    for key in ("sparse_layers", "moe_layers"):
        v = head.get(key)
        if v is not None and not ((isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_LAYER) or
                                  (isinstance(v, list) and all(isinstance(x, int) and 0 <= x <= MAX_LAYER for x in v))):
            raise BadInput(f"{source}: [spec] `{key}` must be a count (1..{MAX_LAYER}) or a list of layer indices")
    return Spec(id=str(head.get("id") or Path(source).stem), description=head.get("description", ""), source=source,
                checks=checks, assertions=assertions, sparse_layers=head.get("sparse_layers"),
                moe_layers=head.get("moe_layers"), example=bool(head.get("example", False)), device=head.get("device"))


def load_spec(path: str | Path | None = None) -> Spec:
    """Read a spec file; None gives the built-in spec for the reference runtime's fast configuration."""
    p = Path(path) if path is not None else BUILTIN_SPEC
    doc = read_toml(p, "spec")
    return parse_spec(doc, "builtin:" + p.name if path is None else str(p))


def default_spec(has_dispatch_log: bool) -> Spec:
    """The built-in spec for a profile: the reference runtime's (with dispatch assertions) when the profile has
    a dispatch log, else the one for any MoE runtime (judged from the profile's structure only)."""
    if has_dispatch_log:
        return load_spec()
    return parse_spec(read_toml(GENERIC_SPEC, "spec"), "builtin:" + GENERIC_SPEC.name)
