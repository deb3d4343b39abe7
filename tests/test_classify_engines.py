"""Kernels of other inference engines (mmprof/rules/kernels_engines.toml) and the "unknown rather than guess" rule.

Names come from real traces where one exists (AMD-AGI/TraceLens test traces at 171dd747; deepseek-ai/profile-data
train.json, a Kineto trace of DeepSeek's own training stack; nsys / rocprof output quoted in public reports and
issues) and otherwise are the demangled form a profiler prints for the kernel's signature in its source (repo and
file named next to each group).
"""

from __future__ import annotations

import re

import pytest

from mmprof.analysis.attribution.classify import classify_name, load_rules
from mmprof.analysis.views.coverage import coverage
from mmprof.analysis.timeline.events import events_of
from mmprof.names import function_name
from mmprof.profiles import ProfileBuilder
from mmprof.errors import BadInput
from tests.conftest import DATA

# (name, family, library)
ENGINE_NAMES = [
    # DeepEP. Real: deepseek-ai/profile-data train.json (DeepSeek's build, namespace dpsk::ep) and DeepEP#348
    # (dpsk::ep::internode::dispatch_ll / combine_ll in decode.json). Signatures: deepseek-ai/DeepEP
    # csrc/kernels/{intranode,internode_ll,layout}.cu (v1), csrc/kernels/legacy/*.cu, deep_ep/include/.../impls.
    ("void dpsk::ep::internode::dispatch<false, 8, false, 8>(int4*, float*, long*, float*, dpsk::ep::internode::"
     "SourceMeta*, int4 const*, float const*, long const*, float const*, int*, int*, int*, int*, int*)",
     "communication", "DeepEP"),
    ("void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, bool const*, "
     "int4 const*, float const*, int4 const*, int4 const*, int const*, int const*)", "communication", "DeepEP"),
    ("void dpsk::ep::internode::notify_dispatch<false, 8>(int const*, long*, int, int const*, int*, int const*, int*, "
     "int, bool const*, int, int, int, int, int, int, int, int*, int*, int*, int*, void*)", "communication", "DeepEP"),
    ("void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*, int, int, int const*, int const*, "
     "int*, void*, void**, int**, int, int, int, int*, bool, int)", "communication", "DeepEP"),
    ("void dpsk::ep::internode::dispatch_ll", "communication", "DeepEP"),
    ("void dpsk::ep::internode::combine_ll", "communication", "DeepEP"),
    ("void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, int)",
     "moe", "DeepEP"),
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*, int4 const*, "
     "float const*, long const*, float const*, bool const*, int const*, int, int, int, int, int, int, int, int, "
     "void**, int, int, int)", "communication", "DeepEP"),
    ("void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 8192>(__nv_bfloat16*, float*, __nv_bfloat16 const*, "
     "float const*, __nv_bfloat16 const*, __nv_bfloat16 const*, int const*, int const*, int const*, int*, int, int, "
     "int, int, void**, int, int, int)", "communication", "DeepEP"),
    ("void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int const*, int*, int, int, int, bool const*, "
     "int*, int*, int, int, void**, int**, int)", "communication", "DeepEP"),
    ("void deep_ep::intranode::cached_notify_combine<8>(void**, int*, int, int, int, int**, int)",
     "communication", "DeepEP"),
    ("void deep_ep::internode_ll::dispatch<true, false, 7168>(void*, void*, int*, long*, int*, int*, int*, long*, "
     "void*, int*, void*, void const*, long const*, int*, int*, int*, int, int, int, int, int, int, int, int, bool)",
     "communication", "DeepEP"),
    ("void deep_ep::internode_ll::combine<false, 7168, 9, 10>(void*, void*, int*, void*, void const*, long const*, "
     "float const*, int const*, long const*, int*, long*, int*, int, int*, int, int, int, int, int, int, int, int, "
     "bool, void*, bool, bool)", "communication", "DeepEP"),
    ("void deep_ep::internode_ll::clean_low_latency_buffer<128>(int*, int, int*, int, int, int, int*, int*)",
     "communication", "DeepEP"),
    ("void deep_ep::legacy::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*)",
     "communication", "DeepEP"),
    ("void deep_ep::legacy::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, "
     "int, int)", "moe", "DeepEP"),
    ("void deep_ep::elastic::dispatch_impl<128, 8, 7168, 8, true>(void*, void*, long*, float*, long*)",
     "communication", "DeepEP"),
    ("_ZN7deep_ep12internode_ll7combineILb0ELi7168ELi9ELi10EEEvPvS1_PiS1_PKvPKlPKfPKiS7_S2_PlS2_iS2_iiiiiiiibS1_bb",
     "communication", "DeepEP"),
    # MoRI: ROCm/mori src/ops/kernels/ep_*.hip (extern "C" <Kernel>_<dtype>[_<flags>]), the 2025 C++ templates
    # in mori::moe (src/ops/dispatch_combine/intranode.hpp), the v2 JIT entry names (ep_spec.cpp EpEntryName).
    ("EpDispatchIntraNodeKernel_bf16", "communication", "MoRI"),
    ("EpCombineIntraNodeKernel_bf16_p2p", "communication", "MoRI"),
    ("EpDispatchInterNodeV1KernelLowLatency_fp8_ocp", "communication", "MoRI"),
    ("EpCombineInterNodeV1KernelLowLatency_bf16_stdmoe", "communication", "MoRI"),
    ("EpDispatchLowLatencyAsyncSendCopy_bf16", "communication", "MoRI"),
    ("EpCombineAll_bf16", "communication", "MoRI"),
    ("void mori::moe::EpDispatchIntraNodeKernel<hip_bfloat16>(mori::moe::EpDispatchCombineArgs<hip_bfloat16>)",
     "communication", "MoRI"),
    ("mori_ep_combine_bf16_ws8_h7168_k8_80x16", "communication", "MoRI"),
    ("ConvertCombineInputKernel_bf16", "moe", "MoRI"),
    # pplx-kernels: csrc/all_to_all/{intranode,internode}_{dispatch,combine}.cu
    ("void (anonymous namespace)::combineKernel<__nv_bfloat16, __nv_bfloat16, 16ul, true, true>(__nv_bfloat16*, "
     "unsigned long, unsigned int const*, unsigned long, unsigned long, float const*, unsigned long, unsigned long, "
     "__nv_bfloat16 const*, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, unsigned int, "
     "unsigned int, unsigned int, unsigned long, unsigned long, unsigned long, std::byte**, unsigned int*, "
     "unsigned int*)", "communication", "pplx-kernels"),
    ("void dispatchKernel<4u, true, false>(int*, unsigned long, std::byte*, unsigned long, unsigned long, float*, "
     "unsigned long, unsigned long, unsigned long, std::byte const*, unsigned long, float const*, unsigned long)",
     "communication", "pplx-kernels"),
    # TensorRT-LLM / FlashInfer MoE all-to-all (flashinfer csrc/nv_internal/.../moeAlltoAllKernels.cu) and NVSHMEM
    ("void tensorrt_llm::kernels::moe_alltoall::moeA2ACombineKernel<__nv_bfloat16, 8>(int const*, int, "
     "tensorrt_llm::kernels::moe_alltoall::CombineKernelPointers, int, int, int, int)", "communication",
     "TensorRT-LLM"),
    ("void flashinfer::trtllm_alltoall::moeAllToAllKernel(flashinfer::trtllm_alltoall::MoeEpWorldInfo, "
     "flashinfer::trtllm_alltoall::SendRecvDataInfo, flashinfer::trtllm_alltoall::SendRecvDispls, "
     "flashinfer::trtllm_alltoall::SendRecvDispls)", "communication", "TensorRT-LLM"),
    ("void nvshmemi_barrier_all_on_stream_kernel(int, int, int)", "communication", "NVSHMEM"),
    # DeepGEMM: deep_gemm/include/deep_gemm/impls/*.cuh (GemmType printed as `(deep_gemm::GemmType)N`)
    ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<(cute::UMMA::Major)0, 0u, 4096u, 7168u, 256u, 64u, 128u, 128u, 128u, "
     "128u, 128u, 5u, 128u, 256u, 1u, false, 132u, (deep_gemm::GemmType)2, __nv_bfloat16, "
     "deep_gemm::EpilogueIdentity>(float*, int*, unsigned int, unsigned int, unsigned int, CUtensorMap, CUtensorMap, "
     "CUtensorMap, CUtensorMap)", "grouped_gemm", "DeepGEMM"),
    ("void deep_gemm::sm100_fp8_fp4_gemm_1d1d_impl<(cute::UMMA::Major)0, (cute::UMMA::Major)0, 0u, 4096u, 7168u, "
     "256u, 128u, 128u, 128u, 1u, 128u, 4u, false, 148u, (deep_gemm::GemmType)1, false, __nv_bfloat16>(int*, "
     "unsigned int, unsigned int, unsigned int, CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap)",
     "grouped_gemm", "DeepGEMM"),
    ("void deep_gemm::fp8_gemm_kernel<4096u, 7168u, 64u, 128u, 128u, 256u, 5u, 128u, 128u, 1u, "
     "(deep_gemm::GemmType)1>(__nv_bfloat16*, float*, int*, unsigned int, CUtensorMap, CUtensorMap, CUtensorMap, "
     "CUtensorMap)", "grouped_gemm", "DeepGEMM"),
    ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<(cute::UMMA::Major)0, 0u, 7168u, 2048u, 1u, 64u, 128u, 128u, 128u, "
     "128u, 128u, 5u, 128u, 256u, 1u, false, 132u, (deep_gemm::GemmType)0, __nv_bfloat16, "
     "deep_gemm::EpilogueIdentity>(float*, int*, unsigned int, unsigned int, unsigned int, CUtensorMap, CUtensorMap, "
     "CUtensorMap, CUtensorMap)", "gemm", "DeepGEMM"),
    ("void deep_gemm::sm90_fp8_mqa_logits<64u, 64u, 128u, 128u, 3u, 128u, 512u, float>(unsigned int, unsigned int, "
     "unsigned int const*, unsigned int const*, unsigned long, float*, CUtensorMap, CUtensorMap, CUtensorMap, "
     "CUtensorMap)", "indexer_score", "DeepGEMM"),
    # CUTLASS grouped GEMMs: NVIDIA/cutlass gemm/kernel/gemm_grouped.h (2.x); real: profile-data (dpsk)
    ("void cutlass::Kernel<cutlass::gemm::kernel::GemmGrouped<cutlass::gemm::threadblock::MmaMultistage<"
     "cutlass::gemm::GemmShape<128, 128, 32> >, cutlass::epilogue::threadblock::Epilogue<cutlass::gemm::GemmShape"
     "<128, 128, 32> >, cutlass::gemm::threadblock::GemmBatchedIdentityThreadblockSwizzle, "
     "(cutlass::gemm::kernel::GroupScheduleMode)0, false> >(cutlass::gemm::kernel::GemmGrouped<>::Params)",
     "grouped_gemm", "CUTLASS"),
    ("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>(dpsk::grouped_gemm::cuda::"
     "fp8_ptp128c::GemmKernel::Params)", "grouped_gemm", "CUTLASS"),
    # TensorRT engines (nsys kernel names quoted in public TensorRT performance reports) and Myelin
    ("sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize32x32x64_stage6_warpsize2x2x1_tensor16x8x16_aligna2_alignc2_"
     "execute_kernel_trt", "gemm", "TensorRT"),
    ("sm89_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize64x64x64_stage4_warpsize2x2x1_tensor16x8x32_bias_f32_"
     "execute_kernel_trt", "gemm", "TensorRT"),
    ("trt_ampere_h16816gemm_128x64_ldg8_nn_v1", "gemm", "TensorRT"),
    ("trt_maxwell_sgemm_32x128_relu_tn_v1", "gemm", "TensorRT"),
    ("trt_turing_h1688cudnn_128x128_ldg8_relu_exp_small_nhwc_tn_v1", "conv", "TensorRT"),
    ("sm80_trt_conv_act_pool_v3_tile_rows_8_tile_cols_120_execute_kernel_trt", "conv", "TensorRT"),
    ("ampere_first_layer_filter3x3_imma_fwd_swish_execute_filter3x3_swish_kernel_trt", "conv", "TensorRT"),
    ("void cuInt8::nhwcTonchw<__half, (int)32, (int)32, (int)2>(const __half *, __half *, int, int, int, int, int)",
     "copy", "TensorRT"),
    ("__myl_FcCast_myl2_0", "gemm", "TensorRT"),
    ("__myl_Move_myl3_0", "unknown", "TensorRT"),  # Myelin's generated name says no op: the library, no family
    # TensorRT-LLM: trtllm-gen (TraceLens tests/traces/b200), fmha_v2 (TensorRT-LLM#6538), tensorrt_llm::kernels
    ("bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_"
     "schedP2x1x2x3_biasM_bN_tmaOpt_clmp_dynBatch_sm100f", "grouped_gemm", "TensorRT-LLM"),
    ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_"
     "schedP2x1x2x3_biasM_bN_tma_tmaOpt_clmp_swiGlu_dynBatch_sm100f", "grouped_gemm", "TensorRT-LLM"),
    ("gemm_Bfloat16_E4m3E4m3_Fp32_t128x32x128u2_et64x32_m64x32x32_cga1x1x1_16dp256b_s6_TN_transOut_noShflA_dsFp8_"
     "schedS_sm100a", "gemm", "TensorRT-LLM"),
    ("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext", "attention",
     "TensorRT-LLM"),
    ("fmha_v2_flash_attention_bf16_64_64_S_q_paged_kv_256_causal_tma_ws_sm90_kernel", "attention", "TensorRT-LLM"),
    ("void tensorrt_llm::kernels::quantize_with_block_size<(tensorrt_llm::BlockScaleQuantizationType)2, "
     "__nv_bfloat16, 32, true>(int, int, int, int, __nv_bfloat16 const*, float const*, unsigned int*, "
     "unsigned int*, tensorrt_llm::QuantizationSFLayout, int*)", "quantization", "TensorRT-LLM"),
    # FlashInfer: include/flashinfer/{attention,sampling,norm,pos_enc,activation,page}.cuh
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 4u, 8u, 16u, 1u, 8u, "
     "flashinfer::DefaultAttention<false, false, false, false>, flashinfer::BatchDecodeParams<__nv_bfloat16, "
     "__nv_bfloat16, __nv_bfloat16, int> >(flashinfer::BatchDecodeParams<__nv_bfloat16, __nv_bfloat16, "
     "__nv_bfloat16, int>)", "attention", "FlashInfer"),
    ("void flashinfer::mla::BatchMLAPagedAttentionKernel<flashinfer::mla::KernelTraits<true, 2u, 1u, 64u, 64u, "
     "512u, 64u, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, int>, flashinfer::MLAParams<__nv_bfloat16, "
     "__nv_bfloat16, __nv_bfloat16, int> >(flashinfer::MLAParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, "
     "int>)", "attention", "FlashInfer"),
    ("void flashinfer::MergeStatesKernel<8u, 16u, 8u, 4u, __nv_bfloat16, __nv_bfloat16>(__nv_bfloat16*, float*, "
     "__nv_bfloat16*, float*, unsigned int, unsigned int, unsigned int)", "attention", "FlashInfer"),
    ("void flashinfer::sampling::TopPSamplingFromProbKernel<1024u, (cub::CUB_200800_SM_900::BlockScanAlgorithm)0, "
     "(cub::CUB_200800_SM_900::BlockReduceAlgorithm)2, 4u, false, float, int>(float*, int*, int*, float*, float, "
     "unsigned int, unsigned long, unsigned long)", "sampling", "FlashInfer"),
    ("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, "
     "unsigned int, unsigned int, unsigned int, float, float)", "norm", "FlashInfer"),
    ("void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<true, 128u, 8u, 16u, __nv_bfloat16, long>("
     "__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, float*, long*, unsigned int, unsigned int)",
     "rope", "FlashInfer"),
    ("void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &(silu(float const&))>(__nv_bfloat16*, "
     "__nv_bfloat16 const*, int)", "activation", "FlashInfer"),
    ("void flashinfer::AppendPagedKVCacheKernel<128u, 8u, 16u, __nv_bfloat16, int>(flashinfer::paged_kv_t<"
     "__nv_bfloat16, int>, __nv_bfloat16*, __nv_bfloat16*, int*, int*, unsigned int, unsigned long, unsigned long, "
     "unsigned long, unsigned long)", "kv_cache", "FlashInfer"),
    # engine-specific attention that used to be "FlashAttention": ggml (below), FlashMLA, vLLM's sparse FA fork
    ("void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576, 64, 64, 8, cutlass::bfloat16_t, "
     "512>, flash::SharedStorageMLA<Flash_fwd_kernel_traits_mla<576, 64, 64, 8, cutlass::bfloat16_t, 512> > >("
     "Flash_fwd_mla_params)", "attention", "FlashMLA"),
    ("void flash::flash_fwd_sparse_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::"
     "bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, "
     "true, false, false>(Flash_fwd_params_sparse)", "sparse_attention", "vLLM"),
    ("void cutlass::device_kernel<flash::FlashAttnBwd<flash::CollectiveMainloopBwd<2, cute::tuple<cute::C<1>, "
     "cute::C<1>, cute::C<1> > > > >(flash::FlashAttnBwd<flash::CollectiveMainloopBwd<2> >::Params)", "attention",
     "FlashAttention"),
    # vLLM / SGLang own kernels (real: TraceLens vllm_* and sglang_* traces)
    ("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type vllm::fused_add_rms_norm_"
     "kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*, c10::BFloat16 const*, float, int, int)",
     "norm", "vLLM"),
    ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char, (vllm::Fp8KVCacheDataType)1>("
     "__nv_bfloat16 const*, __nv_bfloat16 const*, unsigned char*, unsigned char*, long const*, long, long, long, "
     "long, int, int, int, float const*, float const*)", "kv_cache", "vLLM"),
    ("void vllm::scaled_fp8_quant_kernel_strided<c10::BFloat16, c10::Float8_e4m3fn>(c10::Float8_e4m3fn*, "
     "c10::BFloat16 const*, float const*, int, long, long)", "quantization", "vLLM"),
    ("void paged_attention_ll4mi_reduce_kernel<__hip_bfloat16, __hip_bfloat16, 128, 128, 256, 3, false>("
     "__hip_bfloat16*, float const*, float const*, __hip_bfloat16 const*, int const*, int const*, int)",
     "attention", "vLLM"),
    ("void wvSplitK_hf_sml_<__hip_bfloat16, 64, 2, 16, 8, 2, 2>(int, int, int, int, int, __hip_bfloat16 const*, "
     "__hip_bfloat16 const*, __hip_bfloat16 const*, __hip_bfloat16*, int, int)", "gemm", "vLLM/AITER"),
    ("_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_S5_EEEEvPS3_PS4_i",
     "activation", "SGLang"),
    ("create_flashinfer_kv_indices_triton", "index", "SGLang"),
    # SGLang's (and LightLLM's) Triton decode attention: the name says no engine, so no library (issue 30)
    ("_fwd_grouped_kernel_stage1", "attention", None),
    # AITER (hsa/<arch>/*/*.csv knl_name: the exact symbols rocprof shows) and CK as rocprof shows it
    ("_ZN5aiter44PA_A16W8_BLK256_1TG_4W_16mx1_64nx4_MTP_PS_PBE", "attention", "AITER"),
    ("_ZN5aiter41mla_dec_stage1_bf16_a16w16_subQ128_mqa128E", "attention", "AITER"),
    ("_ZN5aiter19topksoftmax_4x128x4E", "moe", "AITER"),
    ("_ZN5aiter48fmoe_stage1_bf16_pertokenFp8_g1u1_16x128_4tg_pf2E", "grouped_gemm", "AITER"),
    ("_ZN5aiter43bf16gemm_fp32bf16_tn_128x64_bshuffle_splitkE", "gemm", "AITER"),
    ("_ZN5aiter42f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256E", "gemm", "AITER"),
    ("_ZN5aiter24fmha_fwd_hd128_bf16_rtneE", "attention", "AITER"),
    ("void aiter::kn_entry_2c_sbhd_cached_inplace<aiter::RotateStyle::NEOX, true, false, __hip_bfloat16, float>("
     "__hip_bfloat16*, __hip_bfloat16*, float const*, float const*, int, int, int, int, int, int)", "rope",
     "AITER"),
    ("_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv_fwd_xdl_cshuffle_v3INS_28GridwiseGemm_xdl"
     "_cshuffle_v3INS_13tensor_layout4gemm8RowMajorENS6_11ColumnMajorES7_DF16bDF16bfDF16bfEEELb1ELNS_25InMemoryData"
     "OperationEnumE0ELi1ELNS_10TailNumberE1EEEvNT_8ArgumentE", "conv", "Composable Kernel"),
    ("_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_40BlockFmhaBatchPrefillPipelineQRKSVS"
     "AsyncINS_36BlockFmhaBatchPrefillPipelineProblemIDF16bDF16bDF16b", "attention", "Composable Kernel"),
    ("sage_fwd", "attention", "AITER"),
    ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_align8>("
     "cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_align8::Params)", "conv", "cuDNN"),
    ("void dot_kernel<float, 128, 0, cublasDotParams<cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
     "cublasGemvTensorStridedBatched<float> > >(cublasDotParams<cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
     "cublasGemvTensorStridedBatched<float> >)", "gemm", "cuBLAS"),
    # llama.cpp / ggml (ggml-org/ggml src/ggml-cuda; names as quoted from nsys / rocprof / nvprof output)
    ("void mul_mat_vec_q<(ggml_type)12, 4, false, false, false>(const void *)", "gemm", "ggml"),
    ("void mul_mat_vec_q<(ggml_type)8, 4, false, false>(void const*, void const*, int const*, float*, unsigned int)",
     "gemm", "ggml"),
    ("void mul_mat_q<(ggml_type)8, 16, false>(char const*)", "gemm", "ggml"),
    ("void mul_mat_q_stream_k_fixup<(ggml_type)8, (int)16, (bool)0>(...)", "gemm", "ggml"),
    ("void mul_mat_vec_q<ggml_type=14, int=7", "gemm", "ggml"),
    ("_Z9mul_mat_qIL9ggml_type8ELi16ELb0EEvPKcPKiS4_S4_PfS5_iiiiiiiiiiiiiii", "gemm", "ggml"),
    ("void flash_attn_ext_f16<128, 128, 4>(const char *)", "attention", "ggml"),
    ("void flash_attn_tile<64, 64, 2, 1, false>(args)", "attention", "ggml"),
    ("void flash_attn_combine_results<64>(args)", "attention", "ggml"),
    ("void rms_norm_f32<1024, true>(const float *)", "norm", "ggml"),
    ("void soft_max_f32<true, 0, 0, __half>(float const*, __half const*, float const*, float*, soft_max_params)",
     "reduction", "ggml"),
    ("void rope_neox<true, float, float>(float const*, float*, int, int, int, int, int, int, int, int, int const*)",
     "rope", "ggml"),
    ("quantize_q8_1(float const*, void*, long, long, long, long, long, long)", "quantization", "ggml"),
    ("void dequantize_block<32, 2, &(dequantize_q4_0(void const*, long, int, float2&)), __half>(void const*, "
     "__half*, long, long, long, long, long, long, long, long)", "quantization", "ggml"),
    ("void k_get_rows_float<float, float>(float const*, int const*, float*, long, long, long, unsigned long)",
     "index", "ggml"),
    ("void cpy_f32_f16<&(cpy_1_f32_f16(char const*, char*))>(char const*, char*, int, int, int, int, int, int, int)",
     "copy", "ggml"),
    ("void k_bin_bcast<&(op_mul(float, float)), float, float, float>(float const*, float const*, float*, int, int)",
     "elementwise", "ggml"),
    ("void unary_op_kernel<&(op_silu(float)), float>(float const*, float*, int)", "activation", "ggml"),
    ("void topk_moe_cuda<8, true, false>(float const*, float*, int*, int, int, int, float, float)", "moe", "ggml"),
    ("void k_argsort_f32_i32<(ggml_sort_order)1>(float const*, int*, int, int, int)", "sort", "ggml"),
    ("void conv_transpose_1d_kernel<float>(int, int, int, int, int, int, int, int, int, float const*, float const*, "
     "float*, int)", "conv", "ggml"),
    ("void ggml_cuda_ar_add_kernel<float, 8>(float**, float*, int, int, int)", "communication", "ggml"),
    # rocPRIM (TraceLens MI300 traces)
    ("void rocprim::ROCPRIM_400400_NS::detail::init_lookback_scan_state_kernel<rocprim::ROCPRIM_400400_NS::detail::"
     "lookback_scan_state<unsigned long, false, true>, rocprim::ROCPRIM_400400_NS::detail::block_id_wrapper<"
     "unsigned int, true> >(rocprim::ROCPRIM_400400_NS::detail::lookback_scan_state<unsigned long, false, true>)",
     "reduction", "rocPRIM"),
]


