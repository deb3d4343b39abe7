"""`mmprof diff` against HTA's TraceDiff on the same two real Kineto traces, side by side in one run (issue 24).

HTA (Holistic Trace Analysis, PyPI `traceinsight`) is installed in its own virtual environment (it pins its own
pandas): pass its interpreter with `--hta-python`. Each tool runs in a fresh process per round, on copies of the two
traces (HTA reads a folder per trace): mmprof `diff BEFORE AFTER --json`; HTA `TraceAnalysis(trace_dir=...)` for
each folder, then `TraceDiff.compare_traces` (its per-op count and duration deltas). Wall time (median of
`--rounds`). One JSON line.

    python -m venv /tmp/htavenv && /tmp/htavenv/bin/pip install traceinsight==0.6.1
    python benchmarks/peer_diff.py BEFORE.pt.trace.json.gz AFTER.pt.trace.json.gz --hta-python /tmp/htavenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HTA_CODE = """
import sys
from hta.trace_analysis import TraceAnalysis
from hta.trace_diff import TraceDiff
a = TraceAnalysis(trace_dir=sys.argv[1])
b = TraceAnalysis(trace_dir=sys.argv[2])
df = TraceDiff.compare_traces(a.t, b.t)
print(len(df))
"""


def _run(cmd: list[str]) -> tuple[float, str | None, str]:
    """(wall s, the error's last line when the command failed else None, stdout's last line)."""
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    err = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1] if out.returncode else None
    return wall, err, (out.stdout.strip().splitlines() or [""])[-1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--hta-python", required=True)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="peer_diff_"))
    try:
        dirs = []
        for name, src in (("before", a.before), ("after", a.after)):
            d = work / name
            d.mkdir()
            shutil.copy(src, d / Path(src).name)
            dirs.append(d)
        mm = [sys.executable, "-m", "mmprof", "diff", a.before, a.after, "--json"]
        hta = [a.hta_python, "-c", HTA_CODE, str(dirs[0]), str(dirs[1])]
        res: dict[str, list] = {"mmprof": [], "hta": []}
        for _ in range(a.rounds):  # interleaved rounds: both tools see the same machine load
            res["mmprof"].append(_run(mm))
            res["hta"].append(_run(hta))
        out = {"benchmark": "peer_diff", "before": Path(a.before).name, "after": Path(a.after).name,
               "before_mb": round(os.path.getsize(a.before) / 1e6, 1), "after_mb": round(os.path.getsize(a.after) / 1e6, 1),
               "rounds": a.rounds, "load_avg": round(os.getloadavg()[0], 1)}
        for tool, runs in res.items():
            out[f"{tool}_s"] = round(statistics.median(r[0] for r in runs), 2)
            if runs[0][1]:
                out[f"{tool}_error"] = runs[0][1][:200]  # a tool that refused the pair: its time is not a diff's
        if "hta_error" not in out and "mmprof_error" not in out:
            out["hta_over_mmprof"] = round(out["hta_s"] / out["mmprof_s"], 1)
            out["hta_rows"] = res["hta"][0][2]
        print(json.dumps(out))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
