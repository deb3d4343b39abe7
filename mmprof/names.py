"""Kernel names: Itanium demangling and short display names for tables and HTML.

`demangle(name)` turns `_Z...` symbols into C++ signatures with LLVM's demangler (the `pycxxfilt` wheel);
`display_name(name)` turns a raw or demangled kernel name into a short label that keeps what identifies the
kernel: its base function name plus the few template arguments that tell variants apart (functor, dtype,
tile shape, arch). docs/names.md describes the rules. Base module: imports only `mmprof.cxx_text` (C++ text scanning).
"""

from __future__ import annotations

import re
from functools import lru_cache

from mmprof.cxx_text import qualified_name as _qualified_name
from mmprof.cxx_text import split_template as _split_template
from mmprof.cxx_text import split_top as _split_top
from mmprof.cxx_text import strip_call as _strip_call

try:  # LLVM's Itanium demangler; wheels for CPython >= 3.11 on Linux/macOS/Windows (see docs/names.md)
    from pycxxfilt import itanium_demangle as _itanium_demangle
except ImportError:  # pragma: no cover - Python 3.10, or a platform without a wheel: names pass through
    _itanium_demangle = None

DEFAULT_MAX_LEN = 60

_STUB = "__device_stub__"
_EMBEDDED = re.compile(r"(?:(?<![\w$])|(?<=_))_Z[\w$]+(?:\.[\w$.]+)?")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")  # not a C++ name


def _demangle_token(tok: str) -> str | None:
    core = tok.removesuffix(".kd")  # ROCm kernel-descriptor symbol of the kernel
    if core.startswith("__Z"):  # Mach-O adds one underscore
        core = core[1:]
    try:
        out = _itanium_demangle(core)
    except Exception:  # invalid mangling, NUL byte, ...: the caller keeps the input
        return None
    return out or None


@lru_cache(maxsize=1 << 16)
def demangle(name: str) -> str:
    """The C++ signature of an Itanium-mangled name; anything else (or a failure) comes back unchanged.

    Handles a whole `_Z...` name, a `.kd` suffix (ROCm), a `__device_stub__` prefix and `_Z` symbols embedded
    in a longer string. Never raises."""
    if not isinstance(name, str) or "_Z" not in name or _itanium_demangle is None:
        return name
    s = name.strip()
    if s.startswith(_STUB) and s[len(_STUB):].lstrip("_")[:1] == "Z":  # nvcc's __device_stub__Z8testfuncPf
        s = "_" + s[len(_STUB):].lstrip("_")
    if s.startswith(("_Z", "__Z")):
        whole = _demangle_token(s)
        return name if whole is None else whole
    try:
        return _EMBEDDED.sub(lambda m: _demangle_token(m.group(0)) or m.group(0), s)
    except Exception:  # pragma: no cover - defensive: demangling never breaks a caller
        return name


# ---------------------------------------------------------------------------------------------------------
# Rendering template arguments as prioritised parts.

