"""The profile store at 1,000 runs x 8 ranks (issue 35): the cross-run questions answered by DuckDB (and Dask).

Writes a store of --runs synthetic runs in --dir (never committed) with the store's own writers
(`mmprof.store.catalog.frame_arrow`, the `runs` row): per run 8 ranks x (1 prefill + --steps decode) step windows,
the variants of 7 region patterns in 2 phases (the routed-experts variant switches from a loop of GEMMs to a grouped
GEMM at run 400 and back at run 700 in one series), and region times per rank. Then, each timed in a fresh
process: `mmprof query` of the per-run step time (`STEP_TIMES`) and of the variant changes (`VARIANT_CHANGES`),
`mmprof history --check`, and the same two aggregates on Dask (`--dask`, a LocalCluster of 2 worker processes).

    nice python benchmarks/store_scale.py --runs 1000 --dir /tmp/mmprof-store
Goal: each question < 10 s on 2 cores with DuckDB. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PATTERNS = ("layers.*.attn.qkv", "layers.*.attn.core", "layers.*.attn.o_proj", "layers.*.moe.router",
            "layers.*.moe.routed", "layers.*.moe.shared", "layers.*.norm")


def write_store(root: Path, runs: int, steps: int, ranks: int = 8) -> None:
    from mmprof.store import catalog
    from mmprof.store.derive import STEP_COLUMNS

    pa, pq = catalog._pa()
    rng = np.random.default_rng(0)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for i in range(runs):
        run = f"{(t0 + dt.timedelta(hours=8 * i)).strftime('%Y%m%dT%H%M%S')}-{i:010x}"
        grouped = 400 <= i < 700
        base = 9_000_000 if grouped else 11_000_000
        n = ranks * (steps + 1)
        w = {c: np.zeros(n, np.int64) for c in STEP_COLUMNS if c != "phase"}
        w["rank"] = np.repeat(np.arange(ranks), steps + 1)
        w["step"] = np.tile(np.arange(steps + 1), ranks)
        w["span_ns"] = (base * rng.normal(1, 0.02, n)).astype(np.int64)
        w["span_ns"][w["step"] == 0] *= 4
        df = pd.DataFrame({c: (np.where(w["step"] == 0, "prefill", "decode").astype(object) if c == "phase"
                               else w[c]) for c in STEP_COLUMNS})
        catalog._write(pq, catalog.frame_arrow(df, "steps"), root / "derived/steps" / f"run={run}" / "part-0.parquet")
        rows = []
        for ph in ("prefill", "decode"):
            for pat in PATTERNS:
                fam, var, lib = (("grouped_gemm", "grouped_mm", "CUTLASS") if grouped else ("gemm", "nvjet_tst_64x8",
                                                                                           "cuBLAS")) \
                    if pat.endswith("routed") else ("gemm", "nvjet_tst_128x64", "cuBLAS")
                rows.append(dict(phase=ph, pattern=pat, family=fam, variant=var, library=lib, path="fast", events=62,
                                 time_ns=1000, share=0.9, dominant=True))
                rows.append(dict(phase=ph, pattern=pat, family="elementwise", variant="elementwise", library="PyTorch",
                                 path="neutral", events=62, time_ns=100, share=0.1, dominant=False))
        catalog._write(pq, catalog.frame_arrow(pd.DataFrame(rows), "variants"),
                       root / "derived/variants" / f"run={run}" / "part-0.parquet")
        reg = pd.DataFrame([dict(rank=r, phase=ph, region=f"layers.{L}.{p.split('.', 2)[2]}", role=p.split(".", 2)[2],
                                 layer=L, events=4, time_ns=1000 + L) for r in range(ranks) for ph in ("decode",)
                            for L in range(0, 62, 8) for p in PATTERNS])
        catalog._write(pq, catalog.frame_arrow(reg, "regions"), root / "derived/regions" / f"run={run}" / "part-0.parquet")
        meta = {"run": run, "date": t0 + dt.timedelta(hours=8 * i), "added": t0, "model": "MiniMax-M3",
                "engine": "vllm", "tp": 8, "ep": 8, "world_size": 8, "ranks": ranks, "batch": 8,
                "git_rev": f"{i:012x}", "label": "nightly", "source_format": "kineto", "source_files": "[]",
                "mmprof_version": "0.1.0", "kernels": 0, "notes": None, "meta_json": "{}"}
        catalog._write(pq, catalog._runs_arrow(meta), root / "runs" / f"run={run}" / "part-0.parquet")


CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
what, store = sys.argv[1], sys.argv[2]
if what == "steps":
    from mmprof.store.query import STEP_TIMES, connect, run_sql
    n = len(run_sql(connect(store), STEP_TIMES, limit=10**9).rows)
elif what == "variants":
    from mmprof.store.history import variant_changes
    n = len(variant_changes(store))
elif what == "history":
    from mmprof.store.history import gate, load_history
    n = len(gate(load_history(store)).runs)
else:
    from distributed import Client, LocalCluster
    from mmprof.store import distributed as engine
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c, Client(c) as cl:
        t1 = time.perf_counter()
        n = (len(engine.step_times(store, client=cl)), len(engine.variant_changes(store, client=cl)))
        print(json.dumps({"n": n, "s": round(time.perf_counter() - t0, 2), "compute_s": round(time.perf_counter() - t1, 2)}))
        raise SystemExit
print(json.dumps({"n": n, "s": round(time.perf_counter() - t0, 2)}))
"""


def timed(what: str, store: Path) -> dict:
    r = subprocess.run(["nice", sys.executable, "-c", CHILD, what, str(store)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if r.returncode:
        return {"error": r.stderr.strip().splitlines()[-1:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/mmprof-store"))
    ap.add_argument("--dask", action="store_true")
    ap.add_argument("--reuse", action="store_true", help="query the store already in --dir (written by this script)")
    a = ap.parse_args()
    t0 = time.perf_counter()
    if not (a.reuse and a.dir.exists()):
        if a.dir.exists():
            shutil.rmtree(a.dir)
        a.dir.mkdir(parents=True)
        write_store(a.dir, a.runs, a.steps)
    res = {"benchmark": "store_scale", "runs": a.runs, "ranks": 8, "steps_per_rank": a.steps + 1,
           "write_s": round(time.perf_counter() - t0, 1),
           "files": sum(1 for _ in a.dir.rglob("*.parquet")),
           "mib": round(sum(p.stat().st_size for p in a.dir.rglob("*.parquet")) / 2**20, 1),
           "load_before": round(os.getloadavg()[0], 1), "cores": os.cpu_count(), "python": platform.python_version()}
    for what in ("steps", "variants", "history") + (("dask",) if a.dask else ()):
        res[what] = timed(what, a.dir)
    res["load_after"] = round(os.getloadavg()[0], 1)
    res["when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(json.dumps(res))


if __name__ == "__main__":
    main()
