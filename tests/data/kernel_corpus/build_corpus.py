"""Build corpus.tsv: real kernel names with the family their source code says (README.md says how).

Usage (from the repository root, after extract_symbols.py / extract_triton.py wrote their TSVs into WORK):
    python tests/data/kernel_corpus/build_corpus.py WORK > tests/data/kernel_corpus/corpus.tsv

The labels are the author's reading of each kernel's source (file given in the row), written as LABELS below: one
line per group of kernels of one source file or one kernel template, most specific first. A name no label line
covers, or whose line says None (launched rarely, or no family fits without guessing), is left out. The labels are
written from the source, not from mmprof's rules: the corpus test compares the two.
"""
from __future__ import annotations

import gzip
import json
import random
import re
import sys
from collections import defaultdict
from pathlib import Path

from mmprof.names import function_name

# (regex searched in the kernel's qualified function name, family, library, platform); first hit wins.
LABELS: list[tuple[str, str | None, str, str]] = [
    # --- vLLM 0.26.0 traces (PyTorch, cuBLAS, FlashAttention 3, FlashInfer) and their source
    (r"^memcpy32_post$", None, "", ""),
    (r"distribution_elementwise_grid_stride_kernel", "elementwise", "PyTorch", "any"),  # uniform_ / exponential_
    (r"elementwise_kernel_with_index", "elementwise", "PyTorch", "any"),                 # arange
    (r"CatArrayBatchedCopy|direct_copy_kernel|bfloat16_copy_kernel", "copy", "PyTorch", "any"),
    (r"cunn_SoftMax", "reduction", "PyTorch", "any"),
    (r"indexSelect|_scatter_gather|index_elementwise_kernel|vectorized_gather_kernel", "index", "PyTorch", "any"),
    (r"^at::native::reduce_kernel$", "reduction", "PyTorch", "any"),
    (r"^at::native::(?:vectorized_|unrolled_)?elementwise_kernel$", "elementwise", "PyTorch", "any"),
    (r"cub::.*Scan", "reduction", "CUB", "cuda"),
    (r"cub::.*RadixSort", "sort", "CUB", "cuda"),
    (r"cub::.*EmptyKernel", None, "", ""),
    (r"^nvjet_|xmma_gemm|splitKreduce|^dot_kernel$|^reduce_1Block_kernel$", "gemm", "cuBLAS", "cuda"),
    (r"^cutlass::Kernel2?$|^cutlass::device_kernel$", "WRAPPED", "", ""),  # decided by the wrapped kernel below
    (r"^flash::(?:prepare_varlen_num_blocks_kernel|flash_fwd_kernel|flash_fwd_splitkv_kernel|flash_fwd_splitkv_combine_kernel)$",
     "attention", "FlashAttention", "cuda"),
    (r"^flash::flash_fwd_sparse_kernel$", "sparse_attention", "vLLM", "cuda"),        # vllm-flash-attn sparse
    (r"^flash::flash_fwd_splitkv_mla", "attention", "FlashMLA", "cuda"),
    (r"flashinfer::norm::", "norm", "FlashInfer", "cuda"),
    (r"flashinfer::sampling::", "sampling", "FlashInfer", "cuda"),
    # vLLM model-runner Triton kernels (vllm/v1/worker, vllm/v1/attention/ops, vllm/model_executor)
    (r"^_compute_slot_mappings?_kernel$|^_compressed_slot_mapping_kernel$|^eagle_step_slot_mapping_metadata_kernel$", "kv_cache", "vLLM", "any"),
    (r"^_gqa_sparse_(?:fwd|decode)_kernel$|^_merge_topk_attn_out_kernel$", "sparse_attention", "vLLM", "any"),
    (r"^_(?:decode|index_block)_score_kernel$", "indexer_score", "vLLM", "any"),
    (r"^_topk_index_(?:partial_|merge_)?kernel$", "topk", "vLLM", "any"),
    (r"^_topk_topp_kernel$|^_min_p_kernel$|^_temperature_kernel$|^_gumbel_sample_kernel$|^_penalties_kernel$|"
     r"^_bad_words_kernel$|^_topk_log_softmax_kernel$|^rejection_(?:greedy|random)_sample_kernel$|"
     r"^sample_recovered_tokens_kernel$|^_rejection_kernel$|^_resample_kernel$|^_compute_local_logits_stats_kernel$|"
     r"^_compute_cumulative_log_p_kernel$|^_apply_grammar_bitmask_kernel$", "sampling", "vLLM", "any"),
    # vLLM's sampler also has _bias_kernel (logit_bias.py) and _bincount_kernel (penalties.py): names that say nothing
    # of sampling, left out (README.md "Not in the corpus")
    # --- vLLM csrc (vllm 0.26.0 wheel: _C, _moe_C; csrc/*.cu)
    (r"^vllm::(?:act_and_mul_kernel\w*|swigluoai_and_mul_kernel|activation_kernel|act_and_mul_quant_kernel|"
     r"silu_mul_fp8_quant_deep_gemm_kernel|silu_and_mul_per_block_quant_kernel|silu_mul_cvt_fp16_to_fp4)$", "activation", "vLLM", "any"),
    (r"^vllm::(?:static_scaled_int8\w*|dynamic_scaled_int8\w*|scaled_fp8_quant\w*|dynamic_per_token_scaled_fp8\w*|"
     r"cvt_fp16_to_fp4\w*|mxfp4_cvt_fp16_to_fp4)$|^per_token_group_quant_8bit\w*$", "quantization", "vLLM", "any"),
    (r"^vllm::(?:fused_add_rms_norm\w*|rms_norm\w*)$", "norm", "vLLM", "any"),
    (r"^vllm::rotary_embedding_kernel$|^tensorrt_llm::kernels::fusedQKNormRope\w*$|^vllm::concat_and_cache_mla_rope_fused_kernel$|"
     r"^vllm::\w+_fused_ops::fused\w*Rope\w*Insert\w*$", "rope", "vLLM", "cuda"),
    (r"^vllm::(?:reshape_and_cache\w*|concat_and_cache_mla_kernel|concat_and_cache_ds_mla_kernel|cp_gather_cache|"
     r"gather_and_maybe_dequant_cache|cp_gather_indexer_k_quant_cache_kernel|indexer_k_quant_and_cache_kernel|"
     r"cp_gather_and_upconvert_fp8_kv_cache)$|^vllm::deepseek_v4_fused_ops::fusedDeepseekV4FullCacheKernel$", "kv_cache", "vLLM", "any"),
    (r"^vllm::ConcatMLAQKernel$", "copy", "vLLM", "any"),
    (r"^vllm::merge_attn_states_kernel$", "attention", "vLLM", "any"),
    (r"^vllm::(?:topKPerRow\w+|filtered_topk::\w+|persistent::persistent_topk_kernel|cooperative::cooperative_topk\w*)$", "topk", "vLLM", "cuda"),
    (r"^vllm::apply_repetition_penalties_kernel$", "sampling", "vLLM", "any"),
    (r"^selective_scan_fwd_kernel$", "ssm", "vLLM", "any"),
    (r"^vllm::cross_device_reduce_\dstage$", "communication", "vLLM", "any"),
    (r"^vllm::tensorrt_llm::minimax_reduce\w*lamport\w*$", "communication", "vLLM", "cuda"),  # all-reduce + RMSNorm
    (r"^vllm::gptq::gemm_half_q_half\w*$|^sglang::gptq::gemm_half_q_half\w*$", "gemm", "vLLM", "any"),
    (r"^(?:vllm|sglang)::gptq::(?:reconstruct\w*)$|^vllm::awq::dequantize_weights$", "quantization", "vLLM", "any"),
    (r"^(?:vllm|sglang)::gptq::(?:shuffle_\dbit_kernel|make_sequential_\dbit_kernel)$", "copy", "vLLM", "any"),
    (r"^vllm::awq::gemm_forward_4bit\w*$", "gemm", "vLLM", "cuda"),
    (r"^machete::prepack_B_kernel$|^marlin::(?:gptq|awq)_marlin_repack_kernel$|^(?:marlin::|marlin_moe_wna16::)?permute_cols_kernel$|"
     r"^cutlass::reorder_tensor_kernel$|^allspark::rearrange_kn_weight\w*$", "copy", "vLLM", "cuda"),
    (r"^marlin_int4_fp8_preprocess_kernel\w*$|^allspark::restore_\w*dequantize\w*$", "quantization", "vLLM", "cuda"),
    (r"^marlin::Marlin(?:Default)?$|^allspark::\w*gemm\w*$|^fused_a_gemm_kernel$|^fp32_router_gemm_kernel$|^router_gemm_kernel_\w+$", "gemm", "vLLM", "cuda"),
    (r"^marlin_moe_wna16::Marlin(?:Default)?$|^moe_wna16_gemm_kernel$", "grouped_gemm", "vLLM", "cuda"),
    (r"^_?_?(?:mxfp4_)?get_group_gemm_starts$|^compute_(?:problem_sizes\w*|batched_moe_data|expert_blockscale_offsets|arg_sorts|expert_offsets)$",
     "moe", "vLLM", "cuda"),
    (r"^vllm::moe::\w+$|^preprocessTopkIdKernel$|^computeExpertFirstTokenOffsetKernel$|^expandInputRowsKernel$|"
     r"^finalizeMoeRoutingKernel$|^shuffleInputRowsKernel$|^kimi_k2_moe_fused_gate_kernel\w*$", "moe", "vLLM", "any"),
    # FlashMLA (vendored in vllm/_flashmla_C and sgl-kernel flashmla_ops)
    (r"get_mla_metadata_kernel\w*$|^smxx::decode::flash_fwd_mla_combine_kernel$|^sm90::flash_fwd_splitkv_mla_kernel$", "attention", "FlashMLA", "cuda"),
    (r"sparse_attn_fwd\w*kernel$|flash_fwd_splitkv_mla_fp8_sparse_kernel$", "sparse_attention", "FlashMLA", "cuda"),
    # sgl-kernel
    (r"^concat_mla_(?:k|absorb_q)_kernel$", "copy", "SGLang", "cuda"),
    # --- FlashInfer cubins (trtllm-gen)
    (r"^fmhaSm1\d\d[af]?Kernel_", "attention", "TensorRT-LLM", "cuda"),
    (r"^bmm_\w+_sm1\d\d[af]$", "grouped_gemm", "TensorRT-LLM", "cuda"),
    (r"^gemm_\w+_sm1\d\d[af]$", "gemm", "TensorRT-LLM", "cuda"),
    (r"^deep_gemm::", "WRAPPED", "", ""),
    # --- AITER asm (hsa/<arch>/...) and AITER Triton (aiter/ops/triton)
    (r"^aiter::fmoe_|^fmoe_", "grouped_gemm", "AITER", "rocm"),
    (r"^aiter::fmha_", "attention", "AITER", "rocm"),
    (r"^aiter::pa_|^pa_a16w\w+$|^pa_kernel_func$", "attention", "AITER", "rocm"),
    (r"^aiter::mla_", "attention", "AITER", "rocm"),
    (r"^aiter::(?:f4gemm|bf16gemm|I8gemm|i8gemm)\w*$|^flatmm_uk_\w+$|^f8_block_scale_mi350_x\d+$", "gemm", "AITER", "rocm"),
    (r"^aiter::topksoftmax_", "moe", "AITER", "rocm"),
    (r"^allreduce_(?:rmsnorm|layernorm)\w*_kernel$|^allreduce_kernel_func$", "communication", "AITER", "rocm"),
    (r"^layer_norm_kernel_func$|^layer_norm_qnt$", "norm", "AITER", "rocm"),
]