@pytest.mark.parametrize("name, family, library", ENGINE_NAMES, ids=[f"{i}-{f}-{lib}" for i, (_, f, lib)
                                                                     in enumerate(ENGINE_NAMES)])
def test_engine_kernels_classify(name, family, library):
    k = classify_name(name)
    assert (k.family, k.library) == (family, library), k
    assert (k.rule is not None) == (family != "unknown") and not (k.rule or "").startswith("generic.")


def test_ep_all_to_all_variant_names_the_op_and_library():
    k = classify_name(ENGINE_NAMES[0][0])
    assert k.variant == "deepep_internode_dispatch"
    assert classify_name("void deep_ep::intranode::notify_dispatch<8>(int const*)").variant == \
        "deepep_intranode_notify_dispatch"
    assert classify_name("EpCombineIntraNodeKernel_bf16_p2p").variant == "mori_combine"
    assert classify_name("mori_ep_dispatch_bf16_ws8_h7168_k8_80x16").variant == "mori_dispatch"
    assert classify_name(ENGINE_NAMES[16][0]).variant == "deepep_elastic_dispatch"
    assert classify_name("void dispatchKernel<4u, true, false>(int*)").variant == "pplx_dispatch"


def test_deepep_time_counts_as_communication_in_the_timeline():
    """A decode step where DeepEP dispatch + combine are 46% of the kernel time: the timeline must say so."""
    from mmprof.analysis.timeline.breakdown import timeline
    from tests.profile_builder import Synth

    s = Synth()
    t = 0
    for name, dur in [("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", 30_000), (ENGINE_NAMES[7][0], 23_000),
                      ("_ZN5aiter48fmoe_stage1_bf16_pertokenFp8_g1u1_16x128_4tg_pf2E", 24_000),
                      (ENGINE_NAMES[5][0], 23_000)]:
        s.kernel(name, t, dur, phase="decode", step=1)
        t += dur
    b = timeline(s.build()).breakdown("decode")
    assert b.span_ns == 100_000
    assert b.time_ns["communication"] == 46_000


