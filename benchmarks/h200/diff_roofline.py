"""H200 check of the roofline and of `mmprof diff` on real GPU traces (one run, < 8 minutes).

1. Roofline sanity: a compute-bound GEMM (8192^3 bf16) and memory-bound GEMMs (batch 8 x 6144 -> 1536/6144) under
   torch.profiler; mmprof must label them compute- / memory-bound with efficiencies below 100% of the H200 peaks.
2. Diff on the reference runtime (preset `small`, bf16, batch 1, prompt 512, 8 decode steps): baseline switches
   (`Switches.baseline()`: expert loop, separate shared expert) vs the defaults (`Switches()`: grouped experts,
   fused shared expert); both traced with record_shapes; `diff_profiles` must name the moe.routed / moe.shared path
   changes and the step-time change.

Writes to $OUT: roofline.json, before.json.gz, after.json.gz (raw Kineto traces, usable as fixtures),
diff.json, diff.md, diff.html, report_after.json, summary.json. Prints a summary table at the end.

    python benchmarks/h200/diff_roofline.py
    python benchmarks/h200/diff_roofline.py --cpu-smoke   # tiny sizes on CPU, to check the script itself
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

OUT = Path(os.environ.get("OUT", "out"))
SMOKE = "--cpu-smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"


def trace(fn, path: Path, steps: int = 1) -> Path:
    acts = [torch.profiler.ProfilerActivity.CPU] + ([] if SMOKE else [torch.profiler.ProfilerActivity.CUDA])
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        fn()
        sync()
    with tempfile.TemporaryDirectory() as d:
        raw = Path(d) / "t.json"
        prof.export_chrome_trace(str(raw))
        path.write_bytes(gzip.compress(raw.read_bytes(), compresslevel=6, mtime=0))
    return path


def sync() -> None:
    if not SMOKE:
        torch.cuda.synchronize()


def roofline_check() -> dict:
    from mmprof.analysis.views.report import build_report
    from mmprof.importers import import_paths

    dev = DEV
    n = 512 if SMOKE else 8192
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    x = torch.randn(8, 6144, device=dev, dtype=torch.bfloat16)
    w1 = torch.randn(6144, 1536, device=dev, dtype=torch.bfloat16)
    w2 = torch.randn(6144, 6144, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        torch.mm(a, b), torch.mm(x, w1), torch.mm(x, w2)
    sync()

    def work():
        for _ in range(5):
            torch.mm(a, b)
        for _ in range(20):
            torch.mm(x, w1)
            torch.mm(x, w2)

    with tempfile.TemporaryDirectory() as d:
        p = trace(work, Path(d) / "gemm.json.gz")
        rep = build_report(import_paths([p]), top=10)
    rows = [{"name": k.name[:80], "calls": k.count, "bound": k.bound, "efficiency": k.efficiency,
             "tflops": k.tflops, "tbs": k.tbs} for ph in rep.phases for k in ph.top_kernels]
    return {"devices": rep.devices, "kernels": rows, "warnings": rep.warnings}


def runtime_pair() -> tuple[Path, Path, dict]:
    from mmprof.runtime import Switches, Workload, build_model, generate, get_preset

    args = get_preset("tiny" if SMOKE else "small")
    wl = Workload(batch=1, prompt_len=64 if SMOKE else 512, decode_steps=2 if SMOKE else 8)
    model = build_model(args, Switches.baseline(), device=DEV, dtype=torch.float32 if SMOKE else torch.bfloat16, seed=0)
    timings = {}
    paths = []
    for tag, sw in (("before", Switches.baseline()), ("after", Switches())):
        model.set_switches(sw)
        generate(model, wl)  # warm-up (allocations, autotuning)
        sync()
        t0 = time.perf_counter()
        res = generate(model, wl)
        timings[tag] = {"wall_s": time.perf_counter() - t0, "decode_ms": list(res.decode_ms)}
        paths.append(trace(lambda: generate(model, wl), OUT / f"{tag}.json.gz"))
    return paths[0], paths[1], timings


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    roof = roofline_check()
    (OUT / "roofline.json").write_text(json.dumps(roof, indent=1))
    before, after, timings = runtime_pair()
    from mmprof.analysis.compare.diff import diff_profiles
    from mmprof.analysis.views.report import build_report
    from mmprof.importers import import_paths
    from mmprof.render.html import diff_html
    from mmprof.render.markdown import diff_markdown

    t1 = time.perf_counter()
    pb, pa = import_paths([before]), import_paths([after])
    t2 = time.perf_counter()
    d = diff_profiles(pb, pa, labels=("baseline", "fast paths"))
    t3 = time.perf_counter()
    (OUT / "diff.json").write_text(json.dumps(d.to_dict(), indent=1, default=str))
    (OUT / "diff.md").write_text(diff_markdown(d))
    (OUT / "diff.html").write_text(diff_html(d))
    rep = build_report(pa)
    (OUT / "report_after.json").write_text(json.dumps(rep.to_dict(), indent=1, default=str))
    summary = {"roofline": roof["kernels"][:6], "verdict": d.verdict,
               "path_changes": [p.summary for p in d.path_changes], "timings": timings,
               "import_s": round(t2 - t1, 2), "diff_s": round(t3 - t2, 2),
               "after_bottleneck": [p.bottleneck for p in rep.phases], "warnings": d.warnings + roof["warnings"],
               "kernels": [pb.n("kernels"), pa.n("kernels")], "total_s": round(time.time() - t0, 1)}
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print("\n== roofline (H200) ==")
    print(f"{'kernel':60s} {'calls':>5s} {'bound':>8s} {'eff':>6s} {'TFLOP/s':>8s} {'TB/s':>6s}")
    for k in roof["kernels"][:6]:
        eff = "-" if k["efficiency"] is None else f"{k['efficiency']:.0%}"
        tf = "-" if k["tflops"] is None else f"{k['tflops']:.0f}"
        tb = "-" if k["tbs"] is None else f"{k['tbs']:.2f}"
        print(f"{k['name'][:60]:60s} {k['calls']:5d} {k['bound']:>8s} {eff:>6s} {tf:>8s} {tb:>6s}")
    print("\n== diff: baseline -> fast paths (runtime preset small) ==")
    print("verdict:", d.verdict)
    for p in d.path_changes[:6]:
        print("  path:", p.summary[:160])
    print("after:", *rep.phases and [p.bottleneck for p in rep.phases])
    print(f"kernels {pb.n('kernels')} / {pa.n('kernels')}; import {t2 - t1:.1f} s, diff {t3 - t2:.2f} s; total {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