# Triton kernels (both wheels): name -> (family, platform); the library is the wheel's engine (vLLM / AITER).
TRITON: dict[str, str] = {}
for fam, names in {
    "grouped_gemm": "fused_moe_kernel fused_moe_kernel_gptq_awq _fused_moe_kernel _fused_moe_kernel_gptq_awq _fused_moe_kernel_mxfp4 "
                    "_fused_moe_persistent_kernel _fused_moe_silu_kernel _moe_gemm_a8w4 _mxfp8_grouped_gemm_kernel "
                    "batched_triton_kernel expert_triton_kernel fused_moe_nvfp4_emulation_kernel _fused_moe_lora_kernel "
                    "e2e_moe_kernel gmm_kernel m_grouped_bf16_gemm_contiguous_tl_impl",
    "gemm": "triton_w4a16_gemm_kernel awq_gemm_kernel scaled_mm_kernel matmul_kernel_persistent bmm_kernel _w8a8_block_int8_matmul "
            "_gemm_a8w8_kernel _gemm_a8w8_blockscale_kernel _gemm_a16_w16_kernel _gemm_afp4_wfp4_kernel _batched_gemm_a8w8_kernel "
            "_batched_gemm_bf16_kernel _gemm_a16w8_blockscale_kernel _mxfp8_linear_kernel _triton_w4a16_skinny_fmt_kernel",
    "attention": "kernel_unified_attention kernel_unified_attention_2d kernel_unified_attention_3d kernel_paged_attention_2d "
                 "_fwd_kernel _fwd_kernel_alibi _fwd_kernel_stage1 _fwd_kernel_stage2 _fwd_grouped_kernel_stage1 attn_fwd _attn_fwd "
                 "_paged_attn_decode_v1_w_dot_kernel _paged_attn_decode_v2_w_dot_kernel _paged_attn_decode_v2_w_dot_reduce_kernel "
                 "kernel_unified_attention_diffkv kernel_reduce_segments_diffkv _correct_attn_cp_out_kernel _hstu_attn_fwd",
    "sparse_attention": "_sparse_attn_decode_partial_kernel _sparse_attn_decode_ragged_kernel _sparse_attn_prefill_ragged_kernel "
                        "_bf16_mla_sparse_kernel _kernel_unified_attention_sparse_mla_2d",
    "indexer_score": "_fp8_mqa_logits_kernel _deepgemm_fp8_paged_mqa_logits _deepgemm_fp8_paged_mqa_logits_stage1",
    "ssm": "_selective_scan_update_kernel _chunk_scan_fwd_kernel _chunk_state_fwd_kernel _state_passing_fwd_kernel _bmm_chunk_fwd_kernel "
           "_chunk_cumsum_fwd_kernel fused_recurrent_gated_delta_rule_fwd_kernel fused_recurrent_gated_delta_rule_packed_decode_kernel "
           "fused_sigmoid_gating_delta_rule_update_kernel chunk_gated_delta_rule_fwd_kernel_h_blockdim64 chunk_fwd_kernel_o "
           "chunk_gla_fwd_kernel_o chunk_scaled_dot_kkt_fwd_kernel recompute_w_u_fwd_kernel _linear_attn_decode_kernel "
           "_bailing_linear_attn_decode_spec_step_kernel fused_gdn_gating_kernel kda_gate_fwd_kernel",
    "conv": "_causal_conv1d_fwd_kernel _causal_conv1d_update_kernel",
    "norm": "_rms_norm_kernel _rmsnorm_fwd_kernel _add_rmsnorm_fwd_kernel _gemma_rmsnorm_kernel _gemma_fused_add_rmsnorm_kernel "
            "_layer_norm_fwd_1pass_kernel layer_norm_fwd_kernel layer_norm_gated_fwd_kernel l2norm_fwd_kernel _fused_q_kv_rmsnorm_kernel "
            "_fused_mtp_input_rmsnorm_kernel _quant_rms_norm_kernel _fused_add_rmsnorm_kernel _layernorm_kernel _fused_add_layernorm_kernel "
            "_fused_rms_fp8_group_quant_kernel _fused_rms_mxfp4_quant_kernel _quant_fused_add_rmsnorm_kernel _rmsnorm_gelu_kernel",
    "rope": "rotary_kernel _triton_mrope_forward _fused_norm_rope_kernel _fused_qk_rmsnorm_rope_gate_kernel _rope_kernel_sbhd_fwd "
            "_rope_kernel_thd_fwd _rope_kernel_cached_thd_2c_gqa_fwd _fused_qk_rope_reshape_and_cache_kernel _fused_qk_rope_cat_and_cache_mla_kernel "
            "_fused_qkv_split_qk_rope_kernel _prepare_rope_positions_kernel _fused_indexer_q_rope_quant_kernel",
    "activation": "_silu_and_mul_triton_kernel _swiglu_oai_kernel _swiglustep_and_mul_kernel _silu_mul_fp8_quant_deep_gemm "
                  "_silu_mul_quant_fp8_packed_kernel _act_mul_and_dynamic_fp8_group_quant_kernel _act_mul_and_dynamic_mxfp4_quant_kernel "
                  "_swiglu_limit_pad_aware_kernel",
    "quantization": "_per_token_group_quant_fp8 _per_token_group_quant_int8 _per_token_quant_int8 awq_dequantize_kernel "
                    "_dequantize_nvfp4_kernel _quantize_pad_fp8_kernel _dynamic_mxfp4_quant_kernel _dynamic_per_token_quant_fp8_i8_kernel "
                    "_static_per_tensor_quant_fp8_i8_kernel _dynamic_per_tensor_quant_fp8_i8_kernel _fp8_ue8m0_quantize",
    "kv_cache": "reshape_and_cache_kernel_flash reshape_and_cache_kernel_flash_diffkv cp_mha_gather_cache_kernel kv_cache_gather_kernel "
                "kv_cache_scatter_kernel _insert_index_cache_kernel _indexer_k_quant_and_cache_kernel _cp_gather_indexer_quant_cache_kernel "
                "_fp8_quant_and_cache_write _zero_kv_blocks_kernel _swap_blocks_kernel _dequantize_and_gather_k_kernel "
                "reshape_and_cache_shuffle_kernel quantize_and_insert_k_kernel _reshape_cache_int4_kernel",
    "moe": "_moe_align_block_size_stage1_kernel _moe_align_block_size_stage2_kernel _count_expert_num_tokens _routing_sigmoid_top1_kernel "
           "_combined_routing_compute _sum_bitmatrix_rows _gemma4_routing_kernel moe_fused_mul_sum_kernel _unpermute_activation_kernel "
           "_fwd_kernel_ep_scatter_1 _fwd_kernel_ep_gather _eplb_map_and_record_i32_kernel",
    "topk": "_topk_kernel topk_stage1_kernel topk_stage2_kernel streaming_topk _dsv4_topk_kernel",
}.items():
    for n in names.split():
        TRITON[n] = fam


