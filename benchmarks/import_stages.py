"""Where the streaming Kineto import's memory peaks (issue 35): the peak RSS of each stage, one JSON line.

Runs `kineto.load_one` on one trace (e.g. import_scale.py's /tmp/mmprof-scale/trace_3000000.json.gz) in this
process with MMPROF_DECODE_JOBS=1, and around each stage (gather, the linking steps of ColumnRankImporter,
building the Profile, saving it) resets the kernel's high-water mark (/proc/self/clear_refs, Linux) and reads it
back (VmHWM) with the RSS left after the stage (VmRSS), plus the bytes the linked Profile's columns hold.

    nice python benchmarks/import_stages.py /tmp/mmprof-scale/trace_3000000.json.gz
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("MMPROF_DECODE_JOBS", "1")
os.environ.setdefault("MMPROF_MAX_EVENTS", "0")

from mmprof.importers import _kineto_columns as kc  # noqa: E402
from mmprof.importers import kineto  # noqa: E402
from mmprof.profiles import profile as pr, save_profile  # noqa: E402

STAGES: list[dict] = []


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS"):
                out[k] = int(v.split()[0]) // 1024
    return out


def _reset() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def stage(name: str, fn):
    def wrapped(*a, **k):
        _reset()
        t0 = time.process_time()
        r = fn(*a, **k)
        s = _status()
        STAGES.append({"stage": name, "peak_mib": s["VmHWM"], "after_mib": s["VmRSS"],
                       "cpu_s": round(time.process_time() - t0, 2)})
        return r
    return wrapped


def main() -> None:
    path = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else "/tmp/mmprof-stages.json.gz"
    kc.gather = stage("gather", kc.gather)
    R = kc.ColumnRankImporter
    for name in ("_ops_t", "_scopes_t", "_launches_t", "_kernels_t", "_copies_t", "_collectives"):
        setattr(R, name, stage(name, getattr(R, name)))
    kineto.km.build_meta = stage("build_meta", kineto.km.build_meta)
    pr.ProfileBuilder.build = stage("build", pr.ProfileBuilder.build)
    start = _status()
    p = kineto.load_one(path)
    stage("save", save_profile)(p, out)
    col_bytes = sum(a.nbytes for t in p.tables.values() for a in t.values())
    str_bytes = sum(sys.getsizeof(s) for s in p.strings) + sys.getsizeof(p.strings)
    events = sum(p.n(t) for t in p.tables)
    print(json.dumps({"benchmark": "import_stages", "file": os.path.basename(path), "start_mib": start["VmRSS"],
                      "stages": STAGES, "profile_rows": events, "column_mib": round(col_bytes / 2**20, 1),
                      "strings": len(p.strings), "string_mib": round(str_bytes / 2**20, 1),
                      "peak_mib": max(s["peak_mib"] for s in STAGES)}))


if __name__ == "__main__":
    main()
