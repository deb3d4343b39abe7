"""Real vLLM 0.26 logs beside real traces on one H200 (issue 34): `mmprof record` of plain vLLM runs keeps the
engine's stdout / stderr; verify-fastpath and report then name the chosen backends and the fallbacks with the
kernels and time they concern.

    PYTHONPATH=$PWD:/tmp/mmdeps:/tmp/vsite python3 benchmarks/h200/vllm_logs.py OUTDIR [--cases a,b,c] [--kit DIR]

Needs vLLM 0.26 importable (the kit: ../shared/tools/vllm-kit, installed to /tmp/vsite) and the kit's run/
folder (default .vllm/run: its qwen2moe_config). Cases (each one vLLM engine, about 2-3 minutes):

  a  default_moe : Qwen2-MoE tiny (32 experts, moe_intermediate 512: no tuned fused-MoE file for E=32,N=512 on H200),
                   vLLM's default compilation + CUDA graphs, batch 8: the log must hold "Using default MoE config".
  b  forced_attn : the same model widened to 64 experts x 1280 (E=64,N=1280,device_name=NVIDIA_H200.json is tuned:
                   "Using configuration from ... for MoE layer."), attention forced to TRITON_ATTN
                   (LLM(attention_backend=...): "Using AttentionBackendEnum.TRITON_ATTN backend.").
  c  log_file    : case a's engine run without record, its output to a file; then `verify-fastpath --log FILE` on
                   case a's profile (the log given afterwards replaces the one record kept): run it in the same call
                   after a (`--cases a,c`), b in a second call (`--cases b`).

Per case OUTDIR gets NAME.json.gz (the Profile), NAME.stdout / NAME.stderr (what record passed through),
NAME.verify.json / NAME.verify.txt / NAME.report.json (mmprof on it), NAME.spec.json (the example spec
examples/specs/vllm-engine-log.toml) and summary.json. Each call stays under 8 minutes with two cases; the
engine-start cost (torch.compile, graph capture) is most of a case.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable

DRIVER = r'''
import random, sys, time
from vllm import LLM, SamplingParams
cfg, batch, out_tokens, attn = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
kw = {} if attn == "auto" else {"attention_backend": attn}
llm = LLM(model=cfg, load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16", tensor_parallel_size=1,
          block_size=128, max_model_len=4096, max_num_seqs=16, max_num_batched_tokens=4096,
          kv_cache_memory_bytes=4 * 1024**3, seed=0, **kw)
rng = random.Random(7)
sp = SamplingParams(max_tokens=out_tokens, min_tokens=out_tokens, ignore_eos=True, temperature=0.0, detokenize=False)
for tag in ("warmup", "run"):
    ps = [{"prompt_token_ids": [rng.randrange(10, 31999) for _ in range(64)]} for _ in range(batch)]
    t = time.time(); outs = llm.generate(ps, sp, use_tqdm=False)
    print(tag, round(time.time() - t, 3), "s", sum(len(o.outputs[0].token_ids) for o in outs), "tokens", flush=True)
'''


def sh(args: list[str], out: Path, name: str, timeout: int, env=None) -> dict:
    t = time.time()
    try:
        r = subprocess.run(args, capture_output=True, timeout=timeout, env=env)
        rc, so, se = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        rc, so, se = 124, e.stdout or b"", e.stderr or b""
    (out / f"{name}.stdout").write_bytes(so)
    (out / f"{name}.stderr").write_bytes(se)
    print(f"rc={rc} {time.time() - t:.0f}s {name}: {' '.join(args)[:160]}", flush=True)
    return {"rc": rc, "s": round(time.time() - t, 1)}


def mmprof(args: list[str], out: Path, name: str) -> dict:
    return sh([PY, "-m", "mmprof", *args], out, name, 180)


def model_config(kit: Path, out: Path, experts: int | None, inter: int | None) -> str:
    src = json.loads((kit / "qwen2moe_config" / "config.json").read_text())
    if experts is None:
        return str(kit / "qwen2moe_config")
    src.update(num_experts=experts, moe_intermediate_size=inter)
    d = out / f"qwen2moe_e{experts}_n{inter}"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(src, indent=1))
    return str(d)


def judge(out: Path, name: str) -> dict:
    """mmprof on the recorded Profile: verify (JSON and text), report, the example spec."""
    prof = str(out / f"{name}.json.gz")
    res = {"verify_json": mmprof(["verify-fastpath", prof, "--json"], out, f"{name}.verify_json"),
           "verify_txt": mmprof(["verify-fastpath", prof], out, f"{name}.verify_txt"),
           "report": mmprof(["report", prof, "--json"], out, f"{name}.report_json"),
           "spec": mmprof(["verify-fastpath", prof, "--spec", str(ROOT / "examples/specs/vllm-engine-log.toml"),
                           "--json"], out, f"{name}.spec_json")}
    try:
        d = json.loads((out / f"{name}.verify_json.stdout").read_text())
        log = d.get("log") or {}
        res["facts"] = [{k: f.get(k) for k in ("rule", "subject", "kind", "value", "verdict", "events", "time_ns",
                                                "ranks", "fallback")} for f in log.get("facts", [])]
        res["lg002"] = next((r for r in d["results"] if r["code"] == "LG002"), None)
        res["log_lines"] = log.get("lines")
    except (OSError, ValueError, KeyError) as e:
        res["facts_error"] = str(e)[:200]
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--cases", default="a,c")
    ap.add_argument("--kit", default=str(ROOT / ".vllm" / "run"))
    args = ap.parse_args()
    out, kit = Path(args.outdir), Path(args.kit)
    out.mkdir(parents=True, exist_ok=True)
    driver = out / "driver.py"
    driver.write_text(DRIVER)
    summary: dict = {"cases": {}}
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", VLLM_LOGGING_LEVEL="INFO")
    for case in args.cases.split(","):
        if case == "a":
            cfg = model_config(kit, out, None, None)
            r = sh([PY, "-m", "mmprof", "record", "-o", str(out / "default_moe.json.gz"), "--", PY, str(driver), cfg,
                    "8", "16", "auto"], out, "default_moe", 300, env)
            summary["cases"]["default_moe"] = {"record": r, **judge(out, "default_moe")}
        elif case == "b":
            cfg = model_config(kit, out, 64, 1280)
            r = sh([PY, "-m", "mmprof", "record", "-o", str(out / "forced_attn.json.gz"), "--", PY, str(driver), cfg,
                    "8", "16", "TRITON_ATTN"], out, "forced_attn", 300, env)
            summary["cases"]["forced_attn"] = {"record": r, **judge(out, "forced_attn")}
        elif case == "c":
            cfg = model_config(kit, out, None, None)
            r = sh([PY, str(driver), cfg, "8", "16", "auto"], out, "plain", 300, env)
            log = out / "plain.log"
            log.write_bytes((out / "plain.stdout").read_bytes() + (out / "plain.stderr").read_bytes())
            prof = out / "default_moe.json.gz"
            v = mmprof(["verify-fastpath", str(prof), "--log", str(log), "--json"], out, "log_file.verify_json") \
                if prof.exists() else {"rc": None, "note": "run case a first"}
            summary["cases"]["log_file"] = {"plain": r, "verify": v}
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
