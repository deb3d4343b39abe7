"""The Triton decode kernels on one GPU (issue 36): their correctness tests there, decode time per step of the rungs
graphs / compile / compile + Triton kernels at batch 1, 8, 64 of `small`, one mmprof profile per rung, and a sweep
of each kernel's launch configurations. One device call, about 5 minutes on an H200.

    python3 benchmarks/h200/decode_kernels.py OUTDIR          # or OUT=OUTDIR bash benchmarks/h200/run_all.sh ...
    python3 benchmarks/h200/decode_kernels.py OUTDIR --phases timing --configs gate_up=1,down=2 --vllm CFG

Phases (`--phases`, in this order: tests, timing, profiles, ablation, sweep, prefill; each writes its results as
it finishes, and a phase that would pass `--budget-s` is skipped and says so in the JSON):
- tests: `pytest tests/runtime/test_triton_kernels.py tests/runtime/test_triton_rung.py` with MMPROF_GPU_TESTS=1
  (every kernel against the runtime's PyTorch region functions at the `small` dimensions, bf16 and fp32; the
  switches end to end on the tiny model), in a subprocess that runs while the model is built -> gpu_tests.txt.
- timing: per batch, the prompt (`--prompt` tokens) is prefilled once; per rung one GraphRunner (one eager static
  step, which compiles on the compile rungs, and the capture), `--warmup` replays, `--repeats` x `--steps` timed
  replays (CUDA events; the median and the spread), kernels per step from one profiled replay, the first step's
  logits against the compile rung's on the same inputs; then the end-to-end figures, both with the rung's own
  capture per call: `generate_ms` (the median decode step of one generate(), CUDA events, prefill and capture
  excluded) and `diff_ms` = (T(generate of `--long` tokens) - T(generate of `--short` tokens)) / (long - short),
  wall clock, the median of `--diff-repeats`: prefill, capture and the first token cancel. diff_ms is exactly
  what benchmarks/h200/vllm_decode.py measures for vLLM (same prompt length, lengths and repeats): the figure to
  put side by side with vLLM's. All generate() calls of a batch use one KV cache of one capacity, so no rung
  recompiles between them.
- ablation: at batch 1, the K=4 pair all+compile / all+kernels and each kernel switch alone on the compile rung
  (compile+norm_rope, compile+attention, compile+moe), measured as above.
- profiles: `mmprof run`'s capture (torch.profiler, full mode, after an unprofiled warm-up run) of one
  generate() per rung at `--profile-batch` -> <rung>_b<B>.json.xz, for `mmprof report`, `verify-fastpath` and
  `mmprof diff graphs_b1.json.xz kernels_b1.json.xz`.
- sweep: for each kernel, each alternative launch configuration of runtime/kernels/support.py CONFIGS (the others
  at their best so far), the kernels rung re-captured and timed at each `--sweep-batches` batch; the best per
  kernel is kept (best_configs, tuned_ms). Batch 1 by default (`--sweep-batches 1,64` for both ends).
- prefill: the prompt's prefill at batch 1, eager and with compile_prefill (compilation timed apart), logits
  compared.

The HBM floor (compile_rung.py floor_bytes): the bytes a decode step must read at 4.8 TB/s.
Results: decode_kernels.json (and the profiles, gpu_tests.txt) under OUTDIR ($OUT when not given).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from compile_rung import floor_bytes, kernels_per_step  # noqa: E402 - the compile rung's own method

KERNELS = dict(triton_norm_rope=True, triton_attention=True, triton_moe=True)
FUSED = dict(moe_impl="grouped", shared_expert="fused", block_reuse=1, graphs=True)
RUNGS = {  # K=1: the configuration vLLM runs (every sparse layer computes its selection)
    "graphs": FUSED,
    "compile": dict(FUSED, compile=True),
    "kernels": dict(FUSED, compile=True, **KERNELS),
    "all+compile": dict(FUSED, block_reuse=4, compile=True),
    "all+kernels": dict(FUSED, block_reuse=4, compile=True, **KERNELS),
    # one kernel switch at a time on the compile rung: what each buys, and which one fails if one does
    "compile+norm_rope": dict(FUSED, compile=True, triton_norm_rope=True),
    "compile+attention": dict(FUSED, compile=True, triton_attention=True),
    "compile+moe": dict(FUSED, compile=True, triton_moe=True),
}
# the K=4 rungs (block reuse: the comparison with the compile rung's 1.48 ms) and the one-switch rungs at batch 1 only
BATCH1_ONLY = ("all+compile", "all+kernels", "compile+norm_rope", "compile+attention", "compile+moe")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Budget:
    def __init__(self, seconds: float):
        self.t0, self.seconds = time.time(), seconds

    def left(self) -> float:
        return self.seconds - (time.time() - self.t0)


def start_tests(out: Path, cpu: bool) -> tuple[subprocess.Popen, object]:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    if not cpu:
        env["MMPROF_GPU_TESTS"] = "1"
        env.pop("TRITON_INTERPRET", None)
    f = open(out / "gpu_tests.txt", "w")
    # pytest-xdist where installed: the tests' time is mostly Triton compiling their kernels, on the host's cores
    par = ["-n", "4"] if importlib.util.find_spec("xdist") else ["-p", "no:xdist"]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *par,
           "tests/runtime/test_triton_kernels.py", "tests/runtime/test_triton_rung.py", "-rfE"]
    # its own process group: a timeout ends pytest and its workers together
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True), f


def finish_tests(proc, f, timeout: float, out: Path) -> dict:
    try:
        rc = proc.wait(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = "timeout"
    f.close()
    tail = (out / "gpu_tests.txt").read_text().strip().splitlines()[-3:]
    return {"rc": rc, "summary": tail}


CPU = False  # --device cpu: a smoke run of the script itself (fake graph capture, Triton's interpreter)


def empty_cache() -> None:
    import torch

    if not CPU:
        torch.cuda.empty_cache()


def sync() -> None:
    import torch

    if not CPU:
        torch.cuda.synchronize()


def fake_capture(step, warmup_step):
    """The CPU stand-in for a CUDA graph (as in the CPU tests): warm up, run the step; the replay runs it again."""
    warmup_step()
    step()
    return step


def runner_for(model, caches, b: int):
    from mmprof.runtime.graph_runner import GraphRunner

    return GraphRunner(model, caches, b, capture=fake_capture if CPU else None)


def time_replays(runner, tok, pos: int, steps: int, repeats: int, warmup: int) -> list[float]:
    import torch

    for i in range(warmup):
        runner.decode(i + 1, tok, pos + i)
    times = []
    for _ in range(repeats):
        if CPU:
            t = time.perf_counter()
            for i in range(steps):
                runner.decode(i + 1, tok, pos + i)
            times.append((time.perf_counter() - t) * 1e3 / steps)
            continue
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for i in range(steps):
            runner.decode(i + 1, tok, pos + i)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / steps)
    return times


def diff_ms(model, wl_kw: dict, caches, short: int, long: int, repeats: int) -> list[float]:
    """(T(long) - T(short)) / (long - short) of wall-clock generate() calls, as vllm_decode.py times vLLM."""
    import torch

    from mmprof.runtime import Workload, generate

    def run(n: int) -> float:
        sync()
        t = time.perf_counter()
        generate(model, Workload(decode_steps=n, **wl_kw), caches=caches, graph_capture=fake_capture if CPU else None)
        sync()
        return time.perf_counter() - t

    run(short)  # warm-up (the caller's generate() at this batch and cache already compiled and captured the step)
    out = []
    for _ in range(repeats):
        ts, tl = run(short), run(long)
        out.append((tl - ts) / (long - short) * 1e3)
    return out


def measure_rung(model, name: str, b: int, a, caches, tok0, firsts: dict, floor_ms: float) -> dict:
    import torch

    from mmprof.runtime import Switches, Workload, generate

    model.set_switches(Switches(**RUNGS[name]))
    t0 = time.perf_counter()
    runner = runner_for(model, caches, b)
    runner.prepare(tok0, a.prompt)
    sync()
    prep_s = time.perf_counter() - t0
    first = runner.decode(1, tok0, a.prompt).float().clone()
    times = time_replays(runner, tok0, a.prompt, a.steps, a.repeats, a.warmup)
    n_k, k_ms = kernels_per_step(runner, 1, tok0, a.prompt) if not CPU else (0, 0.0)
    impls = sorted({f"{r.op}={r.impl}" for r in runner.rows if r.op in ("moe.experts", "attn.decode", "attn.norm_rope",
                                                                          "decode.compile")})
    fell_back = sorted({f"{r.op}: {r.reason}" for r in runner.rows if r.impl != r.requested})
    del runner
    wl = dict(batch=b, prompt_len=a.prompt, seed=3)
    gen = generate(model, Workload(decode_steps=a.steps, **wl), caches=caches, graph_capture=fake_capture if CPU else None)
    diffs = diff_ms(model, wl, caches, a.short, a.long, a.diff_repeats)
    ms = statistics.median(times)
    row = dict(batch=b, rung=name, decode_ms_per_step=ms, repeats_ms=times, spread_ms=[min(times), max(times)],
               generate_ms_per_step=statistics.median(gen.decode_ms), diff_ms_per_step=statistics.median(diffs),
               diff_repeats_ms=diffs, kernels_per_step=n_k, kernel_ms_per_step=k_ms, floor_ms=floor_ms,
               x_floor=ms / floor_ms, diff_x_floor=statistics.median(diffs) / floor_ms, prepare_s=prep_s,
               impls=impls, fallbacks=fell_back)
    firsts[name] = first
    return row


def compare_first_steps(model, rows: list[dict], firsts: dict) -> None:
    """Each rung's first decode step (the same tokens, position and cache) against the compile rung's: the max
    logit difference, the bf16 reordering bound of tests/runtime/tolerance.py (layers x sqrt(longest sum) x ulp at
    max |logit|) and the share of batch rows whose greedy token agrees (K=4 rungs: another model, not compared)."""
    ref = firsts.get("compile")
    if ref is None:
        return
    mag = float(ref.abs().max())
    tol = model.args.n_layers * math.sqrt(max(model.args.hidden_size, model.args.dense_intermediate)) * \
        2.0 ** (math.floor(math.log2(max(mag, 1e-30))) - 7)
    for row in rows:
        first = firsts.get(row["rung"])
        if first is None or row["rung"] == "compile" or row["rung"].startswith("all+"):  # K=4: another model
            continue
        row.update(logits_max_diff_vs_compile=float((first - ref).abs().max()), logits_tol=tol,
                   argmax_agree_vs_compile=float((first.argmax(-1) == ref.argmax(-1)).float().mean()))


def timing_phase(model, a, plan: list[tuple[int, list[str]]], budget: Budget, results: dict, save) -> None:
    """Each (batch, rungs) of `plan`: one prefill per batch, then every rung measured on it (measure_rung)."""
    import torch

    from mmprof.runtime import Switches, Workload
    from mmprof.runtime.kvcache import make_cache

    for b, rungs in plan:
        caches = make_cache(model, b, a.capacity)
        prompt = Workload(batch=b, prompt_len=a.prompt, seed=3).tokens(model.args.vocab_size, a.device)
        model.set_switches(Switches(block_reuse=1))
        with torch.no_grad():
            tok0 = model(prompt, 0, caches, last_only=True)[:, -1].argmax(-1, keepdim=True)
        floor = floor_bytes(model, b, a.prompt)
        floor_ms = floor["total"] / (a.hbm_tb_s * 1e12) * 1e3
        firsts = a.firsts.setdefault(b, {})  # shared by the passes over a batch (the same prompt, the same cache)
        batch_rows: list[dict] = []
        for name in rungs:
            if budget.left() < 20:
                results["skipped"].append(f"timing {name}@{b}: out of budget")
                continue
            try:
                with torch.no_grad():
                    row = measure_rung(model, name, b, a, caches, tok0, firsts, floor_ms)
                row["floor_bytes"] = floor
                results["rows"].append(row)
                batch_rows.append(row)
                compare_first_steps(model, batch_rows, firsts)
                log(f"b={b:<3d} {name:12s} {row['decode_ms_per_step']:7.3f} ms/step (replays) "
                    f"{row['diff_ms_per_step']:7.3f} ms (generate diff) {row['kernels_per_step']:4d} kernels "
                    f"{row['x_floor']:5.2f}x floor {row.get('logits_max_diff_vs_compile', '')}")
            except Exception as ex:  # noqa: BLE001 - keep the other rungs' results
                import traceback

                traceback.print_exc()
                results["errors"][f"{name}@{b}"] = f"{type(ex).__name__}: {str(ex)[:400]}"
            empty_cache()
            save()
        del caches
        empty_cache()


def profiles_phase(model, a, out: Path, budget: Budget, results: dict) -> None:
    import torch

    from mmprof.capture.session import CaptureSession
    from mmprof.capture.workflows.run import RankOutcome, assemble
    from mmprof.capture.workflows.run_options import RunOptions
    from mmprof.profiles.io import save_profile
    from mmprof.runtime import Switches, Workload, generate, set_scopes_enabled
    from mmprof.runtime.kvcache import make_cache

    b = a.profile_batch
    caches = make_cache(model, b, a.capacity)
    wl = Workload(batch=b, prompt_len=a.prompt, decode_steps=a.profile_steps, seed=0)
    cap = fake_capture if CPU else None
    for name in a.profile_rungs:
        if budget.left() < 25:
            results["skipped"].append(f"profile {name}: out of budget")
            continue
        try:
            model.set_switches(Switches(**RUNGS[name]))
            set_scopes_enabled(False)
            plain = generate(model, wl, caches=caches, graph_capture=cap)  # warm-up and the unprofiled timing
            set_scopes_enabled(True)  # the profiled run opens the region scopes, as `mmprof run` does
            work = out / f".work_{name}"
            session = CaptureSession(work, quiet=True, mode="full", rank=0, world_size=1, name=f"{name}",
                                     activities="cpu" if CPU else "gpu", step_markers=())
            model.dispatch.clear()
            session.start()
            try:
                res = generate(model, wl, caches=caches, graph_capture=cap)
            finally:
                trace = session.export()
            opts = RunOptions(preset=a.preset, device=a.device, dtype="bfloat16", batch=b, prompt_len=a.prompt,
                              decode_steps=a.profile_steps, overrides=dict(RUNGS[name]), repeats=1, warmup=1,
                              command=["benchmarks/h200/decode_kernels.py", "--rung", name])

            def timing(r) -> dict:
                return {"prefill_ms": r.prefill_ms, "decode_ms": sum(r.decode_ms), "decode_step_ms": r.decode_ms,
                        "repeats": 1, "prefill_ms_all": [r.prefill_ms], "decode_ms_all": [sum(r.decode_ms)],
                        "prefill_tok_s": r.prefill_tok_s, "decode_tok_s": r.decode_tok_s,
                        "graph_capture_ms": r.graph_capture_ms}

            oc = RankOutcome(rank=0, world_size=1, timings={"plain": timing(plain), "full": timing(res)},
                             trace=str(trace), dispatch=model.dispatch.rows(), tokens=res.tokens.tolist(),
                             graphs=res.graphs, notes=list(session.notes))
            path = out / f"{name}_b{b}.json.xz"
            save_profile(assemble(opts, [oc]), path)
            shutil.rmtree(work, ignore_errors=True)
            results["profiles"][name] = {"file": path.name, "bytes": path.stat().st_size}
            log(f"profile {name}: {path.name} ({path.stat().st_size / 1e6:.1f} MB)")
        except Exception as ex:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            results["errors"][f"profile {name}"] = f"{type(ex).__name__}: {str(ex)[:400]}"
        finally:
            set_scopes_enabled(False)
        empty_cache()
    del caches


def sweep_phase(model, a, budget: Budget, results: dict, save) -> None:
    import torch

    from mmprof.runtime import Switches, Workload
    from mmprof.runtime.kernels import support
    from mmprof.runtime.kvcache import make_cache

    chosen = dict(results["configs"])
    for b in a.sweep_batches:
        caches = make_cache(model, b, a.capacity)
        prompt = Workload(batch=b, prompt_len=a.prompt, seed=3).tokens(model.args.vocab_size, a.device)
        model.set_switches(Switches(block_reuse=1))
        with torch.no_grad():
            tok0 = model(prompt, 0, caches, last_only=True)[:, -1].argmax(-1, keepdim=True)
        model.set_switches(Switches(**RUNGS[a.sweep_rung]))

        def trial() -> float:
            runner = runner_for(model, caches, b)
            runner.prepare(tok0, a.prompt)
            t = statistics.median(time_replays(runner, tok0, a.prompt, a.steps, 3, 2))
            del runner
            return t

        for k, i in chosen.items():
            support.set_config(k, i)
        with torch.no_grad():
            best_ms = trial()
            for kernel, alts in support.CONFIGS.items():
                best = chosen.get(kernel, 0)
                for i in range(len(alts)):
                    if i == best or budget.left() < 15:
                        continue
                    support.set_config(kernel, i)
                    try:
                        ms = trial()
                    except Exception as ex:  # noqa: BLE001 - a configuration that does not compile or fit
                        ms = float("inf")
                        results["errors"][f"sweep {kernel}[{i}]@{b}"] = f"{type(ex).__name__}: {str(ex)[:200]}"
                    results["sweep"].append(dict(batch=b, kernel=kernel, config=i, label=alts[i].label(), ms=ms,
                                                 best_before_ms=best_ms))
                    if ms < best_ms:
                        best, best_ms = i, ms
                    support.set_config(kernel, best)
                chosen[kernel] = best
            results["best_configs"][str(b)] = {k: [i, support.CONFIGS[k][i].label()] for k, i in chosen.items()}
            results["tuned_ms"][str(b)] = best_ms
        log(f"sweep b={b}: {chosen} -> {best_ms:.3f} ms/step")
        save()
        del caches
        empty_cache()


def prefill_phase(model, a, budget: Budget, results: dict) -> None:
    """The prefill of the prompt at batch 1, eager and through the compiled region functions (compile_prefill):
    the first compiled call compiles (timed apart), then `--repeats` timed calls each; the last-position logits of
    the two compared within the bf16 reordering bound."""
    import torch

    from mmprof.runtime import Switches, Workload
    from mmprof.runtime.kvcache import make_cache

    if budget.left() < 90:
        results["skipped"].append("prefill: out of budget")
        return
    caches = make_cache(model, 1, a.capacity)
    prompt = Workload(batch=1, prompt_len=a.prompt, seed=5).tokens(model.args.vocab_size, a.device)
    out = {}
    for name, sw in (("eager", Switches(block_reuse=1)), ("compiled", Switches(block_reuse=1, compile_prefill=True))):
        model.set_switches(sw)
        times = []
        with torch.no_grad():
            for i in range(a.repeats + 1):
                sync()
                t = time.perf_counter()
                logits = model(prompt, 0, caches, last_only=True)[:, -1].float()
                sync()
                times.append((time.perf_counter() - t) * 1e3)
        out[name] = dict(first_ms=times[0], ms=statistics.median(times[1:]), repeats_ms=times[1:], logits=logits)
    ref, got = out["eager"].pop("logits"), out["compiled"].pop("logits")
    mag = float(ref.abs().max())
    tol = model.args.n_layers * math.sqrt(max(model.args.hidden_size, model.args.dense_intermediate, a.prompt)) * \
        2.0 ** (math.floor(math.log2(max(mag, 1e-30))) - 7)
    results["prefill"] = dict(out, tokens=a.prompt, logits_max_diff=float((got - ref).abs().max()), logits_tol=tol,
                              argmax_agree=bool(got.argmax(-1).eq(ref.argmax(-1)).all()))
    log(f"prefill {a.prompt} tokens: eager {out['eager']['ms']:.2f} ms, compiled {out['compiled']['ms']:.2f} ms "
        f"(compile {out['compiled']['first_ms'] / 1e3:.1f} s)")
    del caches


def main(argv=None) -> int:
    from mmprof.runtime.scopes import set_scopes_enabled

    prev = set_scopes_enabled(False)  # timing runs without the scopes' host work, as ladder.py / compile_rung.py
    try:
        return _main(argv)
    finally:
        set_scopes_enabled(prev)


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("outdir", nargs="?", default=os.environ.get("OUT", "."))
    p.add_argument("--preset", default="small")
    p.add_argument("--layers", type=int, default=None, help="override the preset's layer count (CPU smoke runs)")
    p.add_argument("--rungs", default=",".join(RUNGS))
    p.add_argument("--profile-rungs", default="graphs,compile,kernels")
    p.add_argument("--batches", default="1,8,64")
    p.add_argument("--phases", default="tests,timing,profiles,ablation,sweep,prefill")
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--short", type=int, default=17)
    p.add_argument("--long", type=int, default=65)
    p.add_argument("--diff-repeats", type=int, default=3)
    p.add_argument("--profile-batch", type=int, default=1)
    p.add_argument("--profile-steps", type=int, default=8)
    p.add_argument("--sweep-batches", default="1")
    p.add_argument("--sweep-rung", default="kernels", help="the rung re-timed per configuration (CPU smoke: graphs)")
    p.add_argument("--configs", default="", help="kernel=index,... of support.CONFIGS to start from")
    p.add_argument("--budget-s", type=float, default=300.0)
    p.add_argument("--tests-timeout-s", type=float, default=120.0)
    p.add_argument("--hbm-tb-s", type=float, default=4.8)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cpu: a smoke run of this script (fake graph capture, TRITON_INTERPRET=1; use --preset tiny)")
    p.add_argument("--vllm", default=None, help="a vLLM model config dir: also run vllm_decode.py on it (same call)")
    a = p.parse_args(argv)
    budget = Budget(a.budget_s)
    out = Path(a.outdir)
    out.mkdir(parents=True, exist_ok=True)
    phases = a.phases.split(",")
    a.capacity = a.prompt + max(a.long, a.steps + a.warmup) + 8
    a.sweep_batches = [int(x) for x in a.sweep_batches.split(",") if x]
    a.rungs = [r for r in a.rungs.split(",") if r]
    a.firsts = {}
    a.profile_rungs = [r for r in a.profile_rungs.split(",") if r]
    unknown = sorted(set(a.rungs + a.profile_rungs) - set(RUNGS))
    if unknown:
        print(f"decode_kernels: unknown rung(s) {', '.join(unknown)}; rungs are {', '.join(RUNGS)}", file=sys.stderr)
        return 2
    global CPU
    CPU = a.device == "cpu"
    if CPU:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    if not CPU and not torch.cuda.is_available():
        print("decode_kernels: no CUDA device", file=sys.stderr)
        return 2
    tests = start_tests(out, CPU) if "tests" in phases else None
    from mmprof.runtime import Switches, build_model, get_preset
    from mmprof.runtime.kernels import support

    results = dict(env={}, rows=[], sweep=[], profiles={}, errors={}, skipped=[], tests=None, best_configs={},
                   tuned_ms={}, configs={}, phase_s={})
    for item in filter(None, a.configs.split(",")):
        k, i = item.split("=")
        results["configs"][k] = int(i)
        support.set_config(k, int(i))

    def save() -> None:
        (out / "decode_kernels.json").write_text(json.dumps(results, indent=1, default=str))

    import triton

    t = time.time()
    over = dict(max_seq_len=a.capacity) | ({"n_layers": a.layers} if a.layers else {})
    args = get_preset(a.preset, **over)
    model = build_model(args, Switches(), device=a.device, dtype=torch.bfloat16, seed=0)
    results["env"] = dict(torch=torch.__version__, triton=triton.__version__,
                          device="cpu" if CPU else torch.cuda.get_device_name(),
                          sms=None if CPU else torch.cuda.get_device_properties(0).multi_processor_count, preset=a.preset,
                          prompt=a.prompt, steps=a.steps, repeats=a.repeats, short=a.short, long=a.long,
                          diff_repeats=a.diff_repeats, capacity=a.capacity, hbm_tb_s=a.hbm_tb_s, build_s=time.time() - t)
    log(f"decode_kernels: {results['env']}")
    if tests is not None:
        results["tests"] = finish_tests(*tests, timeout=min(a.tests_timeout_s, budget.left() - 120), out=out)
        log(f"gpu tests: {results['tests']}")
        save()
    batches = [int(x) for x in a.batches.split(",")]
    main_rungs = [r for r in a.rungs if r not in BATCH1_ONLY]
    extra = [r for r in a.rungs if r in BATCH1_ONLY]
    # the rungs of the Done-when first (every batch), then the profiles, then the batch-1 extras
    for phase, fn in (("timing", lambda: timing_phase(model, a, [(b, main_rungs) for b in batches], budget, results,
                                                      save)),
                      ("profiles", lambda: profiles_phase(model, a, out, budget, results)),
                      ("ablation", lambda: timing_phase(model, a, [(1, extra)] if extra else [], budget, results,
                                                        save)),
                      ("sweep", lambda: sweep_phase(model, a, budget, results, save)),
                      ("prefill", lambda: prefill_phase(model, a, budget, results))):
        if phase in phases:
            t = time.time()
            fn()
            results["phase_s"][phase] = time.time() - t
            save()
    if a.vllm:
        del model
        a.firsts.clear()
        empty_cache()  # vLLM runs in its own process, on the memory this one gives back
        results["vllm"] = run_vllm(a, out)
        results["vs_vllm"] = versus_vllm(results["rows"], out / "vllm_decode.jsonl")
    save()
    for r in results["rows"]:
        log(f"b={r['batch']:<3d} {r['rung']:12s} {r['decode_ms_per_step']:7.3f} ms/step  diff {r['diff_ms_per_step']:7.3f}"
            f"  {r['kernels_per_step']:5d} kernels  {r['x_floor']:5.2f}x floor ({r['floor_ms']:.3f} ms)")
    return 1 if results["errors"] else 0


def versus_vllm(rows: list[dict], path: Path) -> list[dict]:
    """Per batch and rung: the runtime's diff_ms against vLLM's decode_ms_per_step (the same method), and the
    speedup (vLLM / runtime)."""
    vllm = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if d.get("engine") == "vllm" and "decode_ms_per_step" in d:
            vllm[d["batch"]] = d
    out = []
    for r in rows:
        v = vllm.get(r["batch"])
        if v is not None:
            out.append(dict(batch=r["batch"], rung=r["rung"], runtime_ms=r["diff_ms_per_step"],
                            vllm_ms=v["decode_ms_per_step"], vllm_repeats_ms=v["repeats_ms"],
                            speedup=v["decode_ms_per_step"] / r["diff_ms_per_step"]))
    return out


def run_vllm(a, out: Path) -> dict:
    """vllm_decode.py in a subprocess (vLLM's own process; PYTHONPATH=/tmp/vsite on the device), same lengths."""
    cmd = [sys.executable, str(Path(__file__).with_name("vllm_decode.py")), a.vllm, "--batches", a.batches,
           "--prompt", str(a.prompt), "--short", str(a.short), "--long", str(a.long), "--repeats", str(a.diff_repeats)]
    env = dict(os.environ, PYTHONPATH=os.environ.get("VLLM_PYTHONPATH", "/tmp/vsite"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    (out / "vllm_decode.jsonl").write_text(r.stdout)
    return {"rc": r.returncode, "lines": r.stdout.strip().splitlines()[-4:], "stderr_tail": r.stderr[-1500:]}


if __name__ == "__main__":
    sys.exit(main())
