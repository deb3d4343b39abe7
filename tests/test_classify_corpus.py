"""The labelled corpus of real serving-engine kernel names (tests/data/kernel_corpus/README.md says where each name
comes from and how its family was read from the kernel's source): no name unclassified, none in a wrong family, none
labelled with a library of the other platform, and the five serving families of issue 20 in use."""

from __future__ import annotations

import pytest

from mmprof.analysis.attribution.classify import FAMILIES, LIBRARY_PLATFORM, default_rules, load_rules
from tests.conftest import DATA

CORPUS = DATA / "kernel_corpus" / "corpus.tsv"


def _rows() -> list[tuple[str, str, str, str, str]]:
    rows = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, family, library, platform, source = line.split("\t")
        rows.append((name, family, library, platform, source))
    return rows


ROWS = _rows()


def test_corpus_is_a_few_hundred_real_names_with_known_labels():
    assert 300 <= len(ROWS) <= 1000
    assert len({r[0] for r in ROWS}) == len(ROWS), "duplicate names"
    for name, family, _, platform, source in ROWS:
        assert family in FAMILIES and family != "other", (name, family)
        assert platform in ("cuda", "rocm", "any"), (name, platform)
        assert source.startswith(("trace:samples/vllm/", "wheel:")), source
    # the sources the README names are all present
    for src in ("trace:", "wheel:vllm-0.26.0", "wheel:sgl-kernel", "wheel:flashinfer-cubin", "wheel:amd-aiter"):
        assert any(r[4].startswith(src) for r in ROWS), src


def test_no_corpus_name_is_unclassified_or_in_a_wrong_family():
    rules = default_rules()
    unclassified = [r[0][:100] for r in ROWS if rules.classify(r[0]).rule is None]
    wrong = [(r[0][:100], r[1], rules.classify(r[0]).family, rules.classify(r[0]).rule) for r in ROWS
             if rules.classify(r[0]).rule is not None and rules.classify(r[0]).family != r[1]]
    assert not unclassified, f"{len(unclassified)} unclassified: {unclassified[:10]}"
    assert not wrong, f"{len(wrong)} in a wrong family (name, expected, got, rule): {wrong[:10]}"


def test_no_cuda_kernel_gets_a_rocm_library_or_the_reverse():
    rules = default_rules()
    bad = []
    for name, _, _, platform, _ in ROWS:
        lib = rules.classify(name).library
        got = LIBRARY_PLATFORM.get(lib or "")
        if platform != "any" and got is not None and got != platform:
            bad.append((name[:80], platform, lib))
    assert not bad, bad[:10]


def test_the_serving_families_are_used_on_the_corpus():
    rules = default_rules()
    used = {rules.classify(r[0]).family for r in ROWS}
    for fam in ("rope", "kv_cache", "quantization", "sampling", "ssm"):
        assert fam in used, fam


def test_fused_allreduce_norm_is_communication_naming_the_norm():
    # vLLM's M3 attention-output all-reduce fused with RMSNorm (csrc minimax_reduce_rms) and AITER's asm one
    rules = load_rules()
    for name in [r[0] for r in ROWS if "minimax_reduce_rms_kernel_lamport" in r[0]] + ["allreduce_rmsnorm_N8192_kernel"]:
        kc = rules.classify(name)
        assert (kc.family, kc.variant) == ("communication", "allreduce_rmsnorm"), (name, kc)
    # vLLM's custom all-reduce (csrc/custom_all_reduce.cuh) is communication too, without a norm
    ar = next(r[0] for r in ROWS if "cross_device_reduce_2stage" in r[0])
    assert rules.classify(ar).family == "communication"


@pytest.mark.parametrize("name, family, path", [
    # vLLM picks gptq_marlin over the ExLlama GPTQ kernel whenever Marlin supports the layer
    # (vllm/model_executor/layers/quantization/gptq_marlin.py: GPTQMarlinConfig.override_quantization_method)
    ("void vllm::gptq::gemm_half_q_half_gptq_4bit_kernel<true, 8>(__half const*, unsigned int const*, unsigned int "
     "const*, __half const*, __half*, int, int, int, int, bool, int const*)", "gemm", "fallback"),
    ("expert_triton_kernel", "grouped_gemm", "fallback"),   # fused_moe/fused_batched_moe.py naive batched experts
    ("fused_moe_kernel", "grouped_gemm", "fast"),           # vLLM's default unquantized MoE on H200 (the samples)
])
def test_fast_and_fallback_paths(name, family, path):
    kc = default_rules().classify(name)
    assert (kc.family, kc.path) == (family, path), kc
