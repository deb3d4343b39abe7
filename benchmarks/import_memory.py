"""Peak memory per event of the Kineto importer on minimal events; prints one JSON line.

Generates gzip traces of minimal events (the second bad-input corpus of issue 25: "a 23 MB gzip of minimal events
took 3.7 GiB", "20,000 nested annotations 3.9 GiB"): each event holds only ph / cat / name / ts / dur (kernels and
launches a correlation id), so the JSON is as small per event as a real trace allows and the importer's per-event
cost dominates. Each case is imported by `mmprof import` in a fresh subprocess; its peak RSS (ru_maxrss) minus the
peak of the same import of a 3-event trace, divided by the number of events, is the per-event cost.

Cases: `flat` (kernel / launch / op triples, N events), `annotations` (N/3 sibling annotations around them) and
`nested` (20,000 annotations nested inside each other around 30 kernels).

Usage: python benchmarks/import_memory.py [--events 3000000] [--keep DIR]
Goal (issue 25): a bounded per-event cost, well under the ~530 B/event measured before the change (3M events in
a 20 MB gzip: 1.6 GB peak), and a nested case whose peak does not grow with the square of the depth.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _write(path: Path, chunks) -> int:
    n = 0
    with gzip.open(path, "wb", compresslevel=6) as g:
        g.write(b'{"traceEvents":[')
        first = True
        for ev in chunks:
            for e in ev:
                g.write((b"" if first else b",") + e)
                first = False
                n += 1
        g.write(b"]}")
    return n


def flat(n: int):
    """Kernel / launch / op triples with minimal fields."""
    for i in range(n // 3):
        t = i * 3
        yield [b'{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":%d,"dur":2,"args":{"External id":%d}}'
               % (t, i),
               b'{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":%d,"dur":1,'
               b'"args":{"correlation":%d,"External id":%d}}' % (t, i, i),
               b'{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":%d,"dur":1,"args":{"correlation":%d}}'
               % (t + 1, i)]


def annotations(n: int):
    """Annotations, each around one launch and its kernel."""
    for i in range(n // 3):
        t = i * 4
        yield [b'{"ph":"X","cat":"user_annotation","name":"layers.%d.mlp","pid":1,"tid":1,"ts":%d,"dur":3}'
               % (i % 60, t),
               b'{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":%d,"dur":1,'
               b'"args":{"correlation":%d}}' % (t + 1, i),
               b'{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":%d,"dur":1,"args":{"correlation":%d}}'
               % (t + 2, i)]


def nested(depth: int):
    """`depth` annotations nested inside each other, 30 launches + kernels in the innermost."""
    span = 2 * depth + 100
    yield [b'{"ph":"X","cat":"user_annotation","name":"a%d","pid":1,"tid":1,"ts":%d,"dur":%d}' % (d, d, span - 2 * d)
           for d in range(depth)]
    for i in range(30):
        t = depth + 1 + i
        yield [b'{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":%d,"dur":0.5,'
               b'"args":{"correlation":%d}}' % (t, i),
               b'{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":%d,"dur":1,"args":{"correlation":%d}}'
               % (t, i)]


_CHILD = """
import resource, sys, time
t0 = time.perf_counter()
from mmprof.cli import main
try:
    main(["import", sys.argv[1], "-o", sys.argv[2]])
except SystemExit as e:
    if e.code:
        raise
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, time.perf_counter() - t0)
"""


def peak(args: list[str]) -> tuple[int, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), MMPROF_MAX_EVENTS="0")
    out = subprocess.run([sys.executable, "-c", _CHILD, *args], capture_output=True, text=True, env=env, check=True)
    rss, secs = out.stdout.split()[-2:]
    return int(rss), float(secs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=3_000_000)
    ap.add_argument("--depth", type=int, default=20_000)
    ap.add_argument("--keep", type=Path)
    a = ap.parse_args()
    tmp = Path(a.keep or tempfile.mkdtemp(prefix="mmprof-mem-"))
    tmp.mkdir(parents=True, exist_ok=True)
    tiny = tmp / "tiny.json.gz"
    _write(tiny, flat(3))
    base, _ = peak([str(tiny), str(tmp / "tiny.profile.json.gz")])  # the interpreter, mmprof and one tiny import
    res: dict = {"benchmark": "import_memory", "python": platform.python_version(), "machine": platform.machine(),
                 "baseline_rss_mib": round(base / 2**20, 1)}
    for name, gen, n in (("flat", flat, a.events), ("annotations", annotations, a.events),
                         ("nested", nested, a.depth)):
        f = tmp / f"{name}.json.gz"
        count = _write(f, gen(n))
        rss, secs = peak([str(f), str(tmp / f"{name}.profile.json.gz")])
        res[name] = {"events": count, "gzip_mib": round(f.stat().st_size / 2**20, 1),
                     "peak_rss_mib": round(rss / 2**20, 1), "bytes_per_event": round((rss - base) / count),
                     "seconds": round(secs, 2)}
    res["when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(json.dumps(res))


if __name__ == "__main__":
    main()
