"""The grammar of a kernel name: namespace path, function name, template arguments, tokens and variant features.

A kernel name as a profiler reports it is one of
- a C++ signature (`void at::native::vectorized_elementwise_kernel<4, at::native::AbsFunctor<float>, ...>(int, ...)`),
  mangled (`_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9x...`, maybe cut by the profiler)
  or demangled;
- a bare identifier (Triton's `_fwd_kernel_destindex_copy_kv`, cuBLAS's `nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT`,
  Tensile's `Cijk_Alik_Bljk_BBS_BH_..._MT128x128x64_...`, `ncclDevKernel_AllReduce_Sum_bf16_RING_LL`);
- a text (`Memcpy HtoD (Pageable -> Device)`, a CPU op `aten::mm`).

`parse(name)` splits it into the namespace path (outermost first; anonymous namespaces dropped), the function's own
name, and the template arguments (of the function and of its enclosing classes), and tokenises each part:
snake_case, camelCase and digit boundaries, keeping dtype / arch / tile / bit-width words whole (`bf16`, `e4m3`,
`sm90`, `gfx942`, `128x64x32`, `8bit`, `2d`). Inside template arguments only the names of types and functions count,
never their namespaces (`cutlass::gemm::GemmShape` gives `GemmShape`, not `gemm`), and the identifiers keep their
order, so the outermost wrapped type comes first. A name the demangler cannot read (cut, or partly mangled) is read
from its Itanium source names (`<length><identifier>`): the nested name gives namespaces and function, whatever
follows gives the template identifiers. `features` are the variant words of the whole name: tile shapes, dtypes,
architecture tags and split-K / stream-K markers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from mmprof.cxx_text import qualified_name, split_top
from mmprof.names import demangle

_TOKEN = re.compile(
    r"\d+x\d+(?:x\d+)*"                                               # tile shape 128x64x32
    r"|(?i:(?:nv|mx)?fp(?:4|6|8|16|32|64)|bf16|tf32|f16|f32|f64|e4m3(?:fn)?(?:uz)?|e5m2(?:fnuz)?|e2m1|ue8m0"
    r"|u?int(?:2|4|8|16|32|64)|w\d+a\d+|a\d+w\d+|sm\d{2,3}[a-z]?|gfx\d{3,4}[a-z]?)"
    r"|\d+bit|\d+d(?![a-z])"                                           # 8bit, 2d
    r"|[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_NOISE = frozenset({"void", "const", "unsigned", "signed", "operator", "lambda", "anonymous", "namespace", "std",
                    "detail", "impl", "internal", "type", "enable", "if", "true", "false"})
_ANON = ("(anonymous namespace)", "anonymous namespace", "'anonymous namespace'", "<unnamed>")
_IDENT = re.compile(r"[A-Za-z_$][\w$]*")
_LITERAL = re.compile(r"L[a-z]n?\d+E")                                 # mangled integer literals: Li128E, Lb1E
_TILE = re.compile(r"\d+x\d+(?:x\d+)?")
_ARCH = re.compile(r"sm\d{2,3}[af]?|gfx\d{3,4}[a-z]?")
_DTYPE_TOKENS = {"bf16": "bf16", "fp16": "fp16", "f16": "fp16", "half": "fp16", "fp32": "fp32", "f32": "fp32",
                 "tf32": "tf32", "fp8": "fp8", "e4m3": "fp8e4m3", "e4m3fn": "fp8e4m3", "e5m2": "fp8e5m2", "fp4": "fp4",
                 "nvfp4": "nvfp4", "mxfp4": "mxfp4", "mxfp8": "mxfp8", "mxfp6": "mxfp6", "e2m1": "fp4", "int8": "int8",
                 "int4": "int4", "uint8": "int8", "w4a16": "w4a16", "w8a8": "w8a8", "w4a8": "w4a8", "a8w8": "w8a8",
                 "nf4": "nf4", "4bit": "4bit", "8bit": "8bit"}
# C++ dtypes of template arguments (c10::BFloat16, __nv_bfloat16, cutlass::half_t, Float8_e4m3fn, ...)
_CXX_DTYPE = re.compile(r"(BFloat16|bfloat16|__half\b|\bHalf\b|half_t|_Float16|Float8_e4m3|float_e4m3|__nv_fp8_e4m3|"
                        r"Float8_e5m2|float_e5m2|f8_fnuz|float_e2m1|__nv_fp4)")
_CXX_CANON = {"BFloat16": "bf16", "bfloat16": "bf16", "__half": "fp16", "Half": "fp16", "half_t": "fp16",
              "_Float16": "fp16", "Float8_e4m3": "fp8e4m3", "float_e4m3": "fp8e4m3", "__nv_fp8_e4m3": "fp8e4m3",
              "Float8_e5m2": "fp8e5m2", "float_e5m2": "fp8e5m2", "f8_fnuz": "fp8", "float_e2m1": "fp4", "__nv_fp4": "fp4"}
_SPLIT = {"splitk": "split-k", "streamk": "stream-k", "splitkv": "split-kv"}


@dataclass(frozen=True)
class ParsedName:
    text: str                       # the name demangled (or as given)
    namespace: tuple[str, ...]      # namespace / class path, outermost first, anonymous namespaces dropped
    function: str                   # the function's own name (the base)
    template: str                   # the template arguments' text (function and enclosing classes), "" when none
    mangled: bool                   # the demangler could not read it: read from its source names
    fn_tokens: tuple[str, ...]
    tmpl_idents: tuple[tuple[str, ...], ...]   # tokens of each type / function named in the template arguments
    tmpl_ops: tuple[bool, ...]      # per template identifier: does it name an operation (a functor, op, tag, kernel
                                    # or function) rather than a type (GemmShape, TensorAccessor)?
    ns_tokens: tuple[tuple[str, ...], ...]     # tokens of each namespace component, innermost first
    features: tuple[str, ...]       # variant words: tile shapes, architecture, dtypes, split-K / stream-K

    @property
    def qualified(self) -> str:
        return "::".join(self.namespace + (self.function,))


def tokens(ident: str) -> tuple[str, ...]:
    """The lower-case words of one identifier: `topKSortStage1` -> top, k, sort, stage, 1; `fused8bitrowwise`
    -> fused, 8bit, rowwise; `Rmsnorm2dFwd` -> rmsnorm, 2d, fwd; `rms_norm_bf16` -> rms, norm, bf16."""
    out = []
    for chunk in re.split(r"[^A-Za-z0-9]+", ident):
        for t in _TOKEN.findall(chunk):
            t = t.lower()
            if t and t not in _NOISE:
                out.append(t)
    return tuple(out)


def compounds(toks: tuple[str, ...]) -> frozenset[str]:
    """The tokens and every join of 2 or 3 adjacent ones (`rms` `norm` -> `rmsnorm`, `all` `reduce` ->
    `allreduce`, `l` `2` `norm` -> `l2norm`): spelling variants of one word meet in the vocabulary."""
    s = set(toks)
    for i in range(len(toks)):
        if i + 1 < len(toks):
            s.add(toks[i] + toks[i + 1])
        if i + 2 < len(toks):
            s.add(toks[i] + toks[i + 1] + toks[i + 2])
    return frozenset(s)


_OPLIKE = re.compile(r"(?:[Ff]unctor|_?[Oo]ps?|_tag|[Kk]ernel\w*|_impl|Impl|_cuda)$|^op_")


def _template_idents(text: str) -> tuple[tuple[tuple[str, ...], ...], tuple[bool, ...]]:
    """Tokens of the types and functions named in template-argument text, in order, and whether each names an
    operation (a functor / op / tag / kernel, or a function: followed by `(`); a namespace (an identifier followed
    by `::` and no bracket of its own) names nothing and is skipped."""
    out, ops = [], []
    for m in _IDENT.finditer(text):
        ident, end = m.group(0), m.end()
        if text.startswith("::", end):
            continue
        if ident in ("lambda", "operator", "const", "unsigned", "signed", "long", "int", "char", "short", "bool",
                     "float", "double", "void", "true", "false", "std", "anonymous", "namespace"):
            continue
        toks = tokens(ident)
        if toks:
            out.append(toks)
            ops.append(bool(_OPLIKE.search(ident)) or text.startswith("(", end))
    return tuple(out), tuple(ops)


def _mangled_parts(s: str) -> tuple[list[str], str]:
    """(nested-name components, template text as identifiers) of a mangled name the demangler could not read."""
    s = s.lstrip("_")
    if s.startswith("Z"):
        s = s[1:]
    s = s.removeprefix("L")
    nested = s.startswith("N")
    i = 1 if nested else 0
    while i < len(s) and s[i] in "rVK":
        i += 1
    comps: list[str] = []
    while i < len(s):
        if s.startswith("St", i):
            i += 2
            continue
        m = re.match(r"\d+", s[i:])
        if not m:
            break
        n = int(m.group(0))
        j = i + len(m.group(0))
        comps.append(s[j:j + n])
        i = j + n
        if not nested:
            break
    rest = _LITERAL.sub("", s[i:])
    # template arguments: a nested name N..E names a type by its last source name (the others are namespaces)
    idents: list[str] = []
    groups: list[list[str]] = []
    k = 0
    while k < len(rest):
        c = rest[k]
        if c.isdigit():
            m = re.match(r"\d+", rest[k:])
            n = int(m.group(0))
            j = k + len(m.group(0))
            ident = rest[j:j + n]
            (groups[-1] if groups else idents).append(ident)
            k = j + n
            continue
        if c == "N":
            groups.append([])
        elif c in "IE" and groups:
            g = groups.pop()
            if g:
                idents.append(g[-1])
        k += 1
    for g in groups:
        if g:
            idents.append(g[-1])
    return comps, " ".join(idents)


def _split_function(q: str) -> tuple[list[str], str, str]:
    """(namespace components, function base, template text) of a qualified function name."""
    comps = [c for c in split_top(q, "::") if c]
    names, tmpl = [], []
    for c in comps:
        i = c.find("<")
        if i > 0 and not c.startswith("operator"):
            names.append(c[:i])
            tmpl.append(c[i + 1:].removesuffix(">"))
        else:
            names.append(c)
    # a lambda or operator() as the last component: the enclosing function names the kernel
    while len(names) > 1 and (names[-1].startswith(("operator", "{lambda", "'lambda")) or names[-1].startswith("[")):
        names.pop()
    ns = [n for n in names[:-1] if n not in _ANON and not n.startswith(("{", "'", "["))]
    return ns, names[-1] if names else q, " ".join(tmpl)


def _head(text: str) -> str:
    """The qualified function name (with its template arguments as far as they go) of a signature cut short: the
    first top-level word that is followed by `<` or `(`, after a return type such as `void`."""
    depth, start = 0, 0
    for i, c in enumerate(text):
        if c in "<([":
            if depth == 0 and i > start and text[start:i].strip() not in ("", "void"):
                word = text[start:i].strip().split(" ")[-1]
                return word + text[i:]
            depth += 1
        elif c in ">)]":
            depth = max(depth - 1, 0)
        elif c == " " and depth == 0:
            start = i + 1
    return text.strip().split(" ")[-1]


def _features(fn_tokens: tuple[str, ...], template: str) -> tuple[str, ...]:
    """Variant words: tile shapes, architecture tags, dtypes (of the name, else of its template arguments),
    split-K / stream-K; at most 6, in the order they appear."""
    out: list[str] = []
    comp = compounds(fn_tokens)
    for t in fn_tokens:
        v = t if (_TILE.fullmatch(t) or _ARCH.fullmatch(t)) else _DTYPE_TOKENS.get(t)
        if v and v not in out:
            out.append(v)
    if not any(v in _DTYPE_TOKENS.values() for v in out):
        for m in _CXX_DTYPE.finditer(template[:1024]):
            v = _CXX_CANON[m.group(1)]
            if v not in out:
                out.append(v)
            break
    out += [v for k, v in _SPLIT.items() if k in comp and v not in out]
    return tuple(out[:6])


@lru_cache(maxsize=1 << 16)
def parse(name: str) -> ParsedName:
    """The parts of a kernel (or CPU-op) name; never raises. Cached per name."""
    raw = (name or "").strip()[:32768]
    text = demangle(raw).replace("<unnamed>", "(anonymous namespace)")
    text = text.removesuffix(".kd")
    mangled = text.lstrip("_").startswith("Z") and ("_Z" in text[:3] or text.startswith("Z"))
    if mangled:
        comps, tmpl = _mangled_parts(text)
        if not comps:
            comps = [text]
        ns, func = comps[:-1], comps[-1]
    elif text.count("<") != text.count(">") or text.count("(") != text.count(")"):
        ns, func, tmpl = _split_function(_head(text))   # cut by the profiler: read from the front
    else:
        q = qualified_name(text) if ("(" in text or "<" in text or " " in text) else text
        if q is None:  # not a signature: its words before the first parenthesis (`Memcpy HtoD (...)`)
            head = text.split("(", 1)[0].split()
            q = head[-1] if head else text
        ns, func, tmpl = _split_function(q)
    idents, ops = _template_idents(tmpl)
    return ParsedName(
        text=text, namespace=tuple(ns), function=func, template=tmpl, mangled=mangled,
        fn_tokens=tokens(func), tmpl_idents=idents, tmpl_ops=ops,
        ns_tokens=tuple(tokens(c) for c in reversed(ns)),
        features=_features(tokens(func), tmpl))
