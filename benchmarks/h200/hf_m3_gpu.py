"""transformers' MiniMax M3 on the H200: graph-replay traces, bf16 traces, TP 2 on NCCL, record's dilation.

A runtime nobody on mmprof wrote, built from a config with random weights (no download), bf16 on cuda,
attn_implementation="eager". Parts (argv; default all):

  graphs    the M3 MoE block (model.layers.1.mlp, experts_implementation="grouped_mm") on a decode-sized input
            [8, 1, hidden]: 5 eager calls, then a CUDA graph of one call replayed 5 times, each call in its own
            `mmprof.decode > mmprof.step.N` range (1-5 eager, 6-10 replays). Three traces:
              graph_capture.json.gz     the profiler runs during the capture (capture-time ops in the trace)
              graph_nocapture.json.gz   captured before the profiler starts; eager calls in the same trace
              graph_replays.json.gz     captured before the profiler; replays only
              graph_eager.json.gz       eager calls only (the reference for --graph-ref)
            and, when nsys is on PATH, graph_nsys.sqlite (replays, --cuda-graph-trace=node).
  traces    hf_m3_{eager,grouped}_{stack,nostack}.json.gz: 256-token prefill + 8 decode steps (ProfilerStep#N)
  tp2       hf_m3_tp2_rank{0,1}.json.gz: the same checkpoint under torchrun, 2 ranks, NCCL, tp_plan="auto"
  dilation  `mmprof record` on a decode loop of the model: plain, --no-modules, modules (default), --light,
            --kernels-only when record has it; dilation.json (decode ms per step, median of 3 runs each)

Run on the H200 (device tool):  python benchmarks/h200/hf_m3_gpu.py [PART ...]   (writes under $OUT)
CPU smoke run of the graphs/traces parts (no graph; eager twice):  python benchmarks/h200/hf_m3_gpu.py --cpu graphs
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("OUT", "out"))
CPU = "--cpu" in sys.argv
DEV = "cpu" if CPU else "cuda"
DTYPE = torch.float32 if CPU else torch.bfloat16
PROMPT, DECODE, VOCAB = 256, 8, 4096


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def m3_config(experts: str):
    from transformers.models.minimax_m3_vl.configuration_minimax_m3_vl import MiniMaxM3VLTextConfig

    # tests/data/hf_moe/make_traces.py's tiny config scaled up 8x (kernels long enough to time on a GPU)
    layers = 8
    return MiniMaxM3VLTextConfig(
        vocab_size=VOCAB, hidden_size=768, intermediate_size=384, num_hidden_layers=layers, num_attention_heads=8,
        num_key_value_heads=2, head_dim=128, rotary_dim=64, num_local_experts=16, num_experts_per_tok=2,
        dense_intermediate_size=1536, shared_intermediate_size=384,
        mlp_layer_types=["dense"] + ["sparse"] * (layers - 1),
        layer_types=["full_attention"] + ["minimax_m3_sparse"] * (layers - 1),
        index_n_heads=2, index_head_dim=192, index_block_size=16, index_topk_blocks=4, index_local_blocks=1,
        max_position_embeddings=2048, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
        pad_token_id=None, experts_implementation=experts)


def build(experts: str):
    from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import MiniMaxM3VLForCausalLM

    torch.manual_seed(0)
    cfg = m3_config(experts)
    cfg._attn_implementation = "eager"
    return MiniMaxM3VLForCausalLM(cfg).to(DEV, DTYPE).eval()


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def activities():
    from torch.profiler import ProfilerActivity

    return [ProfilerActivity.CPU] + ([] if CPU else [ProfilerActivity.CUDA])


def export(prof, name: str) -> Path:
    with tempfile.TemporaryDirectory() as d:
        raw = Path(d) / "t.json"
        prof.export_chrome_trace(str(raw))
        out = OUT / name
        out.write_bytes(gzip.compress(raw.read_bytes(), compresslevel=9, mtime=0))
    log(f"{name}: {out.stat().st_size} bytes")
    return out


# ---------------------------------------------------------------- graphs
def _steps(fn, first: int, n: int):
    from torch.profiler import record_function

    for i in range(first, first + n):
        with record_function("mmprof.decode"), record_function(f"mmprof.step.{i}"):
            fn()
    sync()


def part_graphs() -> dict:
    from torch.profiler import profile, record_function

    model = build("grouped_mm")
    block = model.model.layers[1].mlp
    torch.manual_seed(2)
    x = torch.randn(8, 1, model.config.hidden_size, device=DEV, dtype=DTYPE)
    res: dict = {"block": type(block).__name__}
    with torch.inference_mode():
        ref = block(x)
        ref = ref[0] if isinstance(ref, tuple) else ref
        eager = lambda: block(x)  # noqa: E731

        def capture():
            if CPU:
                return None, eager
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    block(x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = block(x)
            return out, g.replay

        # 1. capture inside the profiler
        try:
            with profile(activities=activities(), record_shapes=True) as prof:
                _steps(eager, 1, 5)
                with record_function("mmprof.graph.capture"):
                    out, replay = capture()
                _steps(replay, 6, 5)
            export(prof, "graph_capture.json.gz")
            if out is not None:
                o = out[0] if isinstance(out, tuple) else out
                res["replay_matches_eager"] = bool(torch.allclose(o.float(), ref.float(), atol=2e-2, rtol=2e-2))
            res["capture_in_profiler"] = "ok"
        except Exception as e:  # noqa: BLE001 - recorded, the probe goes on
            res["capture_in_profiler"] = f"failed: {e!r}"[:400]
            log(res["capture_in_profiler"])
        # 2-4. captured before the profiler
        out, replay = capture()
        with profile(activities=activities(), record_shapes=True) as prof:
            _steps(eager, 1, 5)
            _steps(replay, 6, 5)
        export(prof, "graph_nocapture.json.gz")
        with profile(activities=activities(), record_shapes=True) as prof:
            _steps(replay, 6, 5)
        export(prof, "graph_replays.json.gz")
        with profile(activities=activities(), record_shapes=True) as prof:
            _steps(eager, 1, 5)
        export(prof, "graph_eager.json.gz")
        # timing: eager call vs replay (CUDA events, median of 50)
        if not CPU:
            for name, fn in (("eager", eager), ("replay", replay)):
                ts = []
                for _ in range(50):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    fn()
                    b.record()
                    torch.cuda.synchronize()
                    ts.append(a.elapsed_time(b))
                res[f"{name}_ms"] = statistics.median(ts)
    if not CPU and shutil.which("nsys"):
        res["nsys"] = _nsys_graphs()
    return res


_NSYS_CHILD = r"""
import sys, torch
sys.path.insert(0, {here!r})
import hf_m3_gpu as h
model = h.build("grouped_mm"); block = model.model.layers[1].mlp
x = torch.randn(8, 1, model.config.hidden_size, device="cuda", dtype=torch.bfloat16)
with torch.inference_mode():
    for _ in range(3): block(x)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g): block(x)
    for _ in range(5): block(x)
    for _ in range(5): g.replay()
    torch.cuda.synchronize()
