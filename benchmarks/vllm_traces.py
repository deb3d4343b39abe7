"""vLLM's own traces judged: where the kernel time is placed, how, and against the truth; one JSON line per trace.

For every vLLM torch-profiler trace in tests/data/samples/vllm (vLLM 0.26.0's own output, one H200; the shared
samples: the full files in ../shared/samples/vllm when present, else the committed excerpts) and tests/data/vllm_own
(traces we recorded with the vLLM kit), or the traces given:

- `regions`: the share of device time (kernels and copies) in a region; `by_method`: that time by how it was placed
  (label source: module, op, annotation, inductor-*, order, replay-name / -family / -slot / -between / -stream,
  outside-model, family), `none` the unplaced rest, and `ambiguous`: the replayed kernels equal-score alignments
  placed differently (left out and counted);
- `truth` (with the model's config.json): tests/vllm_truth.py's layer and part of each kernel, read from the raw
  JSON with vLLM's model code: steps judged, the share of the truth-named kernel time placed, the kernels placed in
  another layer or part than the code says (`wrong`, count and share), and per region (role over all layers) the
  largest difference between mmprof's time and the truth's (`region_err_max`, over the truth-named kernels);
- the seed checks' verdicts with the generic gate (exit code) and the engine steps by phase; `window`: what of the
  window is not serving (start-up, graph capture), which the report and the checks leave out, and `serving`: the
  share of the time that is serving and of that the share in regions.

Usage: python benchmarks/vllm_traces.py [TRACE[=CONFIG.json] ...]
(the committed traces know their configs; a trace given without one is judged without a truth)
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from mmprof.analysis.checks.verify import verify  # noqa: E402
from mmprof.analysis.timeline.events import events_of  # noqa: E402
from mmprof.analysis.timeline.window import SERVING, window_parts  # noqa: E402
from mmprof.importers import import_paths  # noqa: E402
from mmprof.profiles.io import load_profile  # noqa: E402
from tests import vllm_truth as T  # noqa: E402
from tests.conftest import open_data  # noqa: E402

DIRS = [ROOT / "tests" / "data" / "samples" / "vllm", ROOT / "tests" / "data" / "vllm_own"]
# tests/data/samples/vllm holds excerpts (the first 3-4 engine steps, tests/data/samples/vllm/README.md); the full
# traces the figures in docs/benchmarks.md were measured on are in the shared samples beside the checkout (and in
# git history at 01f295c): read those when present. tests/data/vllm_own has no full copy outside git history.
SHARED = ROOT.parent / "shared" / "samples" / "vllm"
FAMILIES = ROOT / "benchmarks" / "h200" / "vllm_configs"
# a trace's config by its name or its folder's (benchmarks/h200/vllm_families.py writes <case>/trace.pt.trace.json.gz)
CONFIGS = {"m3_": DIRS[0] / "config" / "m3_tiny_config.json", "rec_graphs": DIRS[0] / "config" / "m3_tiny_config.json",
           "qwen2moe_": DIRS[1] / "qwen2moe_config.json", "rec_qwen2moe": DIRS[1] / "qwen2moe_config.json",
           "llama_": FAMILIES / "llama_dense" / "config.json", "qwen3moe_": FAMILIES / "qwen3_moe" / "config.json",
           "dsv2lite_": FAMILIES / "deepseek_v2_lite" / "config.json", "dsv3_": FAMILIES / "deepseek_v3" / "config.json",
           "mixtral_": FAMILIES / "mixtral" / "config.json", "glm45_": FAMILIES / "glm4_moe" / "config.json",
           # the kit's small M3 (benchmarks/h200/vllm_families.py small_*), beside the checkout
           "small_": ROOT.parent / "shared" / "tools" / "vllm-kit" / "run" / "small_config" / "config.json"}


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


def config_of(path: Path) -> Path | None:
    return next((c for k, c in CONFIGS.items() if path.name.startswith(k) or path.parent.name.startswith(k)), None)


def _load(path: Path):
    return import_paths([path]) if ".pt.trace." in path.name else load_profile(path)


def _truth(path: Path, cfg: Path, p, ev) -> dict | None:
    if ".pt.trace." not in path.name:
        return None  # a saved Profile: no raw JSON to read the truth from (and no engine steps)
    m = T.model_of(json.loads(cfg.read_text()))
    tr, judged, skipped = T.truth(json.load(open_data(path)), m)
    j = T.judge(p, ev, tr)
    # per role (all layers together): mmprof's time vs the truth's, over the kernels the truth names
    K = p.tables["kernels"]
    mine: dict[str, float] = defaultdict(float)
    want: dict[str, float] = defaultdict(float)
    for i in np.flatnonzero(ev.table == 0).tolist():
        r = ev.row[i]
        t = tr.get((int(K["stream"][r]), int(K["start_ns"][r]), p.string(int(K["name"][r]))))
        if t is None:
            continue
        d = float(ev.dur[i])
        want[t[1]] += d
        if ev.region[i] is not None and T.agrees(ev.region[i], *t):
            mine[t[1]] += d
        elif ev.role[i] is not None:
            mine[str(ev.role[i]).split("+")[-1]] += d
    err = {r: abs(mine.get(r, 0.0) - w) / w for r, w in want.items() if w}
    worst = max(err, key=err.get) if err else None
    return {"steps_judged": judged, "steps_not_judged": skipped, "kernels": j.kernels,
            "placed": round(j.share_placed, 4), "wrong": len(j.wrong), "wrong_share": round(j.wrong_ns / max(j.ns, 1), 5),
            "region_err_max": round(err[worst], 4) if worst else None, "worst_region": worst}


def measure(path: Path, cfg: Path | None = None) -> dict:
    p = _load(path)
    ev = events_of(p)
    dur = ev.dur.astype(np.float64)
    total = float(dur.sum()) or 1.0
    reg = np.array([r is not None for r in ev.region])
    src = np.array([s if s is not None else "none" for s in ev.label_source], dtype=object)
    src[~reg & (src != "ambiguous")] = "none"
    by = {s: round(float(dur[src == s].sum() / total), 4) for s in sorted(set(src.tolist()))}
    al = ev.graph_align
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
    cfg = cfg or config_of(path)
    if cfg is not None and not cfg.exists():
        cfg = None
    # graph replays and side streams: the share of their kernel time in a region (the kernels on a stream other
    # than the one with the most kernel time are the side streams': vLLM's shared-expert stream)
    K = p.tables["kernels"]
    is_k = ev.table == 0
    stream = np.full(len(ev), -1, dtype=np.int64)
    stream[is_k] = K["stream"][ev.row[is_k]]
    sk = stream[is_k]
    main_s = int(max(set(sk.tolist()), key=lambda x: dur[is_k][sk == x].sum())) if len(sk) else -1
    rep = ev.graph >= 0
    side = is_k & (stream != main_s)

    def _share(sel):
        t = float(dur[sel].sum())
        return {"kernels": int(sel.sum()), "ms": round(t / 1e6, 3),
                "regions": round(float(dur[sel & reg].sum()) / t, 4) if t else None,
                "regions_count": round(float((sel & reg).sum()) / int(sel.sum()), 4) if sel.any() else None}
    parts = window_parts(p)
    serving = None
    if parts:
        sv = parts.part(ev) == SERVING
        serving = {"share_of_time": round(float(dur[sv].sum() / total), 4),
                   "regions": round(float(dur[sv & reg].sum() / max(dur[sv].sum(), 1)), 4)}
    return {"trace": path.name, "kernels": int(len(ev)), "kernel_ms": round(total / 1e6, 3), "inductor": ind_d,
            "regions": round(float(dur[reg].sum() / total), 4),
            "regions_count": round(float(reg.sum()) / max(len(ev), 1), 4), "by_method": by,
            "replays": _share(rep), "side_stream": _share(side),
            "ambiguous": {"kernels": int(al.ambiguous), "share": round(al.ambiguous_ns / total, 4)} if al else None,
            "truth": _truth(path, cfg, p, ev) if cfg is not None else None,
            "classified": round(float(dur[ev.classified].sum() / total), 4),
            "checks": {k: "/".join(v) for k, v in sorted(checks.items())}, "exit_code": res.exit_code,
            "steps": int(len(steps)), "steps_by_phase": {str(k): int(v) for k, v in steps.value_counts().items()},
            "window": parts.note(ev, "report and checks look") if parts else None, "serving": serving}


def main(argv: list[str]) -> None:
    todo = []
    for a in argv:
        t, _, c = a.partition("=")
        todo.append((Path(t), Path(c) if c else None))
    for t, c in todo or [(t, None) for t in traces()]:
        print(json.dumps(measure(t, c)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
