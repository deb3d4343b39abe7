"""Why did fusing the shared expert gain so much at decode batch 64 on `small` (ladder: 52 -> 32 ms/step)?
Profile both rungs with mmprof run (K=1, batch 64, 4k prompt) and diff them. Writes under $OUT."""

from __future__ import annotations

import os
import subprocess
import sys

OUT = os.environ.get("OUT", "out")
PY = sys.executable
os.makedirs(OUT, exist_ok=True)
common = ["--preset", "small", "--device", "cuda", "--batch", "64", "--prompt-len", "4096", "--decode-steps", "4",
          "--repeats", "5", "--baseline", "--moe-impl", "grouped"]
for tag, extra in (("separate", []), ("fused", ["--shared-expert", "fused"])):
    r = subprocess.run([PY, "-m", "mmprof", "run", *common, *extra, "-o", f"{OUT}/{tag}.json.gz"],
                       capture_output=True, text=True)
    print(tag, r.returncode, r.stdout[-1500:], r.stderr[-800:], flush=True)
r = subprocess.run([PY, "-m", "mmprof", "diff", f"{OUT}/separate.json.gz", f"{OUT}/fused.json.gz", "--phase", "decode",
                    "--markdown", f"{OUT}/diff.md"], capture_output=True, text=True, env={**os.environ, "COLUMNS": "160"})
print(r.stdout[-6000:], r.stderr[-500:])
