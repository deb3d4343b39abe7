"""`mmprof record -- torchrun --nproc-per-node 1` of the reference runtime's m3-rank-slice on one H200
(the TP=1 part of the 8-GPU issue), decode batch 1 and 64; then summary, verify-fastpath and shapes of the
recorded Profile. Writes $OUT/record_b1.json.gz, $OUT/record_b64.json.gz and $OUT/tp1.log."""

from __future__ import annotations

import os
import subprocess
import sys

OUT = os.environ.get("OUT", "out")
PY = sys.executable
os.makedirs(OUT, exist_ok=True)


def sh(args: list[str], timeout: int = 240) -> None:
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    with open(os.path.join(OUT, "tp1.log"), "a") as f:
        f.write(f"$ {' '.join(args)}\n{r.stdout[-6000:]}\n{r.stderr[-3000:]}\nrc={r.returncode}\n\n")
    print(f"rc={r.returncode} {' '.join(args[2:])[:140]}", flush=True)


for b in (1, 64):
    out = f"{OUT}/record_b{b}.json.gz"
    sh([PY, "-m", "mmprof", "record", "-o", out, "--", PY, "-m", "torch.distributed.run", "--nproc-per-node", "1",
        "-m", "mmprof.runtime.torchrun", "--preset", "m3-rank-slice", "--batch", str(b), "--prompt-len", "512",
        "--decode-steps", "4"])
    sh([PY, "-m", "mmprof", "summary", out, "--top", "8"])
    sh([PY, "-m", "mmprof", "verify-fastpath", out])
    sh([PY, "-m", "mmprof", "shapes", "--profile", out, "--model", "m3-rank-slice", "--tp", "1"])
