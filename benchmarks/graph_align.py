"""Graph replays with no capture in the window: share of kernel time in regions before / after aligning the replays
with the eager kernels (mmprof.analysis.attribution.graph_align), and what the alignment costs; one JSON line per trace.

"before" is the same analysis with the alignment switched off (the regions the capture / eager / reference rules
and the eager kernels' own labels give). Times are medians of 3 in one process: loading the trace (the import for
a raw trace, `load_profile` for a saved Profile), and building the event frame (classification, rooflines,
regions) without and with the alignment; the alignment runs there, at analysis time, not in the import. The
ratio is what matters (the machine is shared).

Usage: python benchmarks/graph_align.py [TRACE ...]   (default: the vLLM graph samples: the full trace in ../shared/samples/vllm when
present, else the excerpts in tests/data/samples/vllm; the same for the record Profile)
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import mmprof.analysis.timeline.events as events  # noqa: E402
from mmprof.analysis.attribution.graph_align import AlignStats  # noqa: E402
from mmprof.importers import import_paths  # noqa: E402
from mmprof.profiles.io import load_profile  # noqa: E402

VLLM = ROOT / "tests" / "data" / "samples" / "vllm"
# the full graph-mode trace (31 replays) and record Profile (30) are in the shared samples beside the checkout (and
# in git history at 01f295c); tests/data holds excerpts (2 and 14 replays): read the full ones when present
SHARED = ROOT.parent / "shared" / "samples" / "vllm"
DEFAULT = [p if p.exists() else VLLM / rel for rel in ("m3_graphs_b8.pt.trace.json.xz", "record/rec_graphs_b8.json.xz")
           for p in [SHARED / rel]]


def _load(path: Path):
    return load_profile(path) if path.name.endswith(".json.gz") and not path.name.endswith(".pt.trace.json.gz") \
        else import_paths([path])


def _shares(p) -> tuple[float, float]:
    ev = events.events_of(p)
    k = ev.table == 0
    d, g, has = ev.dur[k].astype(np.float64), ev.graph[k] >= 0, ev.region[k] != None  # noqa: E711
    return float(d[g & has].sum() / d[g].sum()) if g.any() else 0.0, float(d[has].sum() / d.sum())


def _timed_events(path: Path, n: int = 3) -> float:
    """Median time of building the event frame of a freshly loaded profile (the load is not timed)."""
    out = []
    for _ in range(n):
        p = _load(path)
        t = time.perf_counter()
        events.events_of(p)
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def measure(path: Path) -> dict:
    real = events.align_replays
    t_import = []
    for _ in range(3):
        t = time.perf_counter()
        _load(path)
        t_import.append(time.perf_counter() - t)
    t_load = statistics.median(t_import)
    try:
        events.align_replays = lambda *a, **k: AlignStats()
        before = _shares(_load(path))
        t_off = _timed_events(path)
    finally:
        events.align_replays = real
    after = _shares(_load(path))
    t_on = _timed_events(path)
    st = events.events_of(_load(path)).graph_align
    return {"trace": path.name, "replay_region_share": {"before": round(before[0], 4), "after": round(after[0], 4)},
            "kernel_region_share": {"before": round(before[1], 4), "after": round(after[1], 4)},
            "load_s": round(t_load, 3), "events_s_without": round(t_off, 3), "events_s_with": round(t_on, 3),
            "alignment_s": round(t_on - t_off, 3), "alignment_vs_load": round((t_on - t_off) / t_load, 2),
            "aligned": st.to_dict() if st is not None else None}


def main() -> None:
    for f in [Path(a) for a in sys.argv[1:]] or DEFAULT:
        print(json.dumps(measure(f)))


if __name__ == "__main__":
    main()
