"""Engine-log speed and memory: reading a large log with --log, and `record` passing a command's output through.
Prints one JSON line per measurement (each in a fresh subprocess, so peak RSS is its own).

  read_floor : the file read in 1 MiB chunks and split into lines (bytes.split), nothing kept: the floor
  read_log   : mmprof.importers.logs.read_log_file (decode, split, escape removal, the size bound with the log
               rules' prefilter on every line)
  tee_direct : a child writing the output with inherited stdio (to /dev/null)
  tee_record : the same child through mmprof.capture.output.OutputCapture (forwarded to /dev/null, kept bounded):
               the command's run (all output forwarded) and the total with taking the log afterwards

Usage: python benchmarks/log_speed.py [--mb 200]
Goals: read_log <= 10x read_floor (a line-by-line Python pass against C's split), peak RSS of read_log independent
of the file size (under 150 MiB at any size); tee_record's command run <= 2x tee_direct.
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

ROOT = Path(__file__).resolve().parents[1]
LINES = [
    "(APIServer pid=7) INFO 12-01 10:30:00 [loggers.py:127] Engine 000: Avg prompt throughput: 812.4 tokens/s, "
    "Avg generation throughput: 1423.1 tokens/s, Running: 64 reqs, Waiting: 0 reqs, GPU KV cache usage: 41.2%",
    "(APIServer pid=7) INFO:     127.0.0.1:51234 - \"POST /v1/completions HTTP/1.1\" 200 OK",
    "(EngineCore pid=9) \x1b[32mINFO\x1b[0m 12-01 10:30:01 [core.py:300] step done",
]
FACT = ("(EngineCore pid=9) WARNING 12-01 10:21:40 [fused_moe.py:1108] Using default MoE config. Performance might "
        "be sub-optimal! Config file not found at /x/E=32,N=512,device_name=NVIDIA_H200.json")

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
what, path = sys.argv[1], sys.argv[2]
t = time.perf_counter()
if what == "read_floor":
    n = 0
    with open(path, "rb") as f:
        rest = b""
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            parts = (rest + b).split(b"\n")
            rest = parts.pop()
            n += len(parts)
elif what == "read_log":
    from mmprof.importers.logs import read_log_file
    lines, src = read_log_file(path)
    n = src["lines"]
    assert any("Using default MoE config" in ln.text for ln in lines)
elif what in ("tee_direct", "tee_record"):
    import subprocess
    code = "import sys\nline = (%r + '\\n').encode()\nw = sys.stdout.buffer\nfor _ in range(%d): w.write(line)" % (
        {line!r}, int(path))
    cmd = [sys.executable, "-c", code]
    if what == "tee_direct":
        subprocess.run(cmd, check=True)
    else:
        from mmprof.capture.command import run_command
        from mmprof.capture.output import OutputCapture
        from mmprof.log_rules import load_log_rules
        r = load_log_rules()
        out = OutputCapture(anchors=r.anchors, wanted=r.wanted, use_pty=False)
        assert run_command(cmd, None, output=out) == 0
        out.drain(30)
        workload_s = time.perf_counter() - t  # the command's run, all its output forwarded
        unsearched = sum(src["unsearched"] for src in out.snapshot()[1])
    n = int(path)
dt = time.perf_counter() - t
print(json.dumps({{"s": dt, "lines": n, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "unsearched": locals().get("unsearched"), "workload_s": locals().get("workload_s")}}), file=sys.stderr)
"""


def run(what: str, arg: str) -> dict:
    code = CHILD.format(root=str(ROOT), line=LINES[0])
    with open(os.devnull, "wb") as null:
        p = subprocess.run([sys.executable, "-c", code, what, arg], stdout=null, stderr=subprocess.PIPE, check=True)
    return json.loads(p.stderr.decode().strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3, help="tee runs (direct, record) in pairs; the median ratio")
    args = ap.parse_args()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    with tempfile.TemporaryDirectory(prefix="mmprof-logbench-") as d:
        path = Path(d) / "big.log"
        block = ("\n".join(LINES) + "\n").encode()
        n = args.mb * 2**20 // len(block)
        with open(path, "wb") as f:
            for i in range(n):
                f.write(block)
                if i == n // 2:
                    f.write(FACT.encode() + b"\n")
        size = path.stat().st_size
        floor, full = run("read_floor", str(path)), run("read_log", str(path))
        print(json.dumps({"bench": "log_read", "machine": machine, "bytes": size, "lines": full["lines"],
                          "floor_s": round(floor["s"], 3), "read_log_s": round(full["s"], 3),
                          "ratio": round(full["s"] / floor["s"], 2), "mib_per_s": round(size / 2**20 / full["s"], 1),
                          "read_log_rss_mib": round(full["rss_mib"], 1), "floor_rss_mib": round(floor["rss_mib"], 1)}))
    lines = args.mb * 2**20 // (len(LINES[0]) + 1)
    pairs = [(run("tee_direct", str(lines)), run("tee_record", str(lines))) for _ in range(args.repeats)]
    ratios = sorted(t["workload_s"] / d["s"] for d, t in pairs)
    direct, tee = pairs[len(pairs) // 2]
    print(json.dumps({"bench": "record_tee", "machine": machine, "lines": lines,
                      "bytes": lines * (len(LINES[0]) + 1), "direct_s": round(direct["s"], 3),
                      "record_workload_s": round(tee["workload_s"], 3),
                      "ratio_median": round(ratios[len(ratios) // 2], 2), "ratio_min": round(ratios[0], 2),
                      "repeats": args.repeats, "record_total_s": round(tee["s"], 3),
                      "record_rss_mib": round(tee["rss_mib"], 1), "unsearched_bytes": tee["unsearched"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
