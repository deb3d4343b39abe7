"""`mmprof shapes --live --device cuda` on H200(s): real bf16 ranks, shapes captured at dispatch level
(torch grouped GEMM, CUDA SDPA backends), compared with the analytic expectation. One run, < 8 minutes.

Runs, each as `python -m mmprof shapes ... --json` (writes $OUT/<name>.json and a summary table at the end):
- tiny   TP 1 (1 GPU), and TP 2 / TP 4 when that many GPUs are visible (NCCL)
- small  TP 1 (real head / indexer geometry, 128 experts, ~12 GB bf16), prefill 512
- m3-rank-slice is not used: the analytic side would need the slice's TP; small covers real dims per expert.
Also runs the GPU-marked pytest of tests/test_shapes_live.py.

    OUT=/tmp/out python benchmarks/h200/shapes_live.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    import torch

    out = Path(os.environ.get("OUT", "/tmp/mmprof-shapes-out"))
    out.mkdir(parents=True, exist_ok=True)
    n_gpu = torch.cuda.device_count()
    runs = [("tiny_tp1", ["--model", "tiny", "--tp", "1", "--seq", "64"])]
    for tp in (2, 4):
        if n_gpu >= tp:
            runs.append((f"tiny_tp{tp}", ["--model", "tiny", "--tp", str(tp), "--seq", "64"]))
    runs.append(("small_tp1", ["--model", "small", "--tp", "1", "--seq", "512", "--batch", "2"]))
    rows = []
    for name, extra in runs:
        cmd = [sys.executable, "-m", "mmprof", "shapes", "--live", "--device", "cuda", "--json", *extra]
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=240)
        dt = time.perf_counter() - t
        row = {"run": name, "rc": proc.returncode, "s": round(dt, 1)}
        if proc.returncode == 0:
            d = json.loads(proc.stdout)
            (out / f"{name}.json").write_text(proc.stdout)
            c = d["comparison"]
            row.update(calls=c["calls"], matched=c["matched"], unmatched=len(c["unmatched"]), unjudged=c["unjudged"],
                       findings=",".join(sorted({f["code"] for f in d["findings"]})),
                       first_mismatch=(c["unmatched"][0]["why"][:100] if c["unmatched"] else ""))
        else:
            row["error"] = proc.stderr.strip()[-300:]
        rows.append(row)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "tests/test_shapes_live.py", "-k", "cuda"],
                          capture_output=True, text=True, cwd=ROOT, timeout=240, env={**os.environ, "MMPROF_GPU_TESTS": "1"})
    rows.append({"run": "pytest -k cuda", "rc": proc.returncode, "s": round(time.perf_counter() - t, 1),
                 "tail": proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-200:]})
    (out / "summary.json").write_text(json.dumps({"gpus": n_gpu, "torch": torch.__version__, "rows": rows}, indent=2))
    print(f"GPUs: {n_gpu} ({torch.cuda.get_device_name(0) if n_gpu else '-'}), torch {torch.__version__}")
    print(f"{'run':16} {'rc':>3} {'s':>6} {'calls':>6} {'match':>6} {'diff':>5} {'unj':>4}  findings / note")
    for r in rows:
        note = r.get("findings", "") + (" " + r["first_mismatch"] if r.get("first_mismatch") else "")
        note = note or r.get("error", r.get("tail", ""))
        print(f"{r['run']:16} {r['rc']:>3} {r['s']:>6} {r.get('calls', ''):>6} {r.get('matched', ''):>6} "
              f"{r.get('unmatched', ''):>5} {r.get('unjudged', ''):>4}  {note}")


if __name__ == "__main__":
    main()
