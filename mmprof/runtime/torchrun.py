"""A torchrun entry point: `torchrun --nproc-per-node N -m mmprof.runtime.torchrun --preset tiny --tp N`.

Every rank builds its shard (seeded init, or --checkpoint), runs one Workload, and rank 0 prints a JSON line
with the timings, tokens and dispatch summary. Without torchrun it runs single-rank.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from mmprof.errors import MmprofError

from .dist import destroy, init_distributed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="tiny", help="preset name, config.json or checkpoint dir")
    p.add_argument("--checkpoint", default=None, help="safetensors file/dir to load (else seeded random)")
    p.add_argument("--ep", action="store_true", help="expert parallel (experts whole per rank, ep = tp)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--decode-steps", type=int, default=8)
    p.add_argument("--backend", default=None, help="gloo | nccl (RCCL on ROCm); default by device")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: bf16 on GPU, fp32 on CPU)")
    p.add_argument("--graphs", action="store_true", help="replay decode steps as a CUDA/HIP graph (GPU, NCCL)")
    a = p.parse_args(argv)

    import torch

    from . import Switches, Workload, build_model, generate, load_config, load_weights

    ok = False
    try:
        ctx = init_distributed(a.backend, a.device)
        dtype = getattr(torch, a.dtype) if a.dtype else (torch.float32 if ctx.device == "cpu" else torch.bfloat16)
        args = load_config(a.preset)
        model = build_model(args, Switches(graphs=a.graphs), tp=ctx.world_size, ep=ctx.world_size if a.ep else 1, rank=ctx.rank,
                            device=ctx.device, dtype=dtype, group=ctx.group,
                            seed=None if a.checkpoint else 0)
        if a.checkpoint:
            load_weights(model, a.checkpoint)
        res = generate(model, Workload(batch=a.batch, prompt_len=a.prompt_len, decode_steps=a.decode_steps))
        if ctx.rank == 0:
            out = res.to_dict()
            out.update(tp=ctx.world_size, ep=a.ep, backend=ctx.backend,
                       dispatch={f"{op}:{impl}": n for (op, impl), n in model.dispatch.summary().items()})
            print(json.dumps(out), flush=True)
        ok = True
    except MmprofError as e:
        print(f"mmprof: error: {e}", file=sys.stderr)
        return 2
    finally:
        destroy(barrier=ok)
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip C++ static destructors: with gloo, a background thread still joinable at interpreter exit
    # occasionally aborts the process ("terminate called without an active exception") after all work
    # is done and printed, which torchrun would report as a failed rank.
    os._exit(rc)
