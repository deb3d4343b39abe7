"""`mmprof demo` as a library: the whole story on the embedded default (tiny M3, CPU) in about a minute.

Runs a "before" (loop experts, separate shared expert, block selection per layer) and an "after" (all fast paths)
with `mmprof run`'s library, saves both Profiles, and then asks the library what each command would say about
them: the top ops (`summary`), the fast-path verdicts (`verify-fastpath`), where the bottleneck moved (`diff`),
whether block-selection reuse is safe (the measured overlap of adjacent layers' selections), and the per-rank
shapes of the real M3 at TP=8 (`shapes --tp 8`). A step that fails is recorded with its one-line error and the
demo goes on. Nothing here computes an analysis of its own.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from mmprof.analysis.checks.verify import verify
from mmprof.analysis.compare.diff import diff_profiles
from mmprof.analysis.compare.bands import runs_band
from mmprof.analysis.timeline.noise import measurement_warnings
from mmprof.analysis.views.summary import summarize
from mmprof.capture.workflows.run_options import Progress, RunOptions
from mmprof.capture.workflows.run import run_workload
from mmprof.capture.workflows.shapes import analytic_shapes
from mmprof.errors import MmprofError
from mmprof.profiles.io import save_profile
from mmprof.runtime import Workload, build_model, measure_selection_overlap

# label, base switches, what the switches mean
SIDES = (
    ("before", "baseline", "loop experts, separate shared expert, selection per layer (K=1)"),
    ("after", "fast", "grouped experts, fused shared expert, selection reused (K=4)"),
)
SAFE_SHARED = 0.75  # reuse keeps at least this share of a layer's blocks in the next layer: call it safe


@dataclass
class Step:
    """One part of the demo: the command a user would run for it, whether it ran, and what it said."""

    name: str
    command: list[str]
    status: str  # ok | violations | error
    exit_code: int | None = None
    data: Any = None  # the result's to_dict()
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class DemoResult:
    out_dir: str
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> profile path, switches, tok/s
    speedup: dict[str, float | None] = field(default_factory=dict)
    speedup_noise: dict[str, dict[str, Any]] = field(default_factory=dict)  # phase -> band, inside (compare/bands.py)
    steps: list[Step] = field(default_factory=list)
    overlap: dict[str, Any] | None = None
    seconds: float = 0.0

    def step(self, name: str) -> Step | None:
        return next((s for s in self.steps if s.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"out_dir": self.out_dir, "runs": self.runs, "speedup": self.speedup, "speedup_noise": self.speedup_noise,
                "steps": [s.to_dict() for s in self.steps], "overlap": self.overlap, "seconds": self.seconds}


def run_step(name: str, command: list[str], fn: Callable[[], Any], exit_code: Callable[[Any], int] | None = None) -> Step:
    """Call the library for one step; an MmprofError becomes a step with status `error` and its message."""
    try:
        res = fn()
    except MmprofError as e:
        return Step(name, command, "error", exit_code=e.exit_code, message=str(e))
    rc = exit_code(res) if exit_code else 0
    return Step(name, command, "ok" if rc == 0 else ("violations" if rc == 1 else "error"), rc, res.to_dict())


def run_demo(out_dir: str | Path, batch: int = 1, prompt_len: int = 128, decode_steps: int = 8, repeats: int = 3,
             progress: Progress | None = None) -> DemoResult:
    """Run before and after, save both, and collect what the other commands say about them."""
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    res = DemoResult(str(out))
    opts, profiles, runs_meta = {}, {}, {}
    for label, base, what in SIDES:
        o = RunOptions(base=base, batch=batch, prompt_len=prompt_len, decode_steps=decode_steps, repeats=repeats,
                       command=["mmprof", "demo"])
        cb = (lambda stage, done, total, label=label: progress(f"{label}: {stage}", done, total)) if progress else None
        profile = run_workload(o, progress=cb)
        path = out / f"{label}.json.gz"
        save_profile(profile, path)
        r = profile.meta["run"]
        # one dilation per run, the one diff quotes too: decode under full capture
        res.runs[label] = {"profile": str(path), "what": what, "switches": r["switches"],
                           "tokens_per_s": r["tokens_per_s"], "dilation": r["dilation"],
                           "decode_dilation": ((r.get("dilation_by_phase") or {}).get("full") or {}).get("decode"),
                           "warnings": measurement_warnings(r)}
        runs_meta[label] = r
        opts[label], profiles[label] = o, profile
    b, a = (res.runs[k]["tokens_per_s"]["plain"] for k in ("before", "after"))
    res.speedup = {ph: (a[ph] / b[ph] if b[ph] else None) for ph in ("prefill", "decode")}
    for ph in ("prefill", "decode"):   # the plain runs' own spread, as `mmprof diff` judges it (compare/bands.py)
        runs = [((runs_meta[k].get("timings") or {}).get("plain") or {}).get(f"{ph}_ms_all") or [] for k in
                ("before", "after")]
        band = runs_band(*runs)
        res.speedup_noise[ph] = {"band": band.to_dict() if band else None, "inside": band.within if band else None}
    paths = {k: res.runs[k]["profile"] for k in res.runs}
    for label in ("before", "after"):
        if progress:
            progress(f"summary, verify-fastpath: {label}", 0, 0)
        p = profiles[label]
        res.steps.append(run_step(f"summary:{label}", ["mmprof", "summary", paths[label], "--top", "5"],
                                  lambda p=p: summarize(p, top=5)))
        res.steps.append(run_step(f"verify:{label}", ["mmprof", "verify-fastpath", paths[label]],
                                  lambda p=p, label=label: verify(p, profile_name=paths[label]),
                                  lambda r: r.exit_code))
    if progress:
        progress("diff before after", 0, 0)
    res.steps.append(run_step("diff", ["mmprof", "diff", paths["before"], paths["after"]],
                              lambda: diff_profiles(profiles["before"], profiles["after"],
                                                    labels=("before.json.gz", "after.json.gz"))))
    if progress:
        progress("block-selection overlap", 0, 0)
    res.overlap = selection_overlap(opts["after"])
    if progress:
        progress("shapes --tp 8 (real M3)", 0, 0)
    res.steps.append(run_step("shapes", ["mmprof", "shapes", "--tp", "8"], lambda: analytic_shapes("m3", 8)))
    res.seconds = time.perf_counter() - t0
    return res


def selection_overlap(opts: RunOptions) -> dict[str, Any]:
    """How much adjacent sparse layers' block selections overlap on the demo prompt (runtime measurement)."""
    import torch  # the runtime already loaded it for the runs

    try:
        model = build_model(opts.model_args(), opts.switches(), dtype=getattr(torch, opts.dtype), seed=opts.seed)
        wl = Workload(batch=opts.batch, prompt_len=opts.prompt_len, decode_steps=opts.decode_steps, seed=opts.seed)
        r = measure_selection_overlap(model, wl)
    except MmprofError as e:
        return {"error": str(e)}
    d = r.to_dict()
    d["safe"] = r.mean_shared_fraction >= SAFE_SHARED
    d["threshold"] = SAFE_SHARED
    return d
