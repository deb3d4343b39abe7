"""Speed, size and loadability of `mmprof export` on a profile of 1M kernels.

Generates the synthetic M3-like decode profile of benchmarks/diff_speed.py (8 ranks, every kernel with its launch
call and its CPU op with shapes), with three kernels renamed to real long names from the H200 example (a 1,270-
character mangled CUTLASS kernel and two at::native names), saves it, then in fresh processes: `mmprof export
PROFILE -o trace.json.gz --json` (wall time and peak RSS) and Python's `json.load` of the trace (wall time, peak
RSS, event count), the check that the trace parses in reasonable time and memory. Prints one JSON line.

    python benchmarks/export_speed.py [--kernels 1000000] [--no-cpu] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.diff_speed import make_profile  # noqa: E402
from mmprof.profiles.io import load_profile, save_profile  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _long_names() -> list[str]:
    p = load_profile(ROOT / "examples" / "h200" / "m3-rank-slice" / "fused.json.gz")
    names = {p.string(int(i)) for i in set(p.tables["kernels"]["name"].tolist())}
    return sorted(names, key=len, reverse=True)[:3]


def child_load(trace: str) -> None:
    t = time.perf_counter()
    with gzip.open(trace, "rb") as f:
        doc = json.load(f)
    s = time.perf_counter() - t
    ph: dict[str, int] = {}
    for e in doc["traceEvents"]:
        ph[e["ph"]] = ph.get(e["ph"], 0) + 1
    print(json.dumps({"load_s": round(s, 2), "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                      "events": len(doc["traceEvents"]), "by_phase": ph}))


def _timed(cmd: list[str]) -> tuple[float, int, str]:
    """(wall s, peak RSS MB of the child, stdout) of a fresh process."""
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr[-2000:]}")
    return wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--keep", help="write the profile and the trace here and keep them")
    ap.add_argument("--no-cpu", action="store_true", help="export with --no-cpu (device tracks and counters only)")
    ap.add_argument("--child-load", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_load:
        return child_load(args.child_load)
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="mmprof-export-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    prof = make_profile(args.kernels, after=False)
    longs = _long_names()
    for sid, long in zip(sorted(set(prof.tables["kernels"]["name"].tolist()))[:3], longs):
        prof.strings[sid] = long
    path = save_profile(prof, tmp / "profile.json.gz")
    trace = tmp / "trace.json.gz"
    export_s, export_rss, out = _timed([sys.executable, "-m", "mmprof", "export", str(path), "-o", str(trace),
                                        "--json"] + (["--no-cpu"] if args.no_cpu else []))
    stats = json.loads(out)
    load_wall, _, out = _timed([sys.executable, str(Path(__file__).resolve()), "--child-load", str(trace)])
    loaded = json.loads(out)
    raw = 0
    with gzip.open(trace, "rb") as f:
        while chunk := f.read(1 << 24):
            raw += len(chunk)
    print(json.dumps({
        "benchmark": "export_speed", "kernels": int(prof.n("kernels")), "ops": int(prof.n("ops")),
        "launches": int(prof.n("launches")), "trace_events": stats["events"], "flows": stats["flows"],
        "counter_points": stats["counters"], "full_names": stats["full_names"], "no_cpu": args.no_cpu,
        "export_cli_s": round(export_s, 1), "export_in_cli_s": round(stats["seconds"], 1),
        "export_max_rss_mb": export_rss, "trace_gz_mb": round(stats["bytes"] / 2**20, 1),
        "trace_raw_mb": round(raw / 2**20, 1), "json_load_s": loaded["load_s"],
        "json_load_max_rss_mb": loaded["max_rss_mb"], "json_load_events": loaded["events"],
        "loaded_ok": loaded["events"] == stats["events"],
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
        "python": platform.python_version()}))


if __name__ == "__main__":
    main()
