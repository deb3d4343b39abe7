"""Record the reference runtime on the GPU with each fast-path switch flipped; classify and verify each trace.

Run on the H200 (device tool), from the repository root, with $OUT set:

    python3 benchmarks/h200/fastpath_runtime.py

For each configuration (fast: grouped experts + fused shared expert + block_reuse=2; then one switch flipped:
separate shared expert, loop experts, block_reuse=1) it runs the `tiny` preset in bf16 (prompt 256, 3 decode
steps) under torch.profiler (CPU + CUDA), writes the Kineto trace, imports it with mmprof, adds the runtime's
dispatch log, and runs the built-in fast-path spec. Writes (5 files, each well under 16 MiB):

    $OUT/runtime_<config>.json.gz   Kineto trace of each configuration (4 files)
    $OUT/fastpath_summary.json      per configuration: kernels, unclassified share of kernel time and the
                                    unclassified names, failing rule codes, exit code, every distinct kernel
                                    name with its class

and prints a summary table. Budget: well under 2 minutes on one H200.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from mmprof.analysis.checks.verify import verify  # noqa: E402
from mmprof.analysis.attribution.classify import load_rules  # noqa: E402
from mmprof.analysis.views.coverage import coverage  # noqa: E402
from mmprof.analysis.timeline.events import events_of  # noqa: E402
from mmprof.importers import import_paths  # noqa: E402
from mmprof.profiles.profile import ProfileBuilder, merge_profiles  # noqa: E402
from mmprof.runtime.config import get_preset  # noqa: E402
from mmprof.runtime.generate import Workload, generate  # noqa: E402
from mmprof.runtime.transformer import Switches, build_model  # noqa: E402

OUT = Path(os.environ.get("OUT", "out"))
OUT.mkdir(parents=True, exist_ok=True)
CONFIGS = {
    "fast": dict(moe_impl="grouped", shared_expert="fused", block_reuse=2),
    "separate_shared": dict(moe_impl="grouped", shared_expert="separate", block_reuse=2),
    "loop_experts": dict(moe_impl="loop", shared_expert="fused", block_reuse=2),
    "block_reuse_1": dict(moe_impl="grouped", shared_expert="fused", block_reuse=1),
}
# raw Kineto traces: no dispatch log, so FP008 (dispatch assertions) has no evidence; require FP007, forbid FP009
EXPECTED = {"fast": set(), "separate_shared": {"FP001"}, "loop_experts": {"FP007", "FP009"},
            "block_reuse_1": {"FP002"}}


def record(name: str, switches: dict) -> tuple[Path, list[dict], dict]:
    args = get_preset("tiny")
    gpu = torch.cuda.is_available()  # CPU only for a local smoke test of this script
    model = build_model(args, Switches(**switches), device="cuda" if gpu else "cpu",
                        dtype=torch.bfloat16 if gpu else torch.float32)
    wl = Workload(prompt_len=256 if gpu else 64, decode_steps=3)
    generate(model, wl)  # warm-up (cuBLAS / Triton autotune, lazy init)
    model.dispatch.clear()
    acts = [torch.profiler.ProfilerActivity.CPU]
    if gpu:
        torch.cuda.synchronize()
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        generate(model, wl)
        if gpu:
            torch.cuda.synchronize()
    path = OUT / f"runtime_{name}.json"
    prof.export_chrome_trace(str(path))
    gz = path.with_suffix(".json.gz")
    import gzip
    import shutil

    with open(path, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
    return gz, model.dispatch.rows(), args.to_dict()


def main() -> None:
    rules = load_rules()
    summary = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "torch": torch.__version__, "configs": {}}
    rows = []
    for name, sw in CONFIGS.items():
        t0 = time.time()
        trace, dispatch, model_cfg = record(name, sw)
        prof = import_paths([trace])
        b = ProfileBuilder({})
        for r in dispatch:
            b.row("dispatch", **r)
        prof = merge_profiles([prof, b.build()], meta=dict(prof.meta, model=model_cfg))
        frame = events_of(prof, rules)
        ev, source = frame.frame(), frame.source
        cov = coverage(frame)
        res = verify(prof)
        failing = sorted({r.code for r in res.results if r.status == "fail"})
        names = sorted(set(ev["name"]))
        summary["configs"][name] = {
            "switches": sw, "source": source, "kernels": int(len(ev)), "unclassified_share": cov.unclassified_share,
            "unclassified": cov.unclassified[:20], "by_family": cov.by_family, "exit_code": res.exit_code,
            "failing_codes": failing, "expected_codes": sorted(EXPECTED[name]),
            "results": [r.to_dict() for r in res.results],
            "names": [{"name": n, **rules.classify(n).to_dict()} for n in names],
        }
        rows.append((name, source, len(ev), len(names), cov.unclassified_share, res.exit_code, failing,
                     set(failing) == EXPECTED[name], time.time() - t0))
    (OUT / "fastpath_summary.json").write_text(json.dumps(summary, indent=1))
    print(f"\n{'config':16s} {'source':8s} {'kernels':>8s} {'names':>6s} {'unclass%':>9s} {'exit':>4s}  codes (as expected?)")
    for name, source, n, nn, share, rc, codes, ok, dt in rows:
        print(f"{name:16s} {source:8s} {n:8d} {nn:6d} {100 * share:8.2f}% {rc:4d}  {','.join(codes) or '-'} "
              f"({'yes' if ok else 'NO'}) [{dt:.1f}s]")


if __name__ == "__main__":
    main()
