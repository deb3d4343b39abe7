"""H200 check of `mmprof run`: profiler dilation (full vs light capture) and the GPU side of the Profile.

One run, < 8 minutes. For preset `small` (bf16, batch 1, prompt 512, 16 decode steps) with the baseline
switches (expert loop, separate shared expert, K=1) and the fast ones (grouped experts, fused shared expert,
K=2), `mmprof run --device cuda --measure-dilation` times the workload without the profiler (CUDA events, median
of 5) and under full and light torch.profiler capture. The issue quotes about 2.1x (loop) and 1.44x (grouped)
decode dilation for plain torch.profiler on an H200; this measures ours.

Checks per run: kernels > 0, >= 90% of kernels carry a prefill/decode phase and a step, dispatch rows for every
switchable op, dilation > 0 for both modes. Writes to $OUT: baseline.json.gz, fast.json.gz (the Profiles, light
capture kept to stay small) and dilation.json; prints a table at the end.

    python benchmarks/h200/run_dilation.py
    python benchmarks/h200/run_dilation.py --cpu-smoke   # tiny preset on CPU, to check the script itself
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from mmprof.capture.workflows.run import RunOptions, run_workload  # noqa: E402
from mmprof.profiles import save_profile  # noqa: E402


def main() -> int:
    smoke = "--cpu-smoke" in sys.argv
    out = Path(os.environ.get("OUT", "/tmp/mmprof-run-dilation"))
    out.mkdir(parents=True, exist_ok=True)
    common = dict(preset="tiny", device="cpu", dtype="float32", prompt_len=64, decode_steps=4, repeats=2) if smoke else \
        dict(preset="small", device="cuda", dtype="bfloat16", prompt_len=512, decode_steps=16, repeats=5)
    rows, failures = [], []
    for label, base in (("baseline", "baseline"), ("fast", "fast")):
        t0 = time.perf_counter()
        p = run_workload(RunOptions(base=base, capture="light", measure_dilation=True, **common))
        wall = time.perf_counter() - t0
        save_profile(p, out / f"{label}.json.gz")
        r = p.meta["run"]
        table = "kernels" if p.n("kernels") else "ops"
        n = p.n(table)
        phased = float(np.mean(p.tables[table]["phase"] >= 0)) if n else 0.0
        stepped = float(np.mean(p.tables[table]["step"] >= 0)) if n else 0.0
        ops = set(p.df("dispatch").op.astype(object))
        checks = {
            f"{table} > 0": n > 0,
            f"{table} with phase >= 90%": phased >= 0.9,
            f"{table} with step >= 90%": stepped >= 0.9,
            "dispatch covers the switchable ops": ops >= {"moe.experts", "moe.shared", "attn.indexer", "attn.core"},
            "dilation > 0 (full and light)": all((r["dilation"][m] or 0) > 0 for m in ("full", "light")),
        }
        if not smoke:
            checks["kernels captured on cuda"] = p.n("kernels") > 0
        failures += [f"{label}: {k}" for k, ok in checks.items() if not ok]
        rows.append({"run": label, "switches": r["switches"], "wall_s": wall, "events": n, "table": table,
                     "phased": phased, "tokens_per_s": r["tokens_per_s"], "dilation": r["dilation_by_phase"],
                     "checks": checks, "warnings": p.meta.get("warnings", [])})
    (out / "dilation.json").write_text(json.dumps({"common": common, "runs": rows, "failures": failures}, indent=1))
    print(f"\n{'run':9} {'plain dec tok/s':>15} {'full dec tok/s':>15} {'light dec tok/s':>16} "
          f"{'dil full (pre/dec)':>20} {'dil light (pre/dec)':>20} {'events':>8}")
    for r in rows:
        t, d = r["tokens_per_s"], r["dilation"]
        print(f"{r['run']:9} {t['plain']['decode']:15.1f} {t['full']['decode']:15.1f} {t['light']['decode']:16.1f} "
              f"{d['full']['prefill']:9.2f}/{d['full']['decode']:<10.2f} {d['light']['prefill']:9.2f}/{d['light']['decode']:<10.2f} "
              f"{r['events']:8d}")
    print("FAILURES:\n  " + "\n  ".join(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
