"""CUDA/HIP-graph decode (`Switches(graphs=True)`): a static-shape decode step and the runner that captures it once
per (batch, KV cache) and replays it for every later decode step.

The static step (`StaticDecode.step`) reads only static buffers (the input tokens [B, 1], the position [1] as a
device long tensor) and writes only static buffers (the last logits [B, V], their argmax [B]). Inside the model
the position stays on the device: RoPE rows are gathered from the precomputed table, KV and index-key writes are
index_copy_ at the position, and attention and the lightning indexer run over the whole cache capacity with the
positions past the query masked (a block that holds no valid key is never selected, and a -1 slot is masked out
of the attention). The grouped experts sort and count on the device; the loop experts sync with the host and are
refused. Block reuse keeps its selection in a tensor made within the step, so it needs no buffer of its own.

`GraphRunner.prepare` runs the static step once eagerly (warm-up, and the trace's eager reference of the kernels the
replays run) and captures it (`capture`, by default `cuda_graph_capture`: one warm-up on the capture stream, then
torch.cuda.graph); generate() calls it between the prefill and decode step 1. `GraphRunner.decode` replays, once
per decode step. Python does not run during a replay, so the dispatch log gets its rows once, at capture; each
replayed step gets a copy of them with its own step number. Tests inject a fake capture (a callable that returns the step itself as
the "replay") to check this bookkeeping on CPU, where no graph exists.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator

import torch

from mmprof.errors import BadInput, CaptureUnavailable

from .config import GRAPHS_NEED_GROUPED
from .dispatch import DispatchRecord
from .scopes import scope, set_scopes_enabled

# capture(step, warmup_step) -> replay: `warmup_step` runs the step with the dispatch log and scopes muted
Capture = Callable[[Callable[[], None], Callable[[], None]], Callable[[], None]]

CAPTURE_SCOPE = "mmprof.graph.capture"
GRAPHS_NEED_NCCL = ("graphs need NCCL/RCCL for tensor-parallel collectives: a gloo all-reduce runs on the host and "
                    "cannot be captured")


def cuda_graph_capture(step: Callable[[], None], warmup_step: Callable[[], None], warmup: int = 1):
    """The standard torch recipe: warm up on a side stream, then capture one step on that stream into a CUDAGraph.
    Returns the graph's replay (it keeps the graph, and its private memory pool, alive)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            warmup_step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, stream=stream):
            step()
    except RuntimeError as e:  # an op that syncs with or copies from the host while capturing
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        hint = ""
        if "between CPU and CUDA" in msg:
            # seen on the H200 (torch 2.11): torch._grouped_mm in fp32 stages data through the host
            hint = "; on torch's fp32 grouped GEMM this is a host copy: run the graphs rung in bfloat16"
        raise CaptureUnavailable(f"the decode step could not be captured as a CUDA/HIP graph ({msg}){hint}") from None
    return graph.replay


def check_graphs(model, real_capture: bool = True) -> None:
    """Refuse, with one line, a model whose decode step cannot be captured. The device and backend checks apply
    to a real capture only (a fake one, in tests, runs the static step on CPU and over gloo)."""
    if model.switches.moe_impl == "loop":
        raise BadInput(GRAPHS_NEED_GROUPED)
    if not real_capture:
        return
    comm = getattr(model, "comm", None)
    if comm is not None and comm.active and getattr(comm, "backend", None) == "gloo":
        raise BadInput(GRAPHS_NEED_NCCL)
    device = model.embed.weight.device
    if device.type != "cuda":
        raise BadInput(f"graphs need a CUDA or ROCm GPU (torch.cuda.CUDAGraph); this model is on {device.type}")


@contextlib.contextmanager
def quiet(model) -> Iterator[None]:
    """No dispatch rows and no scopes while the block runs (what a graph replay does: no Python runs in it)."""
    log = model.dispatch
    prev_log, log.enabled = log.enabled, False
    prev_scopes = set_scopes_enabled(False)
    try:
        yield
    finally:
        log.enabled = prev_log
        set_scopes_enabled(prev_scopes)