_DTYPES = {
    "BFloat16": "bf16", "bfloat16_t": "bf16", "bfloat16": "bf16", "__nv_bfloat16": "bf16", "nv_bfloat16": "bf16",
    "__hip_bfloat16": "bf16", "hip_bfloat16": "bf16", "bf16_t": "bf16", "bhalf_t": "bf16",
    "Half": "half", "half_t": "half", "__half": "half", "_Float16": "half", "half": "half", "fp16_t": "half",
    "float16_t": "half", "float": "float", "double": "double", "tfloat32_t": "tf32", "tf32_t": "tf32",
    "float_e4m3_t": "fp8e4m3", "float_e5m2_t": "fp8e5m2", "Float8_e4m3fn": "fp8e4m3", "Float8_e5m2": "fp8e5m2",
    "Float8_e4m3fnuz": "fp8e4m3fnuz", "Float8_e5m2fnuz": "fp8e5m2fnuz", "__nv_fp8_e4m3": "fp8e4m3",
    "__nv_fp8_e5m2": "fp8e5m2", "f8_fnuz_t": "fp8", "f8_t": "fp8", "fp8_t": "fp8", "bf8_t": "bf8",
    "bf8_fnuz_t": "bf8", "float_e2m1_t": "fp4", "__nv_fp4_e2m1": "fp4", "Float4_e2m1fn_x2": "fp4x2",
    "float_ue8m0_t": "ue8m0", "int8_t": "int8", "signed char": "int8", "unsigned char": "uint8",
    "uint8_t": "uint8", "int": "int", "unsigned int": "uint", "long": "long", "unsigned long": "ulong",
    "long long": "int64", "unsigned long long": "uint64", "int64_t": "int64", "int32_t": "int", "short": "short",
    "unsigned short": "ushort", "bool": "bool", "char": "char",
}
_DTYPE_NAMES = set(_DTYPES.values())
_FLOAT_DTYPES = {"bf16", "half", "float", "double", "tf32", "fp8", "bf8", "fp4", "fp4x2", "ue8m0", "fp8e4m3",
                 "fp8e5m2", "fp8e4m3fnuz", "fp8e5m2fnuz", "int8", "uint8"}
_DTYPE_WORD = re.compile(r"\b(?:c10::|cutlass::|ck::|ck_tile::|std::)?(" + "|".join(
    sorted((re.escape(k) for k in _DTYPES if " " not in k and _DTYPES[k] in _FLOAT_DTYPES), key=len,
           reverse=True)) + r")\b")

# Template arguments that never identify a kernel (matched on the argument's outer name): argument packs,
# offset calculators, load/store policies, layouts, pass-through element ops.
_NOISE_ARG = re.compile(r"^(?:[\w:]*::)?(?:Array<char\s?\*|array<char\s?\*|\w*OffsetCalculator\b|LoadWith|StoreWith|"
                        r"PassThrough$|Tuple<>|tuple<>|NullType$|RestrictPtrTraits$|\w*Major$)|^decltype\(nullptr\)|"
                        r"^(?:[\w:]*::)?(?:policies|tensor_layout)::")
_NOISE_NS = {"at", "native", "(anonymous namespace)", "anonymous namespace", "'anonymous namespace'",
             "'unnamed'", "detail", "impl", "internal", "at_cuda_detail", "std", "c10", "cuda", "_GLOBAL__N_1",
             "__1", "__2", "__4", "__cxx11", "memory", "kernel", "device", "thread", "threadblock", "gemm",
             "collective", "reduce", "scan", "select", "binary_internal", "legacy", "void"}
_NS_VERSIONED = re.compile(r"^(?:THRUST|CUB)_\w*_NS$|^__\d+$|^v\d+$")
_SPECIAL = re.compile(r"^(?:typeinfo (?:name )?for|vtable for|VTT for|construction vtable for|guard variable for|"
                      r"(?:non-virtual |virtual |covariant return )?thunk to|reference temporary|transaction clone) ")
_LAMBDA = re.compile(r"\{lambda\(|'lambda\d*'\(|\[lambda\(")
# Functor wrappers: (name, index of the template argument holding the real op)
_UNWRAP = {"BinaryFunctor": -1, "AUnaryFunctor": -1, "BUnaryFunctor": -1, "UnaryFunctor": -1,
           "func_wrapper_t": -1, "ReduceOp": 1, "gpu_kernel_impl": 0, "gpu_kernel_impl_nocast": 0,
           "gpu_index_kernel": 0, "enable_3x_kernel_for_sm9x": 0, "enable_3x_kernel_for_sm90_or_later": 0,
           "enable_sm90_or_later": 0, "enable_sm80_to_sm89": 0, "enable_sm90": 0}
_FUNCTORISH = re.compile(r"Functor|functor|(?:Ops?|_op|_kernel_cuda|_kernel_impl|Kernel|kernel|Traits|Epilogue|"
                         r"Mainloop|Combination)$")
