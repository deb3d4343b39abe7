"""Profiles for examples/ and the TP=1 part of the 8-GPU issue, on one H200 (one run, < 8 minutes).

Writes under $OUT:
  ladder/<rung>.json.gz   `mmprof run --preset small --device cuda` for each rung of the ladder (batch 8,
                          prompt 512, 4 decode steps, full capture): baseline, grouped, fused, reuse2, reuse4,
                          graphs (the fused rung + --graphs: step 1 eager, the capture in step 2, steps 2-4
                          replayed)
  slice/fused.json.gz, slice/separate.json.gz
                          `mmprof run --preset m3-rank-slice` (one TP=8 rank of the real M3 dims) at decode
                          batch 64, fused vs separate shared expert
  slice/record_b1.json.gz, slice/record_b64.json.gz
                          `mmprof record -- torchrun --nproc-per-node 1 -m mmprof.runtime.torchrun` of the same
                          slice at decode batch 1 and 64
  verify/diff outputs (JSON) for the slice pair
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

OUT = os.environ.get("OUT", "out")
PY = sys.executable
RUNGS = {
    "baseline": ["--baseline"],
    "grouped": ["--baseline", "--moe-impl", "grouped"],
    "fused": ["--baseline", "--moe-impl", "grouped", "--shared-expert", "fused"],
    "reuse2": ["--fast", "--block-reuse", "2"],
    "reuse4": ["--fast"],
    "graphs": ["--baseline", "--moe-impl", "grouped", "--shared-expert", "fused", "--graphs"],
}


def sh(args: list[str], log: str, timeout: int = 200) -> int:
    t = time.time()
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    with open(os.path.join(OUT, log), "a") as f:
        f.write(f"$ {' '.join(args)}\n{r.stdout}\n{r.stderr[-4000:]}\nrc={r.returncode} {time.time() - t:.1f}s\n\n")
    print(f"rc={r.returncode} {time.time() - t:6.1f}s {' '.join(args[2:])[:150]}", flush=True)
    return r.returncode


def main() -> None:
    for d in ("ladder", "slice"):
        os.makedirs(os.path.join(OUT, d), exist_ok=True)
    m = [PY, "-m", "mmprof"]
    for rung, flags in RUNGS.items():
        sh(m + ["run", "--preset", "small", "--device", "cuda", "--batch", "8", "--prompt-len", "512",
                "--decode-steps", "4", "--repeats", "3", *flags, "-o", f"{OUT}/ladder/{rung}.json.gz"], "ladder.log")
    for tag, flags in (("fused", ["--fast"]), ("separate", ["--fast", "--shared-expert", "separate"])):
        sh(m + ["run", "--preset", "m3-rank-slice", "--device", "cuda", "--batch", "64", "--prompt-len", "512",
                "--decode-steps", "4", "--repeats", "3", *flags, "-o", f"{OUT}/slice/{tag}.json.gz"], "slice.log")
    for b in (1, 64):
        sh(m + ["record", "-o", f"{OUT}/slice/record_b{b}.json.gz", "--", PY, "-m", "torch.distributed.run", "--nproc-per-node", "1",
                "-m", "mmprof.runtime.torchrun", "--preset", "m3-rank-slice", "--batch", str(b), "--prompt-len", "512",
                "--decode-steps", "4"], "slice.log")
    for tag in ("fused", "separate"):
        sh(m + ["verify-fastpath", f"{OUT}/slice/{tag}.json.gz", "--json"], f"verify_{tag}.log")
    sh(m + ["diff", f"{OUT}/slice/separate.json.gz", f"{OUT}/slice/fused.json.gz", "--json",
            "--markdown", f"{OUT}/slice/diff.md"], "diff.log")
    sh(m + ["diff", f"{OUT}/ladder/baseline.json.gz", f"{OUT}/ladder/reuse4.json.gz", "--json"], "diff.log")


if __name__ == "__main__":
    main()
