"""mmprof/rules/logs.toml read through mmprof/log_rules.py: how a line is parsed, and the fact each message gives.

The truth of each case is the engine's own source: the message is the engine's format string (quoted from the file
and line named in the case) filled in with values, formatted by the engine's log format (vllm/logger.py:23
`_FORMAT`, vllm/utils/system_utils.py:209 the process prefix); the fact expected is what that code path did.
Real lines quoted in public issues are tests/data/logs/public_lines.toml (test_public_lines_*).
"""

from __future__ import annotations

import re
import tomllib

import pytest

from mmprof.errors import BadInput
from mmprof.log_rules import KINDS, load_log_rules, parse_log_rules
from mmprof.log_text import clean
from tests.conftest import data_file

RULES = load_log_rules()


def facts(line: str) -> set[tuple[str, str, str]]:
    p = RULES.parse(clean(line))
    return {(r.subject, r.kind, v) for r, v, _ in RULES.facts_of(p.message, p.format, p.where)}


def vllm_line(msg: str, where: str = "x.py:1", level: str = "INFO", process: str | None = "EngineCore") -> str:
    head = f"({process} pid=4242) " if process else ""
    return f"{head}{level} 12-01 10:21:14 [{where}] {msg}"


# (vLLM 0.26.0 source line, format string as written there % args, expected (subject, kind, value))
VLLM_026 = [
    ("vllm/platforms/cuda.py:482", "Using %s attention backend out of potential backends: %s." %
     ("FLASH_ATTN", "['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION']"), ("attention", "backend", "FLASH_ATTN")),
    # cuda.py:422 logs the AttentionBackendEnum member: str() of an Enum is "AttentionBackendEnum.NAME"
    ("vllm/platforms/cuda.py:422", "Using %s backend." % "AttentionBackendEnum.TRITON_ATTN",
     ("attention", "backend", "TRITON_ATTN")),
    ("vllm/platforms/rocm.py:570", "Using %s backend (selected via --attention-backend)." % "ROCM_AITER_FA",
     ("attention", "backend", "ROCM_AITER_FA")),
    ("vllm/platforms/rocm.py:624", "Using %s backend out of potential backends: %s." %
     ("ROCM_ATTN", "['ROCM_ATTN', 'ROCM_AITER_UNIFIED_ATTN', 'TRITON_ATTN']"), ("attention", "backend", "ROCM_ATTN")),
    ("vllm/platforms/rocm.py:615", "Found incompatible backend(s) [%s] with %s. Overriding with %s out of potential "
     "backends: %s." % ("ROCM_AITER_FA", "AttentionType.DECODER", "TRITON_ATTN", "['TRITON_ATTN']"),
     ("attention", "fallback", "TRITON_ATTN")),
    ("vllm/models/minimax_m3/common/sparse_attention.py:462",
     "MiniMax M3 sparse attention selected %s (kv_cache_dtype=%s, topk_blocks=%s)" % ("Triton", "auto", 4),
     ("sparse_attention", "backend", "Triton")),
    ("vllm/models/minimax_m3/common/indexer.py:516", "MiniMax M3 indexer: selected Triton (no fmha_sm100) "
     "[topk_blocks=%d, indexer_kv_dtype=%s, sm100=%s]" % (4, "bf16", False), ("indexer", "backend", "Triton")),
    ("vllm/model_executor/layers/fused_moe/fused_moe.py:1095", "Using configuration from %s for MoE layer." %
     "/v/configs/E=64,N=1280,device_name=NVIDIA_H200.json", ("moe", "config", "E=64,N=1280,device_name=NVIDIA_H200")),
    # fused_moe.py:1108 joins the paths it tried with ", " (a user folder first, VLLM_TUNED_CONFIG_FOLDER)
    ("vllm/model_executor/layers/fused_moe/fused_moe.py:1108", "Using default MoE config. Performance might be "
     "sub-optimal! Config file not found at %s" % ", ".join(["/u/E=32,N=512,device_name=NVIDIA_H200.json",
                                                             "/v/configs/E=32,N=512,device_name=NVIDIA_H200.json"]),
     ("moe", "default_config", "E=32,N=512,device_name=NVIDIA_H200")),
    ("vllm/model_executor/layers/fused_moe/fused_moe.py:1108 (fp8 block)", "Using default MoE config. Performance "
     "might be sub-optimal! Config file not found at %s" %
     "/v/configs/E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json",
     ("moe", "default_config", "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128]")),
    ("vllm/model_executor/layers/fused_moe/oracle/unquantized.py:242", "Using %s Unquantized MoE backend out of "
     "potential backends: %s." % ("TRITON", ["FlashInfer TRTLLM", "FlashInfer CUTLASS", "TRITON"]),
     ("moe", "backend", "TRITON")),
    ("vllm/model_executor/layers/fused_moe/oracle/unquantized.py:242", "Using %s Unquantized MoE backend out of "
     "potential backends: %s." % ("FlashInfer TRTLLM", ["FlashInfer TRTLLM", "TRITON"]),
     ("moe", "backend", "FlashInfer TRTLLM")),
    ("vllm/model_executor/layers/fused_moe/oracle/fp8.py:297", "Using %s Fp8 MoE backend out of potential backends: "
     "%s." % ("DEEPGEMM", ["DEEPGEMM", "TRITON"]), ("moe", "backend", "DEEPGEMM")),
    ("vllm/model_executor/layers/fused_moe/oracle/nvfp4.py:211", "Using '%s' NvFp4 MoE backend out of potential "
     "backends: %s." % ("FLASHINFER_CUTLASS", ["FLASHINFER_CUTLASS"]), ("moe", "backend", "FLASHINFER_CUTLASS")),
    ("vllm/model_executor/layers/fused_moe/oracle/unquantized.py:375", "Using %s MoE backend" % "TritonExperts",
     ("moe.experts", "backend", "TritonExperts")),
    ("vllm/model_executor/layers/quantization/utils/fp8_utils.py:886", "Using default W8A8 Block FP8 kernel config. "
     "Performance might be sub-optimal! Config file not found at %s" %
     "/v/configs/N=512,K=7168,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json",
     ("gemm", "default_config", "N=512,K=7168,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128]")),
    ("vllm/model_executor/kernels/linear/__init__.py:605", "Selected %s for %s" %
     ("CutlassFP8ScaledMMLinearKernel", "Fp8LinearMethod"), ("gemm", "backend", "CutlassFP8ScaledMMLinearKernel")),
    ("vllm/config/vllm.py:1163", "Enforce eager set, disabling torch.compile and CUDAGraphs. This is equivalent to "
     "setting -cc.mode=none -cc.cudagraph_mode=none", ("compile", "mode", "NONE")),
    ("vllm/config/vllm.py:1392", "Cudagraph is disabled under eager mode", ("cudagraph", "mode", "NONE")),
    ("vllm/config/vllm.py:1203", "VLLM_USE_BREAKABLE_CUDAGRAPH is set, disabling vLLM's torch.compile pipeline. "
     "Equivalent to -cc.mode=none.", ("compile", "mode", "NONE")),
    ("vllm/config/vllm.py:1281", "Cudagraph mode %s is not compatible with compilation mode %s.Overriding to NONE." %
     ("FULL_AND_PIECEWISE", 2), ("cudagraph", "fallback", "NONE")),
    ("vllm/config/compilation.py:1422", "CUDAGraphMode.%s is not supported with %s backend (support: %s); setting "
     "cudagraph_mode=NONE because attention is not compiled piecewise" %
     ("FULL_DECODE_ONLY", "FlexAttentionBackend", "AttentionCGSupport.NEVER"), ("cudagraph", "fallback", "NONE")),
    ("vllm/v1/worker/gpu_model_runner.py:6845", "Graph capturing finished in %.0f secs, took %.2f GiB" % (11.4, 0.357),
     ("cudagraph", "capture", "0.36")),
    ("vllm/compilation/monitor.py:20", "torch.compile took %.2f s in total" % 23.41, ("compile", "compile", "23.41")),
    ("vllm/compilation/backends.py:394", "Compiling a graph for compile range %s takes %.2f s" % ("(1, 4096)", 17.62),
     ("compile.graph", "compile", "17.62")),
    ("vllm/compilation/backends.py:1156", "Dynamo bytecode transform time: %.2f s" % 8.517, ("compile", "compile", "8.52")),
    ("vllm/config/compilation.py:329", "Enabled custom fusions: %s" % ", ".join(["norm_quant", "act_quant"]),
     ("fusion", "fusion", "norm_quant, act_quant")),
    ("vllm/compilation/passes/fusion/rms_quant_fusion.py:676 (DEBUG)", "Replaced %s patterns" % 0,
     ("fusion.pass", "fusion", "0")),
    ("vllm/config/scheduler.py:253", "Chunked prefill is enabled with max_num_batched_tokens=%d." % 4096,
     ("scheduler.chunked_prefill", "setting", "True")),
    ("vllm/v1/core/kv_cache_utils.py:2177", "GPU KV cache size: %s tokens" % f"{262144:,}",
     ("kv_cache.tokens", "setting", "262,144")),
    ("vllm/v1/sample/ops/topk_topp_sampler.py:55", "Using FlashInfer for top-p & top-k sampling.",
     ("sampling", "backend", "FlashInfer")),
    ("vllm/v1/sample/ops/topk_topp_sampler.py:62", "FlashInfer top-p/top-k sampling unavailable: %s; falling back. "
     "Set VLLM_USE_FLASHINFER_SAMPLER=0 to silence." % "no module", ("sampling", "fallback", "PyTorch")),
    ("vllm/distributed/device_communicators/custom_all_reduce.py:106", "Custom allreduce is disabled due to an "
     "unsupported world size: %d. Supported world sizes: %s. To silence this warning, specify "
     "disable_custom_all_reduce=True explicitly." % (3, [2, 4, 6, 8]), ("allreduce", "fallback", "NCCL")),
    ("vllm/config/vllm.py:584", "Model Runner V2 does not yet support %s; using the V1 model runner instead." %
     "stock torch.compile", ("model_runner", "fallback", "V1")),
    ("vllm/config/vllm.py:1109", "Asynchronous scheduling is %s." % "enabled", ("scheduler.async", "setting", "enabled")),
]


