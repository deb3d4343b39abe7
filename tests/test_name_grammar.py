"""The grammar of kernel names on its own (mmprof/analysis/attribution/name_grammar.py, name_vocab.py): tokens,
template arguments, cut and partly mangled names, the order of evidence inside a name, abstention."""

from __future__ import annotations

import pytest

from mmprof.analysis.attribution.classify import RuleSet, classify_name, default_rules, load_rules
from mmprof.analysis.attribution.name_grammar import compounds, parse, tokens
from mmprof.analysis.attribution.name_vocab import default_vocabulary


@pytest.mark.parametrize("ident, expect", [
    ("topKSortStage1", ("top", "k", "sort", "stage", "1")),
    ("fused8bitrowwise_to_float", ("fused", "8bit", "rowwise", "to", "float")),
    ("Rmsnorm2dFwd", ("rmsnorm", "2d", "fwd")),
    ("RMSNormKernel", ("rms", "norm", "kernel")),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", ("nvjet", "tst", "128x256", "64x4", "1x2", "h", "bz", "coop", "a",
                                                    "tnt")),
    ("sm90_xmma_gemm_bf16bf16_bf16f32", ("sm90", "xmma", "gemm", "bf16", "bf16", "bf16", "f32")),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", ("nccl", "dev", "kernel", "all", "reduce", "sum", "bf16", "ring", "ll")),
])
def test_tokens_split_snake_camel_digits_and_keep_dtype_arch_tile_words(ident, expect):
    assert tokens(ident) == expect


def test_compounds_join_adjacent_words():
    c = compounds(tokens("fused_add_rms_norm_kernel"))
    assert {"rmsnorm", "addrmsnorm", "fusedadd"} <= c
    assert "allreduce" in compounds(tokens("AllReduce_Simple"))


def test_a_signature_splits_into_namespace_function_and_template_operations():
    p = parse("void at::native::vectorized_elementwise_kernel<4, at::native::AbsFunctor<float>, "
              "at::detail::Array<char*, 2> >(int, at::native::AbsFunctor<float>, at::detail::Array<char*, 2>)")
    assert p.namespace == ("at", "native") and p.function == "vectorized_elementwise_kernel"
    assert p.tmpl_idents[0] == ("abs", "functor") and p.tmpl_ops[0]      # a functor names an operation
    assert not p.mangled


def test_template_namespaces_are_not_words():
    # `cutlass::gemm::` inside the arguments is a namespace: only the type's own name counts
    p = parse("void acme::tile_worker<cutlass::gemm::GemmShape<128, 128, 64>, float>(float*)")
    assert ("gemm", "shape") in p.tmpl_idents and ("cutlass",) not in p.tmpl_idents
    assert p.tmpl_ops == (False,)                                          # a shape type is not an operation
    assert classify_name(p.text).family == "unknown"


def test_a_cut_mangled_name_is_read_from_its_source_names():
    # CUPTI leaves CUTLASS 3 kernels mangled and profilers cut long names (docs/names.md)
    cut = "_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9xINS_4gemm6kernel13GemmUniversal"
    p = parse(cut)
    assert p.mangled and p.namespace == ("cutlass",) and p.function == "device_kernel"
    assert ("gemm", "universal") in p.tmpl_idents and ("at",) not in p.tmpl_idents
    k = classify_name(cut)
    assert (k.family, k.library, k.evidence) == ("gemm", "CUTLASS", "tokens") and k.reason.startswith("template")


def test_a_partly_mangled_name_with_literals():
    p = parse("_ZN9turbomind15MoeReduceKernelILi8ELi10ELb1ELi256E13__nv_bfloat16EEvPT3_")
    assert (p.namespace, p.function) == (("turbomind",), "MoeReduceKernel")
    assert classify_name("_ZN9turbomind15MoeReduceKernelILi8ELi10ELb1ELi256E13__nv_bfloat16EEvPT3_").family == "moe"


def test_variant_features_tile_dtype_arch_split():
    p = parse("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_bf16_TNT")
    assert {"sm90", "64x8", "bf16", "split-k"} <= set(p.features)
    assert parse("void vllm::rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*)").features == ("bf16",)
    k = classify_name("my_rmsnorm_kernel_bf16_sm90")
    assert k.variant == "norm bf16 sm90" and k.family == "norm"


@pytest.mark.parametrize("name, family, level", [
    # the function's own words decide before its template arguments ...
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<"
     "float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, "
     "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::"
     "{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, "
     "at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&)::{lambda(int)#1})",
     "elementwise", "template"),
    # ... except for a loop abstraction, whose functor names the op (ATen's copy / silu / Adam)
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
     "{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>,"
     " 4>(int)", "copy", "template"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_kernel("
     "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::"
     "{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int)", "activation", "template"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
     "(at::native::ADAM_MODE)1, false>, float*, double>(int)", "optimizer", "template"),
    # a library namespace names no family: the function's words do
    ("void fbgemm_gpu::(anonymous namespace)::_fused8bitrowwise_to_float_cuda_kernel<float>(unsigned char const*)",
     "quantization", "function"),
    # namespace words come last
    ("void turbomind::comm::Barrier_V2(int)", "communication", "namespace"),
])
def test_order_of_evidence_inside_a_name(name, family, level):
    k = RuleSet([]).classify(name)   # the grammar alone, without the explicit rules
    assert k.family == family, k
    assert k.evidence == "tokens" and k.reason.startswith(level), k


