"""Speed of analytic `mmprof shapes --tp 8` on the real M3 config (goal: under 2 s end to end).

Runs the command as a fresh subprocess (so Python start-up, the torch import and the meta-device builds all
count) `--repeat` times, for the table output and for `--json`, and times the analysis alone in-process
(torch already imported). The analysis builds one layer per layer kind (2 for M3: full/dense and sparse/moe),
not all 60 layers, on the meta device for each of the 8 ranks. Prints one JSON line.

    python benchmarks/shapes_speed.py [--repeat 5] [--tp 8]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "160"})
    dt = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tp", type=int, default=8)
    a = ap.parse_args()
    base = [sys.executable, "-m", "mmprof", "shapes", "--tp", str(a.tp)]
    import_torch = [timed([sys.executable, "-c", "import torch"]) for _ in range(a.repeat)]
    table = [timed(base) for _ in range(a.repeat)]
    as_json = [timed(base + ["--json"]) for _ in range(a.repeat)]

    from mmprof.capture.workflows.shapes import analytic_shapes

    analytic_shapes("m3", a.tp)  # warm
    inproc = []
    for _ in range(a.repeat):
        t = time.perf_counter()
        analytic_shapes("m3", a.tp)
        inproc.append(time.perf_counter() - t)
    print(json.dumps({
        "bench": "shapes_speed", "model": "m3", "tp": a.tp, "repeat": a.repeat, "goal_s": 2.0,
        "cli_table_s": {"min": round(min(table), 3), "median": round(statistics.median(table), 3)},
        "cli_json_s": {"min": round(min(as_json), 3), "median": round(statistics.median(as_json), 3)},
        "python_import_torch_s": {"min": round(min(import_torch), 3), "median": round(statistics.median(import_torch), 3)},
        "analysis_in_process_s": {"min": round(min(inproc), 4), "median": round(statistics.median(inproc), 4)},
        "meets_goal": min(table) < 2.0,
        "cpus": os.cpu_count(), "python": platform.python_version(),
    }))


if __name__ == "__main__":
    main()
