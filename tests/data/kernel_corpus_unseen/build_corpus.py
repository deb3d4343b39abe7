"""Build corpus.tsv: real kernel names of sources the rules were not written from, labelled from their source.

Usage (from the repository root, after extract_binary.py / ../kernel_corpus/extract_triton.py wrote their TSVs
into WORK, README.md says how):
    python tests/data/kernel_corpus_unseen/build_corpus.py WORK > tests/data/kernel_corpus_unseen/corpus.tsv

LABELS holds the labels: per source, one line per group of kernels of one source file or one kernel template,
most specific first: (regex searched in the qualified function name, family, path). The family is the one the
kernel's source says (what the kernel computes, not which library ships it); path is `fast` / `fallback` where the
source says the kernel is the tuned or the slow path, else `neutral`. A name no line covers, or whose line says None
(the source does not settle a family), is left out. The labels were written from the source before mmprof was run
on any of these names, and are kept as written (the benchmark compares mmprof with them).
"""
from __future__ import annotations

import random
import re
import sys
from pathlib import Path

from mmprof.names import function_name

# source key -> (TSV file in WORK, source column, library, platform, split, how many instances per function)
SOURCES: dict[str, tuple[str, str, str, str, str, int]] = {
    "fbgemm": ("fbgemm.tsv", "wheel:fbgemm_gpu-1.9.0", "FBGEMM", "cuda", "tune", 2),
    "fbgemm_genai": ("fbgemm_genai.tsv", "wheel:fbgemm_gpu_genai-1.9.0", "FBGEMM", "cuda", "tune", 2),
    "bnb_cuda": ("bnb_cuda.tsv", "wheel:bitsandbytes-0.50.2:libbitsandbytes_cuda128.so", "bitsandbytes", "cuda", "tune", 2),
    "bnb_rocm": ("bnb_rocm.tsv", "wheel:bitsandbytes-0.50.2:libbitsandbytes_rocm72.so", "bitsandbytes", "rocm", "tune", 2),
    "torchao": ("torchao_xf.tsv", "wheel:torchao-0.18.0", "torchao", "cuda", "heldout", 2),
    "sglang": ("tri_sglang.tsv", "wheel:sglang-0.5.23", "SGLang", "any", "tune", 1),
    "turbomind": ("turbomind.tsv", "wheel:lmdeploy-0.18.0:_turbomind.so", "TurboMind", "cuda", "heldout", 2),
    "lmdeploy": ("tri_lmdeploy.tsv", "wheel:lmdeploy-0.18.0", "LMDeploy", "any", "heldout", 1),
    "liger": ("tri_liger-kernel.tsv", "wheel:liger_kernel-0.8.5", "Liger-Kernel", "any", "heldout", 1),
    "miopen": ("miopen.tsv", "repo:ROCm/MIOpen@2d1fd997a", "MIOpen", "rocm", "tune", 2),
}

_CUB = [(r"^cub::.*RadixSort", "sort", "neutral"), (r"^cub::.*(?:Scan|ReduceByKey|Reduce)\w*Kernel$", "reduction", "neutral"),
        (r"^cub::", None, "neutral")]
_ATEN = [(r"^at::native::(?:vectorized_|unrolled_)?elementwise_kernel$", "elementwise", "neutral")]

