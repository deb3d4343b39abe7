"""Derive a small excerpt of a real Kineto (torch.profiler) trace: its first N steps, every event of them, nothing
edited.

    python tests/data/samples/derive.py IN.json.gz OUT.json.gz N [--marker REGEX]

A step starts at a CPU `user_annotation` whose name matches REGEX (default `^execute_context_`: vLLM's engine step,
`Worker.annotate_profile` in vllm/v1/worker/gpu_worker.py; `^ProfilerStep#` for torch.profiler's own steps). The
cut is the start of the (N+1)-th step. Kept, each event copied as it is (same keys, same values):
- every metadata event (`ph` "M") and every event without a timestamp;
- every CPU-side event (any category but the GPU ones and the CPU->GPU flows) that starts before the cut, so the
  set-up before the first step and every event of the first N steps (also ones that end after the cut);
- every GPU event (kernel, copy, memset) and flow event (`ac2g`, `async_cpu_to_gpu`) whose correlation id (or flow
  id) is a kept CPU event's `args.correlation`: the GPU work the kept launches issued, wherever it ran;
- GPU user annotations that start before the cut.
The header (every top-level key but `traceEvents`) is copied as it is. Written with compact separators (as
torch.profiler writes) and gzip level 9 with no name or mtime in the gzip header, so a re-run is byte-identical."""
from __future__ import annotations

import argparse
import gzip
import io
import json
import re

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Kernel", "Memcpy", "Memset"}
FLOW_CATS = {"ac2g", "async_cpu_to_gpu"}


def excerpt(doc: dict, n: int, marker: str = r"^execute_context_") -> tuple[dict, int, int]:
    ev = doc["traceEvents"]
    rx = re.compile(marker)
    steps = sorted(e["ts"] for e in ev if e.get("cat") == "user_annotation" and e.get("ph") == "X"
                   and rx.search(str(e.get("name", ""))))
    cut = steps[n] if len(steps) > n else float("inf")
    keep, corr = [], set()
    for e in ev:
        if e.get("ph") == "M" or "ts" not in e:
            keep.append(e)
        elif e.get("cat") not in GPU_CATS and e.get("cat") not in FLOW_CATS and float(e["ts"]) < cut:
            keep.append(e)
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                corr.add(c)
    for e in ev:
        if "ts" in e and e.get("ph") != "M" and (e.get("cat") in GPU_CATS or e.get("cat") in FLOW_CATS):
            c = (e.get("args") or {}).get("correlation", e.get("id"))
            if c in corr or (e.get("cat") == "gpu_user_annotation" and float(e["ts"]) < cut):
                keep.append(e)
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    out["traceEvents"] = keep
    return out, min(n, len(steps)), len(steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("n", type=int)
    ap.add_argument("--marker", default=r"^execute_context_")
    a = ap.parse_args()
    with gzip.open(a.src, "rb") as f:
        doc = json.load(f)
    out, kept, total = excerpt(doc, a.n, a.marker)
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as g:
        g.write(json.dumps(out, separators=(",", ":")).encode())
    with open(a.dst, "wb") as f:
        f.write(buf.getvalue())
    print(f"{a.dst}: {len(out['traceEvents'])} of {len(doc['traceEvents'])} events, {kept} of {total} steps, "
          f"{len(buf.getvalue())} bytes")


if __name__ == "__main__":
    main()
