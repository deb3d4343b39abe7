"""Synthetic Profiles shaped like the reference runtime's (DEVELOPERS.md scope labels + dispatch log).

`runtime_profile()` builds what a run of the tiny preset produces, on CPU (ops only: what torch.profiler
records without a GPU, including the op nesting such as aten::_grouped_mm -> aten::mm) or on a GPU
(kernels, with NVIDIA H200 or AMD MI355X kernel names as those libraries name them), in the fast
configuration or with one switch flipped. Times come from a fake clock: every event lasts `dur` ns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mmprof.profiles.profile import Profile, ProfileBuilder

NV = {
    "gemm": "nvjet_tst_128x64_64x8_2x1_v_bz_splitK_TNT",
    "grouped": ("void cutlass::device_kernel<at::cuda::detail::enable_3x_kernel_for_sm9x<cutlass::gemm::kernel::"
                "GemmUniversal<cutlass::gemm::GroupProblemShape<cute::tuple<int, int, int> >, cutlass::gemm::collective::"
                "CollectiveMma<cutlass::gemm::MainloopSm90ArrayTmaGmmaWarpSpecializedCooperative<8> > > > >"),
    "norm_reduce": ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, "
                    "float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, "
                    "float, float>, unsigned int, float, 4>)"),
    "mul": ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
            "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >(int)"),
    "sigmoid": ("void at::native::vectorized_elementwise_kernel<4, at::native::sigmoid_kernel_cuda(at::TensorIteratorBase&)"
                "::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int)"),
    "silu": ("void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}"
             "::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int)"),
    "topk": ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float const, "
             "unsigned int>, unsigned int, unsigned int, bool, unsigned int, unsigned int)"),
    "amax": ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MaxOps<float>, unsigned int, "
             "float, 4> >(at::native::ReduceOp<float, at::native::MaxOps<float>, unsigned int, float, 4>)"),
    "gather": ("void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_kernel_impl"
               "<at::native::OpaqueType<2> > >(at::TensorIteratorBase&)::{lambda(int)#1}>(long)"),
    "attn": ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
             "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, "
             "false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)"),
    "attn_math": ("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 7, false, false>"
                  "(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)"),
    "embed": ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>"
              "(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>)"),
}
AMD = dict(NV, **{
    "gemm": "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x128x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA8_GRVWB8_GSUAMB_ISA950_IU1_K1",
    "grouped": "void ck::kernel_grouped_gemm_xdl_splitk<ck::GridwiseGemmMultipleD_xdl_splitk_cshuffle<ck::bhalf_t, float>>(void const*, int)",
    "attn": "void ck_tile::kentry<256, 2, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync<ck_tile::bf16_t> > >(ck_tile::FmhaFwdKernel::Kargs)",
})


@dataclass
class Config:
    device: str = "cpu"  # cpu | nvidia | amd
    layers: int = 8
    dense_layers: int = 3
    steps: int = 3  # step 0 = prefill, then decode steps
    n_experts: int = 4
    experts: str = "grouped_mm"  # grouped_mm | grouped_bmm | loop (what ran)
    experts_requested: str | None = None  # defaults to `experts`
    experts_by_step: dict[int, str] = field(default_factory=dict)  # steps whose experts ran otherwise (coverage tests)
    shared: str = "fused"  # fused | separate
    block_reuse: int = 2
    attn_math: bool = False  # unfused SDPA fallback
    kernel_scopes: bool = True  # False: kernels carry no scope, only their launching op does
    scopes: bool = True  # False: no annotations at all (like a plain vLLM trace)
    dispatch: bool = True
    dur: int = 1000
    meta: dict[str, Any] = field(default_factory=dict)


class _Clock:
    def __init__(self) -> None:
        self.t = 0

    def tick(self, d: int) -> int:
        t = self.t
        self.t += d + 10
        return t


def runtime_profile(**kw: Any) -> Profile:
    """A synthetic reference-runtime profile; keyword arguments are `Config` fields."""
    cfg = Config(**kw)
    names = NV if cfg.device == "nvidia" else AMD
    meta = {"source": {"format": "mmprof-run", "files": []}, "ranks": [{"rank": 0}],
            "clock": {"unit": "ns"}, "model": {"num_hidden_layers": cfg.layers, "first_k_dense": cfg.dense_layers},
            "run": {"switches": {"experts": cfg.experts, "shared": cfg.shared, "block_reuse": cfg.block_reuse}}}
    meta.update(cfg.meta)
    b = ProfileBuilder(meta)
    clock = _Clock()
    gpu = cfg.device != "cpu"

    def emit(step: int, phase: str, scope: str | None, cpu_op: str, kernels: list[str] = (), children: list[str] = ()) -> None:
        """One CPU op (with child ops) and, on a GPU, the kernels it launched."""
        path = f"mmprof.{phase} > mmprof.step.{step}" + (f" > {scope}" if scope else "")
        sp = path if cfg.scopes else None
        sc = (scope or f"mmprof.step.{step}") if cfg.scopes else None
        start = clock.tick(0)
        op = b.row("ops", rank=0, tid=1, start_ns=start, dur_ns=0, name=cpu_op,
                   scope=sc, scope_path=sp, phase=phase, step=step)
        for ch in children:
            b.row("ops", rank=0, tid=1, start_ns=clock.tick(cfg.dur), dur_ns=cfg.dur, name=ch, parent=op,
                  scope=sc, scope_path=sp, phase=phase, step=step)
        for k in kernels if gpu else ():
            ks = cfg.kernel_scopes and cfg.scopes
            b.row("kernels", rank=0, device=0, stream=7, start_ns=clock.tick(cfg.dur), dur_ns=cfg.dur, name=k, op=op,
                  scope=sc if ks else None, scope_path=sp if ks else None, phase=phase, step=step)
        # the op encloses its children (and, on a GPU, spans its launches); the next op starts after it
        b.cols["ops"]["dur_ns"][op] = max(clock.t - start, cfg.dur)
        clock.t = start + b.cols["ops"]["dur_ns"][op] + 10

    def dispatch(step: int, phase: str, layer: int, op: str, impl: str, requested: str, reason: str | None = None) -> None:
        if cfg.dispatch:
            b.row("dispatch", rank=0, step=step, phase=phase, layer=layer, op=op, impl=impl, requested=requested,
                  reason=reason, scope=f"layers.{layer}.{op}")

    def linear(step: int, phase: str, scope: str) -> None:
        emit(step, phase, scope, "aten::linear", [names["gemm"]], ["aten::t", "aten::mm"])

    for step in range(cfg.steps):
        phase = "prefill" if step == 0 else "decode"
        emit(step, phase, "embed", "aten::embedding", [names["embed"]], ["aten::index_select"])
        for i in range(cfg.layers):
            L = f"layers.{i}"
            emit(step, phase, f"{L}.norm", "aten::rms_norm", [names["norm_reduce"], names["mul"]], ["aten::mean", "aten::mul"])
            linear(step, phase, f"{L}.attn.qkv")
            emit(step, phase, f"{L}.attn.norm_rope", "aten::mul", [names["mul"]])
            sparse = i >= cfg.dense_layers
            if sparse:
                computed = (i - cfg.dense_layers) % max(cfg.block_reuse, 1) == 0
                if computed:
                    emit(step, phase, f"{L}.attn.indexer", "aten::matmul", [names["gemm"]], ["aten::bmm"])
                    emit(step, phase, f"{L}.attn.indexer", "aten::amax", [names["amax"]])
                    emit(step, phase, f"{L}.attn.indexer", "aten::topk", [names["topk"]])
                dispatch(step, phase, i, "attn.indexer", "computed" if computed else "reused",
                         "computed" if computed else "reused")
                emit(step, phase, f"{L}.attn.core", "aten::index_select", [names["gather"]])
                dispatch(step, phase, i, "attn.core", "sparse", "sparse")
            if cfg.attn_math:
                emit(step, phase, f"{L}.attn.core", "aten::scaled_dot_product_attention", [names["attn_math"]],
                     ["aten::_scaled_dot_product_attention_math"])
            else:
                emit(step, phase, f"{L}.attn.core", "aten::scaled_dot_product_attention", [names["attn"]],
                     ["aten::_scaled_dot_product_flash_attention_for_cpu"])
            linear(step, phase, f"{L}.attn.o_proj")
            emit(step, phase, f"{L}.norm", "aten::rms_norm", [names["norm_reduce"], names["mul"]], ["aten::mean"])
            if i < cfg.dense_layers:
                linear(step, phase, f"{L}.mlp")
                emit(step, phase, f"{L}.mlp", "aten::silu", [names["silu"]])
                linear(step, phase, f"{L}.mlp")
                continue
            linear(step, phase, f"{L}.moe.router")
            emit(step, phase, f"{L}.moe.router", "aten::sigmoid", [names["sigmoid"]])
            emit(step, phase, f"{L}.moe.router", "aten::topk", [names["topk"]])
            R = f"{L}.moe.routed"
            emit(step, phase, R, "aten::index_select", [names["gather"]])
            experts = cfg.experts_by_step.get(step, cfg.experts)
            if experts == "grouped_mm":
                for _ in range(2):
                    emit(step, phase, R, "aten::_grouped_mm", [names["grouped"]], ["aten::mm"] * cfg.n_experts)
            elif experts == "grouped_bmm":
                for _ in range(2):
                    emit(step, phase, R, "aten::bmm", [names["grouped"]])
            else:
                for _ in range(cfg.n_experts):
                    linear(step, phase, R)
                    linear(step, phase, R)
            emit(step, phase, R, "aten::silu", [names["silu"]])
            emit(step, phase, R, "aten::index_add_", [names["gather"]])
            req = cfg.experts_requested or cfg.experts
            dispatch(step, phase, i, "moe.experts", experts, req,
                     None if req == experts else "torch._grouped_mm unavailable for this dtype")
            if cfg.shared == "separate":
                S = f"{L}.moe.shared"
                linear(step, phase, S)
                emit(step, phase, S, "aten::silu", [names["silu"]])
                linear(step, phase, S)
            dispatch(step, phase, i, "moe.shared", cfg.shared, cfg.shared)
        emit(step, phase, "final_norm", "aten::rms_norm", [names["norm_reduce"]], ["aten::mean"])
        linear(step, phase, "lm_head")
    return b.build()


def empty_profile() -> Profile:
    return ProfileBuilder({"source": {"format": "kineto"}, "ranks": [{"rank": 0}]}).build()
