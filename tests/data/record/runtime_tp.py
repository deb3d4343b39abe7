"""The reference M3 runtime (mmprof.runtime, tiny preset) under torchrun: TP over all ranks (gloo on CPU),
prefill + a few decode steps. The runtime emits its scope labels (mmprof.prefill/decode, mmprof.step.N,
layers.{i}.*) itself; this script contains no profiling code. Run: torchrun --nproc-per-node 2 runtime_tp.py"""
from mmprof.runtime import Switches, Workload, build_model, generate, get_preset, init_distributed

ctx = init_distributed(backend="gloo", device="cpu")
args = get_preset("tiny")
model = build_model(args, Switches(), tp=ctx.world_size, rank=ctx.rank, group=ctx.group)
res = generate(model, Workload(batch=1, prompt_len=16, decode_steps=3))
print(f"rank {ctx.rank}: generated {len(res.tokens[0]) if hasattr(res.tokens, '__len__') else res.tokens}", flush=True)