LABELS: dict[str, list[tuple[str, str | None, str]]] = {
    # fbgemm_gpu (pytorch/FBGEMM fbgemm_gpu/src: split_embeddings_cache/, embedding_inplace_ops, jagged_tensor_ops/,
    # quantize_ops/, sparse_ops/, codegen/ (TBE forward / backward / optimizer templates); BSD-3-Clause)
    "fbgemm": _CUB + _ATEN + [
        (r"(?:lru|lfu|lxu)_cache_(?:find_uncached|insert|lookup|insert_byte)_kernel$", "embedding", "neutral"),  # TBE UVM cache
        (r"split_rowwise_adagrad_update_kernel$", "optimizer", "neutral"),   # embedding_inplace_ops / optimizer step
        (r"^(?:nbit::)?\w*(?:split|dense|ssd)_embedding\w*_codegen_forward\w*$|^(?:nbit::)?\w*embedding\w*forward\w*kernel\w*$",
         "embedding", "neutral"),
        (r"split_embedding(?:_nobag)?_backward_codegen_\w+$", "embedding", "neutral"),  # fused backward of the table
        (r"batched_unary_embeddings_(?:forward|backward)_kernel$", "embedding", "neutral"),
        (r"mx4|FP8rowwise|8bit_quantize|FP8_quantize|msfp_shared_exponent|_float_to_|rowwise_to_float|_qparam",
         "quantization", "neutral"),                                          # quantize_ops/
        (r"jagged_\w*elementwise\w*$", "elementwise", "neutral"),             # jagged_tensor_ops/
        (r"(?:jagged_dense|jagged_jagged)_bmm_kernel$|dense_vec_jagged_2d(?:_transposed)?_bmm$|outer_prod_jagged_2d_output$",
         "gemm", "neutral"),
        (r"jagged_softmax(?:_backward)?_kernel$", "reduction", "neutral"),
        (r"_segment_sum_csr_cuda_kernel$|auc_kernel$|_batched_complete_cumsum_kernel$", "reduction", "neutral"),
        (r"(?:^|::)(?:group_)?index_(?:select|add)\w*_2d\w*kernel$|jagged_index_(?:select|add)_2d_kernel$|"
         r"keyed_jagged_index_(?:select|add)_dim1_kernel$|masked_select_jagged_1d_compact_kernel$", "index", "neutral"),
        (r"(?:un)?pack_segments_cuda(?:_v2)?_kernel$|recat_copy_async_kernel$|fbgemm_gpu::copy_kernel$", "copy", "neutral"),
    ],
    # fbgemm_gpu_genai (pytorch/FBGEMM fbgemm_gpu/experimental/gen_ai/src: attention/, comm/ (car), kv_cache/,
    # quantize/, moe/; BSD-3-Clause)
    "fbgemm_genai": _CUB + _ATEN + [
        (r"all_reduce\w*$|::reduce_scatter$", "communication", "neutral"),   # comm/car.cu
        (r"rope_xpos_qkv_varseq_prefill_kernel\w*$", "rope", "neutral"),       # kv_cache/: RoPE + cache write, RoPE first
        (r"nope_qkv_varseq_prefill_kernel$|dequantize_(?:fp8|int4)_cache_kernel\w*$", "kv_cache", "neutral"),
        (r"gqa_attn_splitk_\w+$|mqa_attn_\w*kernel$", "attention", "neutral"),   # attention/gqa_attn_splitk.cu, mqa
        (r"^gemv_\w+$|cudaCoreGemm$", "gemm", "neutral"),                      # quantize/fast_gemv, cuda_core_gemm
        (r"silu_mul_quantize_i8_kernel$", "activation", "neutral"),
        (r"Amax|QuantizeScale|quantize\w*kernel$|cvt_fp16_to_fp4$|fused_quantize_rowwise$|scaleMatrix\w*$|quantizeQKVPerHead$",
         "quantization", "neutral"),
        (r"index_shuffling_kernel$|gather_or_scatter_along_first_dim_kernel$|set_\w*kernel_args\w*$|set_grouped_gemm_args_kernel$",
         "moe", "neutral"),                                                   # moe/ routing, token shuffle, grouped-GEMM args
        (r"^cutlass::reorder_tensor_kernel$", "copy", "neutral"),
        (r"^cutlass::(?:device_kernel|Kernel)$", "WRAPPED", "neutral"),
    ],
    # bitsandbytes (bitsandbytes-foundation/bitsandbytes csrc/kernels.cu and csrc/kernels.hip; MIT)
    "bnb_cuda": [
        (r"^k(?:Precondition)?Optimizer\w+$", "optimizer", "neutral"),           # 32-bit / 8-bit blockwise optimizer steps
        (r"^k(?:Quantize|Dequantize)Blockwise\w*$|^kInt8VectorQuant$|^kdequant_mm_int32_fp16$", "quantization", "neutral"),
        (r"^gemm_4bit_\w+$|^kgemm_4bit_inference_naive$", "gemm", "neutral"),   # 4-bit (NF4/FP4) GEMM / GEMV
        (r"^kfunc$", "elementwise", "neutral"),                                 # fill / arange / mul (FUNC enum)
    ],
    # torchao (pytorch/ao torchao/csrc/cuda: mx_kernels/, sparse (2:4) kernels, cutlass rowwise / fp8 GEMMs,
    # moe padding helpers; BSD-3-Clause)
    "torchao": [
        (r"mxfp8_quantize_kernel", "quantization", "neutral"),
        (r"mx_blocked_layout", "copy", "neutral"),   # scale layout swizzle (to_blocked): a data movement
        (r"sparse24_sparsify|sparse24_largest_mask|sparse24_apply|meta_shuffle", "quantization", "neutral"),  # 2:4 compress
        (r"sparseNM_dense", "copy", "neutral"),  # N:M sparse -> dense expansion
        (r"fused_(?:un)?pad_token_groups_kernel$|compute_padded_offsets_kernel$", "moe", "neutral"),  # MoE group padding
        (r"^cutlass::(?:device_kernel|Kernel)$", "WRAPPED", "neutral"),
    ],
    # SGLang (sgl-project/sglang python/sglang: the Triton kernels of srt/layers and kernels/ops; Apache-2.0)
    "sglang": [
        (r"^_?(?:chunk_scan|chunk_state|chunk_cumsum|bmm_chunk|state_passing)_fwd_kernel$|^_causal_conv1d_(?:fwd|update)_kernel$|"
         r"^_linear_attn_decode_kernel$|^_fwd_(?:none_)?diag_kernel$|^_fwd_kv_(?:parallel|reduce)$", "ssm", "neutral"),
        (r"^_fwd_grouped_kernel_stage1$|^_fwd_kernel_stage[12]$|^_fwd_kernel$|^_fwd_kernel_unified$|^_lean_attention_decode_kernel$|"
         r"^_flash_attn_fwd_with_block_score_kernel$", "attention", "neutral"),
        (r"^_gqa_share_sparse_(?:fwd|decode)_kernel\w*$|^_fused_gather_attn_dsv4\w*_kernel$", "sparse_attention", "neutral"),
        (r"^_fwd_kernel_ep_(?:scatter_[12]|gather)$|^_compute_expert_offsets_kernel$|^_compute_src2dst_kernel$|"
         r"^_fused_moe_preprocess_kernel$|^_gemma4_routing_kernel$|^_hash_topk_triton_kernel$|^_fused_append_shared_experts\w*_kernel$",
         "moe", "neutral"),
        (r"^_grouped_gemm_kernel$|^_fused_moe_lora_kernel$", "grouped_gemm", "neutral"),
        (r"^_fp8_scaled_mm_kernel$|^_batched_gemm_bf16_fp8_grid_kernel$", "gemm", "neutral"),
        (r"^_(?:gemma_)?(?:fused_add_)?rmsnorm_kernel$|^_gemma_rmsnorm_residual_kernel$|^_layer_norm_fwd_1pass_kernel$|"
         r"^_group_norm_(?:stats|apply)_kernel$|^_fused_sandwich_residual_rmsnorm_kernel$|^_fused_qk_gemma_rmsnorm_kernel$",
         "norm", "neutral"),
        (r"^_fused_qk_norm_rope_store_kernel$|^_fused_qk_rope_reshape_and_cache_kernel$|^_complex_rope_kernel$|"
         r"^_fused_norm_rope_kernel$|^_ltx2_split_rotary_kernel$", "rope", "neutral"),
        (r"^_copy_pages_kernel$|^_dequantize_k_cache_paged_kernel$|^_get_k_and_s_triton_kernel$|^_gather_fp4_index_k_kernel$",
         "kv_cache", "neutral"),
        (r"^_per_token_group_quant\w*$|^_fp8_quantize_kernel$|^_act_quant_kernel$|^_dequant_group_fp8_kernel$|"
         r"^_fp8_rowwise_kernel$", "quantization", "neutral"),
        (r"^_bias_silu_kernel$|^_bias_glu_kernel$|^_fused_sigmoid_mul_kernel$|^_gathered_softcap_logits_kernel$", "activation", "neutral"),
        (r"^_log_softmax_kernel$|^_combine_lse$", "reduction", "neutral"),
        (r"^_combine_kernel$|^_argmax_(?:partial|final)_kernel$", "sampling", "neutral"),  # temperature_softmax / row_argmax
    ],
    # TurboMind (InternLM/lmdeploy src/turbomind: kernels/, comm/, models/, layers/sampling_layers; Apache-2.0)
    "turbomind": _CUB + [
        (r"comm::(?:All(?:reduce|gather)\w*|Broadcast\w*)$", "communication", "neutral"),  # incl. allreduce + RMSNorm fused
        (r"comm::Barrier", None, "neutral"),
        (r"RMSNorm|LayerNorm|rms_norm_gated_kernel|L2NormalizeQKKernel", "norm", "neutral"),
        (r"RotaryPosEmb|mropeScatterKernel", "rope", "neutral"),
        (r"^turbomind::attention_kernel$|^turbomind::attention::reduce$", "attention", "neutral"),
        (r"linear_attn::delta_rule::|fused_conv1d_batched_kernel", "ssm", "neutral"),
        (r"^turbomind::gemm::(?:gemm_kernel\w*|gemm_universal\w*)$", "gemm", "neutral"),
        (r"^turbomind::gemm::\(anonymous namespace\)::pack_\w+$|^turbomind::gemm::convert_kernel$", "copy", "neutral"),  # weight repack
        (r"Moe(?:Gate|Softmax|Scan)\w*|MoeA2AMappingKernel|MoeGatherKernel|MoeReduceKernel|MoeDispatchScales", "moe", "neutral"),
        (r"BanBadWordsKernel|RepetitionPenaltyKernel|batchApply\w*Penalty\w*|topPMinPFilter|LogitsBitmaskKernel|"
         r"topKSortStage[12]|topp_beam_topk_kernel|topPSortInitialize|^turbomind::sampling$", "sampling", "neutral"),
        (r"quant_symm_(?:block|row)|dequant_symm_(?:block|row)|QuantizeGroupwise_Kernel|BlockscaleToGroupscale|"
         r"NvFp4GlobalScale", "quantization", "neutral"),
        (r"ProcessKV_v2|flattenKV_v2|mla_copy_qkv_kernel", "kv_cache", "neutral"),
        (r"ActivationKernel|SigmoidGateMultiplyKernel", "activation", "neutral"),
        (r"embeddingLookupKernel|addEmbeddingsVecKernel", "embedding", "neutral"),
        (r"CopyKernelND|TransposeCopyKernel|transpose102|transposeAxis01|transpose_2d_kernel|batchedCopy|indexedCopy", "copy", "neutral"),
        (r"^turbomind::softmax$", "reduction", "neutral"),
        (r"castFloat2D|cast_kernel|dtype_cast_kernel|biasKernel|residualScaleKernel", "elementwise", "neutral"),
        (r"curand_(?:init|uniform|normal)$", "elementwise", "neutral"),
    ],
    # LMDeploy's PyTorch engine (InternLM/lmdeploy lmdeploy/pytorch/kernels: Triton kernels; Apache-2.0)
    "lmdeploy": [
        (r"^_silu_and_mul(?:_moe_ep)?_kernel$|^_v4_swiglu_quant_fp8_kernel$", "activation", "neutral"),
        (r"^apply_rotary_pos_emb_qk_kernel$", "rope", "neutral"),
        (r"^awq_linear_kernel$|^_gemm_fp8(?:_tma)?_kernel$|^_fp8_gemm_nt_\w+_kernel$|^_linear(?:_add)?$", "gemm", "neutral"),
        (r"^_bitonic_topk_kernel[01]$", "topk", "neutral"),
        (r"^_fused_moe_w4a16(?:_compact)?_kernel$|^fused_moe(?:_blocked_fp8|_w8a8|_v4_fp4)?(?:_compact)?_kernel$", "grouped_gemm", "neutral"),
        (r"^_fused_moe_w4a16_route_kernel$|^_sorted_idx_phase1_kernel$|^_route_prefix_kernel$|^_scatter_sorted_idx_kernel$|"
         r"^_scatter_and_fill_block_meta_kernel$|^_single_cta_route_prepare_kernel$|^_moe_reduce_kernel$|^_fused_noaux_tc_kernel$|"
         r"^_single_group_topk_router_kernel$|^_fwd_kernel_ep_(?:scatter\w*|gather)$", "moe", "neutral"),
        (r"^_copy_cache_blocks_kernel$|^_fill_kv_cache\w*_kernel$|^_flatten_kv_cache\w*$|^flatten_kv_cache_mla_fp8_kernel$|"
         r"^_flatten_v4_kv_kernel$|^_pack_window_tokens_fp8_kernel$", "kv_cache", "neutral"),
        (r"^_flash_prefill_fwd_kernel$|^_fwd_grouped_split(?:_quant)?_kernel$|^_reduce_split_kernel$", "attention", "neutral"),
        (r"^_fp8_index_kernel$|^_score_kv\w*_kernel$", "indexer_score", "neutral"),
        (r"^_build_\w*sparse_indices_kernel$", "sparse_attention", "neutral"),
        (r"^_multinomial_sampling_kernel$|^_rejection_(?:greedy|random)_sample_kernel$|^_sample_recovered_tokens_kernel$", "sampling", "neutral"),
        (r"^add_rms_norm_kernel$|^rms_norm_quant_kernel$|^add_rms_norm_quant_kernel$", "norm", "neutral"),
        (r"^_per_token_quant_int8$|^_quant_fp8_kernel$", "quantization", "neutral"),
        (r"^_gated_delta_preprocess_kernel$|^_state_(?:select|scatter)_kernel$", "ssm", "neutral"),
        (r"^_all_gather_kernel_inner$", "communication", "neutral"),
        (r"^_fused_lora_kernel$", "gemm", "neutral"),
        (r"^_add_kernel$", "elementwise", "neutral"),
    ],
    # Liger-Kernel (linkedin/Liger-Kernel src/liger_kernel/ops: Triton kernels; BSD-2-Clause)
    "liger": [
        (r"cross_entropy|_ce_|_kl_div|_kldiv|_jsd_kernel|_tv_distance|grpo_loss|selective_log_softmax", "reduction", "neutral"),
        (r"rms_norm|layer_norm|group_norm|poly_norm|_dyt_", "norm", "neutral"),
        (r"rope|mrope", "rope", "neutral"),
        (r"swiglu|geglu|relu_squared", "activation", "neutral"),
        (r"softmax|sparsemax", "reduction", "neutral"),
        (r"neighborhood_attention|_neighborhood_", "attention", "neutral"),
        (r"_moe_router_(?:histogram|prefix_sum|scatter)_kernel$|_token_gather_weighted_sum_kernel$", "moe", "neutral"),
        (r"_fused_up_proj_swiglu_kernel$|_fused_down_proj_kernel$|_moe_bwd_\w+_kernel$", "grouped_gemm", "neutral"),
        (r"^matmul_kernel$", "gemm", "neutral"),
        (r"^embedding_(?:forward|backward)_kernel\w*$", "embedding", "neutral"),
        (r"element_mul_kernel$", "elementwise", "neutral"),
    ],
}

