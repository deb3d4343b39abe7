"""The optimization ladder on one GPU: baseline -> +grouped -> +fused -> +reuse K=2 -> +reuse K=4 -> all, then the
graphs rungs: fused+graphs (the +fused switches, decode steps replayed as a CUDA/HIP graph) and all+graphs, and the
compile rung all+compile (all+graphs with the static step's region math through torch.compile; compile_rung.py
measures it against the graph rungs in detail), and all+kernels (all+compile with the Triton decode kernels of
runtime/kernels/; decode_kernels.py measures them in detail).

Presets `small` and `m3-rank-slice` (rank 0 of TP=8 at the real M3 dims, 8 layers), bf16. For each
decode batch (1, 8, 64): one chunked prefill of a `--prompt`-token prompt fills the KV cache, then every rung
decodes `--steps` tokens from the same cache position, timed with CUDA events (warm-up excluded, median of
`--repeats`). Prefill tokens/s per rung at batch 1. Writes ladder.json under $OUT (or --out) and prints a
table. "all" re-measures the fastest settings together (grouped + fused + K=4 + sparse); it equals the K=4
rung's configuration and shows run-to-run noise. A graphs rung runs one eager static step and captures it once
per batch (the capture time is recorded, not timed as decode), then times replays only. On CPU the graphs rungs
are skipped with a note.

    python benchmarks/h200/ladder.py                       # H200, ~3-6 minutes
    python benchmarks/h200/ladder.py --device cpu --quick  # CPU smoke run (tiny preset, seconds)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))



RUNGS = [  # (name, switches): cumulative
    ("baseline", dict(moe_impl="loop", shared_expert="separate", block_reuse=1)),
    ("+grouped", dict(moe_impl="grouped", shared_expert="separate", block_reuse=1)),
    ("+fused", dict(moe_impl="grouped", shared_expert="fused", block_reuse=1)),
    ("+reuse K=2", dict(moe_impl="grouped", shared_expert="fused", block_reuse=2)),
    ("+reuse K=4", dict(moe_impl="grouped", shared_expert="fused", block_reuse=4)),
    ("all", dict(moe_impl="grouped", shared_expert="fused", block_reuse=4, attention="sparse")),
    ("fused+graphs", dict(moe_impl="grouped", shared_expert="fused", block_reuse=1, graphs=True)),
    ("all+graphs", dict(moe_impl="grouped", shared_expert="fused", block_reuse=4, attention="sparse", graphs=True)),
    ("all+compile", dict(moe_impl="grouped", shared_expert="fused", block_reuse=4, attention="sparse", graphs=True,
                         compile=True)),
    # the hand-written Triton decode kernels (runtime/kernels/) on top of the compile rung (decode_kernels.py
    # measures them against the graph and compile rungs in detail)
    ("all+kernels", dict(moe_impl="grouped", shared_expert="fused", block_reuse=4, attention="sparse", graphs=True,
                         compile=True, triton_norm_rope=True, triton_attention=True, triton_moe=True)),
]
GOAL = 3.14


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _timer(device):
    import torch

    if device.type == "cuda":
        def start():
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e

        def stop(s):
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            torch.cuda.synchronize()
            return s.elapsed_time(e)
    else:
        def start():
            return time.perf_counter()

        def stop(s):
            return (time.perf_counter() - s) * 1e3
    return start, stop


def decode(model, caches, tok, pos: int, n: int):
    """n greedy decode steps from `pos` (overwrites cache slots pos..pos+n-1; earlier slots untouched)."""
    for s in range(n):
        model.dispatch.set_step(s + 1, "decode")
        tok = model(tok, pos + s, caches)[:, -1].argmax(-1, keepdim=True)
    return tok


def capture_graph(model, caches, tok, pos: int, start, stop, capture=None):
    """A GraphRunner for this batch's caches: one eager static step and the capture (their time in ms), as
    generate() does before decode step 1. `capture` replaces the CUDA graph capture (a CPU test passes a fake)."""
    from mmprof.runtime.graph_runner import GraphRunner

    runner = GraphRunner(model, caches, tok.shape[0], capture=capture)
    model.dispatch.set_step(1, "decode")
    s = start()
    runner.prepare(tok, pos)
    return runner, stop(s)


def decode_graphed(runner, model, tok, pos: int, n: int):
    """n greedy decode steps from `pos` as replays of the captured step (the dispatch log gets each step's rows)."""
    for s in range(n):
        model.dispatch.set_step(s + 1, "decode")
        runner.decode(s + 1, tok, pos + s)
        tok = runner.static.next[:, None]
    return tok


def dispatch_summary(model) -> dict[str, list[str]]:
    out: dict[str, set] = {}
    for r in model.dispatch.records:
        out.setdefault(r.op, set()).add(r.impl)
    return {k: sorted(v) for k, v in out.items()}


def run_preset(name: str, a, device, dtype) -> list[dict]:
    import torch

    from mmprof.runtime import Switches, Workload, build_model, get_preset, measure_selection_overlap
    from mmprof.runtime.kvcache import make_cache

    overrides = {"max_seq_len": a.prompt + a.steps + 8}
    args = get_preset(name, **overrides)
    t0 = time.time()
    model = build_model(args, Switches(), device=device, dtype=dtype, seed=0)
    log(f"{name}: built in {time.time() - t0:.1f}s, {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B "
        f"params on this rank, layers {args.n_layers} ({len(args.sparse_layers)} sparse)")
    start, stop = _timer(device)
    rows: list[dict] = []
    rungs = RUNGS
    if device.type != "cuda":
        skipped = [r for r, sw in RUNGS if sw.get("graphs")]
        rungs = [(r, sw) for r, sw in RUNGS if not sw.get("graphs")]
        log(f"{name}: skipping {', '.join(skipped)}: CUDA/HIP graphs need a GPU (the static step is tested on CPU "
            "in tests/runtime/test_graph_runner.py)")
    with torch.no_grad():
        ov = measure_selection_overlap(model, Workload(batch=1, prompt_len=a.prompt, seed=1))
        log(f"{name}: adjacent-layer selection overlap: mean Jaccard {ov.mean_jaccard:.3f}, "
            f"shared fraction {ov.mean_shared_fraction:.3f} ({ov.n_selected} of {ov.n_blocks_total} blocks)")
        # prefill tokens/s per rung, batch 1
        pcache = make_cache(model, 1, a.prompt + 1)
        prompt1 = Workload(batch=1, prompt_len=a.prompt, seed=2).tokens(args.vocab_size, device)
        prefill = {}
        for rung, sw in rungs:
            model.set_switches(Switches(**sw))
            model(prompt1, 0, pcache, last_only=True)  # warm-up
            times = []
            for _ in range(a.prefill_repeats):
                s = start()
                model(prompt1, 0, pcache, last_only=True)
                times.append(stop(s))
            prefill[rung] = a.prompt / (statistics.median(times) / 1e3)
            log(f"{name} prefill {rung:11s} {prefill[rung]:12.0f} tok/s")
        del pcache
        for b in a.batches:
            caches = make_cache(model, b, a.prompt + a.steps + 4)
            model.set_switches(Switches())
            chunk = max(128, a.prefill_tokens // b)
            prompt = Workload(batch=b, prompt_len=a.prompt, seed=3).tokens(args.vocab_size, device)
            for st in range(0, a.prompt, chunk):
                logits = model(prompt[:, st:st + chunk], st, caches, last_only=True)
            tok0 = logits[:, -1].argmax(-1, keepdim=True)
            base = None
            for rung, sw in rungs:
                model.set_switches(Switches(**sw))
                runner, capture_ms = None, None
                if sw.get("graphs"):
                    runner, capture_ms = capture_graph(model, caches, tok0, a.prompt, start, stop)
                    decode_graphed(runner, model, tok0, a.prompt, a.warmup)
                else:
                    decode(model, caches, tok0, a.prompt, a.warmup)
                times = []
                for _ in range(a.repeats):
                    model.dispatch.clear()
                    s = start()
                    if runner is not None:
                        decode_graphed(runner, model, tok0, a.prompt, a.steps)
                    else:
                        decode(model, caches, tok0, a.prompt, a.steps)
                    times.append(stop(s))
                del runner
                ms = statistics.median(times)
                tps = b * a.steps / (ms / 1e3)
                base = base or tps
                row = dict(preset=name, rung=rung, batch=b, switches=sw, decode_ms_per_step=ms / a.steps,
                           decode_tok_s=tps, speedup=tps / base, prefill_tok_s=prefill[rung],
                           prefill_speedup=prefill[rung] / prefill["baseline"], repeats_ms=times,
                           dispatch=dispatch_summary(model), graph_capture_ms=capture_ms)
                rows.append(row)
                log(f"{name} b={b:<3d} {rung:12s} {ms / a.steps:8.2f} ms/step {tps:10.1f} tok/s x{tps / base:5.2f} "
                    f"{row['dispatch'].get('moe.experts')}"
                    + (f" (capture {capture_ms:.0f} ms)" if capture_ms is not None else ""))
            del caches
            if device.type == "cuda":
                torch.cuda.empty_cache()
        for r in rows:
            r["overlap_mean_jaccard"] = ov.mean_jaccard
            r["overlap_shared_fraction"] = ov.mean_shared_fraction
    del model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--quick", action="store_true", help="tiny sizes (CPU smoke test)")
    p.add_argument("--presets", default=None)
    p.add_argument("--batches", default=None)
    p.add_argument("--prompt", type=int, default=None)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--scopes", action="store_true",
                   help="keep record_function/NVTX scopes on while timing (off by default: host overhead)")
    a = p.parse_args(argv)
    import torch

    quick = a.quick
    a.presets = (a.presets or ("tiny" if quick else "small,m3-rank-slice")).split(",")
    a.batches = [int(x) for x in (a.batches or ("1,2" if quick else "1,8,64")).split(",")]
    a.prompt = a.prompt or (128 if quick else 4096)
    a.steps = a.steps or (2 if quick else 8)
    a.repeats = a.repeats or (2 if quick else 5)
    a.prefill_repeats = 2 if quick else 3
    a.warmup = 1 if quick else 2
    a.prefill_tokens = 32768
    device = torch.device(a.device)
    from mmprof.runtime.scopes import set_scopes_enabled

    prev_scopes = set_scopes_enabled(a.scopes)
    try:
        return _run(a, device)
    finally:
        set_scopes_enabled(prev_scopes)


def _run(a, device) -> int:
    import torch

    if device.type == "cuda" and not torch.cuda.is_available():
        print("ladder: no CUDA device; use --device cpu --quick", file=sys.stderr)
        return 2
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    env = dict(torch=torch.__version__, device=torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
               dtype=str(dtype), scopes=a.scopes, prompt=a.prompt, steps=a.steps, repeats=a.repeats, batches=a.batches)
    log(f"ladder: {env}")
    rows = []
    errors = {}
    for name in a.presets:
        try:
            rows += run_preset(name, a, device, dtype)
        except Exception as e:  # noqa: BLE001 - keep the other preset's results; report the failure
            import traceback

            traceback.print_exc()
            errors[name] = f"{type(e).__name__}: {e}"
            log(f"{name}: FAILED {errors[name]}")
            if device.type == "cuda":
                torch.cuda.empty_cache()
    env["errors"] = errors
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ladder.json").write_text(json.dumps({"env": env, "goal": GOAL, "rows": rows}, indent=1))
    print(f"\n{'preset':14s} {'batch':>5s} {'rung':12s} {'ms/step':>9s} {'decode tok/s':>13s} {'x base':>7s} "
          f"{'prefill tok/s':>14s} {'x base':>7s}")
    for r in rows:
        print(f"{r['preset']:14s} {r['batch']:5d} {r['rung']:12s} {r['decode_ms_per_step']:9.2f} "
              f"{r['decode_tok_s']:13.1f} {r['speedup']:7.2f} {r['prefill_tok_s']:14.0f} {r['prefill_speedup']:7.2f}")
    for name in a.presets:
        for b in a.batches:
            for rung in ("all", "all+graphs", "all+compile", "all+kernels"):
                allr = [r for r in rows if r["preset"] == name and r["batch"] == b and r["rung"] == rung]
                if allr:
                    ok = "MEETS" if allr[0]["speedup"] >= GOAL else "misses"
                    print(f"goal {GOAL}x decode: {name} batch {b} ({rung}): x{allr[0]['speedup']:.2f} {ok}")
    print(f"wrote {out / 'ladder.json'}", flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