"""


def _nsys_graphs() -> str:
    with tempfile.TemporaryDirectory() as d:
        child = Path(d) / "child.py"
        child.write_text(_NSYS_CHILD.format(here=str(Path(__file__).resolve().parent)))
        rep = Path(d) / "g"
        r = subprocess.run(["nsys", "profile", "-o", str(rep), "-t", "cuda,nvtx", "--cuda-graph-trace=node",
                            "--force-overwrite=true", sys.executable, str(child)], capture_output=True, text=True,
                           timeout=150)
        if r.returncode != 0:
            return f"nsys profile rc={r.returncode}: {r.stderr[-300:]}"
        r = subprocess.run(["nsys", "export", "--type", "sqlite", "-o", str(OUT / "graph_nsys.sqlite"),
                            "--force-overwrite=true", str(rep) + ".nsys-rep"], capture_output=True, text=True,
                           timeout=120)
        return "ok" if r.returncode == 0 else f"nsys export rc={r.returncode}: {r.stderr[-300:]}"


# ---------------------------------------------------------------- traces
def decode_run(model, prof=None, steps: int = DECODE, prompt: int = PROMPT) -> tuple[list[int], list[float]]:
    """Prefill + greedy decode; one profiler step per forward when `prof` is given. Returns tokens, per-step ms."""
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (1, prompt), device=DEV)
    tokens, ms = [], []
    past, x = None, ids
    with torch.inference_mode():
        for _ in range(steps + 1):
            if prof is not None:
                prof.step()
            t = time.perf_counter()
            out = model(x, past_key_values=past, use_cache=True)
            past, x = out.past_key_values, out.logits[:, -1:].argmax(-1)
            tokens.append(int(x))  # a host sync per step, as generate() does
            ms.append((time.perf_counter() - t) * 1e3)
    return tokens, ms


def part_traces() -> dict:
    from torch.profiler import profile, schedule

    res = {}
    for experts, tag in (("eager", "eager"), ("grouped_mm", "grouped")):
        model = build(experts)
        decode_run(model, steps=2)  # warm-up outside the trace
        for stack in (True, False):
            name = f"hf_m3_{tag}_{'stack' if stack else 'nostack'}"
            with profile(activities=activities(), record_shapes=True, with_stack=stack,
                         schedule=schedule(wait=0, warmup=1, active=DECODE + 1)) as prof:
                tokens, ms = decode_run(model, prof)
            export(prof, name + ".json.gz")
            res[name] = {"tokens": tokens, "step_ms": ms}
        del model
    return res


# ---------------------------------------------------------------- tp2
def part_tp2() -> dict:
    with tempfile.TemporaryDirectory() as d:
        ckpt = Path(d) / "ckpt"
        model = build("grouped_mm")
        model.save_pretrained(ckpt)
        ref, _ = decode_run(model)
        del model
        torch.cuda.empty_cache()
        env = dict(os.environ, OMP_NUM_THREADS="4", NCCL_NVLS_ENABLE="0")
        r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                            "--master-port", "29561", __file__, "--tp-worker", str(ckpt), str(OUT)],
                           env=env, capture_output=True, text=True, timeout=300)
        print(r.stdout[-3000:], r.stderr[-3000:])
        res = {"rc": r.returncode, "single_gpu_tokens": ref}
        for rank in (0, 1):
            f = OUT / f"tokens{rank}.json"
            if f.exists():
                got = json.loads(f.read_text())
                res[f"rank{rank}_tokens"] = got
                res[f"rank{rank}_same_as_single"] = sum(a == b for a, b in zip(got, ref)) / len(ref)
                f.unlink()
        return res


def tp_worker(ckpt: str, outdir: str) -> None:
    from torch.profiler import profile, schedule
    from transformers import DistributedConfig
    from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import MiniMaxM3VLForCausalLM

    model = MiniMaxM3VLForCausalLM.from_pretrained(ckpt, distributed_config=DistributedConfig(tp_plan="auto"),
                                                   attn_implementation="eager", dtype=torch.bfloat16,
                                                   experts_implementation="grouped_mm").eval()
    rank = torch.distributed.get_rank()
    print(f"rank {rank}: backend {torch.distributed.get_backend()} device {model.device}", flush=True)
    decode_run(model, steps=2)
    with profile(activities=activities(), record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=DECODE + 1)) as prof:
        tokens, _ = decode_run(model, prof)
    global OUT
    OUT = Path(outdir)
    export(prof, f"hf_m3_tp2_rank{rank}.json.gz")
    (OUT / f"tokens{rank}.json").write_text(json.dumps(tokens))
    torch.distributed.destroy_process_group()


# ---------------------------------------------------------------- dilation
def dilation_child(out_json: str) -> None:
    """The program `mmprof record` runs: build, warm up, then 3 timed runs of 32 decode steps."""
    model = build("grouped_mm")
    decode_run(model, steps=4)
    runs = []
    for _ in range(3):
        _, ms = decode_run(model, steps=32, prompt=64)
        runs.append(statistics.median(ms[1:]))
    Path(out_json).write_text(json.dumps({"decode_ms_per_step": statistics.median(runs), "runs": runs}))


def part_dilation() -> dict:
    help_text = subprocess.run([sys.executable, "-m", "mmprof", "record", "--help"], capture_output=True,
                               text=True).stdout
    variants = [("plain", None), ("record --no-modules", ["--no-modules"]), ("record", []),
                ("record --light", ["--light"])]
    if "--kernels-only" in help_text:
        variants.append(("record --kernels-only", ["--kernels-only"]))
    res = {}
    with tempfile.TemporaryDirectory() as d:
        for name, flags in variants:
            j = Path(d) / "t.json"
            cmd = [sys.executable, __file__, "--dilation-child", str(j), *(["--cpu"] if CPU else [])]
            if flags is not None:
                cmd = [sys.executable, "-m", "mmprof", "record", "-o", str(Path(d) / "r.json.gz"), *flags, "--",
                       *cmd]
            t = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
            wall = time.perf_counter() - t
            if r.returncode != 0 or not j.exists():
                res[name] = {"error": (r.stderr or r.stdout)[-500:]}
                continue
            res[name] = {**json.loads(j.read_text()), "wall_s": wall}
            log(f"{name}: {res[name]['decode_ms_per_step']:.2f} ms/step, wall {wall:.1f} s")
    base = res.get("plain", {}).get("decode_ms_per_step")
    for v in res.values():
        if base and "decode_ms_per_step" in v:
            v["dilation"] = v["decode_ms_per_step"] / base
    return res


PARTS = {"graphs": part_graphs, "traces": part_traces, "tp2": part_tp2, "dilation": part_dilation}

if __name__ == "__main__":
    if sys.argv[1:2] == ["--tp-worker"]:
        tp_worker(sys.argv[2], sys.argv[3])
        sys.exit()
    if sys.argv[1:2] == ["--dilation-child"]:
        dilation_child(sys.argv[2])
        sys.exit()
    OUT.mkdir(parents=True, exist_ok=True)
    names = [a for a in sys.argv[1:] if not a.startswith("--")] or list(PARTS)
    summary = {"device": torch.cuda.get_device_name(0) if not CPU else "cpu", "torch": torch.__version__}
    for n in names:
        log(f"=== {n}")
        t = time.perf_counter()
        try:
            summary[n] = PARTS[n]()
        except Exception as e:  # noqa: BLE001 - one part failing must not cost the others
            import traceback

            traceback.print_exc()
            summary[n] = {"error": repr(e)[:500]}
        log(f"{n}: {time.perf_counter() - t:.1f} s")
        (OUT / "hf_m3_gpu.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1)[:4000])