@pytest.mark.parametrize("where,msg,want", VLLM_026, ids=[c[0] for c in VLLM_026])
def test_vllm_026_message_gives_its_fact(where, msg, want):
    assert want in facts(vllm_line(msg, where.split(" ")[0].rsplit("/", 1)[-1]))


# vllm/config/vllm.py:2090 VllmConfig.__str__ (the fields in that order) inside vllm/v1/engine/core.py:117's line;
# the compilation config is CompilationConfig.__repr__ (vllm/config/compilation.py:815: a dict, enums as <E.NAME: v>)
ENGINE_LINE = ("Initializing a V1 LLM engine (v0.26.0) with config: model='/tmp/q', speculative_config=None, "
               "tokenizer='/tmp/q', skip_tokenizer_init=True, tokenizer_mode=auto, revision=None, "
               "tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=4096, "
               "download_dir=None, load_format=dummy, tensor_parallel_size=2, pipeline_parallel_size=1, "
               "data_parallel_size=1, decode_context_parallel_size=1, dcp_comm_backend=ag_rs, "
               "disable_custom_all_reduce=False, quantization=fp8, quantization_config=None, enforce_eager=False, "
               "enable_return_routed_experts=False, kv_cache_dtype=fp8_e4m3, device_config=cuda, "
               "structured_outputs_config=StructuredOutputsConfig(), observability_config=ObservabilityConfig(), "
               "seed=0, served_model_name=/tmp/q, enable_prefix_caching=True, enable_chunked_prefill=True, "
               "pooler_config=None, compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, "
               "'debug_dump_path': None, 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, "
               "'cudagraph_capture_sizes': [1, 2, 4, 8], 'max_cudagraph_capture_size': 8}, kernel_config=None")