@pytest.mark.parametrize("name, family", [
    # issue 30's failure classes, on names written in their style: a prefix, a namespace word, a library
    ("_fwd_kernel_destindex_copy_kv", "kv_cache"),          # LightLLM-style KV copy, not attention
    ("_fwd_kernel_apply_penalty", "sampling"),              # a repetition penalty, not attention
    ("void sglang::gemm::weight_repack_kernel<int>(int*)", "copy"),   # `gemm` namespace, repack function
    ("void some_lib::implicit_gemm_conv2d_fprop<float>(float*)", "conv"),
    ("void rocblas_ger_kernel<float>(int)", "gemm"),        # a rank-1 update is a BLAS GEMM routine
    ("void rocblas_nrm2_kernel<float>(int)", "reduction"),
    ("MIOpenBatchNormFwdTrainSpatial", "norm"), ("mloPoolingG", "pooling"), ("MIOpenNeuronFwd", "activation"),
    ("LSTM_elementWise_fp", "rnn"), ("void cudnn::pooling_fw_4d_kernel<float, float>(int)", "pooling"),
    ("void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int)", "pooling"),
    ("void at::native::(anonymous namespace)::fused_dropout_kernel<float, float, unsigned int, 1, 4, bool>(int)",
     "elementwise"),
    ("void at::native::triu_tril_kernel<float, int, false, 4, true>(int)", "elementwise"),
    ("_apply_grammar_bitmask_kernel", "sampling"), ("top_p_min_p_filter_kernel", "sampling"),
    ("void kOptimizer32bit2State<__half, 0>(__half*)", "optimizer"),
])
def test_families_from_words_of_unseen_styles(name, family):
    assert classify_name(name).family == family, classify_name(name)


def test_a_library_only_match_gives_the_library_and_family_unknown():
    k = classify_name("void at::native::(anonymous namespace)::frobnicate_kernel<float>(float*)")
    assert (k.family, k.library, k.rule, k.evidence) == ("unknown", "PyTorch", None, None)
    # the library never claims another library's kernel by a word: a gemv kernel of an unknown library
    assert classify_name("void acme::gemv_kernel<float>(float*)").library is None


def test_conflicting_template_operations_abstain():
    k = classify_name("void lightcore::block_apply<float, acme::MulFunctor<float>, acme::softmax_tag>(float*)")
    assert k.family == "unknown"


def test_fast_and_fallback_from_the_name_with_the_reason():
    k = classify_name("void naive_conv_fwd_nchw<float>(float*)")   # MIOpen's reference convolution (a rule)
    assert (k.family, k.path, k.path_reason) == ("conv", "fallback", "rule rocm.miopen.naive_conv")
    k = RuleSet([]).classify("void naive_conv_fwd_nchw<float>(float*)")   # the grammar alone says it too
    assert k.path == "fallback" and "naive" in k.path_reason
    k = classify_name("reference_gemm_kernel")
    assert (k.family, k.path) == ("gemm", "fallback")
    k = classify_name("gemm_kernel_tuned_sm90")
    assert k.path == "fast" and "tuned" in k.path_reason


def test_every_vocabulary_entry_is_used_and_documented():
    voc = default_vocabulary()
    fams = {r.family for r in voc.families}
    from mmprof.analysis.attribution.classify import FAMILIES
    assert fams <= set(FAMILIES)
    assert all(r.description for r in voc.families) and all(r.description for r in voc.libraries)
    assert len({r.id for r in voc.families}) == len(voc.families)


def test_leave_one_source_out_drops_the_entries_tagged_for_a_source():
    rs = default_rules()
    name = "fbgemm_gpu::(anonymous namespace)::_fused8bitrowwise_to_float_cuda_kernel<float>(int)"
    assert rs.classify(name).library == "FBGEMM"
    without = rs.without_sources({"fbgemm"})
    assert without.classify(name).library != "FBGEMM"                 # lib.fbgemm is tagged fbgemm
    assert len(without.rules) <= len(rs.rules)


def test_user_rule_files_still_override_the_grammar(tmp_path):
    f = tmp_path / "r.toml"
    f.write_text('[[rule]]\nid = "site.penalty"\npattern = "^_fwd_kernel_apply_penalty$"\nfamily = "sampling"\n'
                 'variant = "site"\nlibrary = "LightLLM"\n')
    k = load_rules([f]).classify("_fwd_kernel_apply_penalty")
    assert (k.family, k.library, k.evidence, k.rule) == ("sampling", "LightLLM", "rule", "site.penalty")