_CAST_INT = re.compile(r"^\((?:unsigned |signed )?(?:int|long|long long|short|char)\)(-?\d+)$")
_INT = re.compile(r"^(-?\d+)(?:[uU]?[lL]{0,2}|[lL]{0,2}[uU]?)$")
_MAX_DEPTH = 12  # template nesting read for display; deeper levels are not shown
_ENUM = re.compile(r"^\(((?:\(anonymous namespace\)::|[\w:])+)\)(-?\d+)$")
_ENUM_MATTERS = re.compile(r"GemmType|Activation|ActType|ScoringFunc|Quant|Epilogue|Mode$")
_FUNC_PTR = re.compile(r"^&\(?(.+?)\)?$")


class _Part:
    __slots__ = ("i", "prio", "variants")

    def __init__(self, prio: int, variants: list[str]) -> None:
        self.prio, self.variants, self.i = prio, variants, 0

    @property
    def text(self) -> str:
        return self.variants[self.i]


def _short_ident(comp: str) -> str:
    name = _split_top(comp, "::")[-1].strip()
    return name.removeprefix(_STUB)


def _dtype(a: str) -> str | None:
    if len(a) > 48:
        return None
    t = re.sub(r"\b(?:const|volatile)\b|\s*&+$", "", a).strip() if re.search(r"const|volatile|&", a) else a.strip()
    t = t.split("::")[-1] if "::" in t and "<" not in t else t
    return _DTYPES.get(t)


def _lambda_functor(comps: list[str], k: int, depth: int) -> list[_Part]:
    """A lambda argument (comps[k] is the first lambda): the function that defines it, unwrapping
    gpu_kernel_impl & co, plus the dtypes of the innermost lambda's parameters. A lambda inside a member
    `Class<..>::operator()<Op>` names the class and its Op."""
    e = k - 1
    while e >= 0 and comps[e].startswith("operator"):
        e -= 1
    if e < 0:
        return []
    parts = _render_arg("::".join(comps[:e + 1]), depth + 1)
    if k - 1 > e:  # a member operator: its own template argument is the op (TensorAssign, ReduceAdd, ...)
        op_args = _split_template(_strip_call(comps[k - 1]).replace("operator()", "op", 1))[1]
        for x in _split_top(op_args or "", ","):
            parts += [_Part(6, p.variants) for p in _render_arg(x, depth + 1)]
        return parts
    encl = _split_template(_strip_call(comps[e]))[0]
    params = re.match(r"[{\['](?:lambda\d*'?)\((.*?)\)", comps[-1])
    if encl not in _UNWRAP and params and params.group(1) and "*" not in params.group(1):
        dts = list(dict.fromkeys(d for d in (_dtype(p) for p in _split_top(params.group(1), ",")) if d))
        op_impl = re.search(r"(?:_cuda|_impl|_kernel|_scalar)$", _short_ident(encl))  # aten op: params = dtype
        if dts and (op_impl or set(dts) & _FLOAT_DTYPES) and not any(p.text.endswith(f"<{dts[0]}>") for p in parts):
            tag = ", ".join(dts)  # shown with the functor it belongs to, or not at all
            if len(parts) == 1:
                parts[0].variants = [f"{parts[0].variants[0]}, {tag}"] + parts[0].variants
            else:
                parts.append(_Part(3, [tag]))
    return parts


