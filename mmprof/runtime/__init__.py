"""mmprof's reference MiniMax M3 runtime (PyTorch): the embedded default that `mmprof run` profiles.

Public API (stable; other mmprof modules use only these names):

- `ModelArgs` - every model dimension (config.py); `get_preset(name, **overrides)` for `m3`, `tiny`,
  `small`, `m3-rank-slice` (tp=8, layers=8, rank=0); `load_config(preset | config.json | checkpoint dir)`;
  `from_hf_config(dict)` for a Hugging Face config (its `text_config`, legacy keys included).
- `shard_plan(args, tp, ep, rank) -> ShardPlan` - per-rank local sizes (pure; no torch). Raises
  `ShardRefused` (a BadInput) with vLLM's reason for shapes vLLM refuses.
- `Switches(moe_impl='grouped'|'loop', shared_expert='fused'|'separate', block_reuse=K, attention='sparse'|'dense',
  graphs=False|True)` - the fast paths are the defaults (graphs aside: they need a GPU); `Switches.baseline()` is
  loop/separate/K=1/sparse. graphs=True replays decode steps as a CUDA/HIP graph (graph_runner.py: `GraphRunner`).
- `build_model(args, switches, tp=1, ep=1, rank=0, device='cpu'|'meta'|'cuda', dtype=torch.float32,
  group=None, seed=0) -> Transformer`. `device='meta'` builds shapes only (e.g. per TP rank for
  `mmprof shapes`). Without `group`, tp > 1 builds one rank's slice without collectives.
  `model.set_switches(sw)` changes switches between runs without rebuilding. The model modules are written
  for one device; tp > 1 goes through `mmprof.runtime.parallel.apply(model, plan, comm)` (TP/EP as a transform).
- `load_weights(model, path)` - Hugging Face safetensors (transformers or released-checkpoint names).
- `Workload(batch, prompt_len, decode_steps, seed, prompt)` and `generate(model, workload) -> GenerateResult`
  (tokens, prefill_ms, decode_ms per step, prefill_tok_s, decode_tok_s; with graphs graph_capture_ms, graphs).
- `model.dispatch` - a `DispatchLog`; `.rows()` gives dicts with the Profile `dispatch` table columns.
- `scope(name)` - record_function + NVTX/roctx range; `set_scopes_enabled(bool)` turns all scopes off/on.
- `measure_selection_overlap(model, workload) -> OverlapResult` - adjacent sparse layers' selection agreement.
- `analytic(args, tp, ep, batch, seq, phase, dtype) -> ShapesResult` - per-rank shapes of every rank, built on
  the meta device (`mmprof shapes --tp N`); `layer_kinds(args)`.
- `init_distributed()` - process group from torchrun env (gloo on CPU, NCCL/RCCL on GPUs);
  `python -m mmprof.runtime.torchrun` is a torchrun entry point.

torch is imported lazily: importing this package only loads config/tp; the rest load on first use.
"""

from __future__ import annotations

from .config import PRESETS, ModelArgs, Switches, SwitchSpec, from_hf_config, get_preset, load_config, to_spec
from .tp import ShardPlan, ShardRefused, shard_plan

_LAZY = {
    "Transformer": ".transformer", "build_model": ".transformer",
    "load_weights": ".weights", "Workload": ".generate", "GenerateResult": ".generate", "generate": ".generate",
    "DispatchLog": ".dispatch", "DispatchRecord": ".dispatch", "scope": ".scopes", "set_scopes_enabled": ".scopes",
    "measure_selection_overlap": ".overlap", "OverlapResult": ".indexer", "make_cache": ".kvcache",
    "init_distributed": ".dist", "analytic": ".shapes", "layer_kinds": ".shapes", "GraphRunner": ".graph_runner",
}

__all__ = ["PRESETS", "ModelArgs", "Switches", "SwitchSpec", "from_hf_config", "get_preset", "load_config", "to_spec", "ShardPlan", "ShardRefused",
           "shard_plan", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        mod = importlib.import_module(_LAZY[name], __name__)
        for other, where in _LAZY.items():  # bind all names of that module; this also replaces the
            if where == _LAZY[name]:  # submodule attribute the import set (e.g. `generate`) by the function
                globals()[other] = getattr(mod, other)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
