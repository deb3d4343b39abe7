"""The compile rung against the graph rungs on one GPU: decode ms per step, kernels per step, share of the HBM floor.

Preset `small` (12 layers, hidden 2048, 128 experts top-4 + a shared expert: the config vLLM 0.26 ran at 2.69 ms per
step, issue 22), bf16, a `--prompt`-token prompt (default 512) prefilled once per batch; then per rung one
GraphRunner (one eager static step, which compiles on the compile rungs, and the capture), `--warmup` replays, and
`--repeats` timed runs of `--steps` replays (CUDA events, median). Scopes are off while timing (as in
ladder.py). `generate_ms_per_step`: the median decode step of one `generate()` (its own capture, the host loop
between replays included), the figure to compare with vLLM's (vllm_decode.py). Kernels per step: one replay under torch.profiler (CUDA activity only), kernel events counted and their
durations summed. The HBM floor: the bytes one decode step must read (every weight outside the routed experts, the
lm_head included, one embedding row per token, the routed + shared experts the batch touches in expectation
(E * (1 - (1 - k/E)^B) experts per MoE layer), the KV cache and index keys each layer reads at this context)
over the peak bandwidth `--hbm-tb-s` (H200: 4.8 TB/s).

    python benchmarks/h200/compile_rung.py                    # H200, ~2-4 minutes (compilation included)
    python benchmarks/h200/compile_rung.py --batches 1 --rungs fused+graphs,fused+compile

Writes compile_rung.json under $OUT (or --out), one JSON line per row on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

RUNGS = {  # name -> switches; K=1 is the configuration vLLM runs (every sparse layer computes its selection)
    "fused+graphs": dict(moe_impl="grouped", shared_expert="fused", block_reuse=1, graphs=True),
    "fused+compile": dict(moe_impl="grouped", shared_expert="fused", block_reuse=1, graphs=True, compile=True),
    "all+graphs": dict(moe_impl="grouped", shared_expert="fused", block_reuse=4, graphs=True),
    "all+compile": dict(moe_impl="grouped", shared_expert="fused", block_reuse=4, graphs=True, compile=True),
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def floor_bytes(model, batch: int, ctx: int) -> dict[str, float]:
    """The bytes one decode step must read from HBM (see the module docstring)."""
    from mmprof.runtime.moe import MoE

    args = model.args
    el = next(model.parameters()).element_size()
    routed = other = 0
    for name, p in model.named_parameters():
        if name.startswith("embed."):
            other += batch * p.shape[1] * p.element_size()
        elif name.endswith(".w13") or name.endswith(".w2"):
            routed += p.numel() * p.element_size()
        else:
            other += p.numel() * p.element_size()
    moes = [m for m in model.modules() if isinstance(m, MoE)]
    slots = moes[0].w13.shape[0] if moes else 1
    e, k = args.n_experts, args.top_k
    touched = e * (1 - (1 - k / e) ** batch) + (slots - e)  # expected distinct routed experts + the fused slot
    experts = routed * touched / slots
    kv = 0
    for t in args.attn_types:
        per_pos = 2 * args.n_kv_heads * args.head_dim * el * batch
        if t == "full":
            kv += per_pos * ctx
        else:
            kv += per_pos * min(ctx, args.index_topk_blocks * args.index_block_size)
            kv += args.index_head_dim * el * batch * ctx  # the indexer reads every index key
    return {"weights_other": other, "experts": experts, "kv": kv, "total": other + experts + kv}


def kernels_per_step(runner, step: int, tok, pos: int) -> tuple[int, float]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        runner.decode(step, tok, pos)
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kern = [e for e in ev if "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    return len(kern), sum(e.device_time_total for e in kern) / 1e3  # ms (device_time_total is in us)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--batches", default="1,8,64")
    p.add_argument("--rungs", default=",".join(RUNGS))
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--hbm-tb-s", type=float, default=4.8)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    a = p.parse_args(argv)
    import torch

    from mmprof.runtime import Switches, Workload, build_model, generate, get_preset
    from mmprof.runtime.graph_runner import GraphRunner
    from mmprof.runtime.kvcache import make_cache
    from mmprof.runtime.scopes import set_scopes_enabled

    if not torch.cuda.is_available():
        print("compile_rung: no CUDA device", file=sys.stderr)
        return 2
    set_scopes_enabled(False)
    dev = torch.device("cuda")
    args = get_preset(a.preset, max_seq_len=a.prompt + a.steps * (a.repeats + a.warmup + 2) + 8)
    model = build_model(args, Switches(), device=dev, dtype=torch.bfloat16, seed=0)
    env = dict(torch=torch.__version__, device=torch.cuda.get_device_name(), preset=a.preset, prompt=a.prompt,
               steps=a.steps, repeats=a.repeats, hbm_tb_s=a.hbm_tb_s)
    log(f"compile_rung: {env}")
    rows, errors = [], {}
    with torch.no_grad():
        for b in [int(x) for x in a.batches.split(",")]:
            caches = make_cache(model, b, args.max_seq_len)
            prompt = Workload(batch=b, prompt_len=a.prompt, seed=3).tokens(args.vocab_size, dev)
            model.set_switches(Switches())
            logits = model(prompt, 0, caches, last_only=True)
            tok0 = logits[:, -1].argmax(-1, keepdim=True)
            floor = floor_bytes(model, b, a.prompt)
            floor_ms = floor["total"] / (a.hbm_tb_s * 1e12) * 1e3
            for rung in a.rungs.split(","):
                try:
                    model.set_switches(Switches(**RUNGS[rung]))
                    runner = GraphRunner(model, caches, b)
                    t0 = time.perf_counter()
                    runner.prepare(tok0, a.prompt)
                    torch.cuda.synchronize()
                    prep_s = time.perf_counter() - t0
                    pos = a.prompt
                    for i in range(a.warmup):
                        runner.decode(i + 1, tok0, pos + i)
                    times = []
                    for _ in range(a.repeats):
                        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        s.record()
                        for i in range(a.steps):
                            runner.decode(i + 1, tok0, pos + i)
                        e.record()
                        torch.cuda.synchronize()
                        times.append(s.elapsed_time(e) / a.steps)
                    n_k, k_ms = kernels_per_step(runner, 1, tok0, pos)
                    # end to end as a user runs it: generate() (its own capture, then one replay per step with the
                    # host loop between them; decode_ms per step from CUDA events, capture excluded), the figure
                    # comparable with vLLM's generate() difference (vllm_decode.py)
                    gen = generate(model, Workload(batch=b, prompt_len=a.prompt, decode_steps=a.steps, seed=3))
                    gen_ms = statistics.median(gen.decode_ms)
                    ms = statistics.median(times)
                    row = dict(preset=a.preset, batch=b, rung=rung, decode_ms_per_step=ms, repeats_ms=times,
                               generate_ms_per_step=gen_ms,
                               decode_tok_s=b / (ms / 1e3), kernels_per_step=n_k, kernel_ms_per_step=k_ms,
                               floor_ms=floor_ms, x_floor=ms / floor_ms, floor_bytes=floor, prepare_s=prep_s,
                               tokens=runner.static.next[:4].tolist())
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if k != "floor_bytes"}), flush=True)
                    del runner
                except Exception as ex:  # noqa: BLE001 - keep the other rungs' results
                    import traceback

                    traceback.print_exc()
                    errors[f"{rung}@{b}"] = f"{type(ex).__name__}: {str(ex)[:300]}"
                torch.cuda.empty_cache()
            del caches
            torch.cuda.empty_cache()
    env["errors"] = errors
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compile_rung.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    for r in rows:
        log(f"b={r['batch']:<3d} {r['rung']:14s} {r['decode_ms_per_step']:7.3f} ms/step  {r['kernels_per_step']:5d} "
            f"kernels  {r['kernel_ms_per_step']:6.3f} ms in kernels  generate {r['generate_ms_per_step']:7.3f} ms  {r['x_floor']:5.2f}x floor ({r['floor_ms']:.3f} ms)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
