"""Worker for the multi-process TP/EP tests (gloo, real processes via torch.multiprocessing.spawn)."""

from __future__ import annotations

import os
import sys


def run_rank(rank: int, world: int, ep: int, init_file: str, out_dir: str, switches: dict) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    ok = False
    try:
        from mmprof.runtime import Switches, Workload, build_model, generate, get_preset

        model = build_model(get_preset("tiny"), Switches(**switches), tp=world, ep=ep, rank=rank,
                            group=dist.group.WORLD, seed=0)
        res = generate(model, Workload(batch=2, prompt_len=96, decode_steps=4, seed=5), keep_logits=True)
        torch.save({"logits": res.logits, "tokens": res.tokens, "dispatch": model.dispatch.rows(),
                    "plan": model.plan.to_dict()}, os.path.join(out_dir, f"rank{rank}.pt"))
        ok = True
    finally:
        if ok:
            dist.barrier()  # leave together (a peer closing its socket early can abort gloo)
        dist.destroy_process_group()
    # results are saved: skip C++ static destructors, where a still-joinable gloo thread occasionally
    # aborts the process at exit ("terminate called without an active exception")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