# A broad list of GEMM-like kernel names (besides every one in the repo's real traces): none may be called
# elementwise / activation / norm / copy. Sources: ggml-org/ggml src/ggml-cuda (+ Metal kernel_mul_mv/mm and older
# llama.cpp names), vLLM / SGLang / AITER csrc and Triton kernels, trtllm-gen, DeepGEMM, FlashInfer gemm/.
GEMM_LIKE = [
    "mul_mat_q", "mul_mat_vec_q", "mul_mat_f", "mul_mat_vec_f", "mul_mat_f_ids", "mul_mat_vec_q_moe",
    "mul_mat_vec", "mul_mat_p021_f16_f32", "mul_mat_vec_nc_f16_f32", "dequantize_mul_mat_vec_q4_0",
    "void mul_mat_vec_q<32, 4, block_q4_0, 2, &(vec_dot_q4_0_q8_1(void const*, block_q8_1 const*, int const&))>"
    "(void const*, void const*, float*, int, int)",
    "_ZL13mul_mat_vec_qIL9ggml_type12ELi1EEvPKvS2_PKiPfiiiiiiiiiiii", "kernel_mul_mv_q4_0_f32",
    "kernel_mul_mm_f16_f32", "matmul_kernel", "_w8a8_block_fp8_matmul", "scaled_mm_kernel",
    "void cutlass_scaled_mm_sm90<cutlass::float_e4m3_t>(float*)", "fp8_blockwise_scaled_mm", "wvSplitK_hf_",
    "LLGemm1_kernel", "HGEMV_WFPerRow", "tinygemm_kernel", "kernel_tinygemm2_sm100_stage4", "router_gemm_kernel",
    "gemm_a8w8_blockscale_bpreshuffle_singlebuf_kernel_gfx942", "opus_bmm_splitk_reduce_kernel",
    "void tensorrt_llm::kernels::cutlass_kernels::cooperative_1x128_by_128x128_fp8_gemm_kernel<__nv_bfloat16>(int)",
    "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x64x64_MI16x16x1", "nvjet_tst_64x8_64x16_2x1_v_bz_splitK_TNT",
    "ampere_sgemm_128x64_nn", "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 2, 2, false>()",
    "void batched_gemm_kernel<float>(float*)", "_ZN5aiter43bf16gemm_fp32bf16_tn_128x64_bshuffle_splitkE",
]
# `fbgemm_gpu::` names the library FBGEMM, not a GEMM (its permute / hfp8 kernels are copies and quantisation)
GEMM_WORDS = re.compile(r"(?i)mul_mat|(?<!fb)gemm|gemv|matmul|mat_mul|(?:^|[_\s:])b?mm_|_mm\b|cijk|nvjet|xmma_gemm|"
                        r"mul_m[mv]_|wvsplitk|llgemm")
