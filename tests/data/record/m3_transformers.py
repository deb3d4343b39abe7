"""transformers' MiniMax M3 text model (MiniMaxM3VLForCausalLM) from a tiny config with random weights:
one prefill forward and two greedy decode steps, each in an `mmprof.step.N` annotation. No profiling code
otherwise; `mmprof record` captures it from outside."""
import torch
from transformers.models.minimax_m3_vl.configuration_minimax_m3_vl import MiniMaxM3VLTextConfig
from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import MiniMaxM3VLForCausalLM

torch.manual_seed(0)
cfg = MiniMaxM3VLTextConfig(
    vocab_size=128, hidden_size=64, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, rotary_dim=8, num_local_experts=4, num_experts_per_tok=2,
    dense_intermediate_size=64, shared_intermediate_size=32, mlp_layer_types=["dense", "sparse"],
    layer_types=["full_attention", "minimax_m3_sparse"], index_n_heads=2, index_head_dim=16,
    index_block_size=4, index_topk_blocks=2, index_local_blocks=1, max_position_embeddings=256,
    bos_token_id=1, eos_token_id=2,
)
model = MiniMaxM3VLForCausalLM(cfg).eval()
ids = torch.randint(0, cfg.vocab_size, (1, 12))
with torch.no_grad():
    with torch.profiler.record_function("mmprof.step.0"):
        out = model(input_ids=ids, use_cache=True)
    past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    for i in (1, 2):
        with torch.profiler.record_function(f"mmprof.step.{i}"):
            out = model(input_ids=tok, past_key_values=past, use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
print("m3 logits", tuple(out.logits.shape))