def test_engine_config_line_gives_every_resolved_setting():
    got = facts(vllm_line(ENGINE_LINE, "core.py:117"))
    assert got == {("engine", "setting", "0.26.0"), ("dtype", "setting", "bfloat16"),
                   ("parallel.tp", "setting", "2"), ("quantization", "setting", "fp8"),
                   ("eager", "mode", "False"), ("kv_cache", "setting", "fp8_e4m3"),
                   ("scheduler.chunked_prefill", "setting", "True"), ("compile", "mode", "VLLM_COMPILE"),
                   ("cudagraph", "mode", "FULL_AND_PIECEWISE"), ("cudagraph.sizes", "mode", "1, 2, 4, 8")}


OTHER_ENGINES = [
    # SGLang python/sglang/srt/layers/moe/fused_moe_triton/fused_moe_triton_config.py (get_moe_configs)
    ("[2026-02-21 10:48:18 TP0] Using default MoE kernel config. Performance might be sub-optimal! Config file not "
     "found at /s/configs/triton_3_4_0/E=64,N=1280,device_name=NVIDIA_H200.json, you can create them with "
     "https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton",
     ("moe", "default_config", "E=64,N=1280,device_name=NVIDIA_H200")),
    ("[2026-02-21 10:48:18 DP0 TP1 EP1] Using MoE kernel config from /s/configs/triton_3_4_0/"
     "E=64,N=1280,device_name=NVIDIA_H200.json.", ("moe", "config", "E=64,N=1280,device_name=NVIDIA_H200")),
    # SGLang server_args.py (a logger with its own 'LEVEL file:line: ' header)
    ("[2025-11-11 20:29:05] WARNING server_args.py:1183: Attention backend not explicitly specified. Use flashinfer "
     "backend by default.", ("attention", "backend", "flashinfer")),
    ("[11-11 20:29:05 TP0] Capture cuda graph end. Time elapsed: 12.41 s. mem usage=0.52 GB. avail mem=59.60 GB.",
     ("cudagraph", "capture", "0.52")),
    # FlashInfer 0.6.14 flashinfer/autotuner.py:1211 through flashinfer/jit/core.py:54's format
    ("2026-12-01 10:23:49,123 - WARNING - autotuner.py:1211 - flashinfer.jit: [AutoTuner]: No tuned config covers "
     "trtllm::fused_moe input_shapes=[torch.Size([8192, 7168])]; falling back to runner=FusedMoeRunner tactic=-1.  "
     "This shape is outside the tuning bucket range", ("autotune", "default_config", "trtllm::fused_moe")),
    # AITER (ROCm/aiter aiter/tuned_gemm.py), inside a vLLM worker's decorated stream
    ("(Worker_TP1 pid=889) [aiter] shape is M:64, N:7168, K:2048 dtype='torch.bfloat16' otype='torch.bfloat16' "
     "bias=False, scaleAB=False, bpreshuffle=False, not found tuned config in /tmp/aiter_configs/bf16_tuned_gemm.csv, "
     "will use default config! using torch solution:0", ("gemm", "default_config", "M:64, N:7168, K:2048")),
]