def _render_arg(a: str, depth: int = 0) -> list[_Part]:
    """One template argument as zero or more display parts."""
    a = a.strip()
    if not a or _NOISE_ARG.search(a) or depth > _MAX_DEPTH:
        return []
    m = _CAST_INT.match(a) or _INT.match(a)
    if m:
        return [_Part(1, [m.group(1)])]
    if a in ("true", "false", "(bool)0", "(bool)1"):
        return []  # flags do not read as anything
    m = _ENUM.match(a)
    if m:  # an enum value: GemmType 1 (grouped) is another kernel than GemmType 0; most others say little
        kind = _short_ident(m.group(1))
        return [_Part(6, [f"{kind}={m.group(2)}"])] if _ENUM_MATTERS.search(kind) else []
    m = _FUNC_PTR.match(a)
    if m:  # &(float vllm::silu_kernel<float>(float const&)): the function it points to (SiLU vs GELU)
        q = _qualified_name(m.group(1))
        if q:
            return [_Part(6, [_short_ident(_split_template(_split_top(q, "::")[-1])[0])])]
        return []
    if _LAMBDA.search(a):
        comps = _split_top(a, "::")
        k = next((i for i, c in enumerate(comps) if _LAMBDA.match(c)), None)
        if k is not None:
            return _lambda_functor(comps, k, depth)
    dt = _dtype(a)
    if dt:
        return [_Part(3 if dt in _FLOAT_DTYPES else 2, [dt])]
    comps = _split_top(_strip_call(a), "::")
    last = comps[-1]
    if last.startswith("operator") and len(comps) > 1:
        last = comps[-2]
    name, inner = _split_template(last)
    name = _short_ident(name)
    if inner is None:
        if name.startswith("__"):  # implementation details (std::__identity, ...)
            return []
        if a.endswith("*"):
            return [_Part(1, [name.replace(" ", "")])]
        if re.search(r"Policy\d*$", name):
            return [_Part(1, [name])]
        return [_Part(4 if _FUNCTORISH.search(name) or len(name) > 12 else 3, [name])]
    args = _split_top(inner, ",")
    if name in _UNWRAP and args:
        return _render_arg(args[_UNWRAP[name]] if len(args) > abs(_UNWRAP[name]) else args[-1], depth + 1)
    if re.match(r"Flash_\w*kernel_traits$", name):
        return _flash_traits(args)
    sub: list[str] = []  # a nested type shows its dtypes (and its numbers when it has at most two arguments)
    for x in args:
        for p in _render_arg(x, depth + 1):
            small = len(args) <= 2 and (p.prio == 1 or len(p.text) <= 16)
            if (p.text in _DTYPE_NAMES or small) and len(p.text) <= 24 and p.text not in sub:
                sub.append(p.text if "<" not in p.text or len(p.text) <= 16 else p.variants[-1])
    prio = 5 if _FUNCTORISH.search(name) else 3
    variants = [f"{name}<{', '.join(sub)}>"] if sub else []
    dts = [x for x in sub if x in _FLOAT_DTYPES]
    tail = [", ".join(dts)] if dts and len(name) > 24 else []  # a long config type: its dtypes say enough
    return [_Part(prio, variants + [name] + tail)]


def _flash_traits(args: list[str]) -> list[_Part]:
    """FlashAttention-2 Flash_fwd_kernel_traits<HeadDim, BlockM, BlockN, Warps, ..., elem_type, ...>."""
    nums = [m.group(1) for m in (_CAST_INT.match(x.strip()) or _INT.match(x.strip()) for x in args[:4]) if m]
    dts = [d for d in (_dtype(x) for x in args) if d]
    parts = []
    if len(nums) >= 3:
        parts += [_Part(5, [f"hdim{nums[0]}"]), _Part(4, [f"{nums[1]}x{nums[2]}"])]
    if dts:
        parts.append(_Part(3, [dts[0]]))
    return parts


# ---------------------------------------------------------------------------------------------------------
# Families whose template arguments need reading rather than listing.

_TILE3 = re.compile(r"C<(\d+)>, (?:cute::)?C<(\d+)>, (?:cute::)?C<(\d+)>")
_SCHEDULE = re.compile(r"Kernel\w*?(TmaWarpSpecialized|WarpSpecialized|Multistage|CpAsync)(Cooperative|Pingpong)?")


def _first_dtype(s: str) -> str | None:
    m = _DTYPE_WORD.search(s)
    return _DTYPES[m.group(1)] if m else None


def _template_args_of(s: str, name: str) -> list[str] | None:
    i = s.find(name + "<")
    if i < 0:
        return None
    inner = s[i + len(name) + 1:]
    depth, end = 1, len(inner)
    for m in re.finditer(r"[<>]", inner):
        depth += 1 if m.group(0) == "<" else -1
        if depth == 0:
            end = m.start()
            break
    return _split_top(inner[:end], ",")