GEMM_LIKE += [n for n, f, _ in ENGINE_NAMES if f in ("gemm", "grouped_gemm") and GEMM_WORDS.search(n)]
NOT_FOR_GEMMS = {"elementwise", "activation", "norm", "copy"}


def _trace_kernel_names() -> list[str]:
    """Every kernel name in every trace under tests/data that has kernels (Kineto, rocpd, rocprofv3 CSV / JSON,
    nsys); the legacy rocprof v1 sample is not importable by design."""
    from mmprof.importers import import_paths

    traces = [p for p in sorted(DATA.rglob("*")) if p.is_file() and "legacy_rocprof_v1" not in str(p) and (
        p.name.endswith((".json.gz", ".db", ".sqlite")) or p.name.startswith("kernel_trace")
        or p.name == "14_results.json")]
    names: set[str] = set()
    with_kernels = 0
    for p in traces:
        prof = import_paths([p])
        if prof.n("kernels"):
            with_kernels += 1
            names.update(prof.col("kernels", "name", decode=True))
    assert with_kernels >= 20, with_kernels
    return sorted(names)


def test_no_gemm_like_name_lands_in_elementwise_activation_norm_or_copy():
    from_traces = [n for n in _trace_kernel_names() if GEMM_WORDS.search(n)]
    assert len(from_traces) > 80  # cuBLAS / nvjet / CUTLASS / hipBLASLt / CK / cuDNN implicit-GEMM names
    assert all(GEMM_WORDS.search(n) for n in GEMM_LIKE)
    wrong = {n: classify_name(n).family for n in from_traces + GEMM_LIKE if classify_name(n).family in NOT_FOR_GEMMS}
    assert not wrong, wrong
    # and the ones that are plain matrix products are called so (conv, embedding, MoE helpers aside)
    mm = [n for n in GEMM_LIKE if classify_name(n).family in ("gemm", "grouped_gemm")]
    assert len(mm) == len(GEMM_LIKE), sorted(set(GEMM_LIKE) - set(mm))


