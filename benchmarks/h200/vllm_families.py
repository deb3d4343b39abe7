#!/usr/bin/env python3
"""Record vLLM 0.26 runs of several model families on one H200, with their full logs (issues 31, 34, 37).

Run on the GPU machine, from the repository root, with the vLLM kit installed (../shared/tools/vllm-kit:
`PYTHONPATH=/tmp/vsite`, its run/ folder carried as `.vllm/run`):

    python3 benchmarks/h200/vllm_families.py OUTDIR --cases a,b,c [--parallel 4] [--deadline 480]
    python3 benchmarks/h200/vllm_families.py --list

Every case is its own vLLM engine in a child process of its own process group (`--parallel` of them at a time:
tiny models leave the GPU mostly idle, so recording several at once saves device time; timing cases are run
with `--parallel 1`). A child does: engine start -> warm-up generate -> a prefill-only generate (max_tokens=1) and
a full generate, both unprofiled, `--repeats` times (decode time per step = (full - prefill) / (out - 1), the
same method as the runtime's figures) -> `llm.start_profile()` -> one generate of `prof_out` tokens ->
`llm.stop_profile()`. vLLM's own torch profiler writes the trace (record_shapes, with_stack). The child's
stdout and stderr (vLLM's whole log, as a user who runs the script sees it) go to `log.txt`.

OUTDIR receives at most 8 files: `cases.json` (per case: engine arguments, environment, vLLM's resolved
compilation and CUDA-graph mode, timings, trace statistics, status) and tarballs `families_N.tar` of
`<case>/{trace.pt.trace.json.gz, log.txt, summary.json}` (each under 15 MiB).

The model configs are tiny (benchmarks/h200/vllm_configs/*/config.json, 4 layers, hidden 1024) with dummy
weights; M3 and Qwen2-MoE configs come from the kit (`.vllm/run/m3_config`, `qwen2moe_config`, `small_config`).
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KIT_RUN = os.path.join(REPO, ".vllm", "run")
CFG = os.path.join(HERE, "vllm_configs")
SCRATCH = os.environ.get("VFAM_SCRATCH", "/tmp/vfam")
MiB = 1 << 20


def cfg(name: str) -> str:
    own = os.path.join(CFG, name)
    return own if os.path.isdir(own) else os.path.join(KIT_RUN, name)


# engine arguments every case shares (M3 cases add block_size=128, which its sparse backend needs)
COMMON = dict(load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16", tensor_parallel_size=1,
              max_model_len=4096, max_num_seqs=64, max_num_batched_tokens=4096,
              kv_cache_memory_bytes=3 * 1024**3, seed=0)
M3 = dict(block_size=128)
SMALL_SIZES = dict(compilation_config={"cudagraph_capture_sizes": [1, 2, 4, 8]})
EAGER = dict(enforce_eager=True)
PIECEWISE = dict(compilation_config={"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1, 2, 4, 8]})
FULL = dict(compilation_config={"cudagraph_mode": "FULL", "cudagraph_capture_sizes": [1, 2, 4, 8]})
NO_STREAM = {"VLLM_DISABLE_SHARED_EXPERTS_STREAM": "1"}
STREAM = {"VLLM_DISABLE_SHARED_EXPERTS_STREAM": "0"}


def case(model, engine=None, env=None, batch=8, prompt=64, out=32, prof_out=10, desc="", timeout=240, repeats=1):
    e = dict(COMMON, **(engine or {}))
    return dict(model=model, engine=e, env=env or {}, batch=batch, prompt=prompt, out=out, prof_out=prof_out,
                desc=desc, timeout=timeout, repeats=repeats)


def _m(*parts):
    out: dict = {}
    for p in parts:
        for k, v in p.items():
            if k == "compilation_config" and k in out:
                out[k] = {**out[k], **v}
            else:
                out[k] = v
    return out


CASES = {
    # --- families nobody here has seen (issue 37), eager and compiled, batch 1 and 8
    "llama_eager_b8": case("llama_dense", EAGER, desc="dense Llama, eager, b8"),
    "llama_graphs_b8": case("llama_dense", SMALL_SIZES, desc="dense Llama, compiled + FULL_AND_PIECEWISE, b8"),
    "qwen3moe_eager_b8": case("qwen3_moe", EAGER, desc="Qwen3-MoE (no shared expert), eager, b8"),
    "qwen3moe_graphs_b8": case("qwen3_moe", SMALL_SIZES, desc="Qwen3-MoE, compiled + FULL_AND_PIECEWISE, b8"),
    "qwen3moe_piecewise_b1": case("qwen3_moe", PIECEWISE, batch=1, desc="Qwen3-MoE, compiled, PIECEWISE graphs, b1"),
    "qwen3moe_full_b8": case("qwen3_moe", FULL, desc="Qwen3-MoE, compiled, FULL graphs, b8"),
    "dsv2lite_eager_b8": case("deepseek_v2_lite", EAGER, desc="DeepSeek-V2-Lite-like (MLA, 2 shared experts), eager, b8"),
    "dsv2lite_graphs_b8": case("deepseek_v2_lite", SMALL_SIZES, desc="DeepSeek-V2-Lite-like, compiled + graphs, b8"),
    "dsv3_eager_b1": case("deepseek_v3", EAGER, batch=1, desc="DeepSeek-V3-like (MLA, sigmoid grouped top-k), eager, b1"),
    "dsv3_graphs_b8": case("deepseek_v3", SMALL_SIZES, desc="DeepSeek-V3-like, compiled + graphs, b8"),
    "mixtral_eager_b8": case("mixtral", EAGER, desc="Mixtral (8 experts top-2, no shared), eager, b8"),
    "mixtral_graphs_b1": case("mixtral", SMALL_SIZES, batch=1, desc="Mixtral, compiled + graphs, b1"),
    "glm45_graphs_b8": case("glm4_moe", SMALL_SIZES, desc="GLM-4.5-MoE-like (shared expert, sigmoid), compiled, b8"),
    "glm45_eager_b1": case("glm4_moe", EAGER, batch=1, desc="GLM-4.5-MoE-like, eager, b1"),
    "qwen2moe_graphs_b8": case("qwen2moe_config", SMALL_SIZES, env=STREAM,
                               desc="Qwen2-MoE, compiled + graphs, b8, shared-expert side stream on"),
    "qwen2moe_graphs_b8_nostream": case("qwen2moe_config", SMALL_SIZES, env=NO_STREAM,
                                        desc="Qwen2-MoE, compiled + graphs, b8, side stream off"),
    # --- M3: mixed prefill+decode steps (chunked prefill of 4 x 2048 tokens in 4096-token steps), side stream
    "m3_graphs_b4_p2048": case("m3_config", _m(M3, SMALL_SIZES), env=NO_STREAM, batch=4, prompt=2048,
                               desc="M3, graphs, b4 x 2048-token prompts (mixed steps), side stream off"),
    "m3_graphs_b8_nostream": case("m3_config", _m(M3, SMALL_SIZES), env=NO_STREAM,
                                  desc="M3, graphs, b8, side stream off (pair of the sample m3_graphs_b8)"),
    "m3_graphs_b8_stream": case("m3_config", _m(M3, SMALL_SIZES), env=STREAM, desc="M3, graphs, b8, side stream on"),
    # --- logs (issue 34): a forced attention backend; a tuned fused-MoE config found vs the default
    "qwen3moe_triton_attn_b8": case("qwen3_moe", _m(SMALL_SIZES, {"attention_config": {"backend": "TRITON_ATTN"}}),
                                    desc="Qwen3-MoE, compiled, attention backend forced to TRITON_ATTN, b8"),
    "qwen3moe_tuned_b8": case("qwen3_moe", SMALL_SIZES, env={"VLLM_TUNED_CONFIG_FOLDER": "@TUNED@"},
                              desc="Qwen3-MoE, compiled, a fused-MoE config file for its E/N in "
                                   "VLLM_TUNED_CONFIG_FOLDER (tuned config found)"),
    # --- comparisons (issue 31): two prompt lengths; vLLM on the runtime's `small` config (12 layers)
    "qwen3moe_graphs_b8_p512": case("qwen3_moe", SMALL_SIZES, prompt=512, desc="Qwen3-MoE, graphs, b8 x 512 tokens"),
    "small_graphs_b1": case("small_config", _m(M3, SMALL_SIZES), env=STREAM, batch=1, prompt=512, out=32, repeats=3,
                            desc="vLLM on the runtime's small config (12 layers, 128 experts), graphs, b1 x 512"),
    "small_eager_b1": case("small_config", _m(M3, EAGER), env=STREAM, batch=1, prompt=512, out=32,
                           desc="vLLM on the small config, eager, b1 x 512"),
    # --- shapes (issue 32): vLLM's per-rank layout at TP 2, one trace per rank (nvidia-h200-x2 only): every
    # parallel linear of both ranks must match `mmprof shapes --engine vllm-cuda --tp 2`
    "m3_eager_tp2_b8": case("m3_config", _m(M3, EAGER, {"tensor_parallel_size": 2}),
                            env={"CUDA_LAUNCH_BLOCKING": "1", **NO_STREAM}, desc="M3, eager, TP 2, b8 (2 GPUs)"),
    "qwen2moe_eager_tp2_b8": case("qwen2moe_config", _m(EAGER, {"tensor_parallel_size": 2}),
                                  desc="Qwen2-MoE, eager, TP 2, b8 (2 GPUs)"),
}


def tuned_folder(workdir: str) -> str:
    """A folder holding a fused-MoE config for the tiny Qwen3-MoE (E=32 experts; N named both ways vLLM's
    callers size it), so vLLM logs 'Using configuration from ...' instead of the default-config warning."""
    d = os.path.join(workdir, "tuned")
    os.makedirs(d, exist_ok=True)
    tile = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
            "num_stages": 3}
    body = {str(m): tile for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)}
    for n in (256, 512, 1024):
        with open(os.path.join(d, f"E=32,N={n},device_name=NVIDIA_H200.json"), "w") as f:
            json.dump(body, f)
    return d


# ----------------------------------------------------------------------------------------------------- child
def child(name: str, workdir: str) -> None:
    spec = CASES[name]
    res: dict = {"case": name, "desc": spec["desc"], "stage": "import"}
    out_json = os.path.join(workdir, "summary.json")

    def dump():
        with open(out_json, "w") as f:
            json.dump(res, f, indent=1, default=str)

    dump()
    import vllm
    from vllm import LLM, SamplingParams

    res["vllm_version"] = vllm.__version__
    prof = os.path.join(workdir, "prof")
    os.makedirs(prof, exist_ok=True)
    engine = dict(spec["engine"])
    profiler_config = dict(profiler="torch", torch_profiler_dir=prof, torch_profiler_record_shapes=True,
                           torch_profiler_with_stack=True, torch_profiler_use_gzip=True)
    model = cfg(spec["model"])
    res["engine_args"] = dict(engine, model=os.path.relpath(model, REPO))
    res["env"] = {k: os.environ.get(k) for k in sorted(set(spec["env"]) | {"VLLM_DISABLE_SHARED_EXPERTS_STREAM",
                                                                            "VLLM_USE_BREAKABLE_CUDAGRAPH"})}
    res["stage"] = "engine_init"
    dump()
    t0 = time.time()
    llm = LLM(model=model, profiler_config=profiler_config, **engine)
    res["engine_init_s"] = round(time.time() - t0, 2)
    try:
        vc = llm.llm_engine.vllm_config
        cc = vc.compilation_config
        res["resolved"] = {"compilation_mode": str(cc.mode), "cudagraph_mode": str(cc.cudagraph_mode),
                           "cudagraph_capture_sizes": list(cc.cudagraph_capture_sizes or []),
                           "enforce_eager": vc.model_config.enforce_eager, "block_size": vc.cache_config.block_size,
                           "architectures": vc.model_config.architectures}
    except Exception as e:  # informational only
        res["resolved"] = {"error": repr(e)}
    vocab = 32000
    try:
        vocab = int(llm.llm_engine.vllm_config.model_config.get_vocab_size())
    except Exception:
        pass
    rng = random.Random(1234)

    def gen(out_tokens: int) -> dict:
        ps = [{"prompt_token_ids": [rng.randrange(10, vocab - 1) for _ in range(spec["prompt"])]}
              for _ in range(spec["batch"])]
        sp = SamplingParams(max_tokens=out_tokens, min_tokens=out_tokens, ignore_eos=True, temperature=0.0,
                            detokenize=False)
        t = time.perf_counter()
        outs = llm.generate(ps, sp, use_tqdm=False)
        dt = time.perf_counter() - t
        return {"wall_s": round(dt, 5), "output_tokens": sum(len(o.outputs[0].token_ids) for o in outs)}

    res["batch"], res["prompt_len"], res["out_len"], res["prof_out"] = (spec["batch"], spec["prompt"], spec["out"],
                                                                        spec["prof_out"])
    res["stage"] = "warmup"
    dump()
    res["warmup"] = gen(spec["out"])
    res["stage"] = "timed"
    dump()
    timed = []
    for _ in range(spec["repeats"]):
        pre = gen(1)
        full = gen(spec["out"])
        timed.append({"prefill_only_s": pre["wall_s"], "full_s": full["wall_s"],
                      "decode_ms_per_step": round(1e3 * (full["wall_s"] - pre["wall_s"]) / (spec["out"] - 1), 4)})
    res["timed_unprofiled"] = timed
    res["stage"] = "profiled"
    dump()
    llm.start_profile(profile_prefix=name)
    res["profiled_generate"] = gen(spec["prof_out"])
    llm.stop_profile()
    res["stage"] = "done"
    dump()
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:
        pass
    print(f"[vllm_families] {name} done", flush=True)


# ----------------------------------------------------------------------------------------------------- parent
def trace_stats(path: str) -> dict:
    with gzip.open(path, "rt") as f:
        evs = json.load(f).get("traceEvents", [])
    kern = [e for e in evs if e.get("cat") == "kernel" and e.get("ph") == "X"]
    return {"events": len(evs), "kernels": len(kern), "kernel_time_us": round(sum(e.get("dur", 0) for e in kern), 1),
            "streams": sorted({str((e.get("args") or {}).get("stream")) for e in kern}),
            "graph_launches": sum(1 for e in evs if e.get("name") in ("cudaGraphLaunch", "cuGraphLaunch"))}


def start(name: str, env: dict) -> tuple:
    spec = CASES[name]
    wd = os.path.join(SCRATCH, name)
    shutil.rmtree(wd, ignore_errors=True)
    os.makedirs(wd)
    cenv = dict(env)
    for k, v in spec["env"].items():
        cenv[k] = tuned_folder(wd) if v == "@TUNED@" else v
    lf = open(os.path.join(wd, "log.txt"), "wb")
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", name, "--workdir", wd],
                         stdout=lf, stderr=subprocess.STDOUT, env=cenv, start_new_session=True)
    return p, lf, wd, time.time()


def stop(p) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        time.sleep(3 if sig == signal.SIGTERM else 0)


def finish(name: str, p, lf, wd: str, t0: float, status: str) -> dict:
    stop(p)
    lf.close()
    info = {"case": name, "status": status, "returncode": p.poll(), "wall_s": round(time.time() - t0, 1)}
    try:
        with open(os.path.join(wd, "summary.json")) as f:
            info.update(json.load(f))
    except Exception as e:
        info["summary_error"] = repr(e)
    if info["status"] == "ok" and info.get("stage") != "done":
        info["status"] = f"incomplete(rc={info['returncode']})"
    found = sorted(glob.glob(os.path.join(wd, "prof", "*.pt.trace.json*")))
    tp = int(CASES[name]["engine"].get("tensor_parallel_size", 1))
    # TP > 1: one trace per rank (vLLM names them ..._tp{r}_..._rank{r}...), kept as trace.rank{r}.pt.trace.json.gz
    picks = [(f"trace.rank{r}.pt.trace.json.gz", s) for r, s in enumerate(found[-tp:])] if tp > 1 and \
        len(found) >= tp else ([("trace.pt.trace.json.gz", found[-1])] if found else [])
    for fname, src in picks:
        dst = os.path.join(wd, fname)
        if src.endswith(".gz"):
            shutil.move(src, dst)
        else:
            with open(src, "rb") as fi, gzip.open(dst, "wb", 6) as fo:
                shutil.copyfileobj(fi, fo)
        try:
            info.setdefault("traces", {})[fname] = trace_stats(dst) | {"bytes": os.path.getsize(dst)}
            info["trace"] = info["traces"][fname]
        except Exception as e:  # a cut trace
            info["trace_error"] = repr(e)
    shutil.rmtree(os.path.join(wd, "prof"), ignore_errors=True)
    with open(os.path.join(wd, "summary.json"), "w") as f:
        json.dump(info, f, indent=1, default=str)
    tu = info.get("timed_unprofiled") or [{}]
    print(f"CASE {name}: {info['status']} wall={info['wall_s']}s init={info.get('engine_init_s')}s "
          f"decode_ms={[t.get('decode_ms_per_step') for t in tu]} kernels={(info.get('trace') or {}).get('kernels')}",
          flush=True)
    return info


def pack(outdir: str, names: list[str], cap: int = 15 * MiB, max_tars: int = 7) -> None:
    tars: list[list[str]] = [[]]
    size = 0
    for n in names:
        wd = os.path.join(SCRATCH, n)
        s = sum(os.path.getsize(os.path.join(wd, f)) for f in os.listdir(wd) if os.path.isfile(os.path.join(wd, f)))
        if tars[-1] and size + s > cap:
            tars.append([])
            size = 0
        tars[-1].append(n)
        size += s
    for i, group in enumerate(tars[:max_tars]):
        with tarfile.open(os.path.join(outdir, f"families_{i}.tar"), "w") as t:
            for n in group:
                wd = os.path.join(SCRATCH, n)
                for f in ("summary.json", "log.txt", "trace.pt.trace.json.gz",
                          *sorted(x for x in os.listdir(wd) if x.startswith("trace.rank"))):
                    if os.path.exists(os.path.join(wd, f)):
                        t.add(os.path.join(wd, f), arcname=f"{n}/{f}")
    if len(tars) > max_tars:
        print(f"not returned (over the file limit): {[n for g in tars[max_tars:] for n in g]}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir", nargs="?")
    ap.add_argument("--cases", default="")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--deadline", type=float, default=480.0)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--child")
    ap.add_argument("--workdir")
    a = ap.parse_args()
    if a.list:
        for k, v in CASES.items():
            print(f"{k:28s} {v['desc']}")
        return 0
    if a.child:
        child(a.child, a.workdir)
        return 0
    names = [c for c in a.cases.split(",") if c] or list(CASES)
    bad = [n for n in names if n not in CASES]
    if bad or not a.outdir:
        ap.error(f"unknown cases {bad}" if bad else "OUTDIR required")
    sys.path.insert(0, KIT_RUN)
    import record as kit  # the kit's environment for FlashInfer's JIT and the NVLink-multicast-off settings

    env = kit.base_env()
    os.makedirs(a.outdir, exist_ok=True)
    os.makedirs(SCRATCH, exist_ok=True)
    t_start = time.time()
    todo, running, done = list(names), [], []
    while todo or running:
        while todo and len(running) < a.parallel and time.time() - t_start < a.deadline - 60:
            n = todo.pop(0)
            running.append((n, *start(n, env)))
        time.sleep(1)
        for r in list(running):
            n, p, lf, wd, t0 = r
            late = time.time() - t_start > a.deadline
            if p.poll() is not None or time.time() - t0 > CASES[n]["timeout"] or late:
                status = "ok" if p.poll() is not None else ("deadline" if late else "timeout")
                done.append(finish(n, p, lf, wd, t0, status))
                running.remove(r)
        if todo and time.time() - t_start >= a.deadline - 60 and not running:
            for n in todo:
                done.append({"case": n, "status": "not started (deadline)"})
            todo = []
    with open(os.path.join(a.outdir, "cases.json"), "w") as f:
        json.dump(done, f, indent=1, default=str)
    pack(a.outdir, [d["case"] for d in done if os.path.isdir(os.path.join(SCRATCH, d["case"]))])
    print(f"total {round(time.time() - t_start, 1)} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
