"""Prefill + greedy decode loop with per-phase timings and the mmprof phase/step scopes.

Scopes: `mmprof.prefill` > `mmprof.step.0` for the prompt, `mmprof.decode` > `mmprof.step.N` for decode
step N (1..). Timing uses CUDA events on GPUs (one sync at the end, none per step) and perf_counter on CPU.

With `Switches(graphs=True)` the decode steps go through a `GraphRunner` (graph_runner.py): between the prefill and
decode step 1, inside `mmprof.graph.capture` and in no phase, the static step runs once eagerly and is captured;
every decode step is a replay. The capture is timed apart (`GenerateResult.graph_capture_ms`), as serving engines
capture before serving.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from mmprof.errors import BadInput

from .graph_runner import CAPTURE_SCOPE, Capture, GraphRunner
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
    graph_capture_ms: float | None = None  # with graphs: the capture (warm-up included), not counted in decode_ms
    graphs: dict | None = None  # with graphs: GraphStats.to_dict() (eager, captured and replayed steps)

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
                "tokens": self.tokens.tolist(), "graph_capture_ms": self.graph_capture_ms, "graphs": self.graphs}


class _Timer:
    """Marks between steps; `exclude(True)` .. `exclude(False)` brackets a stretch inside the current interval
    that is timed apart (the graph capture) and subtracted from it."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list = []
        self.excluded: list[tuple[int, object, object]] = []  # (interval index, start, end)
        self._open = None

    def _now(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def _ms(self, a, b) -> float:
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3

    def mark(self) -> None:
        self.marks.append(self._now())

    def exclude(self, start: bool) -> None:
        if start:
            self._open = self._now()
        else:
            self.excluded.append((len(self.marks) - 1, self._open, self._now()))

    def intervals_ms(self) -> tuple[list[float], float | None]:
        """Per interval, minus its excluded stretches; and the excluded total (None if nothing was excluded)."""
        if self.cuda:
            torch.cuda.synchronize()
        iv = [self._ms(a, b) for a, b in zip(self.marks, self.marks[1:])]
        total = None
        for i, a, b in self.excluded:
            ms = self._ms(a, b)
            iv[i] -= ms
            total = (total or 0.0) + ms
        return iv, total


@torch.no_grad()
def generate(model, workload: Workload, keep_logits: bool = False, caches=None,
             on_step_end: Callable[[int], None] | None = None, graph_capture: Capture | None = None) -> GenerateResult:
    """Run prefill then `decode_steps` greedy decode steps on `model` (a runtime Transformer).

    `on_step_end(step)` runs after each step's ranges have closed (step 0 is the prefill), where no
    record_function range is open: a profiler may be stopped or restarted there. Its time counts in that step.
    With `model.switches.graphs` the decode steps run through a GraphRunner; `graph_capture` replaces its CUDA
    graph capture (tests drive the runner on CPU with a fake one).
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
    runner = GraphRunner(model, caches, b, capture=graph_capture) if model.switches.graphs else None
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
    if runner is not None and workload.decode_steps:
        # between the prefill and decode step 1, in no phase: one eager run of the static step (the kernels the
        # graph replays, with their layer scopes) and the capture (its ops and scopes); timed apart
        log.set_step(1, "decode")
        timer.exclude(True)
        with scope(CAPTURE_SCOPE):
            runner.prepare(out[:, 0:1], p)
        timer.exclude(False)
    for s in range(1, workload.decode_steps + 1):
        log.set_step(s, "decode")
        # one phase range per step (as for prefill), so a capture window can open or close between steps
        with scope("mmprof.decode"), scope(f"mmprof.step.{s}"):
            if runner is None:
                last = model(out[:, s - 1:s], p + s - 1, caches)[:, -1]  # [B, V]
                out[:, s] = last.argmax(-1)
            else:  # replays get their step from the graph launch inside these ranges
                last = runner.decode(s, out[:, s - 1:s], p + s - 1, on_capture=timer.exclude)
                out[:, s] = runner.static.next
        if on_step_end is not None:
            on_step_end(s)
        timer.mark()
        if keep_logits:
            logits_kept.append(last.to("cpu", torch.float32, copy=True))  # `last` may be a static buffer
    iv, capture_ms = timer.intervals_ms()
    return GenerateResult(prompt=prompt.cpu(), tokens=out.cpu(), prefill_ms=iv[0], decode_ms=iv[1:],
                          logits=logits_kept, graph_capture_ms=capture_ms,
                          graphs=runner.stats.to_dict() if runner is not None else None)