@pytest.mark.parametrize("line,want", OTHER_ENGINES, ids=[w[2] for _, w in OTHER_ENGINES])
def test_other_engines_and_libraries(line, want):
    assert want in facts(line)


def test_parse_prefixes_formats_and_plain_text():
    p = RULES.parse("(Worker_TP3 pid=12) WARNING 12-01 10:21:40 [fused_moe.py:1108] msg here")
    assert (p.process, p.pid, p.format, p.level, p.stamp, p.where, p.message) == \
        ("Worker_TP3", 12, "vllm", "WARNING", "12-01 10:21:40", "fused_moe.py:1108", "msg here")
    # a worker's line through the engine core's decorated stream (vLLM 0.10): the last prefix printed it
    p = RULES.parse("(EngineCore_0 pid=1) (VllmWorker pid=2) INFO 08-15 12:11:58 [x.py:7] m")
    assert (p.process, p.pid, p.message) == ("VllmWorker", 2, "m")
    p = RULES.parse("[2026-01-30 20:54:56 PP1 TP1] Load weight end.")
    assert (p.format, p.process, p.stamp, p.message) == ("sglang", "PP1 TP1", "2026-01-30 20:54:56", "Load weight end.")
    p = RULES.parse("(EngineCore pid=5) Capturing CUDA graphs: 100%")
    assert (p.format, p.process, p.pid, p.message) == (None, "EngineCore", 5, "Capturing CUDA graphs: 100%")
    p = RULES.parse("some tool output")
    assert (p.format, p.process, p.pid, p.message) == (None, None, -1, "some tool output")