# MIOpen (ROCm/MIOpen src/kernels: the kernel entry points of its .cl / .cpp / .s files, named as rocprof shows
# them; MIT). Labelled by the source file each comes from (given in the row).
LABELS["miopen"] = [
    (r"^(?:Amp)?Adam\w*$|^Transformers\w*AdamW\w*$", "optimizer", "neutral"),            # MIOpenAdam.cpp
    (r"Layernorm|LayerNorm|GroupNorm|BatchNorm|^miopenGcnAsmBN", "norm", "neutral"),     # MIOpenLayerNorm / BatchNorm*
    (r"^Calculation\w*FwdContiguous$|^ExtremeFwdContiguous$|^Reduce\w*|^gridwise_generic_reduce",
     "reduction", "neutral"),                                                          # MIOpenReduce*.cpp
    (r"^Cat\d+FwdPacked$", "copy", "neutral"),                                          # MIOpenCat.cpp
    (r"^Col2Im", "conv", "neutral"),                                                     # MIOpenCol2Im*.cl
    (r"^DropoutKernel$", "elementwise", "neutral"),
    (r"^GLU|^PReLU|^MIOpenActive", "activation", "neutral"),                            # MIOpenGLU / PReLU / Neuron
    (r"GetItem|Getitem", "index", "neutral"),
    (r"^KthvalueFwd$", "topk", "neutral"),
    (r"^LSTM\w*HidUpdate$", "rnn", "neutral"),                                           # MIOpenRNNHiddenStateUpdate
    (r"MarginLoss", "reduction", "neutral"),                                             # losses
    (r"^Op\d?d?Tensor\w*$|^OpTensor\w*$|^SubTensorOpWith(?:Scalar|Transform)\w*$|^vector_add", "elementwise", "neutral"),
    (r"^SubTensorOpWith(?:CastTensor|SubTensor)\w*$", "copy", "neutral"),
    (r"^RoPE", "rope", "neutral"),
    (r"^Softmax(?:Forward|Backward)$", "reduction", "neutral"),
    (r"^UniversalTranspose$|^transpose_", "copy", "neutral"),
    (r"^naive_conv_", "conv", "fallback"),       # gpu_reference_kernel/: the reference convolution beside the tuned ones
    (r"^igemm_|^miopenConv|^miopenGcnAsmConv|^miopenSp3AsmConv|^MIOpenConvUni$|Winograd", "conv", "neutral"),
    (r"^mloPoolingForwardNaive$", "pooling", "fallback"),   # MIOpenPoolingForwardNaive.cl: the naive pooling
]
# bnb_rocm shares the CUDA labels (csrc/kernels.hip is the HIP port of csrc/kernels.cu)
LABELS["bnb_rocm"] = LABELS["bnb_cuda"]
# the wrapped kernel of a cutlass::device_kernel / Kernel decides its label
WRAPPED = [(r"Sparse|sparse", "gemm"), (r"GemmUniversal|Gemm", "gemm")]