def _gemm_library(q: str, lib: str) -> list[_Part]:
    """CUTLASS 2/3 and ck_tile kernels: arch, operation, tile shape, dtype and schedule read from the type."""
    parts: list[_Part] = []
    arch = re.search(r"S[Mm](\d{2,3}[a-z]?)(?!\d)", q)
    if arch:
        parts.append(_Part(4, [f"sm{arch.group(1)}"]))
    conv = re.search(r"Conv[23]d(Fprop|Dgrad|Wgrad)", q)
    kind = re.search(r"::(\w*(?:Kernel|Attn\w*))<", q) if lib == "ck_tile" or "Flash" in q else None
    if kind:
        parts.append(_Part(9, [kind.group(1)]))
    elif "ImplicitGemmConvolution" in q or conv:
        parts.append(_Part(9, [f"conv {conv.group(1).lower()}" if conv else "conv"]))
    else:
        parts.append(_Part(9, ["grouped gemm" if "GroupProblemShape" in q else "gemm"]))
    tile = None
    mma = _template_args_of(q, "CollectiveMma")
    if mma and len(mma) > 1:
        tile = _TILE3.search(mma[1])
    tile = tile or re.search(r"GemmShape<(\d+), (\d+), (\d+)>", q) or re.search(
        r"TileGemmShape<(?:ck_tile::)?sequence<(\d+), (\d+), (\d+)>", q) or _TILE3.search(q)
    if tile:
        parts.append(_Part(5, ["x".join(tile.groups())]))
    dts = [d for d in (_dtype(x) for x in (mma[2:5:2] if mma and len(mma) > 4 else [])) if d]
    dt = "/".join(dict.fromkeys(dts)) if dts else _first_dtype(q)
    if dt:
        parts.append(_Part(4, [dt]))
    sch = _SCHEDULE.search(q)
    if sch:
        words = [w.lower() for w in sch.groups() if w]
        full = " ".join(w.replace("tma", "") if len(words) > 1 else w for w in words)
        parts.append(_Part(2, [f"({full})", f"({words[-1]})"]))
    elif lib == "ck_tile":
        pipe = re.search(r"GemmPipeline\w*?(Comp\w*|Mem\w*)<", q)
        if pipe:
            parts.append(_Part(2, [f"({pipe.group(1)})"]))
    return parts


def _tensile(name: str) -> tuple[str, list[_Part]]:
    """hipBLASLt / Tensile 'Cijk_Alik_Bljk_BBS_BH_..._MT128x128x64_MI16x16x16x1_...': problem type + tile."""
    i = name.find("_MT")
    head = name[:i] if i > 0 else name
    parts = []
    mt = re.search(r"_MT(\d+x\d+x\d+)", name)
    mi = re.search(r"_MI(\d+x\d+x\d+)(?:x(\d+))?", name)
    if mt:
        parts.append(_Part(5, [f"MT{mt.group(1)}"]))
    if mi:
        parts.append(_Part(4, [f"MI{mi.group(1)}" + (f"x{mi.group(2)}" if mi.group(2) not in (None, "1") else "")]))
    isa = re.search(r"_(gfx\d+\w*?)(?:_|$)", name) or re.search(r"_ISA(\d+[a-z]?)_", name)
    if isa:
        parts.append(_Part(1, [isa.group(1) if isa.group(1).startswith("gfx") else f"gfx{isa.group(1)}"]))
    return head, parts


_NOISE_TOKEN = re.compile(r"^(?:|stage\d+|warpsize\w+|g\d+|align\w*|execute|kernel\d*|knob|cga\d+x\d+x\d+|ldg\d+|"
                          r"\d+|\d+x\d+x\d+|t\d+r\d+s\d+|unity|stride|v\d+|nn|nt|tn|tt|n|t)$")
