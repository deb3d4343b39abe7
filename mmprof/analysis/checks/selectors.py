"""Selector validation: a family / variant / library / path / region pattern in a spec that no rule or role can
produce is refused (one line naming the nearest valid names, exit 2), instead of a `forbid` that passes because
it matches nothing (issue 25: `family = "gemmm"` printed PASS). And a bound on spec regexes, so that a pattern
with nested quantifiers cannot hang the gate.

The valid names are read at run time from the kernel rules in use (built-in `mmprof/rules/kernels_*.toml` plus
any `--rules` files) and the roles (`mmprof/rules/roles.toml`); nothing here lists a family or a role.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from typing import Any, Iterable

from mmprof import regex_safety
from mmprof.analysis.attribution.classify import FAMILIES, PATHS, default_rules
from mmprof.errors import BadInput
from mmprof.labels import roles
from mmprof.regex_safety import BoundedRegex

MAX_SEARCH_CHARS = regex_safety.MAX_CHARS  # a spec regex sees at most this much of a name (kernel names < 9 KB)
MAX_SPEC_PATTERN_CHARS = 1000


def compile_bounded(pattern: str, where: str, key: str) -> BoundedRegex:
    """A spec regex with a bound on its work (`mmprof.regex_safety`: RE2, else a shape that cannot backtrack;
    anything else is refused in one line, whatever names the profile at hand holds)."""
    if isinstance(pattern, str) and len(pattern) > MAX_SPEC_PATTERN_CHARS:
        raise BadInput(f"{where}: `{key}` regex is {len(pattern)} characters (at most {MAX_SPEC_PATTERN_CHARS})")
    return regex_safety.compile_bounded(pattern, where, key, max_chars=MAX_SEARCH_CHARS)


def bounded_search(rx: BoundedRegex, s: str) -> bool:
    return rx.search(s) is not None


# ------------------------------------------------------------------------------------------------ names
def _variant_template_regex(template: str) -> re.Pattern:
    parts = re.split(r"\{[^{}]*\}", template)
    return re.compile(".+".join(re.escape(p) for p in parts).lower(), re.DOTALL)


def valid_names(rules: Any = None) -> dict[str, Any]:
    """What the rules and roles can produce: families, libraries, paths, concrete variants, variant templates,
    and the region roles (layer-level and model-level)."""
    rs = rules or default_rules()
    fams = set(FAMILIES) | {r.family for r in rs.rules}
    libs = {r.library for r in rs.rules if r.library}
    concrete: set[str] = set()
    templates: set[str] = set()
    whole: list[re.Pattern] = []
    for r in rs.rules:
        if not r.variant:
            continue
        if "{" in r.variant:
            templates.add(r.variant)
            if not re.sub(r"\{[^{}]*\}", "", r.variant):  # `{0}`, `{coll}`: the variant is text the regex matched
                whole.append(r.regex)
            if r.example:
                kc = r.apply(r.example)
                if kc is not None and kc.variant:
                    concrete.add(kc.variant)
        else:
            concrete.add(r.variant)
    rr = roles()
    layer_roles = {p.key for p in rr.paths if "{" not in p.key}
    for p in rr.paths:  # a templated role (`{1}`): the alternatives of its first group are the roles it gives
        if "{" in p.key:
            layer_roles |= _alternatives(p.regex.pattern)
    layer_roles |= {role for _, _, role in rr.contexts if role}
    layer_roles |= {"layer", "moe"}  # parse_label's fallback roles (labels.py)
    model_roles = {m.key for m in rr.model}
    return {"family": fams, "library": libs, "path": set(PATHS), "variant": concrete, "variant_templates": templates,
            "variant_regexes": whole,
            "layer_roles": layer_roles, "model_roles": model_roles}


def _alternatives(pattern: str) -> set[str]:
    """The plain words a `^(a\\.(?:b|c)|d|...)` group can match: a.b, a.c, d (for the runtime-label role rule)."""
    m = re.match(r"\^\((.*?)\)\(\?:", pattern)
    if not m:
        return set()
    out: set[str] = set()
    depth, cur, items = 0, "", []
    for ch in m.group(1):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "|" and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    for it in items:
        g = re.fullmatch(r"(.*?)\(\?:([^()]*)\)(.*)", it)
        alts = [g.group(1) + a + g.group(3) for a in g.group(2).split("|")] if g else [it]
        out |= {a.replace("\\.", ".") for a in alts if re.fullmatch(r"[\w\\.]+", a)}
    return out


def nearest_names(value: str, names: Iterable[str], n: int = 3) -> str:
    """`nearest: a, b` (the closest valid names by spelling), else `valid: ...` (the first eight)."""
    pool = sorted(set(names))
    near = difflib.get_close_matches(value.lower(), [x.lower() for x in pool], n=n, cutoff=0.5)
    lower = {x.lower(): x for x in pool}
    near = [lower[x] for x in near]
    if not near:
        return "valid: " + ", ".join(pool[:8]) + (" ..." if len(pool) > 8 else "")
    return "nearest: " + ", ".join(near)


def _glob_hits(glob: str, names: Iterable[str]) -> bool:
    g = glob.lower()
    return any(fnmatch.fnmatchcase(x.lower(), g) for x in names)


def _variant_ok(glob: str, v: dict[str, Any]) -> bool:
    if _glob_hits(glob, v["variant"]):
        return True
    probe = re.sub(r"\[[^\]]*\]|[*?]", "x", glob)  # a wildcard stands for some text of the template's
    if any(_variant_template_regex(t).fullmatch(probe.lower()) for t in v["variant_templates"]
           if re.sub(r"\{[^{}]*\}", "", t)):
        return True
    literal = re.sub(r"\[[^\]]*\]|[*?]", "", glob)  # `{0}` rules: the regex must find the glob's literal text
    return bool(literal) and any(rx.search(literal) for rx in v["variant_regexes"])


def region_candidates(glob: str, v: dict[str, Any]) -> list[str]:
    """Region names the roles can produce that a glob is tried on: every layer-level role at the layer indices
    the glob names (and 0..9, 10, 100), every model-level role."""
    layers = {str(i) for i in range(10)} | {"10", "100"} | set(re.findall(r"\d{1,6}", glob))
    out = [f"layers.{i}.{r}" for r in v["layer_roles"] for i in layers]
    return out + sorted(v["model_roles"])


def _region_ok(glob: str, v: dict[str, Any]) -> bool:
    return glob == "*" or _glob_hits(glob, region_candidates(glob, v))


def check_selector_names(where: str, key: str, values: Iterable[str], v: dict[str, Any]) -> None:
    for val in values:
        if key == "variant":
            ok = _variant_ok(val, v)
            pool = v["variant"] | {re.sub(r"\{[^{}]*\}", "*", t) for t in v["variant_templates"]}
        elif key in ("region", "within"):
            ok = _region_ok(val, v)
            pool = {f"layers.*.{r}" for r in v["layer_roles"]} | v["model_roles"]
        else:
            ok = _glob_hits(val, v[key])
            pool = v[key]
        if not ok:
            raise BadInput(f"{where}: {key} {val[:60]!r} matches nothing the kernel rules or roles can produce "
                           f"({nearest_names(val, pool)})")


def validate_spec(spec: Any, rules: Any = None) -> None:
    """Refuse a spec whose selectors name nothing that can exist (module docstring)."""
    v = valid_names(rules)
    for a in spec.assertions:
        w = f"{spec.source}: assertion {a.id}"
        sel = a.selector
        for key, vals in (("family", sel.family), ("variant", sel.variant), ("library", sel.library),
                          ("path", sel.path), ("region", a.region), ("within", a.within)):
            check_selector_names(w, key, vals, v)
