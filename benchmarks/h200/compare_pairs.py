#!/usr/bin/env python3
"""The comparisons of issue 31 on recorded pairs: `mmprof diff` on each pair, its answer in one JSON file (issue 31).

Two parts, each one call:

    python3 benchmarks/h200/compare_pairs.py OUTDIR --runtime          # on the H200: the runtime's side of the pairs
    python3 benchmarks/h200/compare_pairs.py OUTDIR --families DIR     # anywhere (CPU is enough): the diffs

`--runtime` runs `mmprof run` on the `small` preset at the workload of vLLM's `small_graphs_b1` case
(benchmarks/h200/vllm_families.py: batch 1, 512-token prompt, 32 output tokens = 31 decode steps), as CUDA graphs
and as the compile rung, into OUTDIR/runtime_small_{graphs,compile}_b1.json.gz (about 2 minutes).

`--families DIR` takes vllm_families.py's unpacked output (`DIR/CASE/{trace.pt.trace.json.gz, summary.json}`) and
the runtime profiles in OUTDIR, and diffs each pair below whose two files are there (vLLM's own timing comes from
each case's summary.json, read by `mmprof diff` itself). Per pair: OUTDIR/diff_PAIR.json (`mmprof diff --json`),
OUTDIR/diff_PAIR.txt (the terminal output at 100 columns); and OUTDIR/pairs.json: per pair the exit code, the
faster side, the evidence, the reason, the flags, the profiler's cost per side and the noise band, so the answers
can be checked against the truth stated beside each pair.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# name: (before, after, the true answer as the engines' code and the run's set-up make it)
PAIRS = {
    "vllm_vs_runtime_small_b1": ("runtime:runtime_small_graphs_b1.json.gz", "small_graphs_b1",
                                 "one config (small, 12 layers), batch 1, 512-token prompt: comparable, engines flagged; "
                                 "the faster is the one with the lower plain ms/step (vLLM's prefill-subtracted timing "
                                 "vs mmprof run's)"),
    "runtime_compile_vs_vllm_small_b1": ("runtime:runtime_small_compile_b1.json.gz", "small_graphs_b1",
                                         "as above, the runtime's compile rung"),
    "vllm_eager_vs_graphs_small_b1": ("small_eager_b1", "small_graphs_b1",
                                      "graphs faster; the reason host time (the same kernels run)"),
    "m3_side_stream_on_vs_off_b8": ("m3_graphs_b8_stream", "m3_graphs_b8_nostream",
                                    "side stream off: GPU busy up, overlap across streams down (moe.shared)"),
    "qwen2moe_side_stream_on_vs_off_b8": ("qwen2moe_graphs_b8", "qwen2moe_graphs_b8_nostream",
                                          "as above on Qwen2-MoE"),
    "qwen3moe_prompt_64_vs_512_b8": ("qwen3moe_graphs_b8", "qwen3moe_graphs_b8_p512",
                                     "two prompt lengths: flagged (prompt length differs)"),
    "two_models_m3_vs_qwen2moe": ("m3_graphs_b8_stream", "qwen2moe_graphs_b8", "refused: different models (exit 2)"),
    "a_file_with_itself": ("m3_graphs_b8_stream", "m3_graphs_b8_stream", "refused: the same trace (exit 2)"),
}


def _path(spec: str, families: Path, out: Path) -> Path:
    if spec.startswith("runtime:"):
        return out / spec.split(":", 1)[1]
    found = sorted((families / spec).glob("trace.pt.trace.json*"))
    return found[0] if found else families / spec / "trace.pt.trace.json.gz"


def run_runtime(out: Path) -> int:
    rc = 0
    for rung, extra in (("graphs", ["--graphs"]), ("compile", ["--graphs", "--compile"])):
        cmd = [sys.executable, "-m", "mmprof", "run", "--preset", "small", "--device", "cuda", "--batch", "1",
               "--prompt-len", "512", "--decode-steps", "31", "--fast", "--block-reuse", "1", *extra,
               "-o", str(out / f"runtime_small_{rung}_b1.json.gz"), "--json"]
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        (out / f"runtime_small_{rung}_b1.log").write_text(p.stdout[-20000:] + p.stderr[-20000:])
        print(f"runtime {rung}: rc={p.returncode}", flush=True)
        rc = rc or p.returncode
    return rc


def answer_of(doc: dict) -> dict:
    """The part of a diff's JSON a reviewer checks: who is faster, on what, why, the flags, cost and noise."""
    ans = doc.get("answer") or {}
    lines = {x["key"]: x["text"] for x in ans.get("lines") or []}
    step = next((s for s in doc.get("steps") or [] if s.get("phase") == doc.get("phase")), {})
    plain = doc.get("plain") or {}
    return {"faster": ans.get("faster"), "basis": ans.get("basis"), "why": lines.get("why"),
            "verdict": doc.get("verdict"), "flags": doc.get("preface"),
            "caveats": (doc.get("compared") or {}).get("caveats"), "band": step.get("band"),
            "change": step.get("change"), "plain": plain.get("text"),
            "cost": {s: (plain.get(s) or {}).get("cost") for s in ("before", "after")},
            "missing": [t for k, t in lines.items() if k == "missing"]}


def run_diffs(out: Path, families: Path) -> int:
    env = dict(os.environ, COLUMNS="100")
    summary = {}
    for name, (b, a, truth) in PAIRS.items():
        pb, pa = _path(b, families, out), _path(a, families, out)
        if not (pb.exists() and pa.exists()):
            summary[name] = {"skipped": f"missing {pb if not pb.exists() else pa}", "truth": truth}
            continue
        base = [sys.executable, "-m", "mmprof", "diff", str(pb), str(pa)]
        js = subprocess.run(base + ["--json"], cwd=ROOT, capture_output=True, text=True, env=env)
        txt = subprocess.run(base, cwd=ROOT, capture_output=True, text=True, env=env)
        (out / f"diff_{name}.txt").write_text(txt.stdout + txt.stderr)
        entry = {"rc": js.returncode, "truth": truth}
        if js.returncode == 0:
            (out / f"diff_{name}.json").write_text(js.stdout)
            entry.update(answer_of(json.loads(js.stdout)))
        else:
            entry["error"] = js.stderr.strip()
        summary[name] = entry
        print(f"{name}: rc={js.returncode} faster={entry.get('faster')} {entry.get('error', '')[:120]}", flush=True)
    (out / "pairs.json").write_text(json.dumps(summary, indent=1))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--runtime", action="store_true", help="record the runtime's side (a GPU)")
    ap.add_argument("--families", help="vllm_families.py's unpacked output folder: run the diffs")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rc = run_runtime(out) if a.runtime else 0
    if a.families:
        rc = rc or run_diffs(out, Path(a.families))
    return rc


if __name__ == "__main__":
    sys.exit(main())
