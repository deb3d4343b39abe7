"""Helpers for the transformers oracle test: a tiny HF config from ModelArgs and a checkpoint writer."""

from __future__ import annotations

from pathlib import Path


def hf_text_config(args):
    from transformers.models.minimax_m3_vl.configuration_minimax_m3_vl import MiniMaxM3VLTextConfig

    return MiniMaxM3VLTextConfig(
        vocab_size=args.vocab_size, hidden_size=args.hidden_size, intermediate_size=args.moe_intermediate,
        num_hidden_layers=args.n_layers, num_attention_heads=args.n_heads, num_key_value_heads=args.n_kv_heads,
        head_dim=args.head_dim, rms_norm_eps=args.norm_eps, num_experts_per_tok=args.top_k,
        num_local_experts=args.n_experts, dense_intermediate_size=args.dense_intermediate,
        shared_intermediate_size=args.shared_intermediate, routed_scaling_factor=args.routed_scaling_factor,
        rotary_dim=args.rotary_dim, swiglu_alpha=args.swiglu_alpha, swiglu_limit=args.swiglu_limit,
        mlp_layer_types=["sparse" if t == "moe" else "dense" for t in args.mlp_types],
        layer_types=["minimax_m3_sparse" if t == "sparse" else "full_attention" for t in args.attn_types],
        index_n_heads=args.index_n_heads, index_head_dim=args.index_head_dim,
        index_block_size=args.index_block_size, index_topk_blocks=args.index_topk_blocks,
        index_local_blocks=args.index_local_blocks, max_position_embeddings=args.max_seq_len,
        rope_parameters={"rope_type": "default", "rope_theta": args.rope_theta,
                         "partial_rotary_factor": args.rotary_dim / args.head_dim},
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
    )


def write_hf_checkpoint(args, out: Path, seed: int = 0):
    """Random-init transformers' MiniMaxM3VLForCausalLM (norms and router bias perturbed so they matter),
    save it with save_pretrained, and return the model (eval, fp32, eager attention)."""
    import torch
    from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import MiniMaxM3VLForCausalLM

    torch.manual_seed(seed)
    cfg = hf_text_config(args)
    cfg._attn_implementation = "eager"
    model = MiniMaxM3VLForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(0.0, 0.1)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.normal_(0.0, 0.01)
    model.save_pretrained(out, safe_serialization=True)
    return model