def test_ggml_prefill_is_mostly_matrix_multiplies():
    """The motivating case: a llama.cpp prefill whose time is 78% mul_mat_q must not read as elementwise."""
    names = ["void mul_mat_q<(ggml_type)12, 64, false>(char const*)", "void mul_mat_vec_q<(ggml_type)12, 1, false>"
             "(void const*)", "void flash_attn_ext_f16<128, 128, 4>(const char *)", "void rms_norm_f32<1024, true>"
             "(const float *)", "void k_bin_bcast<&(op_add(float, float)), float, float, float>(float const*)"]
    b = ProfileBuilder({"source": {"format": "kineto"}})
    t = 0
    for n, d in zip(names, [78_000, 4_000, 10_000, 3_000, 5_000]):
        b.row("kernels", rank=0, start_ns=t, dur_ns=d, name=n)
        t += d
    cov = coverage(events_of(b.build()))
    fam = {r["family"]: r["share"] for r in cov.by_family}
    assert fam["gemm"] == pytest.approx(0.82) and fam["elementwise"] == pytest.approx(0.05)
    assert cov.unclassified_share == 0.0
    assert {r["library"] for r in cov.by_library} == {"ggml"}


# Made-up names in the style of engines we have no rules for: they must stay unclassified (or, under a known
# library's namespace, that library's family-less catch-all), never take a family from a stray word.
UNKNOWN = [
    "void acme::kernels::persistent_step<__nv_bfloat16, 8>(acme::StepParams)",
    "void acme::runtime::k_dispatch_work<float, c10::Float8_e4m3fn>(float*, c10::Float8_e4m3fn const*)",
    "void acme::kernels::tile_worker<cutlass::gemm::GemmShape<128, 128, 64>, float>(float*)",
    "void xengine::rms_stage_kernel<float, __nv_fp8_e4m3>(float const*, __nv_fp8_e4m3*, int)",
    "void acme::cvt_stage<__nv_fp8_e4m3>(__nv_fp8_e4m3*, float const*, int)",
    "_ZN4acme7runtime12step_kernelIfEEvPf",
    "_ZL15fused_block_v2_kILi128EEvPKfPfi",
    "dispatch_kernel", "combine_tokens_v3", "kernel_42_xyz", "zzq_fused_op_17",
    "void lightcore::block_apply<float, acme::MulFunctor<float>, acme::softmax_tag>(float*)",
]


