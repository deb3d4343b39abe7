"""Write the synthetic vLLM 0.26 logs of tests/data/logs/ (`python tests/data/logs/make_logs.py`).

SYNTHETIC, NOT RECORDED: no vLLM log of these runs was kept (tests/data/vllm_own/README.md; no GPU this session).
Each line is one of vLLM 0.26.0's own format strings (file and line named beside it) filled in with what that code
path prints for the run of the real trace it goes with, in vLLM's log format (vllm/logger.py:23 `_FORMAT`, date
"%m-%d %H:%M:%S") with the engine core's process prefix (vllm/utils/system_utils.py:209) and the trace's own pid,
so the rank mapping is the real one. What the code path prints was read from vLLM 0.26's source:

- qwen2moe: Qwen2-MoE (tests/data/vllm_own/qwen2moe_config.json: 32 experts, moe_intermediate_size 512, TP 1) has
  no tuned fused-MoE file (fused_moe/configs/ holds no E=32,N=512,device_name=NVIDIA_H200.json), so
  get_moe_configs warns (fused_moe.py:1108); attention by the platform's priority list (cuda.py:482); the
  unquantized MoE oracle puts TRITON first on SM90 (oracle/unquantized.py:48-85, logged at :242); the
  compilation / CUDA-graph mode is the trace's (summary.json: mode 3, FULL_AND_PIECEWISE, sizes 1..32).
- m3: MiniMax M3 tiny (32 experts, intermediate 768: no E=32,N=768 H200 file either), breakable CUDA graphs
  (summary.json: compilation mode 0, VLLM_USE_BREAKABLE_CUDAGRAPH=1 after init), the M3 sparse attention and
  indexer on Triton (not SM100: sparse_attention.py:462, indexer.py:516), FLASH_ATTN for the full-attention layers.
- forced_flashinfer: the qwen2moe log with the backend forced to FLASHINFER (cuda.py:422 logs the enum member),
  a log of ANOTHER run than the trace (which ran FlashAttention): the disagreement LG002 must report.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def line(level: str, t: str, where: str, msg: str, pid: int | None) -> str:
    head = f"(EngineCore pid={pid}) " if pid is not None else ""
    return f"{head}{level} 12-01 {t} [{where}] {msg}"


def engine_config(model: str, mode: str, num: int, sizes: str) -> str:
    # vllm/v1/engine/core.py:117 with VllmConfig.__str__ (vllm/config/vllm.py:2090) and
    # CompilationConfig.__repr__ (vllm/config/compilation.py:815)
    return (f"Initializing a V1 LLM engine (v0.26.0) with config: model='{model}', speculative_config=None, "
            f"tokenizer='{model}', skip_tokenizer_init=True, tokenizer_mode=auto, revision=None, "
            "tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=4096, "
            "download_dir=None, load_format=dummy, tensor_parallel_size=1, pipeline_parallel_size=1, "
            "data_parallel_size=1, decode_context_parallel_size=1, dcp_comm_backend=ag_rs, "
            "disable_custom_all_reduce=False, quantization=None, quantization_config=None, enforce_eager=False, "
            "enable_return_routed_experts=False, kv_cache_dtype=auto, device_config=cuda, "
            "structured_outputs_config=StructuredOutputsConfig(), observability_config=ObservabilityConfig(), "
            f"seed=0, served_model_name={model}, enable_prefix_caching=True, enable_chunked_prefill=True, "
            f"pooler_config=None, compilation_config={{'mode': <CompilationMode.{mode}: {num}>, "
            f"'debug_dump_path': None, 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, "
            f"'cudagraph_capture_sizes': [{sizes}], 'max_cudagraph_capture_size': 32}}, kernel_config=None")


MOE_BACKENDS = "['TRITON', 'BATCHED_TRITON', 'FlashInfer TRTLLM', 'FlashInfer CUTLASS']"  # unquantized.py:72-80
ATTN = "['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION']"
CFG = "/tmp/vsite/vllm/model_executor/layers/fused_moe/configs"


def qwen2moe(pid: int, forced: str | None = None) -> list[str]:
    out = [
        line("INFO", "10:20:58", "utils.py:253", "non-default args: {'model': 'qwen2moe_config', 'seed': 0}", None),
        line("INFO", "10:20:59", "scheduler.py:253", "Chunked prefill is enabled with max_num_batched_tokens=4096.",
             None),
        line("INFO", "10:21:10", "core.py:117",
             engine_config("qwen2moe_config", "VLLM_COMPILE", 3, "1, 2, 4, 8, 16, 24, 32"), pid),
    ]
    if forced:
        out.append(line("INFO", "10:21:14", "cuda.py:422", f"Using AttentionBackendEnum.{forced} backend.", pid))
    else:
        out.append(line("INFO", "10:21:14", "cuda.py:482",
                        f"Using FLASH_ATTN attention backend out of potential backends: {ATTN}.", pid))
    out += [
        line("INFO", "10:21:15", "unquantized.py:242",
             f"Using TRITON Unquantized MoE backend out of potential backends: {MOE_BACKENDS}.", pid),
        line("INFO", "10:21:15", "unquantized.py:375", "Using TritonExperts MoE backend", pid),
        line("INFO", "10:21:30", "backends.py:1156", "Dynamo bytecode transform time: 5.91 s", pid),
        line("INFO", "10:21:38", "backends.py:394", "Compiling a graph for compile range (1, 4096) takes 7.20 s", pid),
        line("INFO", "10:21:39", "monitor.py:53", "torch.compile took 14.02 s in total", pid),
        line("WARNING", "10:21:40", "fused_moe.py:1108", "Using default MoE config. Performance might be sub-optimal! "
             f"Config file not found at {CFG}/E=32,N=512,device_name=NVIDIA_H200.json", pid),
        line("INFO", "10:21:44", "kv_cache_utils.py:2177", "GPU KV cache size: 349,440 tokens", pid),
        f"(EngineCore pid={pid}) Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 7/7",
        line("INFO", "10:21:52", "gpu_model_runner.py:6845", "Graph capturing finished in 6 secs, took 0.21 GiB", pid),
    ]
    return out


def m3(pid: int) -> list[str]:
    return [
        line("INFO", "10:20:58", "utils.py:253", "non-default args: {'model': 'm3_config', 'seed': 0}", None),
        line("INFO", "10:20:59", "vllm.py:1197", "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1. Set "
             "VLLM_USE_BREAKABLE_CUDAGRAPH=0 to opt out.", None),
        line("WARNING", "10:20:59", "vllm.py:1203", "VLLM_USE_BREAKABLE_CUDAGRAPH is set, disabling vLLM's "
             "torch.compile pipeline. Equivalent to -cc.mode=none.", None),
        line("INFO", "10:21:10", "core.py:117", engine_config("m3_config", "NONE", 0, "1, 2, 4, 8, 16, 24, 32"), pid),
        line("INFO", "10:21:14", "cuda.py:482",
             f"Using FLASH_ATTN attention backend out of potential backends: {ATTN}.", pid),
        line("INFO", "10:21:14", "sparse_attention.py:462",
             "MiniMax M3 sparse attention selected Triton (kv_cache_dtype=auto, topk_blocks=4)", pid),
        line("INFO", "10:21:14", "indexer.py:516", "MiniMax M3 indexer: selected Triton (no fmha_sm100) "
             "[topk_blocks=4, indexer_kv_dtype=bf16, sm100=False]", pid),
        line("INFO", "10:21:15", "unquantized.py:242",
             f"Using TRITON Unquantized MoE backend out of potential backends: {MOE_BACKENDS}.", pid),
        line("WARNING", "10:21:40", "fused_moe.py:1108", "Using default MoE config. Performance might be sub-optimal! "
             f"Config file not found at {CFG}/E=32,N=768,device_name=NVIDIA_H200.json", pid),
        line("INFO", "10:21:52", "gpu_model_runner.py:6845", "Graph capturing finished in 9 secs, took 0.34 GiB", pid),
    ]


def main() -> None:
    # the pids are the traces' own (meta ranks[].pid of tests/data/vllm_own/*.pt.trace.json.xz)
    (HERE / "vllm026_qwen2moe_graphs_b1.log").write_text("\n".join(qwen2moe(1535)) + "\n")
    (HERE / "vllm026_qwen2moe_forced_flashinfer.log").write_text("\n".join(qwen2moe(1535, "FLASHINFER")) + "\n")
    (HERE / "vllm026_m3_graphs_b1.log").write_text("\n".join(m3(1745)) + "\n")


if __name__ == "__main__":
    main()
