"""Wall time of `mmprof demo` end to end (the test suite checks what it does, not how long it takes; the goal is
under two minutes on a 2-core machine). Prints one JSON line.

    python benchmarks/demo_speed.py [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mmprof-demo-bench-") as d:
        out = args.out_dir or str(Path(d) / "demo")
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "mmprof", "demo", "--out-dir", out, "--json"], capture_output=True,
                           text=True, env=env)
        wall = time.perf_counter() - t
    print(json.dumps({"bench": "demo_speed", "wall_s": round(wall, 2), "exit_code": p.returncode,
                      "goal_s": 120, "within_goal": wall < 120, "cpus": os.cpu_count(),
                      "machine": platform.machine(), "python": platform.python_version()}))


if __name__ == "__main__":
    main()
