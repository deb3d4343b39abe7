"""Hand-written Triton kernels for the decode step (issue 36), each behind its own runtime switch.

| switch | module | kernels (one decode step, per layer) |
|---|---|---|
| `triton_norm_rope` | `norm_rope_insert.py` | `qk_norm_rope_kv_insert_kernel`: per-head Gemma Q/K norm, partial NeoX RoPE and the KV (and index-key) cache insert, one launch |
| `triton_attention` | `decode_attention.py` | `sparse_indexer_block_score_kernel` (the lightning indexer's block scores), `sparse_attention_decode_kernel` (top-k of those scores and attention over the selected blocks, split over the blocks), `sparse_attention_decode_combine_kernel`; full layers: `decode_attention_splitk_kernel` + `decode_attention_combine_kernel` |
| `triton_moe` | `fused_moe.py` | `moe_fused_gate_logits_kernel` (router GEMV, split over H), `moe_topk_sigmoid_renorm_kernel` (sigmoid, biased top-k, renormalisation, the fused shared slot), `fused_moe_decode_gate_up_act_kernel` (gate/up GEMM of the experts the batch touches + SwiGLU-OAI), `fused_moe_decode_down_kernel` (down GEMM, top-k weights applied, summed per token) |

Each kernel's launcher is a torch custom op (`mmprof::...`, `ops.py`), so a torch.profiler trace records it with its
input shapes (the roofline reads them) and its kernels run inside the runtime's region scopes like any other.
`support.triton_unavailable(device)` says why the kernels cannot run (no Triton, a CPU without the interpreter);
the runtime then takes its PyTorch path and logs the reason in the dispatch row. Importing this package loads
neither torch nor Triton.
"""
