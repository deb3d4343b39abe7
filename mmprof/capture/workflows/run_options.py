"""The options of `mmprof run` (RunOptions) and their validation: one clear line for every impossible
combination, before any rank starts. Importing this module does not import torch (commands such as
`verify-fastpath --run` build RunOptions before deciding to run); the checks that need it import it lazily.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Callable

from mmprof.capture.session import gpu_available
from mmprof.errors import BadInput, CaptureUnavailable
from mmprof.runtime import PRESETS, Switches, load_config, shard_plan

Progress = Callable[[str, int, int], None]

PRESET_NAMES = tuple(PRESETS)
CAPTURE_MODES = ("full", "light", "kernels", "none")
DTYPES = ("float32", "bfloat16")
MEMORY_HEADROOM = 0.8  # refuse when the weights alone need more than this share of the memory there is


@dataclass
class RunOptions:
    """Everything `mmprof run` takes. `base` picks the switch defaults; explicit switches override them."""

    preset: str = "tiny"
    config: str | None = None  # a config.json or checkpoint directory; overrides `preset`
    device: str = "cpu"
    dtype: str = "float32"
    batch: int = 1
    prompt_len: int = 128
    decode_steps: int = 8
    seed: int = 0
    base: str = "fast"  # fast | baseline
    # explicit switches (Switches field name -> value) over the base; None values are no override. The switches
    # are declared once, in runtime/config.py:Switches, and this dict needs no field per switch.
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    capture: str = "full"  # full | light | kernels | none
    measure_dilation: bool = False  # capture in every mode (kernels on a GPU only); keep `capture`'s trace
    tp: int = 1
    ep: int = 1
    repeats: int = 3  # plain (unprofiled) timing runs; the median is used
    warmup: int = 1
    command: list[str] | None = None

    def switches(self) -> Switches:
        """The runtime Switches these options ask for."""
        if self.base not in ("fast", "baseline"):
            raise BadInput(f"base switches must be fast or baseline, not {self.base!r}")
        sw = Switches.baseline() if self.base == "baseline" else Switches()
        names = {s.name for s in Switches.specs()}
        unknown = sorted(set(self.overrides) - names)
        if unknown:
            raise BadInput(f"unknown switch(es) {', '.join(unknown)}; switches are {', '.join(sorted(names))}")
        over = {k: v for k, v in self.overrides.items() if v is not None}
        return dataclasses.replace(sw, **over) if over else sw

    def modes(self) -> list[str]:
        """Capture modes to run, the kept one first."""
        if self.capture == "none":
            return []
        if self.measure_dilation:
            others = ("full", "light", "kernels") if self.device == "cuda" else ("full", "light")
            return [self.capture] + [m for m in others if m != self.capture]
        return [self.capture]

    def model_args(self):
        return load_config(self.config if self.config else self.preset)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# -- validation -------------------------------------------------------------------------------------
def validate(opts: RunOptions) -> Any:
    """Refuse impossible combinations with one clear line; returns the ModelArgs."""
    if opts.config is None and opts.preset not in PRESET_NAMES:
        raise BadInput(f"unknown preset {opts.preset!r}; choose one of {', '.join(PRESET_NAMES)} or give --config")
    if opts.device not in ("cpu", "cuda"):
        raise BadInput(f"--device must be cpu or cuda, not {opts.device!r}")
    if opts.dtype not in DTYPES:
        raise BadInput(f"--dtype must be one of {', '.join(DTYPES)}, not {opts.dtype!r}")
    if opts.capture not in CAPTURE_MODES:
        raise BadInput(f"--capture must be one of {', '.join(CAPTURE_MODES)}, not {opts.capture!r}")
    if opts.measure_dilation and opts.capture == "none":
        raise BadInput("--measure-dilation needs a capture: use --capture full or light")
    if opts.capture == "kernels" and opts.device != "cuda":
        raise BadInput("--capture kernels records device activity only and needs --device cuda")
    for name in ("batch", "prompt_len", "tp", "ep", "repeats"):
        if getattr(opts, name) < 1:
            raise BadInput(f"--{name.replace('_', '-')} must be at least 1, not {getattr(opts, name)}")
    if opts.decode_steps < 1:
        raise BadInput(f"--decode-steps must be at least 1 (the decode phase is what dilation is about), "
                       f"not {opts.decode_steps}")
    if opts.warmup < 0:
        raise BadInput("warm-up runs must be >= 0")
    sw = opts.switches()  # raises BadInput on a bad switch value (graphs with the loop experts, too)
    if sw.graphs and opts.device != "cuda":
        raise BadInput(f"--graphs needs --device cuda: CUDA/HIP graphs capture GPU kernels (not {opts.device})")
    args = opts.model_args()
    if args.slice_tp > 1 and opts.tp > 1:
        raise BadInput(f"preset {args.name} already is one rank of a TP={args.slice_tp} model; run it with --tp 1 "
                       "or use --preset m3 with --tp")
    if opts.ep > 1 and opts.ep != opts.tp:
        raise BadInput(f"--ep {opts.ep} must be 1 (experts split by TP) or equal --tp {opts.tp}")
    total = opts.prompt_len + opts.decode_steps
    if total > args.max_seq_len:
        raise BadInput(f"--prompt-len {opts.prompt_len} + --decode-steps {opts.decode_steps} = {total} exceeds the "
                       f"{args.name} KV cache ({args.max_seq_len} tokens)")
    shard_plan(args, opts.tp, opts.ep, 0)  # raises ShardRefused (BadInput) for splits vLLM refuses
    _check_device(opts)
    _check_memory(opts, args)
    return args


def _check_device(opts: RunOptions) -> None:
    if opts.device != "cuda":
        return
    if not gpu_available():
        raise CaptureUnavailable("--device cuda: torch sees no CUDA/ROCm GPU here; use --device cpu")
    import torch  # lazy: RunOptions are built by commands that may never run the model (verify-fastpath)

    n = torch.cuda.device_count()
    if opts.tp > n:
        raise BadInput(f"--tp {opts.tp} on cuda needs {opts.tp} GPUs, but this host has {n}")


def weight_bytes(args, opts: RunOptions) -> tuple[int, int]:
    """(bytes of one rank's weights, bytes of all ranks' weights) from a shapes-only (meta) build."""
    import torch

    from mmprof.runtime.transformer import build_model  # imports torch

    dtype = getattr(torch, opts.dtype)
    m = build_model(args, Switches(), tp=opts.tp, ep=opts.ep, rank=0, device="meta", dtype=dtype)
    per_rank = sum(p.numel() * p.element_size() for p in m.parameters())
    return per_rank, per_rank * opts.tp


def cache_bytes(args, opts: RunOptions) -> int:
    """The KV cache (and the indexer's keys) generate() allocates for the whole run, on one device: batch x
    (prompt + decode steps) positions x every layer's K and V rows (runtime/kvcache.py:make_cache), plus the
    prefill's largest activations (batch x prompt x the widest projection, fp32): a size past any device is
    refused here, before torch tries to allocate it."""
    el = 4 if opts.dtype == "float32" else 2
    positions = opts.batch * (opts.prompt_len + opts.decode_steps)
    per_pos = sum(2 * args.n_kv_heads * args.head_dim + (args.index_head_dim if t == "sparse" else 0)
                  for t in args.attn_types)
    widest = max(args.vocab_size, args.dense_intermediate * 2, args.n_heads * args.head_dim * 3)
    return positions * per_pos * el + opts.batch * opts.prompt_len * widest * 4


def _check_memory(opts: RunOptions, args) -> None:
    per_rank, total = weight_bytes(args, opts)
    cache = cache_bytes(args, opts)
    per_rank, total = per_rank + cache, total + cache * opts.tp
    if opts.device == "cpu":
        have = _host_memory()
        if have and total > MEMORY_HEADROOM * have:
            raise BadInput(f"preset {args.name} in {opts.dtype} needs {total / 1e9:,.1f} GB of weights, KV cache and "
                           f"activations ({opts.tp} rank(s) on this host) but the host has {have / 1e9:.1f} GB; use "
                           "a smaller preset (tiny, small, m3-rank-slice), batch or prompt, or --device cuda with --tp")
        return
    import torch

    free, _ = torch.cuda.mem_get_info(0)
    if per_rank > MEMORY_HEADROOM * free:
        raise BadInput(f"preset {args.name} in {opts.dtype} at --tp {opts.tp} needs {per_rank / 1e9:,.1f} GB of weights, "
                       f"KV cache and activations per GPU but GPU 0 has {free / 1e9:.1f} GB free; raise --tp or use a "
                       "smaller preset, batch or prompt")


def _host_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
