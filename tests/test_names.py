"""mmprof.names on real kernel names: every distinct kernel and copy name of the real traces in tests/data,
a table of representative names with their expected display names, and demangle()'s pass-through contract."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mmprof import names
from mmprof.importers import import_paths
from mmprof.names import demangle, display_name, function_name
from tests.conftest import DATA

TRACES = ["samples/kineto/*.json.gz", "samples/kineto/*.json.xz", "h200_runtime/*.json.xz", "kineto_own/*.json.gz", "diff_external/*.json.gz",
          "samples/nsys/*.sqlite", "samples/rocprofv3/rocpd/*.db", "samples/rocprofv3/csv/kernel_trace*.csv",
          "rocprofv3_json/*.json"]


@pytest.fixture(scope="module")
def real_names() -> list[str]:
    """Every distinct kernel and memcpy/memset name the importers read from the real traces."""
    found: set[str] = set()
    files = [f for pat in TRACES for f in sorted(DATA.glob(pat))]
    assert len(files) >= 25, files
    for f in files:
        prof = import_paths([f], check_ranks=False)
        for table in ("kernels", "memcpy"):
            found.update(n for n in prof.col(table, "name", decode=True) if n)
    return sorted(found)


def _trace_name(real: list[str], *parts: str) -> str:
    hits = [n for n in real if all(p in n for p in parts)]
    assert hits, f"no real trace name contains {parts}"
    return hits[0]


_BRACKETS = re.compile(r"<[^<>()]*>|\([^()]*\)|\{[^{}]*\}|\[[^\[\]]*\]")


def _base(sig: str) -> str:
    """The unqualified function name of a signature, by erasing bracketed groups from the inside out."""
    prev = None
    while prev != sig:
        prev, sig = sig, _BRACKETS.sub("", sig)
    return sig.strip().split(" ")[-1].split("::")[-1]


def _tokens_in_order(short: str, full: str) -> bool:
    """Each '_'/space-separated token of short starts a token of full, in order (tokens were only dropped)."""
    rest = iter(full.split("_"))
    return all(any(t.startswith(s) for t in rest) for s in re.split(r"[_\s]+", short) if s)


def test_the_real_traces_hold_the_names_these_tests_need(real_names):
    assert len(real_names) >= 600
    assert sum(n.startswith("_Z") for n in real_names) >= 3  # raw mangled CUTLASS names (CUPTI left them so)
    assert any(n.startswith("Memcpy ") for n in real_names)


def test_every_real_name_gets_a_short_readable_name_that_keeps_its_base(real_names):
    over = []
    for raw in real_names:
        shown = display_name(raw)
        full = demangle(raw)
        assert shown and shown == shown.strip(), raw
        assert not re.search(r"(?<![A-Za-z0-9])_Z[NSZ0-9]", shown), (raw, shown)  # nothing left mangled
        base = _base(full)
        assert base, raw
        if re.fullmatch(r"[\w$.]+", full):  # a plain identifier: only tokens were dropped, the head stays
            assert shown == full or _tokens_in_order(shown, full), (full, shown)
            assert shown.split("_")[0].split(" ")[0] == full.split("_")[0], (full, shown)
        elif base in names._WRAPPERS:  # cutlass::Kernel<X>, device_kernel<...>, kentry<...>: named by library
            lib = re.match(r"(?:void )?(\w+)::", full).group(1)
            assert base in shown or shown.startswith(lib), (full, shown)
        else:
            assert base in shown, (base, shown)
        assert len(shown) <= max(60, len(base)), (raw, shown)
        over += [shown] if len(shown) > 60 else []
    assert len(over) <= 0.05 * len(real_names), over


# Real names by a unique part of their text (they are looked up in the traces above), with their display names.
TRACE_TABLE = [
    (("unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}",
      "{lambda(float)#1}, std::array<char*, 2ul>, 4"), "unrolled_elementwise_kernel<direct_copy_kernel_cuda, float>"),
    (("vectorized_elementwise_kernel<8, at::native::FillFunctor<c10::BFloat16>",),
     "vectorized_elementwise_kernel<FillFunctor<bf16>>"),
    (("vectorized_elementwise_kernel<8, at::native::sigmoid_kernel_cuda(",),
     "vectorized_elementwise_kernel<sigmoid_kernel_cuda, bf16>"),
    (("elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10::BFloat16",),
     "elementwise_kernel<MulFunctor<float>>"),
    ((("elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::(anonymous namespace)::"
      "where_kernel_impl"),), "elementwise_kernel<where_kernel_impl, bool, bf16>"),
    (("reduce_kernel<512, 1, at::native::ReduceOp<c10::Half, at::native::func_wrapper_t",),
     "reduce_kernel<sum_functor<half, float>>"),
    (("reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::MaxOps",), "reduce_kernel<MaxOps<float>>"),
    (("_scatter_gather_elementwise_kernel", "ReduceAdd"), "_scatter_gather_elementwise_kernel<float, ReduceAdd>"),
    (("CatArrayBatchedCopy_alignedK_contig<at::native::(anonymous namespace)::OpaqueType<8u>",),
     "CatArrayBatchedCopy_alignedK_contig<OpaqueType<8>, uint>"),
    (("multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>",),
     "multi_tensor_apply_kernel<BinaryOpListAlphaFunctor<float>>"),
    (("void (anonymous namespace)::softmax_warp_forward<float, float, float, 6",), "softmax_warp_forward<float, 6>"),
    (("sbtopk::gatherTopK<float, unsigned int, 2",), "sbtopk::gatherTopK<float, uint, 2>"),
    (("at::cuda::(anonymous namespace)::spin_kernel",), "spin_kernel"),
    (("cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, int>",),
     "cub::DeviceRadixSortOnesweepKernel<Policy800, long, int>"),
    (("internal::gemvx::kernel<int, int, float, float, float, float, false, true, true, false, 7, false",),
     "gemvx::kernel<int, float, 7, cublasGemvParamsEx<int, float>>"),
    (("clover::par_ranged2d_kernel<generate_chunk",), "clover::par_ranged2d_kernel<generate_chunk>"),
    (("saxpy(",), "saxpy"),
    # CUTLASS 3 (raw mangled in the H200 trace) and CUTLASS 2 convolution (raw mangled in the A100 trace)
    (("_ZN7cutlass13device_kernel",), "cutlass sm90 grouped gemm 64x128x128 bf16 (pingpong)"),
    (("_ZN19cutlass_cudnn_train6Kernel", "GemmShapeILi128"), "cutlass_cudnn_train conv wgrad 128x128x32 tf32"),
    (("cutlass::Kernel2<cutlass_80_simt_sgemm_32x128_8x5_tn_align1>",),
     "cutlass::Kernel2<cutlass_80_simt_sgemm_32x128_8x5_tn_align1>"),
    (("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128",),
     "cudnn_generated_sdpa_sm90_flash_fprop_wgmma_f16_64x128x128"),
    ((("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1"
      "_g1_tensor16x8x8_alignc4"),), "sm80_xmma_fprop_gemm_tf32f32_tf32f32_f32_tilesize128x128x16"),
    (("nvjet_sm90_tst_64x8_64x16_1x1_h_bz_NNT",), "nvjet_sm90_tst_64x8_64x16_1x1_h_bz_NNT"),
    (("volta_sgemm_128x32_nt",), "volta_sgemm_128x32_nt"),
    (("triton_poi_fused_add_clamp_mul_sigmoid_split_0",), "triton_poi_fused_add_clamp_mul_sigmoid_split_0"),
    (("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm",), "ncclKernel_AllReduce_RING_LL_Sum_float"),
    # ROCm: hipBLASLt/Tensile (MI250), ck_tile and a plain HIP kernel (MI300X rocpd), a ROCclr fill
    (("Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16",), "Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs MT64x16x16 MI16x16x1"),
    (("ck_tile::kentry<1, ck_tile::BatchedGemmKernel",), "ck_tile BatchedGemmKernel 256x256x64 half (CompV3)"),
    (("batched_matrix_multiplication_matrix_core_128x128x16<128u",), "batched_matrix_multiplication_matrix_core_128x128x16"),
    (("__amd_rocclr_fillBufferAligned",), "__amd_rocclr_fillBufferAligned"),
    (("Memcpy HtoD (Pageable -> Device)",), "Memcpy HtoD (Pageable -> Device)"),
    (("MEMORY_COPY_HOST_TO_DEVICE",), "MEMORY_COPY_HOST_TO_DEVICE"),
]


@pytest.mark.parametrize("parts,expected", TRACE_TABLE, ids=[e for _, e in TRACE_TABLE])
def test_representative_trace_names(real_names, parts, expected):
    assert display_name(_trace_name(real_names, *parts)) == expected


# Names quoted in public profiles of other people's runs (nsys/ncu/Kineto/rocprof reports on GitHub): kernels
# our traces lack (FlashAttention 2, NCCL 2.19+ device kernels, CK, hipBLASLt bf16) and nsys's own demangling
# style ((int)4, [lambda() (instance 3)], operator ()()).
PUBLIC_TABLE = [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
     "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
    ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "ncclDevKernel_Generic_1"),
    (("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)32, (int)4, (bool)0, "
     "(bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)128, (int)32, (int)4, cutlass::bfloat16_t>>, "
     "(bool)0, (bool)0, (bool)0, (bool)0, (bool)0, (bool)1, (bool)0, (bool)0>(pytorch_flash::Flash_fwd_params)"),
     "pytorch_flash::flash_fwd_kernel<hdim128, 128x32, bf16>"),
    (("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::"
     "[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) "
     "(instance 1)], std::array<char *, (unsigned long)2>, (int)4, TrivialOffsetCalculator<(int)1, unsigned int>, "
     "TrivialOffsetCalculator<(int)1, unsigned int>, at::native::memory::LoadWithCast<(int)1>, "
     "at::native::memory::StoreWithCast<(int)1>>(int, T1, T2, T4, T5, T6, T7)"),
     "unrolled_elementwise_kernel<direct_copy_kernel_cuda, float>"),
    (("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, "
     "std::array<char *, (unsigned long)3>>(int, T2, T3)"), "vectorized_elementwise_kernel<CUDAFunctor_add<float>>"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_bf16_64x64_64x6_tn_align8>(T1::Params)",
     "Kernel2<cutlass_80_tensorop_s16816gemm_bf16_64x64_64x6_tn>"),
    ("Cijk_Alik_Bljk_BBS_BH_UserArgs_MT128x128x64_MI16x16x1_SN_AFC1_GSUAMB_ISA950_MIWT2_2_WG32_8_1",
     "Cijk_Alik_Bljk_BBS_BH_UserArgs MT128x128x64 MI16x16x1 gfx950"),
    ("Custom_Cijk_Alik_Bljk_BBS_BH_MT256x256x64_MI16x16x1_UserArgs_shortname0_gfx950",
     "Custom_Cijk_Alik_Bljk_BBS_BH MT256x256x64 MI16x16x1 gfx950"),
    (("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemmMultiD_ABScale_xdl_cshuffle_v3<"
     "ck::tensor_layout::gemm::RowMajor, ck::tensor_layout::gemm::ColumnMajor, ck::Tuple<>, "
     "ck::tensor_layout::gemm::RowMajor, ck::f8_fnuz_t, ck::f8_fnuz_t, float, float, ck::Tuple<>, unsigned short, "
     "ck::tensor_operation::element_wise::PassThrough, ck::tensor_operation::element_wise::PassThrough, "
     "ck::tensor_operation::element_wise::PassThrough, (ck::tensor_operation::device::GemmSpecialization)2, "
     "256, 1, 128, 128, 16, 128, 256, 16, 16, 16, 16, 1, 2, ck::Sequence<16, 16, 1>, ck::Sequence<1, 0, 2>, "
     "ck::Sequence<1, 0, 2>, 2, 16, 16, false, 0, ck::Sequence<16, 16, 1>, ck::Sequence<1, 0, 2>, "
     "ck::Sequence<1, 0, 2>, 2, 16, 16, false, 0, 1, 2, ck::Sequence<1, 16, 1, 16>, ck::Sequence<8>, "
     "(ck::BlockGemmPipelineScheduler)0, (ck::BlockGemmPipelineVersion)0, ck::f8_fnuz_t, ck::f8_fnuz_t, "
     "ck::f8_fnuz_t, ck::f8_fnuz_t>, true, (ck::InMemoryDataOperationEnum)0, 2, (ck::TailNumber)10>"),
     "ck::kernel_gemm_xdl_cshuffle_v3<fp8, float>"),
    (("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, "
     "unsigned int, unsigned int, unsigned int, float, float)"), "flashinfer::RMSNormKernel<8, bf16>"),
    ("void (anonymous namespace)::all_reduce_one_shot_push_kernel<__nv_bfloat16, 4u, true>((anonymous namespace)::"
     "AllReducePushData, device::distributed::PushController)", "all_reduce_one_shot_push_kernel<bf16, 4>"),
    ("cutlass3x_sm100_simt_sgemm_f32_f32_f32_f32_f32_32x32x16_1x1x1_3_tnn_align1_bias_f32_relu",
     "cutlass3x_sm100_simt_sgemm_f32_f32_f32_f32_f32_32x32x16"),
    ("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT"),
    ("triton_poi_fused__unsafe_view_add_fill_mul_sigmoid_silu_sub_view_5",  # Triton names stay, even when long
     "triton_poi_fused__unsafe_view_add_fill_mul_sigmoid_silu_sub_view_5"),
    ("Memset (Device)", "Memset (Device)"),
    ("[CUDA memcpy Host-to-Device]", "[CUDA memcpy Host-to-Device]"),
    # constructed, not from a profile: the forms hipBLASLt (4-part MI), nvcc (device stub) and ROCm (.kd) use
    ("Cijk_Alik_Bljk_BBS_BH_MT128x128x64_MI16x16x16x1_SN_LDSB1_AFC1", "Cijk_Alik_Bljk_BBS_BH MT128x128x64 MI16x16x16"),
    ("__device_stub__Z8testfuncPf", "testfunc"),
    ("_Z13vector_squareIfEvPT_S1_m.kd", "vector_square<float>"),
]


@pytest.mark.parametrize("raw,expected", PUBLIC_TABLE, ids=[e for _, e in PUBLIC_TABLE])
def test_representative_public_names(raw, expected):
    assert display_name(raw) == expected


def test_max_len_drops_the_least_informative_parts_first_and_never_cuts_the_base(real_names):
    cutlass = _trace_name(real_names, "_ZN7cutlass13device_kernel")
    assert display_name(cutlass, max_len=100) == "cutlass sm90 grouped gemm 64x128x128 bf16 (warpspecialized pingpong)"
    assert display_name(cutlass, max_len=40) == "cutlass sm90 grouped gemm 64x128x128"
    copy = _trace_name(real_names, "unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(",
                       "{lambda(float)#1}, std::array<char*, 2ul>, 4")
    assert display_name(copy, max_len=55) == "unrolled_elementwise_kernel<direct_copy_kernel_cuda>"  # dtype first
    assert display_name(copy, max_len=40) == "unrolled_elementwise_kernel"
    assert display_name(copy, max_len=10) == "unrolled_elementwise_kernel"  # the base is never cut
    for raw in real_names:
        short, default = display_name(raw, max_len=30), display_name(raw)
        assert len(short) <= len(default), raw
        if not re.fullmatch(r"[\w$.]+", demangle(raw)):
            assert _base(demangle(raw)) in short or short.split(" ")[0] == default.split(" ")[0], (raw, short)


def test_display_name_is_deterministic_and_cached(real_names):
    sample = real_names[::7]
    first = [display_name(n) for n in sample]
    hits = display_name.cache_info().hits
    assert [display_name(n) for n in sample] == first
    assert display_name.cache_info().hits >= hits + len(sample)
    display_name.cache_clear()
    demangle.cache_clear()
    assert [display_name(n) for n in sample] == first


def test_all_real_names_are_shown(real_names):
    """Every real name gives a non-empty display name (no time limit here: benchmarks/names_speed.py times it)."""
    display_name.cache_clear()
    demangle.cache_clear()
    assert all(display_name(n) for n in real_names)


def test_demangle_reads_the_real_mangled_names(real_names):
    mangled = [n for n in real_names if n.startswith("_Z")]
    for raw in mangled:
        out = demangle(raw)
        assert out.startswith("void cutlass") and "_Z" not in out, out[:200]
    assert demangle("_Z3fooPfi") == "foo(float*, int)"
    assert demangle("_Z13vector_squareIfEvPT_S1_m.kd") == "void vector_square<float>(float*, float*, unsigned long)"
    assert demangle("_ZN2ns23__device_stub__nskernelEv") == "ns::__device_stub__nskernel()"
    assert demangle("__device_stub__Z8testfuncPf") == "testfunc(float*)"
    assert demangle("launch of _Z3fooPfi failed") == "launch of foo(float*, int) failed"


GARBAGE = ["", " ", "_Z", "_ZN", "_Zgarbage", "_Z3foo\x00v", "__Z", "Z3foov", "?foo@@YAXXZ", "_RNvC6_123foo3bar",
           "_Z" + "N" * 5000, "_Z" + "I" * 100000, "<" * 5000, "(" * 5000, "x<" * 3000, "operator<", "::", "void ()",
           "\udcff", "x" * 100000]


def test_demangle_passes_everything_else_through_unchanged_and_never_raises(real_names):
    for s in GARBAGE + [n for n in real_names if not n.startswith("_Z")]:
        assert demangle(s) == s, s[:80]
    for s in GARBAGE:
        assert isinstance(display_name(s), str)
    assert demangle(None) is None  # type: ignore[arg-type]


def test_every_cut_of_a_real_name_is_shown_without_raising(real_names):
    """Profilers cut long names; a cut anywhere (or stray brackets) still gives a non-empty string."""
    for raw in real_names[::5]:
        for cut in range(1, len(raw), max(1, len(raw) // 12)):
            for s in (raw[:cut], raw[cut:], raw[:cut] + ">>)", "(" + raw[:cut]):
                out = display_name(s)
                assert isinstance(out, str) and (out or not s.strip())


def test_without_the_demangler_names_pass_through(monkeypatch, real_names):
    """A platform without the pycxxfilt wheel (or without libstdc++, which it links) keeps raw names."""
    monkeypatch.setattr(names, "_itanium_demangle", None)
    demangle.cache_clear()
    display_name.cache_clear()
    try:
        mangled = _trace_name(real_names, "_ZN7cutlass13device_kernel")
        assert demangle(mangled) == mangled
        assert display_name(mangled).endswith("…") and len(display_name(mangled)) == 60
        assert display_name("void foo<float>(float*)") == "foo<float>"
    finally:
        demangle.cache_clear()
        display_name.cache_clear()


# --- issue 20 / 25: distinct kernels stay distinct, template arguments that matter stay, brackets never break ---

from mmprof.names_distinct import distinct_display_names  # noqa: E402

_MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::{w}<float, float, float, "
        "at::native::binary_internal::MulFunctor<float> >, std::array<char*, {k}ul> >(int, at::native::{w}<float, "
        "float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, {k}ul>)")


@pytest.mark.parametrize("names, must_contain", [
    # torch's three launches of a float multiply (tensor*scalar on either side, tensor*tensor): ATen Loops.cuh
    ([_MUL.format(w="AUnaryFunctor", k=2), _MUL.format(w="BUnaryFunctor", k=2), _MUL.format(w="BinaryFunctor", k=3)],
     ["AUnaryFunctor", "BUnaryFunctor", "BinaryFunctor"]),
    # two lambdas of one CloverLeaf loop (the demangler numbers them "instance 1" / "instance 2")
    (["void clover::par_ranged2d_kernel<PdV_kernel(bool, int, int, int, int, double)::[lambda(int, int) "
      "(instance 1)], int>(clover::Range2d, T1)",
      "void clover::par_ranged2d_kernel<PdV_kernel(bool, int, int, int, int, double)::[lambda(int, int) "
      "(instance 2)], int>(clover::Range2d, T1)"], ["lambda 1", "lambda 2"]),
    # DeepEP's low-latency and normal internode dispatch (csrc/kernels/internode_ll.cu vs internode.cu)
    (["void deep_ep::internode_ll::dispatch<8, 768, 8192>(int4*, float*)",
      "void deep_ep::internode::dispatch<8, 768, 8192>(int4*, float*)"], ["internode_ll", "internode"]),
    # DeepGEMM GemmType 0 (dense) and 1 (M-grouped contiguous): deep_gemm/include/deep_gemm/common/types.cuh
    (["void deep_gemm::sm90_fp8_gemm_1d2d_impl<(deep_gemm::GemmType)0, 7168u, 2048u>(float*, int*, unsigned int)",
      "void deep_gemm::sm90_fp8_gemm_1d2d_impl<(deep_gemm::GemmType)1, 7168u, 2048u>(float*, int*, unsigned int)"],
     ["GemmType=0", "GemmType=1"]),
])
@pytest.mark.parametrize("width", [60, 30, 20])
def test_distinct_kernels_never_share_a_display_name(names, must_contain, width):
    shown = distinct_display_names(names, width)
    assert len(set(shown)) == len(names), shown
    for s, tag in zip(shown, must_contain):
        assert tag in s, (s, tag)
    # the same name twice is still one kernel: same text, no suffix
    assert distinct_display_names([names[0], names[0]], width) == [display_name(names[0], width)] * 2


def test_template_arguments_that_matter_are_kept():
    silu = ("void vllm::act_and_mul_kernel<c10::BFloat16, &(float vllm::silu_kernel<float>(float const&)), true>"
            "(c10::BFloat16*, c10::BFloat16 const*, int)")
    assert "silu" in display_name(silu) and "gelu" in display_name(silu.replace("silu", "gelu"))
    gt = "void deep_gemm::sm90_fp8_gemm_1d2d_impl<(deep_gemm::GemmType)2, 7168u, 2048u>(float*, int*)"
    assert "GemmType=2" in display_name(gt)


@pytest.mark.parametrize("raw", [
    "void <unnamed>::doActivationKernel<__nv_bfloat16, (<unnamed>::ActivationKind)0>(__nv_bfloat16*, int)",
    "void marlin::Marlin<(<unnamed>::ScalarTypeId)3, 256>(int4 const*)",
])
def test_nsys_unnamed_namespace_never_breaks_brackets(raw):
    # nsys prints the anonymous namespace as `<unnamed>`: that `<` is no template bracket
    for width in (60, 30, 20):
        d = display_name(raw, width)
        assert "(<" not in d and d.count("<") == d.count(">") and d.count("(") == d.count(")"), d
    assert function_name(raw).split("::")[-1] in ("doActivationKernel", "Marlin")
    assert not function_name(raw).startswith("::")


def test_display_names_of_the_kernel_corpus_keep_brackets_balanced():
    pairs = {")": "(", ">": "<", "]": "["}
    corpus = Path(__file__).parent / "data" / "kernel_corpus" / "corpus.tsv"
    names = [ln.split("\t")[0] for ln in corpus.read_text().splitlines() if ln and not ln.startswith("#")]
    for n in names:
        for width in (60, 40, 24):
            stack = []
            for ch in display_name(n, width).replace("->", "").replace("operator()", ""):
                if ch in "(<[":
                    stack.append(ch)
                elif ch in pairs:
                    assert stack and stack.pop() == pairs[ch], (n[:80], display_name(n, width))
            assert not stack, (n[:80], display_name(n, width))
