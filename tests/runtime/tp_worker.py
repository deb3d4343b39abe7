"""Worker for the multi-process TP/EP tests (gloo on CPU, or NCCL with one GPU per rank; real processes via
torch.multiprocessing.spawn)."""

from __future__ import annotations

import os
import sys


def _fake_capture(step, warmup_step):
    """A stand-in for cuda_graph_capture on CPU: warm up, 'capture' by running the step, replay = the step."""
    warmup_step()
    step()
    return step


def run_rank(rank: int, world: int, ep: int, init_file: str, out_dir: str, switches: dict,
             graphs: bool = False, device: str = "cpu") -> None:
    """graphs=True also runs the graphs rung: on cpu (gloo) with a fake capture, after checking that the real
    capture is refused; on cuda (NCCL) with the real CUDA graph."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    cuda = device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    ok = False
    try:
        from mmprof.runtime import Switches, Workload, build_model, generate, get_preset

        model = build_model(get_preset("tiny"), Switches(**switches), tp=world, ep=ep, rank=rank,
                            group=dist.group.WORLD, seed=0, device=f"cuda:{rank}" if cuda else "cpu",
                            **({"dtype": torch.bfloat16} if cuda else {}))
        wl = Workload(batch=2, prompt_len=96, decode_steps=4, seed=5)
        res = generate(model, wl, keep_logits=True)
        out = {"logits": res.logits, "tokens": res.tokens, "dispatch": model.dispatch.rows(),
               "plan": model.plan.to_dict()}
        if graphs:
            from mmprof.errors import BadInput
            from mmprof.runtime.graph_runner import GraphRunner
            from mmprof.runtime.kvcache import make_cache

            model.set_switches(Switches(graphs=True, **switches))
            out["refusal"] = None
            if not cuda:  # gloo: the real capture is refused; the static step runs through a fake one
                try:
                    GraphRunner(model, make_cache(model, 2, 100), 2)
                except BadInput as e:
                    out["refusal"] = str(e)
            model.dispatch.clear()
            g = generate(model, wl, keep_logits=True, graph_capture=None if cuda else _fake_capture)
            out.update(static_logits=g.logits, static_tokens=g.tokens, static_dispatch=model.dispatch.rows(),
                       static_graphs=g.graphs)
        torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
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