_KEEP_TOKEN = re.compile(r"^(?:sm\d+\w*|tilesize\d+x\d+x\d+|\d+x\d+(?:x\d+)?|[a-z]*gemm\w*|fprop|dgrad|wgrad|sdpa|"
                         r"flash|conv|w?mma|wgmma|h?mma\d*|tensorop|simt|f16|bf16|fp8|tf32\w*|f32\w*|s\d+\w*gemm)$")


def _long_identifier(name: str, max_len: int) -> str:
    """xmma / cuDNN-generated / CUTLASS-2 identifiers: drop their tuning tokens (stage, warpsize, align, ...)
    until the name fits, keeping the order and the leading tokens."""
    toks = name.split("_")
    prio = [9 if i < 2 else 5 if _KEEP_TOKEN.match(t) else 0 if _NOISE_TOKEN.match(t) else 3
            for i, t in enumerate(toks)]
    keep = list(range(len(toks)))
    while len("_".join(toks[i] for i in keep)) > max_len:
        lowest = min(prio[i] for i in keep)
        if lowest >= 9:
            break
        keep.remove(max(i for i in keep if prio[i] == lowest))
    return "_".join(toks[i] for i in keep)


_WRAPPERS = {"device_kernel", "Kernel", "Kernel2", "kentry"}
_LONG_FAMILY = re.compile(r"^(?:sm\d+_xmma_|cudnn_|cutlass_(?:\d+_)?(?:tensorop|simt|wmma)|"
                          r"cutlass3x_|sm\d+_fmha_|fmha_cutlass)")


# ---------------------------------------------------------------------------------------------------------

def _assemble(ns: _Part | None, base: str, parts: list[_Part], max_len: int, words: bool = False) -> str:
    def text() -> str:
        shown = [p.text for p in parts if p.i >= 0]
        head = (ns.text + ("::" if not words else " ") if ns and ns.i >= 0 else "") + base
        if words:
            return " ".join([head] + shown)
        return f"{head}<{', '.join(shown)}>" if shown else head

    everything = ([ns] if ns else []) + parts
    out = text()
    dropped: list[_Part] = []
    while len(out) > max_len:
        live = [p for p in everything if p.i >= 0]
        if not live:
            break
        low = min(p.prio for p in live)
        victim = [p for p in live if p.prio == low][-1]
        if low == 1:  # numbers are positional: show all of them or none
            for p in live:
                p.i = -1 if p.prio == 1 else p.i
        else:
            victim.i = victim.i + 1 if victim.i + 1 < len(victim.variants) else -1
        dropped += [p for p in live if p.i < 0]
        out = text()
    for p in sorted(dict.fromkeys(dropped), key=lambda p: -p.prio):  # give back what fits again
        if p.prio > 1:
            p.i = len(p.variants) - 1
            if len(text()) > max_len:
                p.i = -1
    return text()


# -- names cut by the profiler ------------------------------------------------------------------------------
_BUILTIN = set("vwbcahstijlmxynofdegz")  # Itanium builtin types (one letter)


def _token_ends(m: str) -> list[tuple[int, tuple[str, ...]]] | None:
    """Where the tokens of a mangled prefix end, each with the scopes open there (`N` nested name, `I` template
    arguments or pack, `L` literal), read over the subset of the Itanium grammar kernel names use; None when it meets
    a construct this reader does not follow. A token cut by the end of the text is not counted."""
    i, stack, ends = 2, [], []  # after "_Z"
    n = len(m)
    while i < n:
        c = m[i]
        if c.isdigit():
            j = i
            while j < n and m[j].isdigit() and j - i < 6:
                j += 1
            k = int(m[i:j])
            if j + k > n:  # the identifier itself was cut: end before it
                break
            i = j + k
        elif c in "NILJ":  # J: a template argument pack, closed by E like I
            stack.append("I" if c == "J" else c)
            i += 1
            if c == "L" and i < n and m[i] in _BUILTIN:  # a literal's type, then its digits
                i += 1
                while i < n and (m[i].isdigit() or m[i] == "n"):
                    i += 1
        elif c == "E":
            if not stack:
                return None
            stack.pop()
            i += 1
            if not stack:  # the name is complete; what follows is its signature
                ends.append((i, ()))
                break
        elif c == "D" and i + 1 < n and m[i + 1] == "F":  # DF16b (bfloat16), DF16_ (_Float16): a builtin type
            j = i + 2
            while j < n and m[j].isdigit():
                j += 1
            if j >= n:
                break
            i = j + 1
        elif c == "D" and i + 1 < n and m[i + 1] in "nhsiacdfu":  # Dn nullptr_t, Dh half, Ds / Di char16/32_t, ...
            i += 2
        elif c in "KVrPR":  # qualifiers and pointers / references: prefixes of the next type
            i += 1
            continue  # not the end of a token
        elif c == "S" and i + 1 < n and m[i + 1] in "tabsiod":  # std::, std::allocator, ...
            i += 2
        elif c in "ST":  # a substitution S_ / S0_ or a template parameter T_ / T0_
            j = i + 1
            while j < n and (m[j].isdigit() or m[j].isupper()) and m[j] != "_":
                j += 1
            if j >= n:
                break
            if m[j] != "_":
                return None
            i = j + 1
        elif c in _BUILTIN and stack and stack[-1] in "IL":
            i += 1
        else:
            return None
        ends.append((i, tuple(stack)))
    return ends


