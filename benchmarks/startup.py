"""Start-up of small commands: `mmprof --version`, `--help`, `rules`, `rules --markdown`, `rules --kernels`
against a bare interpreter, each in a fresh process, interleaved over --rounds rounds (medians; the ratio to the
bare interpreter is taken within each round, since this machine is shared). Also says which heavy modules each
command loaded (numpy / pandas must not load for these). Prints one JSON line.

    python benchmarks/startup.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# run outside the tree (python -c / -m put the working directory first on sys.path), with PYTHONPATH naming the
# mmprof to measure: this tree unless the caller set another (e.g. a copy of the code before a change)
ENV = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH") or str(ROOT))
CWD = tempfile.gettempdir()
COMMANDS = {"--version": ["--version"], "--help": ["--help"], "rules": ["rules"], "rules --markdown": ["rules", "--markdown"],
            "rules --kernels": ["rules", "--kernels"]}
PROBE = ("import sys\nfrom mmprof.cli import main\ntry:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
         "print('@@' + ','.join(m for m in ('numpy', 'pandas', 'rich', 'torch') if m in sys.modules), file=sys.stderr)")


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=CWD, env=ENV)
    return time.perf_counter() - t0


def loaded(args: list[str]) -> list[str]:
    err = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], capture_output=True, text=True,
                         cwd=CWD, env=ENV).stderr
    return [m for m in err.rsplit("@@", 1)[-1].strip().split(",") if m]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    runs: dict[str, list[float]] = {k: [] for k in ["bare", *COMMANDS]}
    ratios: dict[str, list[float]] = {k: [] for k in COMMANDS}
    for _ in range(a.rounds):
        bare = wall([sys.executable, "-c", "pass"])
        runs["bare"].append(bare)
        for k, args in COMMANDS.items():
            t = wall([sys.executable, "-m", "mmprof", *args])
            runs[k].append(t)
            ratios[k].append(t / bare)
    print(json.dumps({"benchmark": "startup", "rounds": a.rounds,
                      "median_s": {k: round(statistics.median(v), 3) for k, v in runs.items()},
                      "over_bare": {k: round(statistics.median(v), 1) for k, v in ratios.items()},
                      "heavy_modules_loaded": {k: loaded(args) for k, args in COMMANDS.items()},
                      "load_avg": round(os.getloadavg()[0], 1), "cpus": os.cpu_count(),
                      "python": platform.python_version(), "time": time.strftime("%Y-%m-%dT%H:%M:%S")}))


if __name__ == "__main__":
    main()