def test_a_fact_rule_applies_only_to_its_formats_and_source_locations():
    # SGLang's wording printed by something that is not SGLang's log is not SGLang's fact
    assert facts("Attention backend not explicitly specified. Use flashinfer backend by default.") == set()
    # "Using X backend." names the attention backend only where vLLM's platform code prints it
    assert facts(vllm_line("Using NCCL backend.", "cuda.py:419")) == {("attention", "backend", "NCCL")}
    assert facts(vllm_line("Using NCCL backend.", "parallel_state.py:12")) == set()


def test_every_fact_rule_is_checked_at_load():
    for r in RULES.facts:
        assert r.kind in KINDS and r.says and r.source
    assert {f.id for f in RULES.formats} >= {"vllm", "sglang", "flashinfer", "aiter"}
    assert {r.engine for r in RULES.facts} >= {"vllm", "sglang", "flashinfer", "aiter", "triton"}


def test_wanted_prefilter_never_hides_a_fact_line():
    for _, msg, _ in VLLM_026:
        assert RULES.wanted(msg), msg
    assert not RULES.wanted("INFO 12-01 10:21:14 [core.py:1] nothing to see")


BAD = [
    ({"fact": [{"id": "x", "engine": "e", "kind": "nope", "subject": "s", "says": "s", "source": "s",
                "pattern": "a", "value": "v", "example": "a"}]}, "`kind` must be one of"),
    ({"fact": [{"id": "x", "engine": "e", "kind": "backend", "subject": "s", "says": "s", "source": "s",
                "pattern": "a(", "value": "v", "example": "a"}]}, "bad regex 'a('"),
    # the rules' regexes run on regex_safety's bounded engines: a shape RE2 refuses and `re` could backtrack on
    ({"fact": [{"id": "x", "engine": "e", "kind": "backend", "subject": "s", "says": "s", "source": "s",
                "pattern": "(a+)+\\1", "value": "v", "example": "aa"}]}, "exponential or high-polynomial time"),
    ({"fact": [{"id": "x", "engine": "e", "kind": "backend", "subject": "s", "says": "s", "source": "s",
                "pattern": "abc", "value": "v", "example": "xyz"}]}, "does not match"),
    ({"fact": [{"id": "x", "engine": "e", "kind": "backend", "subject": "s", "says": "s", "source": "s",
                "pattern": "a(?P<value>b)", "example": "ab", "example_value": "c"}]}, "not example_value"),
    ({"fact": [{"id": "x", "engine": "e", "kind": "backend", "subject": "s", "says": "s", "source": "s",
                "pattern": "ab", "contains": "zz", "value": "v", "example": "ab"}]}, "prefilter would hide"),
    ({"fact": [{"id": "x", "engine": "e", "kind": "backend", "subject": "s", "says": "s", "source": "s",
                "pattern": "ab", "example": "ab"}]}, "no (?P<value>"),
    ({"fact": [{"id": "x", "engine": "e", "kind": "backend", "subject": "s", "says": "s", "source": "s",
                "pattern": "ab", "value": "v", "example": "ab", "colour": 1}]}, "unknown key"),
    ({"format": [{"id": "f", "pattern": "^(?P<x>.*)$"}]}, "(?P<message>...)"),
    ({"rules": []}, "unknown table"),
]


@pytest.mark.parametrize("doc,msg", BAD, ids=[m for _, m in BAD])
def test_bad_rules_are_refused_with_one_line(doc, msg):
    with pytest.raises(BadInput, match=re.escape(msg)):
        parse_log_rules(doc, "test.toml")


def _corpus():
    return tomllib.loads(data_file("logs", "public_lines.toml").read_text())["line"]


def test_public_lines_corpus_is_labelled_and_sourced():
    lines = _corpus()
    assert len(lines) >= 40
    assert all(ln["source"].startswith("https://github.com/") for ln in lines)
    assert {ln["split"] for ln in lines} <= {"tuning", "held_out"}


@pytest.mark.parametrize("ln", [x for x in _corpus() if x["split"] == "tuning"],
                         ids=lambda x: x["source"].rsplit("/", 2)[-2] + "/" + x["source"].rsplit("/", 1)[-1])
def test_public_lines_of_the_tuning_split_give_exactly_their_labels(ln):
    want = {(e["subject"], e["kind"], e["value"]) for e in ln["expect"]}
    assert facts(ln["text"]) == want