@lru_cache(maxsize=1 << 12)
def demangle_cut(name: str) -> str | None:
    """The readable prefix of an Itanium-mangled name that was cut (a profiler keeps a name's first N bytes) and so
    does not demangle, plus `...`: `_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9x` ->
    `cutlass::device_kernel<at::cuda::detail::enable_3x_kernel_for_sm9x...`. The prefix (ended at one of its last
    token boundaries) is completed with the closing `E`s its open scopes need (and a void signature) and demangled
    by LLVM's demangler; the text the completion added is taken off again. None when the name demangles whole, or
    no completion demangles."""
    if _itanium_demangle is None or not name.startswith("_Z") or len(name) > 4096 or _demangle_token(name):
        return None
    ends = _token_ends(name)
    if not ends:
        return None
    for cut, scopes in reversed(ends[-12:]):
        text = _completed(name[:cut], scopes)
        if text:
            return text + "..."
    return None


def _completed(prefix: str, scopes: tuple[str, ...]) -> str | None:
    closers = "E" * len(scopes)
    for tail in ("", "v", "vv"):
        text = _demangle_token(prefix + closers + tail)
        if not text:
            continue
        if text.startswith("void ") and tail == "vv":
            text = text[5:]
        text = text.removesuffix("()").removesuffix("(void)").rstrip()
        for _ in range(scopes.count("I")):  # the > of every template-argument list the completion closed
            if not text.endswith(">"):
                return None
            text = text[:-1].rstrip()
        text = text.rstrip(", ")
        return text if text.count("<") >= scopes.count("I") else None
    return None


def _cut_at_break(s: str, max_len: int) -> str:
    """`s` cut to at most max_len characters at a `::`, `<`, `,`, `_` or space, never inside a word."""
    if len(s) <= max_len:
        return s
    head = s[:max_len]
    best = max(head.rfind(t) for t in ("::", "<", ",", " ", "_"))
    return head[:best] if best > max_len // 3 else head


@lru_cache(maxsize=1 << 16)
def display_name(name: str, max_len: int = DEFAULT_MAX_LEN) -> str:
    """A short, readable kernel name (about max_len characters when the name allows; the base function name
    is never cut). Deterministic; raw mangled names are demangled first. Never raises: a name it cannot
    read comes back demangled but otherwise unchanged."""
    if not isinstance(name, str) or _CONTROL.search(name):  # text with control characters is not a symbol:
        return name                                           # shown as it is (escaped by the renderer)
    s = _normalise(demangle(name).strip())
    try:
        return _display(s, max_len) or name
    except Exception:  # pragma: no cover - text it cannot read is shown as it is
        return s or name


def _normalise(s: str) -> str:
    """nsys prints the anonymous namespace as `<unnamed>`: a `<` that is no template bracket."""
    return s.replace("<unnamed>", "(anonymous namespace)") if "<unnamed>" in s else s


