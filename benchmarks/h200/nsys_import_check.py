"""H200 check of the Nsight Systems importer on a fresh nsys export (newer nsys than the test samples).

Runs a tiny two-process torch workload with NVTX ranges (mmprof.prefill / mmprof.decode / mmprof.step.N /
layers.0.*) under `nsys profile --trace-fork-before-exec=true --cuda-graph-trace=node`, exports SQLite,
imports it with mmprof and checks: both processes became ranks, kernels linked to cudaLaunchKernel, runtime
names without _v suffix, NVTX scopes, phase/step attribution, H200 device, memcpy rows.

Usage (repo root, on the GPU machine):  python benchmarks/h200/nsys_import_check.py
Writes under $OUT: trace.sqlite (if small enough), profile.json.gz, summary.json. Exits 0 with a note when
nsys is not installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

WORKLOAD = textwrap.dedent('''
    import os, torch, torch.multiprocessing as mp
    from torch.cuda import nvtx

    def run(rank):
        torch.cuda.set_device(0)
        nvtx.range_push(f"MPI Rank {rank}")  # becomes a scope; thread-name style rank hints are eventType 39 only
        nvtx.range_pop()
        x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        host = torch.randn(1 << 20).pin_memory()
        for step in range(4):
            phase = "mmprof.prefill" if step == 0 else "mmprof.decode"
            nvtx.range_push(phase); nvtx.range_push(f"mmprof.step.{step}")
            nvtx.range_push("layers.0.attn.core"); y = torch.softmax(x @ w, dim=-1); nvtx.range_pop()
            nvtx.range_push("layers.0.moe.routed"); z = torch.relu(y @ w.t()); nvtx.range_pop()
            nvtx.range_pop(); nvtx.range_pop()
        dev = host.to("cuda", non_blocking=True); back = dev.cpu()
        torch.cuda.synchronize()

    if __name__ == "__main__":
        mp.set_start_method("spawn")
        ps = [mp.Process(target=run, args=(r,)) for r in range(2)]
        [p.start() for p in ps]; [p.join() for p in ps]
''')


def main() -> int:
    out = Path(os.environ.get("OUT", "out_nsys_check"))
    out.mkdir(parents=True, exist_ok=True)
    nsys = shutil.which("nsys")
    if not nsys:
        print("nsys not installed on this machine: nothing to check (importer tests use the stored samples)")
        (out / "summary.json").write_text(json.dumps({"nsys": None}))
        return 0
    work = out / "work.py"
    work.write_text(WORKLOAD)
    rep = out / "trace"
    subprocess.run([nsys, "profile", "-o", str(rep), "-f", "true", "-t", "cuda,nvtx", "--trace-fork-before-exec=true",
                    "--cuda-graph-trace=node", sys.executable, str(work)], check=True, timeout=300)
    subprocess.run([nsys, "export", "--type", "sqlite", "-f", "true", "-o", str(out / "trace.sqlite"),
                    str(rep) + ".nsys-rep"], check=True, timeout=120)
    version = subprocess.run([nsys, "--version"], capture_output=True, text=True).stdout.strip()
    work.unlink()
    (Path(str(rep) + ".nsys-rep")).unlink(missing_ok=True)

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from mmprof.importers import import_paths
    from mmprof.profiles import save_profile

    p = import_paths([out / "trace.sqlite"])
    save_profile(p, out / "profile.json.gz")
    k = p.df("kernels")
    lnames = set(p.col("launches", "name", decode=True))
    summary = {
        "nsys": version,
        "ranks": p.ranks,
        "kernels": int(p.n("kernels")),
        "kernels_linked": float((k.launch >= 0).mean()) if len(k) else 0.0,
        "launch_names": sorted(n for n in lnames if n),
        "any_v_suffix": any(n and re.search(r"_v\d+$", n) for n in lnames),
        "scopes": int(p.n("scopes")),
        "kernels_with_phase": int(k.phase.notna().sum()),
        "phases": sorted(set(k.phase.dropna().astype(str))),
        "steps": sorted(set(int(s) for s in k.step if s >= 0)),
        "memcpy": int(p.n("memcpy")),
        "devices": p.meta["ranks"][0].get("devices"),
        "warnings": p.meta.get("warnings", []),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if (out / "trace.sqlite").stat().st_size > 16 * 1024 * 1024:
        (out / "trace.sqlite").unlink()
    print(f"{'check':<22} value")
    for key in ("nsys", "ranks", "kernels", "kernels_linked", "launch_names", "any_v_suffix", "scopes",
                "kernels_with_phase", "phases", "steps", "memcpy"):
        print(f"{key:<22} {summary[key]}")
    print(f"{'device':<22} {(summary['devices'] or [{}])[0]}")
    ok = (len(p.ranks) == 2 and summary["kernels_linked"] > 0.95 and not summary["any_v_suffix"]
          and summary["phases"] == ["decode", "prefill"] and summary["steps"] == [0, 1, 2, 3])
    print("RESULT", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