def _wrapped(name: str) -> tuple[str, str, str] | None:
    """Label of a cutlass::device_kernel / Kernel / DeepGEMM instance from the kernel type it wraps."""
    if re.search(r"deep_gemm::", name):
        return ("grouped_gemm", "DeepGEMM", "cuda") if re.search(r"GemmType\)[1-6]", name) else ("gemm", "DeepGEMM", "cuda")
    if re.search(r"flash::FlashAttn", name):
        return "attention", "FlashAttention", "cuda"
    if re.search(r"cutlass::fmha::", name):
        return "attention", "CUTLASS", "cuda"
    if re.search(r"group_gemm|GroupProblemShape", name):
        return "grouped_gemm", "CUTLASS", "cuda"
    if re.search(r"machete::", name):
        return "gemm", "Machete", "cuda"
    if re.search(r"gemm|Gemm", name):
        return "gemm", "CUTLASS", "cuda"
    return None


def label(name: str, src: str) -> tuple[str, str, str] | None:
    f = function_name(name)
    for rx, fam, lib, plat in LABELS:
        # PyTorch's TensorIterator kernels say what they do in their template argument (the functor): whole name
        if re.search(rx, f) or (f.startswith("at::native::") and re.search(rx, name)):
            if fam is None:
                return None
            return _wrapped(name) if fam == "WRAPPED" else (fam, lib, plat)
    if f in TRITON:
        lib = "AITER" if "aiter" in src else "vLLM"
        return TRITON[f], lib, ("rocm" if lib == "AITER" else "any")
    return None


def main(work: str) -> None:
    cand = json.loads(Path(work, "candidates.json").read_text())
    print("# name\tfamily\tlibrary\tplatform\tsource")
    kept = 0
    for name, src in cand:
        lab = label(name, src)
        if lab is None:
            continue
        kept += 1
        print("\t".join([name, *lab, src]))
    print(f"{kept} labelled of {len(cand)}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1])