class StaticDecode:
    """The static buffers of one (batch, caches) decode step and the step that reads and writes only them."""

    def __init__(self, model, caches, batch: int):
        device = model.embed.weight.device
        self.model, self.caches = model, caches
        self.tokens = torch.zeros(batch, 1, dtype=torch.long, device=device)  # [B, 1] input token ids
        self.pos = torch.zeros(1, dtype=torch.long, device=device)  # [1] position of the input tokens
        # the step's outputs: [B, V] last-position logits and [B] greedy next token. No copy into buffers of
        # our own: the tensors the captured step made live in the graph's memory pool and every replay rewrites
        # them in place, so the last step's outputs are the static outputs.
        self.logits: torch.Tensor | None = None
        self.next: torch.Tensor | None = None

    def set_inputs(self, tokens: torch.Tensor, pos: int) -> None:
        """tokens [B, 1] (device); copied into the static buffers on the current stream, no host sync."""
        self.tokens.copy_(tokens)
        self.pos.fill_(pos)

    def step(self) -> None:
        self.logits = self.model(self.tokens, self.pos, self.caches)[:, -1]  # [B, V]
        with scope("lm_head"):  # the greedy pick belongs to the head (no kernel outside a region)
            self.next = self.logits.argmax(-1)


@dataclasses.dataclass
class GraphStats:
    """What a runner did: the decode step it captured before (after one eager run of the static step), and the
    steps it replayed."""

    captured_before_step: int | None = None
    replayed_steps: list[int] = dataclasses.field(default_factory=list)
    captures: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class GraphRunner:
    """One captured decode step for one (batch size, KV caches); `decode` per step, in generate()'s step scopes."""

    def __init__(self, model, caches, batch: int, capture: Capture | None = None):
        check_graphs(model, real_capture=capture is None)
        self.model = model
        self.static = StaticDecode(model, caches, batch)
        self.capture_fn: Capture = capture or cuda_graph_capture
        self.replay_fn: Callable[[], None] | None = None
        self.rows: list[DispatchRecord] = []  # the dispatch rows the captured step wrote
        self.stats = GraphStats()

    @property
    def captured(self) -> bool:
        return self.replay_fn is not None

    def prepare(self, tokens: torch.Tensor, pos: int, step: int = 1) -> None:
        """Before decode step `step`: run the static step once eagerly (its kernels and layer scopes in the trace,
        the eager reference of what the graph replays; no dispatch rows), then capture it. The captured dispatch
        rows are kept for the replays (each replay adds them with its own step) and taken out of the log."""
        self.static.set_inputs(tokens, pos)
        log = self.model.dispatch
        prev, log.enabled = log.enabled, False
        try:
            self.static.step()  # the eager reference (and, on the compile rung, its compilation)
        finally:
            log.enabled = prev
        n0 = len(log.records)

        def warm() -> None:
            with quiet(self.model):
                self.static.step()

        self.replay_fn = self.capture_fn(self.static.step, warm)
        self.rows = list(log.records[n0:])
        del log.records[n0:]
        self.stats.captured_before_step, self.stats.captures = step, self.stats.captures + 1

    def replay(self, step: int, phase: str = "decode") -> None:
        """Replay the captured step; the dispatch log gets the captured rows with this step number."""
        with quiet(self.model):
            self.replay_fn()
        self.model.dispatch.extend_as(self.rows, step, phase)
        self.stats.replayed_steps.append(step)

    def decode(self, step: int, tokens: torch.Tensor, pos: int, on_capture=None) -> torch.Tensor:
        """One decode step: tokens [B, 1] at `pos` -> the static logits [B, V] (argmax in `self.static.next`),
        replayed. Not captured yet: `prepare` first, under the `mmprof.graph.capture` scope, bracketed by
        `on_capture(start: bool)` (generate() times it apart; it calls `prepare` itself before decode step 1, outside
        the decode ranges)."""
        if not self.captured:
            if on_capture is not None:
                on_capture(True)
            with scope(CAPTURE_SCOPE):
                self.prepare(tokens, pos, step)
            if on_capture is not None:
                on_capture(False)
        self.static.set_inputs(tokens, pos)
        self.replay(step)
        return self.static.logits