@pytest.mark.parametrize("name", UNKNOWN)
def test_unknown_engine_names_stay_unclassified(name):
    k = classify_name(name)
    assert (k.family, k.rule, k.evidence) == ("unknown", None, None), k


def test_a_lone_moe_word_is_moe_plumbing():
    # the grammar reads `moe` in a function name as MoE plumbing (routing / align / permute / reduce: vLLM's
    # moe_align_block_size, moe_sum, TurboMind's MoeGate / MoeReduce); the expert GEMMs say gemm or fused_moe
    k = classify_name("void acme::moe_stage<__nv_bfloat16>(acme::MoeArgs<__nv_bfloat16, attention_mask_t>)")
    assert (k.family, k.evidence, k.reason) == ("moe", "tokens", "function word 'moe'"), k


def test_unknown_kernels_under_a_known_library_get_no_family():
    for name, lib in [("_ZN5aiter23some_new_fancy_kernelIDF16bEEvPv", "AITER"),
                      ("void flashinfer::some_new_helper<128u>(float*)", "FlashInfer"),
                      ("void tensorrt_llm::kernels::brandNewKernel<__nv_bfloat16>(void*)", "TensorRT-LLM"),
                      ("__myl_Qzx_myl0_7", "TensorRT")]:
        k = classify_name(name)
        assert (k.family, k.library, k.rule) == ("unknown", lib, None), k


