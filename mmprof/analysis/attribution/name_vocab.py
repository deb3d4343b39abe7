"""The family, path and library of a kernel name from its grammar (`name_grammar.parse`) and the vocabulary data
(`rules/kernel_tokens.toml`, `rules/kernel_libraries.toml`).

Order of evidence inside a name: the function name's own words first, then the types and functions named in its
template arguments (outermost first), then its namespaces; a loop abstraction (`vectorized_elementwise_kernel`,
`reduce_kernel`, `cutlass::device_kernel`) lets its template arguments speak before its own family. The library
comes from the namespace / prefix / symbol conventions and never decides the family: a name whose words name no
family is `unknown`, with its library when that is known.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmprof.analysis.attribution.name_grammar import ParsedName, compounds
from mmprof.errors import BadInput
from mmprof.fileio import read_toml
from mmprof.regex_safety import BoundedRegex, compile_bounded

RULES_DIR = Path(__file__).resolve().parents[2] / "rules"
TOKENS_FILE = RULES_DIR / "kernel_tokens.toml"
LIBRARIES_FILE = RULES_DIR / "kernel_libraries.toml"
LEVELS = ("function", "template", "namespace")
_MOE_WORDS = frozenset({"moe", "experts", "expert", "fusedmoe"})
_FAMILY_KEYS = {"id", "family", "variant", "words", "patterns", "all", "unless", "levels", "container", "functions",
                "weak", "description", "sources"}
_PATH_KEYS = {"id", "path", "words", "reason", "sources"}
_LIB_KEYS = {"id", "library", "platform", "namespaces", "prefixes", "patterns", "description", "sources"}


@dataclass(frozen=True)
class WordRule:
    id: str
    family: str
    variant: str
    words: frozenset[str]
    patterns: tuple[re.Pattern, ...]
    all: frozenset[str]
    unless: frozenset[str]
    levels: frozenset[str]
    container: bool
    functions: frozenset[str]
    description: str
    sources: tuple[str, ...]
    weak: bool = False

    def hit(self, comp: frozenset[str], toks: tuple[str, ...]) -> str | None:
        """The word that makes this rule match these words (a word, a compound or a token a pattern matches)."""
        if self.unless and comp & self.unless:
            return None
        if self.all and not self.all <= comp:
            return None
        w = next(iter(sorted(comp & self.words)), None) if self.words else None
        if w is None and self.patterns:
            w = next((t for t in toks for p in self.patterns if p.fullmatch(t)), None)
        if w is None and self.all and not self.words and not self.patterns:
            w = "+".join(sorted(self.all))
        return w


@dataclass(frozen=True)
class PathRule:
    id: str
    path: str
    words: frozenset[str]
    reason: str
    sources: tuple[str, ...]


@dataclass(frozen=True)
class LibraryRule:
    id: str
    library: str
    platform: str
    namespaces: frozenset[str]
    prefixes: tuple[str, ...]
    patterns: tuple[re.Pattern, ...]
    description: str
    sources: tuple[str, ...]

    def match(self, p: ParsedName) -> str | None:
        """How this library's conventions match the name (namespace | prefix | pattern), or None."""
        outer = p.namespace[0] if p.namespace else None
        if outer is not None and outer in self.namespaces:
            return "namespace"
        if self.prefixes and p.function.startswith(self.prefixes):
            return "prefix"
        if self.patterns:
            q = p.qualified if not p.mangled else p.text
            if any(rx.search(q) for rx in self.patterns):
                return "pattern"
        return None


@dataclass(frozen=True)
class Decision:
    family: str            # `unknown` when no word names one
    variant: str | None
    rule: str | None       # the word rule that decided, None for unknown
    level: str | None      # function | template | namespace
    word: str | None       # the word that decided
    path: str = "neutral"
    path_reason: str | None = None

    @property
    def reason(self) -> str | None:
        if self.rule is None:
            return None
        return f"{self.level} word '{self.word}'"


