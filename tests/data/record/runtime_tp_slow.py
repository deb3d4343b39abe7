"""runtime_tp.py with one rank made slow on purpose, for `mmprof ranks` tests: the reference runtime (tiny preset)
with TP over all torchrun ranks (gloo), prefill 16 + 3 decode steps. `MMPROF_TEST_SLOW=RANK:LAYER:SECONDS` makes
that rank sleep SECONDS at the start of layer LAYER's MLP / MoE block on every forward (the other ranks then wait
for it in the block's all-reduce). No profiling code. Run: torchrun --nproc-per-node 2 runtime_tp_slow.py"""
import os
import time

from mmprof.runtime import Switches, Workload, build_model, generate, get_preset, init_distributed

ctx = init_distributed(backend="gloo", device="cpu")
model = build_model(get_preset("tiny"), Switches(), tp=ctx.world_size, rank=ctx.rank, group=ctx.group)
slow_rank, layer, secs = os.environ.get("MMPROF_TEST_SLOW", "-1:0:0").split(":")
if ctx.rank == int(slow_rank):
    mlp = model.layers[int(layer)].mlp
    inner = mlp.forward

    def slowed(*args, **kwargs):
        time.sleep(float(secs))
        return inner(*args, **kwargs)

    mlp.forward = slowed
res = generate(model, Workload(batch=1, prompt_len=16, decode_steps=3))
print(f"rank {ctx.rank}: done", flush=True)
