"""FLOPs and bytes of one operator call from its name, input shapes and input dtypes.

Inputs are what torch.profiler records with `record_shapes=True`: `input_dims` (JSON list of shapes, `[]` for
scalars and None) and `input_types` (JSON list of dtype names such as "c10::BFloat16", "float", "Scalar").

Covered: GEMMs (aten::mm, addmm, bmm, baddbmm, linear, matmul, _scaled_mm), grouped GEMMs (aten::_grouped_mm,
with tokens per expert when given, and the fused-MoE expert ops of vLLM / SGLang, `*::[in|out]place_fused_experts`),
attention (scaled_dot_product_attention and its flash / efficient / cudnn / CPU kernels, flash_attn ops, and
block-sparse attention through `sparse_attention_cost`), and elementwise / norm / softmax / reduction / copy ops.
Bytes count each input read once and the output written once (the minimum traffic; caches can only lower the real
figure, so intensities are lower bounds). An op not covered, or one with missing shapes, gives None: never a guess.

Kernels torch.compile (Inductor) generates run under a CPU op of the kernel's own name whose inputs are the
kernel's arguments (torch/_inductor/runtime/triton_heuristics.py: `_RecordFunctionFast(kernel_name, args)`).
A pointwise or reduction kernel (`triton_poi_` / `triton_per_` / `triton_red_fused_*`) does a few operations per
element it loads, far below any GPU's ridge point (H200 bf16: 206 FLOP/B), so it is memory-bound by its kind
(`OpCost.bound`); its FLOPs are not counted. Its bytes are its tensor arguments' sizes (each read or written once,
Inductor's own estimate, torch/_inductor/codegen/simd.py `estimate_kernel_num_bytes`), unless the fused ops its name
lists read or write an argument in part (index, gather, scatter, embedding, slice, ...: a gathered table, a KV cache
written at one position): then the bytes are unknown and the kernel gets its bound without an efficiency.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

import orjson

from mmprof.units import dtype_bytes

_DTYPE_CLASS = {2: "bf16", 4: "fp32", 1: "fp8"}

GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul",
            "aten::_scaled_mm", "aten::addbmm", "aten::_addmm_activation"}
GROUPED_GEMM_OPS = {"aten::_grouped_mm", "aten::_scaled_grouped_mm"}
# fused-MoE expert ops of serving engines (vLLM / SGLang custom ops): (hidden [T, H], w1 [E, N1, H], w2 [E, H, I],
# topk_weights [T, K], topk_ids [T, K], ...): both expert GEMMs of every routed token in one op
FUSED_MOE_OPS = re.compile(r"^\w+::(?:inplace_|outplace_)?fused_experts(?:_impl)?$")
# SDPA-style ops with [B, H, L, D] layout
SDPA_BHLD = {"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
             "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
             "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math",
             "aten::_scaled_dot_product_fused_attention_overrideable", "aten::_cudnn_attention_forward"}
# flash-attn layout [B, L, H, D]
FLASH_BLHD = {"aten::_flash_attention_forward", "flash_attn::_flash_attn_forward", "aten::_efficient_attention_forward"}
NORM_OPS = {"aten::layer_norm": 5, "aten::native_layer_norm": 5, "aten::rms_norm": 4, "aten::_fused_rms_norm": 4,
            "aten::group_norm": 5, "aten::native_group_norm": 5, "aten::batch_norm": 5}
SOFTMAX_OPS = {"aten::softmax": 5, "aten::_softmax": 5, "aten::log_softmax": 5, "aten::_log_softmax": 5,
               "aten::_safe_softmax": 5}
ACTIVATION_OPS = {"aten::silu": 4, "aten::silu_": 4, "aten::gelu": 8, "aten::gelu_": 8, "aten::relu": 1,
                  "aten::relu_": 1, "aten::sigmoid": 4, "aten::sigmoid_": 4, "aten::tanh": 4, "aten::exp": 1,
                  "aten::exp_": 1, "aten::rsqrt": 1, "aten::sqrt": 1, "aten::erf": 4, "aten::neg": 1}
ELEMENTWISE_OPS = {"aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::mul", "aten::mul_", "aten::div",
                   "aten::div_", "aten::pow", "aten::where", "aten::masked_fill", "aten::masked_fill_",
                   "aten::clamp", "aten::clamp_", "aten::addcmul", "aten::addcmul_", "aten::maximum",
                   "aten::minimum", "aten::reciprocal", "aten::abs", "aten::cos", "aten::sin", "aten::eq",
                   "aten::ne", "aten::gt", "aten::lt", "aten::ge", "aten::le", "aten::bitwise_and"}
REDUCTION_OPS = {"aten::sum", "aten::mean", "aten::amax", "aten::max", "aten::min", "aten::argmax",
                 "aten::norm", "aten::linalg_vector_norm", "aten::var", "aten::cumsum", "aten::prod"}
TOPK_OPS = {"aten::topk", "aten::sort", "aten::argsort"}
COPY_OPS = {"aten::copy_", "aten::_to_copy", "aten::clone", "aten::contiguous", "aten::cat", "aten::fill_",
            "aten::zero_", "aten::zeros", "aten::full", "aten::stack"}
INDEX_OPS = {"aten::index_select", "aten::gather", "aten::index", "aten::scatter", "aten::scatter_add_",
             "aten::scatter_add", "aten::index_copy_", "aten::index_put_", "aten::index_add_", "aten::nonzero",
             "aten::masked_select"}
_COMM_RE = re.compile(r"^(c10d|gloo|nccl|rccl)::|all_?reduce|all_?gather|reduce_?scatter|all_to_all|broadcast_|"
                      r"^record_param_comms$", re.I)


# Inductor's pointwise / reduction kernels by name (torch/_inductor/codegen/triton.py: `triton_{poi,per,red}_fused_`
# + the fused ops + a counter), and the fused-op words after which an argument may be touched only in part
INDUCTOR_KERNEL = re.compile(r"^triton_(?P<kind>poi|per|red)_fused(?:_(?P<ops>\w*?))?_\d+$")
_PARTIAL_ACCESS = re.compile(r"(?:^|_)(?:index|gather|scatter|embedding|slice|select|narrow|as_strided|unfold|"
                             r"diagonal|take|masked_select)(?:_|$)")


@dataclass(frozen=True)
class OpCost:
    """Work of one op call. `dtype_class` picks the peak: 'bf16' (fp16/bf16), 'fp8' or 'fp32'. `bound` is set when
    the op's kind fixes its bound without a FLOP count (Inductor's pointwise / reduction kernels: 'memory'); then
    `flops` is NaN, and `bytes` too when the shapes do not bound them."""

    family: str
    flops: float
    bytes: float
    dtype_class: str | None
    bound: str | None = None

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else math.inf


def op_family(name: str | None) -> str | None:
    """Family of a CPU op by name (the same vocabulary as kernel classification), None when unknown."""
    if not name:
        return None
    m = INDUCTOR_KERNEL.match(name)
    if m:
        return "elementwise" if m["kind"] == "poi" else "reduction"
    if name in GEMM_OPS:
        return "gemm"
    if name in GROUPED_GEMM_OPS or FUSED_MOE_OPS.match(name):
        return "grouped_gemm"
    if name in SDPA_BHLD or name in FLASH_BLHD or "attention" in name.lower() or "flash_attn" in name:
        return "sparse_attention" if "sparse" in name.lower() else "attention"
    if name in NORM_OPS or "rms_norm" in name or "layer_norm" in name:
        return "norm"
    if name in SOFTMAX_OPS:
        return "norm"
    if name in ACTIVATION_OPS:
        return "activation"
    if name in ELEMENTWISE_OPS:
        return "elementwise"
    if name in REDUCTION_OPS:
        return "reduction"
    if name in TOPK_OPS:
        return "topk"
    if name in COPY_OPS:
        return "copy"
    if name in INDEX_OPS:
        return "index"
    if name == "aten::embedding":
        return "embedding"
    if _COMM_RE.search(name):
        return "communication"
    return None


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _tensors(dims: list, types: list) -> list[tuple[list[int], int]]:
    """(shape, element size) for each positional input that is a tensor with a known dtype; None placeholders kept."""
    out = []
    for i, shape in enumerate(dims):
        t = types[i] if i < len(types) else None
        size = dtype_bytes(t)
        if size is None or not isinstance(shape, list) or (shape and not all(isinstance(d, int) for d in shape)):
            out.append(None)
        else:
            out.append((shape, size))
    return out


def _gemm(name: str, ts: list) -> tuple[float, float, int] | None:
    """(flops, bytes, element size) for the GEMM family; None when the shapes do not fit."""
    if name == "aten::linear":
        x, w = ts[0], ts[1] if len(ts) > 1 else None
        if not x or not w or len(w[0]) != 2 or not x[0]:
            return None
        k, n = x[0][-1], w[0][0]
        if w[0][1] != k:
            return None
        m = _numel(x[0][:-1])
        b = ts[2] if len(ts) > 2 and ts[2] and ts[2][0] else None
        by = (m * k + n * k + m * n) * x[1] + (_numel(b[0]) * b[1] if b else 0)
        return 2.0 * m * k * n + (m * n if b else 0), by, x[1]
    if name in ("aten::addmm", "aten::baddbmm", "aten::_addmm_activation", "aten::addbmm"):
        bias, a, bm = (ts + [None, None, None])[:3]
        if not a or not bm:
            return None
        core = _gemm("aten::bmm" if a[0].__len__() == 3 else "aten::mm", [a, bm])
        if core is None:
            return None
        fl, by, es = core
        if bias:
            by += _numel(bias[0]) * bias[1]
        return fl, by, es
    if name in ("aten::mm", "aten::_scaled_mm"):
        a, b = (ts + [None, None])[:2]
        if not a or not b or len(a[0]) != 2 or len(b[0]) != 2 or a[0][1] != b[0][0]:
            return None
        (m, k), n = a[0], b[0][1]
        out_es = 2 if name == "aten::_scaled_mm" else a[1]
        return 2.0 * m * k * n, m * k * a[1] + k * n * b[1] + m * n * out_es, a[1]
    if name in ("aten::bmm", "aten::matmul"):
        a, b = (ts + [None, None])[:2]
        if not a or not b or not a[0] or not b[0]:
            return None
        sa, sb = list(a[0]), list(b[0])
        if len(sa) == 1:
            sa = [1] + sa
        vec_b = len(sb) == 1
        if vec_b:
            sb = sb + [1]
        m, k = sa[-2], sa[-1]
        k2, n = sb[-2], sb[-1]
        if k != k2:
            return None
        ba, bb = sa[:-2], sb[:-2]
        nb = max(len(ba), len(bb))
        ba, bb = [1] * (nb - len(ba)) + ba, [1] * (nb - len(bb)) + bb
        batch_shape = []
        for x, y in zip(ba, bb):
            if x != y and 1 not in (x, y):
                return None
            batch_shape.append(max(x, y))
        batch = _numel(batch_shape)
        fl = 2.0 * batch * m * k * n
        by = _numel(a[0]) * a[1] + _numel(b[0]) * b[1] + batch * m * n * a[1]
        return fl, by, a[1]
    return None


def _grouped(ts: list, tokens_per_expert: list[int] | None) -> tuple[float, float, int] | None:
    a, b = (ts + [None, None])[:2]
    if not a or not b:
        return None
    sa, sb = a[0], b[0]
    if len(sa) == 2 and len(sb) == 3:  # tokens [T, K] x experts [E, K, N], offsets split T among experts
        t, k = sa
        e, k2, n = sb
        if k != k2:
            return None
        if tokens_per_expert is not None:
            if len(tokens_per_expert) != e or sum(tokens_per_expert) > t:
                return None
            rows = sum(tokens_per_expert)
            active = sum(1 for x in tokens_per_expert if x > 0)
        else:
            rows, active = t, min(e, t)  # at most min(E, T) experts get tokens: bytes are an upper bound
        return 2.0 * rows * k * n, (t * k + t * n) * a[1] + active * k * n * b[1], a[1]
    if len(sa) == 3 and len(sb) == 3:  # [E, M, K] x [E, K, N]
        e, m, k = sa
        e2, k2, n = sb
        if e != e2 or k != k2:
            return None
        return 2.0 * e * m * k * n, (e * m * k + e * m * n) * a[1] + e * k * n * b[1], a[1]
    if len(sa) == 2 and len(sb) == 2:  # [T, K] x [K*, N] grouped along K (weight-gradient form)
        t, k = sa
        k2, n = sb
        if t != k2:
            return None
        return 2.0 * t * k * n, (t * k + k2 * n) * a[1] + k * n * a[1], a[1]
    return None


def _fused_moe(ts: list) -> tuple[float, float, int] | None:
    """Both expert GEMMs of a fused-MoE op: T tokens x K experts each, gate/up [N1 x H] then down [H x I].
    Bytes: the tokens in and out, the routing, and the weights of at most min(E, T*K) experts (an upper bound)."""
    x, w1, w2, tw, ti = (ts + [None] * 5)[:5]
    if not x or not w1 or not w2 or not ti or len(x[0]) != 2 or len(w1[0]) != 3 or len(w2[0]) != 3 or len(ti[0]) != 2:
        return None
    t, h = x[0]
    e, n1, h1 = w1[0]
    e2, h2, i = w2[0]
    t2, k = ti[0]
    if h1 != h or h2 != h or e2 != e or t2 != t:  # packed (int4) or unexpected layouts: no estimate
        return None
    active = min(e, t * k)
    by = 2 * t * h * x[1] + active * (n1 * h + h * i) * w1[1] + t * k * (ti[1] + (tw[1] if tw else 0))
    return 2.0 * t * k * (n1 * h + h * i), float(by), w1[1]


def attention_cost(batch: int, heads: int, q_len: int, kv_len: int, head_dim: int, v_dim: int | None = None,
                   kv_heads: int | None = None, elem: int = 2) -> tuple[float, float]:
    """(flops, bytes) of softmax(Q K^T) V attending every query to `kv_len` keys (no causal halving)."""
    v_dim = v_dim or head_dim
    kv_heads = kv_heads or heads
    fl = 2.0 * batch * heads * q_len * kv_len * (head_dim + v_dim)
    by = elem * (batch * heads * q_len * head_dim + batch * kv_heads * kv_len * (head_dim + v_dim)
                 + batch * heads * q_len * v_dim)
    return fl, by


def sparse_attention_cost(batch: int, heads: int, q_len: int, blocks_selected: int, block_size: int, head_dim: int,
                          v_dim: int | None = None, kv_heads: int | None = None, elem: int = 2) -> tuple[float, float]:
    """Block-sparse attention: each query attends `blocks_selected` blocks of `block_size` keys."""
    return attention_cost(batch, heads, q_len, blocks_selected * block_size, head_dim, v_dim, kv_heads, elem)


def _attention(name: str, ts: list) -> tuple[float, float, int] | None:
    q, k, v = (ts + [None, None, None])[:3]
    if not q or not k or not v:
        return None
    if name in FLASH_BLHD:
        if len(q[0]) != 4 or len(k[0]) != 4:
            return None
        b, lq, h, d = q[0]
        _, lk, hk, _ = k[0]
        dv = v[0][-1]
    else:
        if len(q[0]) < 3 or len(k[0]) < 3:
            return None
        *bq, lq, d = q[0]
        *bk, lk, _ = k[0]
        dv = v[0][-1]
        if len(bq) == 2:
            b, h = bq
            hk = bk[-1] if len(bk) == 2 else h
        else:
            b, h, hk = 1, _numel(bq), _numel(bk)
    fl, by = attention_cost(b, h, lq, lk, d, dv, hk, q[1])
    return fl, by, q[1]


def _pointwise(name: str, ts: list, flops_per_elem: float) -> tuple[float, float, int] | None:
    """Every input read once, the (broadcast) output written once, `flops_per_elem` per output element."""
    present = [t for t in ts if t]
    if not present or not present[0][0]:
        return None
    first = present[0]
    out_elems = max(_numel(t[0]) for t in present)
    by = sum(_numel(t[0]) * t[1] for t in present) + out_elems * first[1]
    return flops_per_elem * out_elems, by, first[1]


@lru_cache(maxsize=65536)
def _cost_cached(name: str, dims: str, types: str) -> OpCost | None:
    try:
        d = orjson.loads(dims) if dims else None
        t = orjson.loads(types) if types else None
    except orjson.JSONDecodeError:
        return None
    if not isinstance(d, list) or not isinstance(t, list):
        return None
    return op_cost(name, d, t)


def inductor_kernel_cost(name: str, ts: list) -> OpCost | None:
    """An Inductor pointwise / reduction kernel's launch op (module docstring): memory-bound, with the bytes of its
    tensor arguments unless its fused ops touch an argument in part."""
    m = INDUCTOR_KERNEL.match(name)
    present = [t for t in ts if t]
    if m is None or not present:
        return None
    # a nameless kernel (`triton_poi_fused_1`) says nothing of its ops: no evidence that it reads every argument whole
    partial = not m["ops"] or _PARTIAL_ACCESS.search(m["ops"])
    by = math.nan if partial else float(sum(_numel(t[0]) * t[1] for t in present))
    es = max(present, key=lambda t: _numel(t[0]))[1]
    return OpCost(family="elementwise" if m["kind"] == "poi" else "reduction", flops=math.nan, bytes=by,
                  dtype_class=_DTYPE_CLASS.get(es), bound="memory")


def op_cost(name: str, dims: list, types: list, tokens_per_expert: list[int] | None = None) -> OpCost | None:
    """FLOPs and bytes of one call, or None when the op is not covered or its shapes are missing."""
    family = op_family(name)
    if family is None or family == "communication":
        return None
    ts = _tensors(dims, types)
    if INDUCTOR_KERNEL.match(name):
        return inductor_kernel_cost(name, ts)
    res = None
    if family == "gemm":
        res = _gemm(name, ts)
    elif family == "grouped_gemm":
        res = _fused_moe(ts) if FUSED_MOE_OPS.match(name) else _grouped(ts, tokens_per_expert)
    elif family in ("attention", "sparse_attention"):
        res = _attention(name, ts) if (name in SDPA_BHLD or name in FLASH_BLHD) else None
    elif family == "norm":
        res = _pointwise(name, ts[:1], NORM_OPS.get(name) or SOFTMAX_OPS.get(name) or 5)
    elif family == "activation":
        res = _pointwise(name, ts[:1], ACTIVATION_OPS.get(name, 1))
    elif family == "elementwise":
        res = _pointwise(name, ts, 1)
    elif family == "reduction":
        x = ts[0] if ts else None
        if x and x[0]:  # the output of a reduction is small: count the input read only
            n = _numel(x[0])
            res = (float(n), float(n * x[1]), x[1])
    elif family == "copy" and name in ("aten::copy_", "aten::_to_copy", "aten::clone", "aten::contiguous"):
        src = ts[1] if name == "aten::copy_" and len(ts) > 1 and ts[1] else (ts[0] if ts else None)
        if src and src[0]:
            n = _numel(src[0])
            res = (0.0, 2.0 * n * src[1], src[1])
    if res is None:
        return None
    fl, by, es = res
    return OpCost(family=family, flops=float(fl), bytes=float(by), dtype_class=_DTYPE_CLASS.get(es))


def cost_from_text(name: str | None, dims: str | None, types: str | None) -> OpCost | None:
    """`op_cost` from the Profile's JSON text columns (cached per distinct triple)."""
    if not name or not dims or not types:
        return None
    return _cost_cached(name, dims, types)
