"""Prefill + greedy decode loop with per-phase timings and the mmprof phase/step scopes.

Scopes: `mmprof.prefill` > `mmprof.step.0` for the prompt, `mmprof.decode` > `mmprof.step.N` for decode
step N (1..). Timing uses CUDA events on GPUs (one sync at the end, none per step) and perf_counter on CPU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from mmprof.errors import BadInput

from .kvcache import make_cache
from .scopes import scope


@dataclass
class Workload:
    """What to run: a random (seeded) or given prompt, then `decode_steps` greedy tokens."""

    batch: int = 1
    prompt_len: int = 256
    decode_steps: int = 8
    seed: int = 0
    prompt: list[list[int]] | None = None  # explicit token ids [batch][prompt_len]; overrides the random prompt
    prefill_chunk: int | None = None  # prefill the prompt in chunks of this many tokens (bounds memory)

    def tokens(self, vocab: int, device) -> torch.Tensor:
        if self.prompt is not None:
            t = torch.tensor(self.prompt, dtype=torch.long)
            if t.ndim != 2:
                raise BadInput("workload prompt must be a list of token-id lists of equal length")
        else:
            g = torch.Generator().manual_seed(self.seed)
            t = torch.randint(0, vocab, (self.batch, self.prompt_len), generator=g)
        if int(t.max()) >= vocab or int(t.min()) < 0:
            raise BadInput(f"prompt token ids must lie in [0, {vocab})")
        return t.to(device)


@dataclass
class GenerateResult:
    """Generated tokens and timings (milliseconds; throughput in tokens/s over the whole batch)."""

    prompt: torch.Tensor  # [B, P]
    tokens: torch.Tensor  # [B, decode_steps + 1]: the prefill's next token then one per decode step
    prefill_ms: float
    decode_ms: list[float] = field(default_factory=list)  # per decode step
    logits: list[torch.Tensor] = field(default_factory=list)  # last-position logits per step if kept

    @property
    def prefill_tok_s(self) -> float:
        return self.prompt.numel() / (self.prefill_ms / 1e3) if self.prefill_ms > 0 else 0.0

    @property
    def decode_tok_s(self) -> float:
        total = sum(self.decode_ms)
        return self.prompt.shape[0] * len(self.decode_ms) / (total / 1e3) if total > 0 else 0.0

    def to_dict(self) -> dict:
        return {"batch": self.prompt.shape[0], "prompt_len": self.prompt.shape[1], "decode_steps": len(self.decode_ms),
                "prefill_ms": self.prefill_ms, "decode_ms": self.decode_ms,
                "prefill_tok_s": self.prefill_tok_s, "decode_tok_s": self.decode_tok_s,
                "tokens": self.tokens.tolist()}


class _Timer:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list = []

    def mark(self) -> None:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append(e)
        else:
            self.marks.append(time.perf_counter())

    def intervals_ms(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        return [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:])]


@torch.no_grad()
def generate(model, workload: Workload, keep_logits: bool = False, caches=None,
             on_step_end: Callable[[int], None] | None = None) -> GenerateResult:
    """Run prefill then `decode_steps` greedy decode steps on `model` (a runtime Transformer).

    `on_step_end(step)` runs after each step's ranges have closed (step 0 is the prefill), where no
    record_function range is open: a profiler may be stopped or restarted there. Its time counts in that step.
    """
    device = model.embed.weight.device
    prompt = workload.tokens(model.args.vocab_size, device)
    b, p = prompt.shape
    total = p + workload.decode_steps
    if total > model.args.max_seq_len and caches is None:
        raise BadInput(f"prompt {p} + {workload.decode_steps} decode steps exceeds max_seq_len {model.args.max_seq_len}")
    caches = caches or make_cache(model, b, max(total, 1))
    out = torch.empty(b, workload.decode_steps + 1, dtype=torch.long, device=device)
    logits_kept: list[torch.Tensor] = []
    timer = _Timer(device)
    log = model.dispatch
    timer.mark()
    log.set_step(0, "prefill")
    with scope("mmprof.prefill"), scope("mmprof.step.0"):
        chunk = workload.prefill_chunk or p
        for start in range(0, p, chunk):
            logits = model(prompt[:, start:start + chunk], start, caches, last_only=True)
        out[:, 0] = logits[:, -1].argmax(-1)
    if on_step_end is not None:
        on_step_end(0)
    timer.mark()
    if keep_logits:
        logits_kept.append(logits[:, -1].float().cpu())
    for s in range(1, workload.decode_steps + 1):
        log.set_step(s, "decode")
        # one phase range per step (as for prefill), so a capture window can open or close between steps
        with scope("mmprof.decode"), scope(f"mmprof.step.{s}"):
            logits = model(out[:, s - 1:s], p + s - 1, caches)
            out[:, s] = logits[:, -1].argmax(-1)
        if on_step_end is not None:
            on_step_end(s)
        timer.mark()
        if keep_logits:
            logits_kept.append(logits[:, -1].float().cpu())
    iv = timer.intervals_ms()
    return GenerateResult(prompt=prompt.cpu(), tokens=out.cpu(), prefill_ms=iv[0], decode_ms=iv[1:],
                          logits=logits_kept)
