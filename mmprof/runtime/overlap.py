"""Measure how much adjacent sparse layers' block selections overlap on a real forward (is reuse safe?)."""

from __future__ import annotations

import dataclasses

import torch

from .indexer import OverlapResult, selection_overlap
from .kvcache import make_cache


@torch.no_grad()
def measure_selection_overlap(model, workload) -> OverlapResult:
    """Prefill `workload`'s prompt with block_reuse=1 (every sparse layer computes) and compare the
    selections of consecutive sparse layers. Restores the model's switches afterwards."""
    saved = model.switches
    model.set_switches(dataclasses.replace(saved, block_reuse=1, attention="sparse"))
    try:
        device = model.embed.weight.device
        prompt = workload.tokens(model.args.vocab_size, device)
        caches = make_cache(model, prompt.shape[0], prompt.shape[1])
        cap: dict[int, torch.Tensor] = {}
        was = model.dispatch.enabled
        model.dispatch.enabled = False
        model(prompt, 0, caches, last_only=True, capture=cap)
        model.dispatch.enabled = was
    finally:
        model.set_switches(saved)
    return selection_overlap(cap, model.args.index_block_size, prompt.shape[1])
