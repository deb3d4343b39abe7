"""Write the config.json of every model in make_traces.py to configs/<family>.json (what `--model` reads).

Run: python tests/data/hf_moe/make_configs.py   (transformers 5.17; no model is built)
"""

from __future__ import annotations

import sys
from pathlib import Path

import transformers as tf

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_traces as mt  # noqa: E402


def configs() -> dict[str, object]:
    kw = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    return {
        "m3": mt.m3_config(None),
        "qwen3moe": tf.Qwen3MoeConfig(vocab_size=mt.VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
                                      num_experts_per_tok=2, moe_intermediate_size=32, mlp_only_layers=[0],
                                      norm_topk_prob=True, max_position_embeddings=256, **kw),
        "dsv3": tf.DeepseekV3Config(vocab_size=mt.VOCAB, hidden_size=64, intermediate_size=128,
                                    moe_intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
                                    num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8, n_group=2,
                                    topk_group=1, num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=32,
                                    kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                                    max_position_embeddings=256, **kw),
        "dsv32": tf.DeepseekV32Config(vocab_size=mt.VOCAB, hidden_size=64, intermediate_size=128,
                                      moe_intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
                                      num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8, n_group=2,
                                      topk_group=1, num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=32,
                                      kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                                      index_topk=8, index_n_heads=2, index_head_dim=16,
                                      max_position_embeddings=256, **kw),
        "mixtral": tf.MixtralConfig(vocab_size=mt.VOCAB, hidden_size=64, intermediate_size=32, num_hidden_layers=4,
                                    num_attention_heads=4, num_key_value_heads=2, num_local_experts=8,
                                    num_experts_per_tok=2, max_position_embeddings=256, **kw),
        "gptoss": tf.GptOssConfig(vocab_size=mt.VOCAB, hidden_size=64, intermediate_size=32, num_hidden_layers=4,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=8,
                                  num_experts_per_tok=2, sliding_window=8,
                                  layer_types=["sliding_attention", "full_attention"] * 2, **kw),
    }


if __name__ == "__main__":
    out = HERE / "configs"
    out.mkdir(exist_ok=True)
    for name, cfg in configs().items():
        (out / f"{name}.json").write_text(cfg.to_json_string(use_diff=False))
        print(out / f"{name}.json")
