"""Streaming Kineto import at scale (issue 35): peak memory and time from 1M to 30M events, against the parse floor.

Writes decode-like traces to a gzip in --dir (never held in memory; never committed): per kernel its
`cudaLaunchKernel`, its CPU op (with Input Dims / Input type) and an ac2g flow pair, i.e. 5 events per kernel (the
issue's "3M kernels ~15M events"), in steps of 62 layers under `mmprof.step.N` / `layers.L.*` annotations. Then,
each in a fresh child process (`nice`d, one at a time), with its peak RSS (ru_maxrss):

  floor     the same bytes decompressed and parsed with orjson piece by piece (the streaming cutter's pieces): the
            bare parse of the file in bounded memory (a whole-file orjson parse of 15M events needs ~10 GB)
  stream    `kineto.load_one` (streaming, MMPROF_DECODE_JOBS=1 and =2) and saving the Profile
  reference the Struct path (MMPROF_KINETO_REFERENCE=1), only up to --reference-max events (it takes ~470 B/event)

Prints one JSON line per size: events, gzip MB, seconds, CPU seconds (the decode workers' own, reported by them:
they are the forkserver's children, not this process's), peak MiB, events/s per core of CPU, ratio to the floor.

    nice python benchmarks/import_scale.py --events 1000000 3000000 15000000 30000000 --dir /tmp/mmprof-scale
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCOPES = ("attn.qkv", "attn.core", "attn.o_proj", "moe.router", "moe.routed", "moe.shared", "norm")
KERNELS = ("nvjet_tst_128x64_64x4_1x1_v_bz_TNT", "flash_fwd_splitkv_kernel", "nvjet_tst_64x8_64x16_4x1_v_bz_TNN",
           "void at::native::(anonymous namespace)::topk_kernel<float>(float const*, int)",
           "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<grouped>>(Params)",
           "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>(int)")


def generate(path: Path, n_events: int) -> dict:
    kernels = n_events // 6  # a kernel, its launch, op, annotation and two flow events
    t = 1_000_000.0
    k = 0
    step = 0
    with gzip.open(path, "wb", compresslevel=1) as g:
        g.write(b'{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "computeMajor": 9, '
                b'"computeMinor": 0, "warpSize": 32, "numSms": 132, "totalGlobalMem": 150754820096}], '
                b'"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8}, "traceEvents": [\n')
        first = True
        buf = []
        while k < kernels:
            per_step = 62 * len(SCOPES)
            buf.append(b'{"ph": "X", "cat": "user_annotation", "name": "mmprof.step.%d", "pid": 7, "tid": 7, '
                       b'"ts": %.3f, "dur": %.3f}' % (step, t, per_step * 12.0 - 0.5))
            for layer in range(62):
                for s_i, scope in enumerate(SCOPES):
                    if k >= kernels:
                        break
                    buf.append(b'{"ph": "X", "cat": "user_annotation", "name": "layers.%d.%s", "pid": 7, "tid": 7, '
                               b'"ts": %.3f, "dur": 11.5}' % (layer, scope.encode(), t + 0.1))
                    k += 1
                    buf.append(b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": %.3f, '
                               b'"dur": 8.0, "args": {"External id": %d, "Record function id": 0, "Ev Idx": %d, '
                               b'"Input Dims": [[8, 6144], [6144, 1536]], "Input type": ["c10::BFloat16", '
                               b'"c10::BFloat16"]}}' % (t + 0.5, k, k))
                    buf.append(b'{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7, '
                               b'"ts": %.3f, "dur": 4.2, "args": {"External id": %d, "cbid": 211, '
                               b'"correlation": %d}}' % (t + 2, k, k))
                    buf.append(b'{"ph": "X", "cat": "kernel", "name": "%s", "pid": 0, "tid": 7, "ts": %.3f, '
                               b'"dur": 9.1, "args": {"External id": %d, "device": 0, "stream": 7, "correlation": %d, '
                               b'"registers per thread": 128, "grid": [96, 1, 1], "block": [128, 1, 1]}}'
                               % (KERNELS[(k + s_i) % len(KERNELS)].encode(), t + 20, k, k))
                    buf.append(b'{"ph": "s", "id": %d, "pid": 7, "tid": 7, "ts": %.3f, "cat": "ac2g", '
                               b'"name": "ac2g"}' % (k, t + 2))
                    buf.append(b'{"ph": "f", "id": %d, "pid": 0, "tid": 7, "ts": %.3f, "cat": "ac2g", '
                               b'"name": "ac2g", "bp": "e"}' % (k, t + 20))
                    t += 12.0
                if len(buf) > 50_000:
                    g.write((b"" if first else b",\n") + b",\n".join(buf))
                    first, buf = False, []
            step += 1
        if buf:
            g.write((b"" if first else b",\n") + b",\n".join(buf))
        g.write(b'\n], "traceName": "synthetic", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1700000000000000000}')
    return {"kernels": kernels, "gzip_mb": round(path.stat().st_size / 2**20, 1)}


CHILD = r"""
import json, os, resource, sys, time
mode, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
c0 = time.process_time()
res = {}
if mode == "floor":
    import orjson
    from mmprof.importers import _kineto_stream as ks
    from mmprof.fileio import iter_bytes
    n = 0
    for kind, data in ks.pieces(iter(iter_bytes(path))):
        if kind == "events":
            n += len(orjson.loads(b"[" + data[0] + b"]"))
    res["events"] = n