def _display(s: str, max_len: int) -> str:
    s = s.removesuffix(".kd")
    if re.match(r"^(?:triton_|nvjet_)", s):
        return s
    if re.match(r"^(?:Custom_)?Cijk_", s):
        head, parts = _tensile(s)
        return _assemble(None, head, parts, max_len, words=True)
    if s.startswith("_Z"):  # a mangled name the demangler could not read (cut by the profiler?)
        cut = demangle_cut(s)
        if cut is not None:  # its readable prefix, marked as cut
            return cut if len(cut) <= max_len + 3 else _cut_at_break(cut[:-3], max_len) + "..."
        return s if len(s) <= max_len else s[:max_len - 1] + "…"
    if re.match(r"^[\w$.]+$", s):
        return _long_identifier(s, max_len) if len(s) > max_len and _LONG_FAMILY.match(s) else s
    q = None if _SPECIAL.match(s) else _qualified_name(s)
    if not q:  # not a function signature: keep it, cut at a bracket when it is long
        if len(s) <= max_len:
            return s
        cut = min((i for i in (s.find("<"), s.find("(")) if i > 0), default=-1)
        return s[:cut].rstrip() + "…" if cut > 0 else s
    comps = [c for c in _split_top(q, "::") if c]
    if not comps:
        return s
    k = len(comps) - 1
    while k > 0 and (comps[k].startswith("operator") or _LAMBDA.match(comps[k])):
        k -= 1
    base, targs = _split_template(_strip_call(comps[k]))
    base = _short_ident(base)
    if not base.strip():
        return s
    nss = [c for c in comps[:k] if c not in _NOISE_NS and not _NS_VERSIONED.match(c) and "<" not in c
           and "(" not in c]
    ns = _Part(2, [nss[0]]) if nss else None
    args = _split_top(targs, ",") if targs else []
    if base in _WRAPPERS and args:
        inner = args[1] if base == "kentry" and len(args) > 1 else args[0]
        if "<" in inner and re.search(r"GemmUniversal<|CollectiveMma<|ImplicitGemm|GemmKernel|TileGemmShape|"
                                      r"Flash\w*Sm\d+<|gemm::kernel::", inner):
            lib = (nss[0] if nss else comps[0]).split("<")[0]
            return _assemble(None, lib, _gemm_library(inner, lib), max_len, words=True)
    if base in _WRAPPERS and len(args) == 1 and re.match(r"^[\w:]+$", args[0].strip()):
        ident = _short_ident(args[0])  # cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x4_tn_align4>
        budget = max(max_len - len(base) - 2, 24)
        return _assemble(ns, base, [_Part(9, [ident, _long_identifier(ident, budget)])], max_len)
    parts: list[_Part] = []
    for p in (p for a in args for p in _render_arg(a)):
        if p.prio == 1 or all(p.text != q.text for q in parts):  # numbers are positional: never merged
            parts.append(p)
    if any(p.prio >= 4 for p in parts):  # launch-config integers say less than the functor beside them
        parts = [p for p in parts if p.prio > 1]
    return _assemble(ns, base, parts, max_len)


def _without_templates(q: str) -> str:
    out, depth = [], 0
    for ch in q:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


@lru_cache(maxsize=65536)
def function_name(name: str) -> str:
    """The qualified function name of a kernel name as profilers show it (demangled when mangled): namespaces and
    name, without the return type, template arguments, parameter list and `[clone .kd]` / `.kd` suffixes.
    `void vllm::rms_norm_kernel<c10::BFloat16, 8>(...)` -> `vllm::rms_norm_kernel`; a text that is not a C++
    signature (`Memcpy HtoD (Pageable -> Device)`) gives its words before the first parenthesis."""
    s = _normalise(demangle(name.strip()))
    q = _qualified_name(s)
    if q is None:
        head = s.split("(", 1)[0].split()
        q = head[-1] if head else s
    q = _without_templates(q)
    return q[:-3] if q.endswith(".kd") else q
