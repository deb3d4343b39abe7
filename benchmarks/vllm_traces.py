"""vLLM's own traces judged: attribution, seed checks and engine steps; one JSON line per trace.

For every vLLM torch-profiler trace in tests/data/samples/vllm (vLLM 0.26.0's own output, one H200; the shared
samples: the full files in ../shared/samples/vllm when present, else the committed excerpts) and tests/data/vllm_own (traces we recorded with the vLLM kit): the share of kernel time attributed to
a model region (and by which evidence), the share of kernel time whose kernel a rule classifies, the seed checks'
verdicts with the generic gate (exit code), and the engine steps by phase. The independent counts (kernel time
from the raw JSON) are in the tests; this prints the figures for docs/benchmarks.md.

Usage: python benchmarks/vllm_traces.py [TRACE ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from mmprof.analysis.checks.verify import verify  # noqa: E402
from mmprof.analysis.timeline.events import events_of  # noqa: E402
from mmprof.importers import import_paths  # noqa: E402

DIRS = [ROOT / "tests" / "data" / "samples" / "vllm", ROOT / "tests" / "data" / "vllm_own"]
# tests/data/samples/vllm holds excerpts (the first 3-4 engine steps, tests/data/samples/vllm/README.md); the full
# traces the figures in docs/benchmarks.md were measured on are in the shared samples beside the checkout (and in
# git history at 01f295c): read those when present. tests/data/vllm_own has no full copy outside git history.
SHARED = ROOT.parent / "shared" / "samples" / "vllm"


def _full(path: Path) -> Path:
    # the excerpts are committed as .json.xz; the full files beside the checkout are the .json.gz vLLM wrote
    rel = str(path.relative_to(DIRS[0])).removesuffix(".xz") + ".gz" if path.is_relative_to(DIRS[0]) else None
    alt = SHARED / rel if rel and path.name.endswith(".xz") else SHARED / path.relative_to(DIRS[0]) if rel else None
    return alt if alt is not None and alt.exists() else path


def traces() -> list[Path]:
    out = []
    for d in DIRS:
        out += sorted([*d.glob("*.pt.trace.json.gz"), *d.glob("*.pt.trace.json.xz")])
        out += sorted([*d.glob("rec_*.json.gz"), *d.glob("rec_*.json.xz")])
    return [_full(p) for p in out]


def measure(path: Path) -> dict:
    p = import_paths([path])
    ev = events_of(p)
    dur = ev.dur.astype(np.float64)
    total = float(dur.sum()) or 1.0
    reg = np.array([r is not None for r in ev.region])
    src = np.array([s if s is not None else "none" for s in ev.label_source], dtype=object)
    by = {s: round(float(dur[src == s].sum() / total), 4) for s in sorted(set(src.tolist()))}
    res = verify(p)
    checks = {}
    for r in res.results:
        checks.setdefault(r.code, []).append(r.status)
    f = ev.frame()
    steps = f[f.step >= 0].groupby("step").phase.first()
    ind = ev.inductor
    ind_d = None
    if ind is not None and ind.kernels:  # Inductor kernels (analysis/attribution/inductor.py): share of kernel time, placed
        placed = sum(ind.by_source.values())
        ind_d = {"kernels": ind.kernels, "share": round(ind.time_ns / total, 4),
                 "attributed": round(placed / ind.time_ns, 4),
                 "by_source": {k: round(v / ind.time_ns, 4) for k, v in sorted(ind.by_source.items())},
                 "unplaced": {k: v[0] for k, v in ind.unplaced.items()}}
    return {"trace": path.name, "kernels": int(len(ev)), "kernel_ms": round(total / 1e6, 3), "inductor": ind_d,
            "attributed": round(float(dur[reg].sum() / total), 4), "by_source": by,
            "classified": round(float(dur[ev.classified].sum() / total), 4),
            "checks": {k: "/".join(v) for k, v in sorted(checks.items())}, "exit_code": res.exit_code,
            "steps": int(len(steps)), "steps_by_phase": {str(k): int(v) for k, v in steps.value_counts().items()}}


def main(argv: list[str]) -> None:
    for t in ([Path(a) for a in argv] or traces()):
        print(json.dumps(measure(t)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