def test_myelin_names_its_fused_kernels_by_their_ops():
    # Myelin (TensorRT's fusion compiler) names a generated kernel after the ops it fuses: Resh Tran Mul Add is
    # reshape + transpose + mul + add, element-wise work of TensorRT
    k = classify_name("__myl_ReshTranMulAdd_myl0_7")
    assert (k.family, k.library, k.evidence) == ("elementwise", "TensorRT", "tokens"), k


def test_keywords_in_template_arguments_do_not_decide_the_family():
    # fp8 / e4m3 in a parameter type used to make any kernel a quantisation kernel
    assert classify_name("void cuda::reduce_fused_impl<__nv_bfloat16, false, false>(int4 const*, float const*, "
                         "__nv_fp8_interpretation_t)").family == "reduction"
    # a broad-keyword Triton rule used to call an Inductor pointwise kernel fused around SDPA "attention"
    assert classify_name("triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_view_10").family == \
        "elementwise"
    # KV-cache writes are kv_cache (their own family since issue 20), transposed convolutions are convolutions
    assert classify_name("reshape_and_cache_flash_kernel").family == "kv_cache"
    assert classify_name("conv2d_transpose_kernel").family == "conv"


@pytest.mark.parametrize("name, func", [
    ("void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*, long)", "vllm::rms_norm_kernel"),
    ("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
     "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*)", "vllm::fused_add_rms_norm_kernel"),
    ("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256EEEvPT0_", "aiter::add_rmsnorm_quant_kernel"),
    ("_ZN12_GLOBAL__N_114dispatchKernelILj4ELb1ELb1EEEvPi", "(anonymous namespace)::dispatchKernel"),
    ("_ZL7mul_f32PKfS0_Pfii", "mul_f32"),
    ("void (anonymous namespace)::store_kvcache<2048l>((anonymous namespace)::StoreKVCacheParams)",
     "(anonymous namespace)::store_kvcache"),
    ("void k_bin_bcast<&(op_add(float, float)), float>(float const*)", "k_bin_bcast"),
    ("void bar<1>(int) [clone .kd]", "bar"), ("foo.kd", "foo"), ("nvjet_tst_64x8_64x16_2x1_v_bz_TNT",
                                                                 "nvjet_tst_64x8_64x16_2x1_v_bz_TNT"),
])
def test_function_name(name, func):
    assert function_name(name) == func


def test_on_key_is_validated(tmp_path):
    f = tmp_path / "r.toml"
    f.write_text('[[rule]]\nid = "x"\npattern = "a"\nfamily = "gemm"\non = "args"\n')
    with pytest.raises(BadInput, match="on 'args' must be one of name, function"):
        load_rules([f])
    f.write_text('[[rule]]\nid = "x"\npattern = "^mine$"\nfamily = "gemm"\non = "function"\n'
                 'example = "void ns::mine<int>(int)"\n')
    with pytest.raises(BadInput, match="does not match"):  # the function name is ns::mine
        load_rules([f])
    f.write_text('[[rule]]\nid = "x"\npattern = "^ns::mine$"\nfamily = "gemm"\non = "function"\n'
                 'example = "void ns::mine<int>(int)"\n')
    rules = load_rules([f])
    assert rules.classify("void ns::mine<float>(float*)").rule == "x"
    assert rules.classify("void other<ns::mine>(int)").rule != "x"
