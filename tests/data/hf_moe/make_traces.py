"""Make torch.profiler traces of Hugging Face transformers MoE models (a runtime nobody on mmprof wrote).

Every model is built from a tiny config with random weights (no download), on CPU, fp32, one thread,
attn_implementation="eager", after torch.manual_seed(0). One run = a 16-token prefill forward and 3 greedy
decode forwards (one token each, with the KV cache), each forward its own `ProfilerStep#N` range
(torch.profiler schedule, `prof.step()` before every forward; #1 is the prefill, #2-#4 decode). Profiling:
CPU activity, record_shapes=True, with_stack as named. The trace is `prof.export_chrome_trace` gzipped
(mtime 0). A warm-up forward runs before the profiler so lazy initialisation stays out of the trace.

    m3_eager_stack / m3_eager_nostack         MiniMax M3 text model, experts_implementation="eager"
    m3_grouped_stack / m3_grouped_nostack     same, experts_implementation="grouped_mm"
    m3_tp2_rank0 / m3_tp2_rank1               M3 under torchrun, 2 ranks, gloo, from_pretrained(tp_plan="auto")
    qwen3moe_grouped_stack / _nostack         Qwen3-MoE, grouped_mm (transformers' default)
    dsv3_eager_stack / _nostack               DeepSeek-V3, eager (per-expert loop)
    dsv32_grouped_stack / _nostack            DeepSeek-V3.2 (indexer / DSA), grouped_mm
    mixtral_eager_stack                       Mixtral, eager
    gptoss_grouped_stack                      gpt-oss, grouped_mm

The experts implementation is chosen with the config kwarg `experts_implementation=...` (transformers 5.x
stores it as `config._experts_implementation`; a model built from a config without it gets "grouped_mm").

The TP traces need `accelerate` importable (from_pretrained refuses tp_plan without it); the script runs
`python -m torch.distributed.run --nproc-per-node 2 make_traces.py --tp-worker CKPT OUTDIR` itself, and
checks that both ranks decode the same tokens as a single-process run of the same checkpoint.

Run:  python tests/data/hf_moe/make_traces.py [NAME ...]   (torch 2.13 CPU, transformers 5.17; ~1 min)
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
PREFILL = 16
DECODE = 3
VOCAB = 128
M3_VOCAB = 160


def m3_config(experts: str | None):
    from transformers.models.minimax_m3_vl.configuration_minimax_m3_vl import (
        MiniMaxM3VLTextConfig,
    )

    kw = {} if experts is None else {"experts_implementation": experts}
    # Real M3's ratios where cheap (routed = shared expert intermediate, 2*intermediate = hidden, dense = 2*hidden,
    # index heads = KV heads), but dims chosen so that no two roles share a weight shape, with or without TP 2.
    return MiniMaxM3VLTextConfig(
        vocab_size=M3_VOCAB, hidden_size=96, intermediate_size=48, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=2, head_dim=16, rotary_dim=8, num_local_experts=8, num_experts_per_tok=2,
        dense_intermediate_size=192, shared_intermediate_size=48,
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
        layer_types=["full_attention", "minimax_m3_sparse", "minimax_m3_sparse", "minimax_m3_sparse"],
        index_n_heads=2, index_head_dim=24, index_block_size=4, index_topk_blocks=2, index_local_blocks=1,
        max_position_embeddings=256, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, **kw)


def build(family: str, experts: str):
    """A tiny random-weight causal LM of `family` with the given experts implementation."""
    import transformers as tf

    torch.manual_seed(0)
    kw = {"experts_implementation": experts, "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    if family == "m3":
        from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import (
            MiniMaxM3VLForCausalLM,
        )
        cfg, cls = m3_config(experts), MiniMaxM3VLForCausalLM
    elif family == "qwen3moe":
        cfg = tf.Qwen3MoeConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
                                num_experts_per_tok=2, moe_intermediate_size=32, mlp_only_layers=[0],
                                norm_topk_prob=True, max_position_embeddings=256, **kw)
        cls = tf.Qwen3MoeForCausalLM
    elif family == "dsv3":
        cfg = tf.DeepseekV3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                                  num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                                  n_shared_experts=1, n_routed_experts=8, n_group=2, topk_group=1,
                                  num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16,
                                  qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                                  max_position_embeddings=256, **kw)
        cls = tf.DeepseekV3ForCausalLM
    elif family == "dsv32":
        cfg = tf.DeepseekV32Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                                   num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                                   n_shared_experts=1, n_routed_experts=8, n_group=2, topk_group=1,
                                   num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=32,
                                   kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                                   index_topk=8, index_n_heads=2, index_head_dim=16,
                                   max_position_embeddings=256, **kw)
        cls = tf.DeepseekV32ForCausalLM
    elif family == "mixtral":
        cfg = tf.MixtralConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=32, num_hidden_layers=4,
                               num_attention_heads=4, num_key_value_heads=2, num_local_experts=8,
                               num_experts_per_tok=2, max_position_embeddings=256, **kw)
        cls = tf.MixtralForCausalLM
    elif family == "gptoss":
        cfg = tf.GptOssConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=32, num_hidden_layers=4,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=8,
                              num_experts_per_tok=2, sliding_window=8,
                              layer_types=["sliding_attention", "full_attention"] * 2, **kw)
        cls = tf.GptOssForCausalLM
    else:
        raise SystemExit(f"unknown family {family}")
    cfg._attn_implementation = "eager"
    model = cls(cfg).eval()
    assert model.config._experts_implementation == experts, model.config._experts_implementation
    return model


def profile_decode(model, with_stack: bool) -> tuple[torch.profiler.profile, list[int]]:
    """Prefill + DECODE greedy steps under the profiler; returns the profiler and the decoded tokens."""
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (1, PREFILL))  # VOCAB <= every model's vocab_size
    tokens = []
    with torch.inference_mode():
        model(ids)  # warm-up, outside the trace
        sched = torch.profiler.schedule(wait=0, warmup=1, active=DECODE + 1)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                    with_stack=with_stack, schedule=sched) as prof:
            past, x = None, ids
            for _ in range(DECODE + 1):
                prof.step()  # first call leaves the schedule's warm-up step; each opens ProfilerStep#N
                out = model(x, past_key_values=past, use_cache=True)
                past, x = out.past_key_values, out.logits[:, -1:].argmax(-1)
                tokens.append(int(x))
    return prof, tokens


def export(prof, out: Path) -> None:
    with tempfile.TemporaryDirectory() as d:
        raw = Path(d) / "t.json"
        prof.export_chrome_trace(str(raw))
        out.write_bytes(gzip.compress(raw.read_bytes(), compresslevel=9, mtime=0))
    print(f"{out.name}: {out.stat().st_size} bytes")


SINGLE = {  # name: (family, experts implementation, with_stack)
    "m3_eager_stack": ("m3", "eager", True),
    "m3_eager_nostack": ("m3", "eager", False),
    "m3_grouped_stack": ("m3", "grouped_mm", True),
    "m3_grouped_nostack": ("m3", "grouped_mm", False),
    "qwen3moe_grouped_stack": ("qwen3moe", "grouped_mm", True),
    "qwen3moe_grouped_nostack": ("qwen3moe", "grouped_mm", False),
    "dsv3_eager_stack": ("dsv3", "eager", True),
    "dsv3_eager_nostack": ("dsv3", "eager", False),
    "dsv32_grouped_stack": ("dsv32", "grouped_mm", True),
    "dsv32_grouped_nostack": ("dsv32", "grouped_mm", False),
    "mixtral_eager_stack": ("mixtral", "eager", True),
    "gptoss_grouped_stack": ("gptoss", "grouped_mm", True),
}


def run_single(name: str) -> None:
    family, experts, stack = SINGLE[name]
    prof, tokens = profile_decode(build(family, experts), stack)
    export(prof, HERE / f"{name}.json.gz")
    print(f"  tokens {tokens}")


def run_tp() -> None:
    """Save the tiny M3 (grouped_mm) checkpoint, decode it in-process, then again under torchrun TP 2 / gloo."""
    import importlib.util

    if importlib.util.find_spec("accelerate") is None:
        raise SystemExit("m3_tp2 needs `accelerate` importable (transformers refuses tp_plan without it)")
    with tempfile.TemporaryDirectory() as d:
        ckpt, outdir = Path(d) / "ckpt", Path(d) / "out"
        outdir.mkdir()
        model = build("m3", "grouped_mm")
        model.save_pretrained(ckpt)
        _, ref = profile_decode(model, False)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--master-port", "29533", __file__, "--tp-worker", str(ckpt), str(outdir)],
                       check=True, env=env)
        for rank in (0, 1):
            got = json.loads((outdir / f"tokens{rank}.json").read_text())
            assert got == ref, f"rank {rank} decoded {got}, single-process {ref}"
            out = HERE / f"m3_tp2_rank{rank}.json.gz"
            out.write_bytes(gzip.compress((outdir / f"rank{rank}.json").read_bytes(), compresslevel=9, mtime=0))
            print(f"{out.name}: {out.stat().st_size} bytes  tokens {got} (= single-process)")


def tp_worker(ckpt: str, outdir: str) -> None:
    from transformers import DistributedConfig
    from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import (
        MiniMaxM3VLForCausalLM,
    )

    torch.set_num_threads(1)
    # = from_pretrained(..., tp_plan="auto"), which 5.17 still takes but deprecates (gone in 5.18). The process
    # group is made by transformers (gloo on a CPU-only machine; see distributed/utils.py backend_map).
    model = MiniMaxM3VLForCausalLM.from_pretrained(ckpt, distributed_config=DistributedConfig(tp_plan="auto"),
                                                   attn_implementation="eager",
                                                   experts_implementation="grouped_mm").eval()
    rank = torch.distributed.get_rank()
    prof, tokens = profile_decode(model, False)
    prof.export_chrome_trace(str(Path(outdir) / f"rank{rank}.json"))
    (Path(outdir) / f"tokens{rank}.json").write_text(json.dumps(tokens))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1:2] == ["--tp-worker"]:
        tp_worker(sys.argv[2], sys.argv[3])
        sys.exit()
    names = sys.argv[1:] or [*SINGLE, "m3_tp2"]
    for n in names:
        run_tp() if n == "m3_tp2" else run_single(n)