def label(source: str, name: str) -> str | tuple[str, str] | None:
    fn = function_name(name)
    for rx, fam, path in LABELS[source]:
        if re.search(rx, fn):
            if fam == "WRAPPED":
                inner = name[name.find("<") + 1:]
                if "StructuredSparseCompressor" in inner:
                    return ("quantization", path)
                for wrx, wfam in WRAPPED:
                    if re.search(wrx, inner):
                        return (wfam, path)
                return None
            return None if fam is None else (fam, path)
    return None


def main(work: str) -> None:
    random.seed(20)
    print("# name\tfamily\tlibrary\tplatform\tpath\tsource\tsplit")
    for key, (tsv, src, lib, platform, split, per) in SOURCES.items():
        p = Path(work) / tsv
        if not p.exists():
            print(f"missing {p}", file=sys.stderr)
            continue
        rows = [ln.rstrip("\n").split("\t") for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()]
        seen: dict[str, int] = {}
        for r in rows:
            name = r[0].strip()
            if not name or name.startswith("__cuda_"):
                continue
            lab = label(key, name)
            if lab is None:
                continue
            fn = function_name(name)
            if seen.get(fn, 0) >= per:
                continue
            seen[fn] = seen.get(fn, 0) + 1
            fam, path = lab
            nlib = lib
            if fn.startswith("cub::"):
                nlib = "CUB"
            elif fn.startswith("at::"):
                nlib = "PyTorch"
            elif fn.startswith("cutlass::"):
                nlib = "CUTLASS"
            file = r[1].strip() if len(r) > 1 else ""
            print(f"{name}\t{fam}\t{nlib}\t{platform}\t{path}\t{src}:{file}\t{split}")


if __name__ == "__main__":
    main(sys.argv[1])