@dataclass
class Vocabulary:
    families: list[WordRule]
    paths: list[PathRule]
    libraries: list[LibraryRule]
    _by_level: dict[str, list[WordRule]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_level = {lv: [r for r in self.families if lv in r.levels and not r.container] for lv in LEVELS}
        self._containers = [r for r in self.families if r.container]
        # a library's namespace (fbgemm_gpu, deep_gemm, flashinfer) names the library, never the family
        self._lib_ns = frozenset(n for lib in self.libraries for n in lib.namespaces)

    def without_sources(self, drop: set[str]) -> "Vocabulary":
        """The vocabulary as it would be without the entries written for these sources (leave-one-source-out)."""
        keep = (lambda r: not (set(r.sources) & drop))
        return Vocabulary([r for r in self.families if keep(r)], [r for r in self.paths if keep(r)],
                          [r for r in self.libraries if keep(r)])

    def _first(self, rules: list[WordRule], toks: tuple[str, ...]) -> tuple[WordRule, str] | None:
        if not toks:
            return None
        comp = compounds(toks)
        weak = None
        for r in rules:
            w = r.hit(comp, toks)
            if w is not None:
                if not r.weak:
                    return r, w
                weak = weak or (r, w)
        return weak

    def decide(self, p: ParsedName) -> Decision:
        container = None
        for r in self._containers:
            if p.function in r.functions or (r.words and r.hit(compounds(p.fn_tokens), p.fn_tokens)):
                container = r
                break
        weak_fn = None
        if container is None:
            hit = self._first(self._by_level["function"], p.fn_tokens)
            if hit and not hit[0].weak:
                return self._decision(p, hit[0], "function", hit[1])
            weak_fn = hit   # `unary_op_kernel<op_silu>`: the template's op may name the family
        # template arguments: any wrapped type of a loop abstraction or wrapper; otherwise only the ones that name an
        # operation (a functor, op, tag, kernel or function, not a shape or accessor type), and only when they
        # agree: `block_apply<MulFunctor, softmax_tag>` names two families and stays unknown
        found = []
        for toks, op in zip(p.tmpl_idents, p.tmpl_ops):
            if container is None and not op:
                continue
            hit = self._first(self._by_level["template"], toks)
            if hit:
                found.append(hit)
        strong = [h for h in found if not h[0].weak] or found
        if container is not None and strong:
            return self._decision(p, strong[0][0], "template", strong[0][1])
        if strong and len({r.family for r, _ in strong}) == 1:
            return self._decision(p, strong[0][0], "template", strong[0][1])
        if weak_fn is not None:
            return self._decision(p, weak_fn[0], "function", weak_fn[1])
        if container is not None and container.family != "unknown":
            return self._decision(p, container, "function", p.function)
        for comp, toks in zip(reversed(p.namespace), p.ns_tokens):
            if comp in self._lib_ns:
                continue
            hit = self._first(self._by_level["namespace"], toks)
            if hit:
                return self._decision(p, hit[0], "namespace", hit[1])
        path, reason = self.path_of(p)
        return Decision("unknown", None, None, None, None, path, reason)

    def path_of(self, p: ParsedName) -> tuple[str, str | None]:
        comp = compounds(p.fn_tokens)
        for r in self.paths:
            w = next(iter(sorted(comp & r.words)), None)
            if w is not None:
                return r.path, f"{r.reason} ('{w}')"
        return "neutral", None

    def _decision(self, p: ParsedName, r: WordRule, level: str, word: str) -> Decision:
        path, reason = self.path_of(p)
        variant = r.variant
        if r.family == "gemm" and _MOE_WORDS & (compounds(p.fn_tokens) | {t for ts in p.ns_tokens for t in ts}):
            # a GEMM of MoE experts (`moe_wna16_gemm`, `marlin_moe_wna16::Marlin`) is a grouped GEMM
            r = WordRule("tokens.grouped_gemm.moe", "grouped_gemm", "moe_gemm", r.words, r.patterns, r.all,
                         r.unless, r.levels, False, r.functions, "a GEMM whose name says MoE / experts", r.sources)
            variant = r.variant
        if p.features:
            variant = f"{variant} {' '.join(p.features)}"
        return Decision(r.family, variant, r.id, level, word, path, reason)

    def library(self, p: ParsedName) -> tuple[str | None, str | None, str | None]:
        """(library, library rule id, how it matched: namespace | prefix | pattern) of a parsed name."""
        for lib in self.libraries:
            how = lib.match(p)
            if how:
                return lib.library, lib.id, how
        return None, None, None

    def is_wrapper(self, p: ParsedName) -> bool:
        """A kernel wrapper (cutlass::device_kernel, ck_tile::kentry): its namespace is not the kernel's library."""
        return any(r.container and r.family == "unknown" and p.function in r.functions for r in self._containers)

    def platform(self, library: str | None) -> str | None:
        for lib in self.libraries:
            if lib.library == library:
                return None if lib.platform == "any" else lib.platform
        return None


def _strings(v: Any, where: str, key: str) -> tuple[str, ...]:
    if v is None:
        return ()
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise BadInput(f"{where}: `{key}` must be a list of strings")
    return tuple(v)


def _regexes(v: Any, where: str, key: str) -> tuple[BoundedRegex, ...]:
    """The patterns of a vocabulary entry, each with a bound on its work (mmprof.regex_safety)."""
    return tuple(compile_bounded(s, where, key) for s in _strings(v, where, key))


def _entries(doc: dict, table: str, keys: set[str], path: Path) -> list[tuple[str, dict]]:
    out = []
    for i, e in enumerate(doc.get(table, [])):
        rid = e.get("id") if isinstance(e, dict) else None
        where = f"{path.name}: [[{table}]] {rid or '#' + str(i + 1)}"
        if not isinstance(e, dict) or not isinstance(rid, str) or not rid:
            raise BadInput(f"{where}: every entry needs a string `id`")
        extra = set(e) - keys
        if extra:
            raise BadInput(f"{where}: unknown key(s) {', '.join(sorted(extra))}")
        out.append((where, e))
    return out


def read_vocabulary(tokens_file: Path = TOKENS_FILE, libraries_file: Path = LIBRARIES_FILE) -> Vocabulary:
    doc = read_toml(tokens_file, "vocabulary")
    fams, paths = [], []
    for where, e in _entries(doc, "family", _FAMILY_KEYS, tokens_file):
        if not isinstance(e.get("family"), str) or not re.fullmatch(r"[a-z][a-z0-9_]*", e["family"]):
            raise BadInput(f"{where}: `family` must be a lower_snake_case string")
        levels = _strings(e.get("levels"), where, "levels") or LEVELS
        if set(levels) - set(LEVELS):
            raise BadInput(f"{where}: levels must be among {', '.join(LEVELS)}")
        words = frozenset(w.lower() for w in _strings(e.get("words"), where, "words"))
        pats = _regexes(e.get("patterns"), where, "patterns")
        alls = frozenset(w.lower() for w in _strings(e.get("all"), where, "all"))
        funcs = frozenset(_strings(e.get("functions"), where, "functions"))
        if not (words or pats or alls or funcs):
            raise BadInput(f"{where}: needs `words`, `patterns`, `all` or `functions`")
        fams.append(WordRule(e["id"], e["family"], e.get("variant") or e["family"], words, pats, alls,
                             frozenset(w.lower() for w in _strings(e.get("unless"), where, "unless")),
                             frozenset(levels), bool(e.get("container", False)), funcs, e.get("description", ""),
                             _strings(e.get("sources"), where, "sources"), bool(e.get("weak", False))))
    for where, e in _entries(doc, "path", _PATH_KEYS, tokens_file):
        if e.get("path") not in ("fast", "fallback"):
            raise BadInput(f"{where}: `path` must be fast or fallback")
        paths.append(PathRule(e["id"], e["path"], frozenset(w.lower() for w in _strings(e.get("words"), where, "words")),
                              e.get("reason", ""), _strings(e.get("sources"), where, "sources")))
    ldoc = read_toml(libraries_file, "vocabulary")
    libs = []
    for where, e in _entries(ldoc, "library", _LIB_KEYS, libraries_file):
        if not isinstance(e.get("library"), str) or not e["library"]:
            raise BadInput(f"{where}: `library` must be a non-empty string")
        if e.get("platform", "any") not in ("cuda", "rocm", "any"):
            raise BadInput(f"{where}: `platform` must be cuda, rocm or any")
        libs.append(LibraryRule(e["id"], e["library"], e.get("platform", "any"),
                                frozenset(_strings(e.get("namespaces"), where, "namespaces")),
                                _strings(e.get("prefixes"), where, "prefixes"),
                                _regexes(e.get("patterns"), where, "patterns"), e.get("description", ""),
                                _strings(e.get("sources"), where, "sources")))
    return Vocabulary(fams, paths, libs)


_DEFAULT: Vocabulary | None = None


def default_vocabulary() -> Vocabulary:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = read_vocabulary()
    return _DEFAULT
