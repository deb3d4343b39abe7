"""Kernel (and CPU op) name -> op family, variant, library and path, from rules stored as TOML data.

Why data and not code: kernel names change with every library release (pytorch/pytorch #92077 and friends
broke on exact names); a user must be able to read, extend and override the rules without touching mmprof.
The built-in tables live in `mmprof/rules/kernels_*.toml` and `mmprof/rules/cpu_ops.toml`; `docs/rules.md`
describes the format. Rules are tried in order; the first whose regex *searches* successfully wins.

A rule's `variant` may use the regex's groups: `{1}` for group 1, `{name}` for a named group, `{0}` for the
whole match. A rule with `on = "function"` searches only the kernel's qualified function name (`function_name`):
keyword rules then cannot fire on a word in a template argument or a parameter type.

These explicit rules know particular kernels (evidence `rule`). A name none of them matches is read by the grammar
of kernel names (`name_grammar`, `name_vocab`: the function name's words, then the template arguments', then the
namespaces'; evidence `tokens`). The library comes from the rule or from the library conventions of
`rules/kernel_libraries.toml`, never the family from the library: a name no rule and no word places has family
`unknown` (rule None), with its library when that is known -- better unknown than a wrong family.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from mmprof.analysis.attribution.name_grammar import parse
from mmprof.analysis.attribution.name_vocab import Vocabulary, default_vocabulary
from mmprof.errors import BadInput
from mmprof.fileio import read_toml
from mmprof.names import function_name
from mmprof.regex_safety import BoundedRegex, compile_bounded

RULES_DIR = Path(__file__).resolve().parents[2] / "rules"
# Priority order of the built-in files: model-specific kernels first, generic keyword rules last.
# kernels_serving.toml (serving-engine kernels other files would put in a wrong family, fused kernels) comes first;
# kernels_engines.toml (rules anchored on an engine's or kernel library's namespace or exact kernel names) comes
# before the model file, whose rules are keyword-like.
BUILTIN_FILES = ("kernels_inductor.toml", "cpu_ops.toml", "kernels_serving.toml", "kernels_engines.toml", "kernels_model.toml", "kernels_rocm.toml", "kernels_cuda.toml",
                 "kernels_torch.toml")
PATHS = ("fast", "fallback", "neutral")
FAMILIES = ("gemm", "grouped_gemm", "moe", "attention", "sparse_attention", "indexer_score", "ssm", "topk", "sort",
            "sampling", "norm", "rope", "activation", "quantization", "elementwise", "reduction", "index", "kv_cache",
            "copy", "memcpy", "communication", "embedding", "conv", "optimizer", "rnn", "pooling", "other", "unknown")
UNKNOWN = "unknown"  # no rule and no word of the name says the family (the library may still be known)
# Timeline categories that follow from the family alone (docs/rules.md "Families and timeline categories"): every
# other family is compute or memory work whose bound the roofline decides from the op's shapes. A KV-cache write or
# gather moves data like a copy (it was family copy / variant kv_cache_write before it had a family of its own).
COMM_FAMILIES = ("communication",)
DATA_MOVEMENT_FAMILIES = ("copy", "memcpy", "kv_cache")
# A fused kernel spanning families gets the first of these that it does (its variant names the fused parts):
# communication + norm is communication, norm + RoPE + KV-cache insert is rope, activation + quant is activation.
FUSED_PRIMARY_ORDER = ("communication", "grouped_gemm", "gemm", "sparse_attention", "attention", "ssm", "sampling",
                       "moe", "rope", "norm", "kv_cache", "activation", "quantization")
# The platform a rule's library runs on ("cuda", "rocm"; a library not listed runs on both: PyTorch, Triton, vLLM,
# SGLang, ggml, NCCL/RCCL). A CUDA kernel must never get a ROCm library or the reverse (tests/test_classify_corpus.py).
LIBRARY_PLATFORM = {
    # FlashAttention, FlashInfer, DeepEP, FBGEMM and bitsandbytes have ROCm ports: they run on both
    **dict.fromkeys(("cuBLAS", "cuDNN", "CUTLASS", "CUB", "DeepGEMM", "FlashMLA", "TensorRT", "TensorRT-LLM", "Marlin",
                     "Machete", "NVSHMEM", "pplx-kernels"), "cuda"),
    **dict.fromkeys(("hipBLASLt", "rocBLAS", "Composable Kernel", "AITER", "MIOpen", "HIP runtime", "rocPRIM", "MoRI",
                     "vLLM/AITER"), "rocm"),
}
_RULE_KEYS = {"id", "pattern", "family", "variant", "library", "path", "description", "example", "ignore_case", "on",
              "sources"}
EVIDENCE = ("op", "provenance", "rule", "tokens")  # what decided a family, in the frame's order of rank
TARGETS = ("name", "function")
@dataclass(frozen=True)
class KernelClass:
    family: str
    variant: str | None
    library: str | None
    path: str  # fast|fallback|neutral
    rule: str | None  # id of the deciding rule or vocabulary entry, None = unclassified (family 'unknown')
    evidence: str | None = None  # rule | tokens (| op | provenance in the event frame); None when unknown
    reason: str | None = None  # what decided, in words ("function word 'rmsnorm'", "rule torch.copy")
    path_reason: str | None = None  # why fast / fallback, when the name says so

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "variant": self.variant, "library": self.library, "path": self.path,
                "rule": self.rule, "evidence": self.evidence, "reason": self.reason, "path_reason": self.path_reason}


UNCLASSIFIED = KernelClass(UNKNOWN, None, None, "neutral", None)


@dataclass(frozen=True)
class Rule:
    id: str
    pattern: str
    family: str
    variant: str | None = None
    library: str | None = None
    path: str = "neutral"
    description: str = ""
    example: str | None = None
    ignore_case: bool = False
    on: str = "name"  # name: search the whole kernel name; function: only its qualified function name
    source: str = "builtin"
    sources: tuple[str, ...] = ()  # the corpus sources the rule was written for (leave-one-source-out)
    regex: BoundedRegex = field(default=None, compare=False, repr=False)  # type: ignore[assignment]

    def apply(self, name: str, func: str | None = None) -> KernelClass | None:
        if self.on == "function":
            name = func if func is not None else function_name(name)
        m = self.regex.search(name)
        if m is None:
            return None
        variant = self.variant
        if variant and "{" in variant:
            groups = {k: (v or "") for k, v in m.groupdict().items()}
            try:
                variant = variant.format(m.group(0), *[g or "" for g in m.groups()], **groups) or None
            except (IndexError, KeyError):
                pass
        return KernelClass(self.family, variant, self.library, self.path, self.id, "rule", f"rule {self.id}")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "pattern": self.pattern, "on": self.on, "family": self.family, "variant": self.variant,
                "library": self.library, "path": self.path, "description": self.description,
                "example": self.example, "source": self.source, "sources": list(self.sources)}


# Rules see at most this many characters of a name (and of its function name). A backtracking regex costs up to
# (match starts) x (span) steps: patterns like `\bvllm::(?:\w+::)*\w*quant` take 13 s on a 16K-character name
# that repeats `vllm::` (benchmarks/long_names.py). Real kernel names classify from their first 1,024 characters
# (all 620 of the labelled corpus, the longest 8,598 characters: tests/test_trust_import.py checks it), so 2,048
# changes no real name's class and bounds the worst name to about 0.1 s over every rule.
CLASSIFY_MAX_CHARS = 2048


class RuleSet:
    """An ordered list of explicit rules, the vocabulary of the name grammar, and a per-name cache (profiles have
    ~1M kernels but a few thousand names)."""

    def __init__(self, rules: Iterable[Rule], vocabulary: Vocabulary | None = None):
        self.rules: list[Rule] = list(rules)
        self.vocabulary: Vocabulary = vocabulary if vocabulary is not None else default_vocabulary()
        self._cache: dict[str, KernelClass] = {}

    def classify(self, name: str | None) -> KernelClass:
        if not name:
            return UNCLASSIFIED
        hit = self._cache.get(name)
        if hit is None:
            hit = self._classify(name)
            self._cache[name] = hit
        return hit

    def _classify(self, name: str) -> KernelClass:
        func = function_name(name)[:CLASSIFY_MAX_CHARS]
        text = name[:CLASSIFY_MAX_CHARS]
        voc = self.vocabulary
        p = parse(name)
        table_lib, _, how = voc.library(p)
        for rule in self.rules:
            kc = rule.apply(text, func)
            if kc is not None:
                # the rule's library, unless one of ATen's keyword rules (kernels_torch.toml) matched a kernel
                # whose own namespace names another library (FBGEMM's index_add_2d kernel is FBGEMM's)
                lib = kc.library
                if lib is None or (how == "namespace" and table_lib != lib and rule.source == "kernels_torch.toml"):
                    lib = table_lib if table_lib is not None else lib
                # a rule says the path itself (its own `path`); the name's fast / fallback words are the grammar's
                why = f"rule {rule.id}" if kc.path != "neutral" else None
                return KernelClass(kc.family, kc.variant, lib, kc.path, kc.rule, "rule", kc.reason, why)
        d = voc.decide(p)
        lib = table_lib
        if d.rule is None:
            return KernelClass(UNKNOWN, None, lib, d.path, None, None,
                               f"no word names a family (library {lib})" if lib else "no word names a family",
                               d.path_reason)
        return KernelClass(d.family, d.variant, lib, d.path, d.rule, "tokens", d.reason, d.path_reason)

    def get(self, rule_id: str) -> Rule | None:
        return next((r for r in self.rules if r.id == rule_id), None)

    def without_sources(self, drop: set[str]) -> "RuleSet":
        """The rules and vocabulary as they would be without the entries written for these sources."""
        return RuleSet([r for r in self.rules if not (set(r.sources) & drop)], self.vocabulary.without_sources(drop))

    def __len__(self) -> int:
        return len(self.rules)


def _parse_rules(doc: dict[str, Any], where: str) -> list[Rule]:
    raw = doc.get("rule", [])
    if not isinstance(raw, list):
        raise BadInput(f"{where}: expected [[rule]] tables")
    unknown_top = set(doc) - {"rule", "meta"}
    if unknown_top:
        raise BadInput(f"{where}: unknown top-level key(s) {', '.join(sorted(unknown_top))}; rules go in [[rule]] tables")
    out = []
    for i, r in enumerate(raw):
        rid = r.get("id") if isinstance(r, dict) else None
        label = f"{where}: rule {rid or '#' + str(i + 1)}"
        if not isinstance(r, dict) or not rid or not isinstance(rid, str):
            raise BadInput(f"{label}: every rule needs a string `id`")
        extra = set(r) - _RULE_KEYS
        if extra:
            raise BadInput(f"{label}: unknown key(s) {', '.join(sorted(extra))} (allowed: {', '.join(sorted(_RULE_KEYS))})")
        for key in ("pattern", "family"):
            if not isinstance(r.get(key), str) or not r[key]:
                raise BadInput(f"{label}: missing or empty `{key}`")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", r["family"]):
            raise BadInput(f"{label}: family {r['family']!r} must be lower_snake_case (built-in: {', '.join(FAMILIES)})")
        path = r.get("path", "neutral")
        if path not in PATHS:
            raise BadInput(f"{label}: path {path!r} must be one of {', '.join(PATHS)}")
        on = r.get("on", "name")
        if on not in TARGETS:
            raise BadInput(f"{label}: on {on!r} must be one of {', '.join(TARGETS)}")
        # RE2 (linear time) where the pattern allows, else Python's re for a shape that cannot backtrack; a user's
        # and a built-in rule alike (mmprof.regex_safety)
        rx = compile_bounded(r["pattern"], label, "pattern", ignore_case=bool(r.get("ignore_case")),
                             max_chars=CLASSIFY_MAX_CHARS)
        rule = Rule(id=rid, pattern=r["pattern"], family=r["family"], variant=r.get("variant") or None,
                    library=r.get("library") or None, path=path, description=r.get("description", ""),
                    example=r.get("example"), ignore_case=bool(r.get("ignore_case")), on=on, source=where, regex=rx,
                    sources=tuple(r.get("sources") or ()))
        if rule.example is not None and rule.apply(rule.example) is None:
            raise BadInput(f"{label}: its example {rule.example[:80]!r} does not match its own pattern")
        out.append(rule)
    return out


def read_rule_file(path: str | Path) -> list[Rule]:
    """The rules of one TOML file. Every pattern, a user's or a built-in, runs with a bound on its work
    (`mmprof.regex_safety`: RE2, else a shape that cannot backtrack, else refused in one line)."""
    p = Path(path)
    doc = read_toml(p, "rules")
    return _parse_rules(doc, str(p) if p.parent != RULES_DIR else p.name)


def builtin_rules() -> list[Rule]:
    rules: list[Rule] = []
    for fname in BUILTIN_FILES:
        rules.extend(read_rule_file(RULES_DIR / fname))
    return rules


def load_rules(extra: Sequence[str | Path] = ()) -> RuleSet:
    """Built-in rules plus user files. A user rule with a built-in id replaces it in place; new rules come first."""
    rules = builtin_rules()
    index = {r.id: i for i, r in enumerate(rules)}
    front: list[Rule] = []
    for f in extra:
        for r in read_rule_file(f):
            if r.id in index:
                rules[index[r.id]] = r
            else:
                front = [x for x in front if x.id != r.id] + [r]
    return RuleSet(front + rules)


_DEFAULT: RuleSet | None = None


def default_rules() -> RuleSet:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = load_rules()
    return _DEFAULT


def classify_name(name: str, rules: RuleSet | None = None) -> KernelClass:
    """Classify one kernel or CPU-op name (cached per RuleSet)."""
    return (rules or default_rules()).classify(name)


def classify_names(names: Sequence[str | None], rules: RuleSet | None = None) -> "Any":
    """A DataFrame (family, variant, library, path, rule) with one row per given name, in order."""
    import pandas as pd

    rs = rules or default_rules()
    return pd.DataFrame([rs.classify(n).to_dict() for n in names],
                        columns=["family", "variant", "library", "path", "rule"])


def classify_codes(profile: Any, codes: "Any", rules: RuleSet | None = None) -> "Any":
    """Classify a string-id column (e.g. kernels.name) classifying each unique id once."""
    import numpy as np
    import pandas as pd

    rs = rules or default_rules()
    codes = np.asarray(codes)
    uniq, inverse = np.unique(codes, return_inverse=True)
    table = classify_names([profile.string(int(c)) for c in uniq], rs)
    out = table.iloc[inverse.reshape(-1)].reset_index(drop=True) if len(codes) else table.iloc[0:0]
    return out.astype({"family": "category", "path": "category"}) if len(out) else pd.DataFrame(
        columns=["family", "variant", "library", "path", "rule"])


def classify_profile(profile: Any, rules: RuleSet | None = None, table: str = "kernels") -> "Any":
    """One row per row of `table` (default kernels) with columns family, variant, library, path, rule."""
    return classify_codes(profile, profile.tables[table]["name"], rules)
