"""Share of device time attributed to a model region on traces of runtimes mmprof did not write; one JSON line each.

For every trace: the events (kernels, or a CPU run's outermost compute ops) whose layer/region is known, by the
evidence that gave it (annotation, module, shape), as a share of the events' time. Traces with nn.Module events
(`with_stack`, or `mmprof record`'s module ranges) are labelled without help; traces with shapes only get
`--model CONFIG` shape matching (`mmprof.analysis.shapes.shape_match`).

Usage: python benchmarks/attributed_share.py   (reads tests/data/hf_moe and examples/h200/hf_m3)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from mmprof.analysis.timeline.events import events_of  # noqa: E402
from mmprof.analysis.shapes.shape_match import match_profile  # noqa: E402
from mmprof.importers import import_paths  # noqa: E402
from mmprof.modelspec import ModelSpec  # noqa: E402

HF = ROOT / "tests" / "data" / "hf_moe"
H200 = ROOT / "examples" / "h200" / "hf_m3"
CONFIG = {"m3": "m3", "qwen3moe": "qwen3moe", "dsv3": "dsv3", "dsv32": "dsv32", "mixtral": "mixtral", "gptoss": "gptoss"}


def measure(name: str, files: list[Path], config: Path | None) -> dict:
    p = import_paths(files)
    regions = None
    if config is not None:
        regions = match_profile(p, ModelSpec.load(config)).regions
    ev = events_of(p, shape_regions=regions)
    dur = ev.dur.astype(np.float64)
    total = dur.sum()
    src = np.array([s if s is not None else "none" for s in ev.label_source], dtype=object)
    by = {s: round(float(dur[src == s].sum() / total), 4) for s in sorted(set(src.tolist()))}
    return {"trace": name, "events": ev.source, "attributed": round(float(dur[src != "none"].sum() / total), 4),
            "by_source": by, "model": config.name if config else None}


def main() -> None:
    runs = []
    for f in sorted(HF.glob("*.json.gz")):
        fam = f.name.split("_")[0]
        if "tp2_rank1" in f.name:
            continue
        files = [HF / "m3_tp2_rank0.json.gz", HF / "m3_tp2_rank1.json.gz"] if "tp2" in f.name else [f]
        name = "m3_tp2 (2 ranks)" if "tp2" in f.name else f.name.replace(".json.gz", "")
        stack = "_stack" in f.name
        runs.append((name + " [CPU]", files, None if stack else HF / "configs" / f"{CONFIG[fam]}.json"))
    # the H200 traces are excerpts (examples/trim.py: the first profiler steps, as Profiles); the eager one and
    # the full traces measured in docs/benchmarks.md are in git history (commit 01f295c)
    runs.append(("hf_m3_grouped_nostack (2 steps) [H200]", [H200 / "hf_m3_grouped_nostack.json.gz"],
                 H200 / "config.json"))
    runs.append(("hf_m3_tp2 (2 ranks, 1 step) [2xH200]", [H200 / "hf_m3_tp2.json.gz"], H200 / "config.json"))
    for name, files, cfg in runs:
        print(json.dumps(measure(name, files, cfg)))


if __name__ == "__main__":
    main()