else:
    from mmprof.importers import kineto
    from mmprof.profiles import save_profile
    from mmprof.importers import _kineto_columns
    p = kineto.load_one(path)
    res["import_s"] = round(time.perf_counter() - t0, 2)
    res["worker_cpu_s"] = round(_kineto_columns.WORKER_CPU_S[0], 2)
    res["kernels"] = p.n("kernels")
    save_profile(p, out)
res["s"] = round(time.perf_counter() - t0, 2)
res["cpu_s"] = round(time.process_time() - c0, 2)
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
res["children_cpu_s"] = round(ch.ru_utime + ch.ru_stime, 2)
res["peak_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
res["children_peak_mib"] = round(ch.ru_maxrss / 1024)
print(json.dumps(res))
"""


def child(mode: str, path: Path, out: Path, env: dict) -> dict:
    e = dict(os.environ, PYTHONPATH=str(ROOT), MMPROF_MAX_EVENTS="0", **env)
    r = subprocess.run(["nice", sys.executable, "-c", CHILD, mode, str(path), str(out)], capture_output=True,
                       text=True, env=e)
    if r.returncode:
        return {"error": r.stderr.strip().splitlines()[-1:] or [str(r.returncode)]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, nargs="+", default=[1_000_000, 3_000_000])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/mmprof-scale"))
    ap.add_argument("--reference-max", type=int, default=3_000_000)
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--no-floor", action="store_true", help="skip the floor (its rate per core does not depend on "
                                                             "the size; measure it on a smaller trace)")
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    for n in a.events:
        f = a.dir / f"trace_{n}.json.gz"
        if not f.exists():
            t0 = time.perf_counter()
            info = generate(f, n)
            info["generate_s"] = round(time.perf_counter() - t0, 1)
        else:
            info = {"kernels": n // 6, "gzip_mb": round(f.stat().st_size / 2**20, 1)}
        res = {"benchmark": "import_scale", "events": n, **info, "machine": platform.machine(),
               "cores": os.cpu_count(), "load_before": round(os.getloadavg()[0], 1)}
        res["floor"] = {} if a.no_floor else child("floor", f, a.dir / "x", {})
        for j in a.jobs:
            res[f"stream_jobs{j}"] = child("stream", f, a.dir / f"p{n}.json.gz", {"MMPROF_DECODE_JOBS": str(j)})
        if n <= a.reference_max:
            res["reference"] = child("stream", f, a.dir / f"r{n}.json.gz", {"MMPROF_KINETO_REFERENCE": "1"})
        fl = res["floor"].get("s")
        for k, v in list(res.items()):
            if isinstance(v, dict) and "import_s" in v and fl:
                v["over_floor"] = round(v["import_s"] / fl, 2)
                v["events_per_s_per_core"] = round(n / max(v["cpu_s"] + v.get("worker_cpu_s", 0), 1e-9))
        if fl:
            res["floor"]["events_per_s_per_core"] = round(n / max(res["floor"]["cpu_s"], 1e-9))
        res["load_after"] = round(os.getloadavg()[0], 1)
        res["when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
