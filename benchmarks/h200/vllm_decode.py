"""vLLM's decode time per step on the runtime's `small` config, for the compile rung's comparison (issue 22).

Runs where vLLM is importable (the vLLM kit on the H200: `PYTHONPATH=/tmp/vsite`, ../shared/tools/vllm-kit/).
One offline engine (`LLM`, vLLM's defaults: torch.compile + CUDA graphs FULL_AND_PIECEWISE; dummy weights, bf16,
TP 1, block 128, token-id prompts) on CONFIG (the kit's `small_config`: 12 layers, hidden 2048, 16 q / 4 KV heads,
3 dense + 9 MoE layers of 128 experts top-4 + a shared expert, MiniMax sparse attention). Per batch (1, 8, 64):
`--prompt`-token random prompts, greedy, `ignore_eos`; the decode time per step is the difference of two
generate() calls that differ only in their output length, (T(long) - T(short)) / (long - short): prefill,
scheduling of the prompts and the first token cancel out. Median of `--repeats`. One JSON line per batch; a
batch that fails (vLLM 0.26's M3 sparse path crashed at batch 8 and 64 on this config once) prints its error.

    PYTHONPATH=/tmp/vsite python3 benchmarks/h200/vllm_decode.py .vllm/run/small_config --batches 1,8,64
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--batches", default="1,8,64")
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--short", type=int, default=17)
    p.add_argument("--long", type=int, default=65)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    import torch
    import vllm
    from vllm import LLM, SamplingParams

    batches = [int(x) for x in a.batches.split(",")]
    t0 = time.time()
    llm = LLM(model=a.config, load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16", tensor_parallel_size=1,
              block_size=128, max_model_len=a.prompt + a.long + 64, max_num_seqs=max(batches),
              max_num_batched_tokens=8192, kv_cache_memory_bytes=8 * 1024**3, seed=0)
    print(json.dumps({"vllm": vllm.__version__, "torch": torch.__version__, "device": torch.cuda.get_device_name(),
                      "config": a.config, "engine_start_s": round(time.time() - t0, 1)}), flush=True)
    rng = random.Random(7)
    errors = 0
    for b in batches:
        try:
            def run(n: int) -> float:
                ps = [{"prompt_token_ids": [rng.randrange(10, 31999) for _ in range(a.prompt)]} for _ in range(b)]
                sp = SamplingParams(max_tokens=n, min_tokens=n, ignore_eos=True, temperature=0.0, detokenize=False)
                t = time.perf_counter()
                outs = llm.generate(ps, sp, use_tqdm=False)
                dt = time.perf_counter() - t
                assert all(len(o.outputs[0].token_ids) == n for o in outs)
                return dt

            run(a.short), run(a.long)  # warm-up at this batch size
            per_step = []
            for _ in range(a.repeats):
                ts, tl = run(a.short), run(a.long)
                per_step.append((tl - ts) / (a.long - a.short) * 1e3)
            ms = statistics.median(per_step)
            print(json.dumps({"engine": "vllm", "batch": b, "prompt": a.prompt, "decode_ms_per_step": ms,
                              "repeats_ms": per_step, "decode_tok_s": b / (ms / 1e3)}), flush=True)
        except Exception as e:  # noqa: BLE001 - report the batch that failed and go on
            errors += 1
            print(json.dumps({"engine": "vllm", "batch": b, "error": f"{type(e).__name__}: {str(e)[:300]}"}), flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
