"""Parallel import of N rank files: wall time and peak memory; prints one JSON line.

Generates one realistic Kineto trace (benchmarks/import_speed.py's generator) of about --mb MB and copies it as
--ranks rank files (distributedInfo.rank 0..N-1), then measures, each in a fresh subprocess:
  one   : mmprof.importers.kineto.load of one rank file (its wall time and peak RSS)
  seq   : all rank files with jobs=1 (one after another in one process)
  par   : all rank files with jobs=--jobs (default: the machine's cores): the parent's peak RSS (it holds the
          per-rank Profiles and merges them) and the largest worker's peak RSS
  auto  : all rank files with the default jobs (kineto.default_jobs: by JSON size and cores); goal: never
          slower than seq (default_over_seq <= 1, up to noise)
Goals (issue 15): par wall <= 1.5x one rank's import on an 8-core machine; a worker's peak RSS <= 1.5x one
import's. On fewer cores than ranks the wall is bounded by ranks / cores x one rank's import.

Usage: python benchmarks/parallel_import.py [--ranks 8] [--mb 100] [--jobs N]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from import_speed import generate  # noqa: E402

CHILD = r"""
import json, os, resource, sys, threading, time
from pathlib import Path
from mmprof.importers import kineto
files = [Path(p) for p in sys.argv[2:]]
jobs = None if sys.argv[1] == "auto" else int(sys.argv[1])
chosen = kineto.default_jobs(files) if jobs is None else jobs
peak = [0]
done = threading.Event()

def ours(pid, me):  # a descendant of this process (other users' multiprocessing jobs share the machine)
    for _ in range(4):
        pid = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]
        if pid == me:
            return True
        if pid in ("0", "1"):
            return False
    return False

def sample():  # the workers are the forkserver's children, not ours: read their peak RSS (VmHWM) from /proc
    me = str(os.getpid())
    while not done.is_set():
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid == me:
                continue
            try:
                if b"multiprocessing" not in open(f"/proc/{pid}/cmdline", "rb").read() or not ours(pid, me):
                    continue
                for line in open(f"/proc/{pid}/status"):
                    if line.startswith("VmHWM:"):
                        peak[0] = max(peak[0], int(line.split()[1]))
            except OSError:
                pass
        time.sleep(0.05)

th = threading.Thread(target=sample, daemon=True)
th.start()
t0 = time.perf_counter()
p = kineto.load(files, jobs=jobs)
dt = time.perf_counter() - t0
done.set()
th.join()
print(json.dumps({"s": dt, "jobs": chosen, "kernels": p.n("kernels"), "ranks": p.ranks,
                  "rss_self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rss_child_mb": peak[0] / 1024}))
"""


def run(jobs, files: list[Path]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    out = subprocess.run([sys.executable, "-c", CHILD, str(jobs), *map(str, files)], capture_output=True, text=True,
                         env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        base = d / "base.json"
        probe = generate(base, 20000)
        n_events = int(20000 * a.mb * 1e6 / probe["bytes"])
        info = generate(base, n_events)
        data = base.read_bytes()
        head, tail = data[:4096], data[4096:]
        assert b'"rank": 0' in head or b'"rank":0' in head
        files = []
        for r in range(a.ranks):
            f = d / f"rank{r}.json"
            f.write_bytes(head.replace(b'"rank": 0', f'"rank": {r}'.encode(), 1).replace(b'"rank":0', f'"rank":{r}'.encode(), 1)
                          + tail)
            files.append(f)
        base.unlink()
        one = run(1, files[:1])
        seq = run(1, files)
        par = run(a.jobs, files)
        auto = run("auto", files)   # the default: jobs chosen by input size and cores (kineto.default_jobs)
        assert par["ranks"] == list(range(a.ranks)) and par["kernels"] == seq["kernels"] == a.ranks * one["kernels"]
        print(json.dumps({
            "bench": "parallel_import", "machine": platform.node(), "cores": os.cpu_count(), "python": sys.version.split()[0],
            "ranks": a.ranks, "file_mb": round(info["bytes"] / 1e6, 1), "events_per_rank": info["events"],
            "jobs": a.jobs, "one_s": round(one["s"], 2), "seq_s": round(seq["s"], 2), "par_s": round(par["s"], 2),
            "par_over_one": round(par["s"] / one["s"], 2), "default_jobs": auto["jobs"],
            "default_s": round(auto["s"], 2), "default_over_seq": round(auto["s"] / seq["s"], 2), "seq_over_par": round(seq["s"] / par["s"], 2),
            "one_rss_mb": round(one["rss_self_mb"]), "seq_rss_mb": round(seq["rss_self_mb"]),
            "par_parent_rss_mb": round(par["rss_self_mb"]), "par_worker_rss_mb": round(par["rss_child_mb"]),
            "worker_over_one": round(par["rss_child_mb"] / one["rss_self_mb"], 2),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S")}))


if __name__ == "__main__":
    main()
