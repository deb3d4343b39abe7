"""`mmprof run` as a library: run the reference MiniMax M3 runtime under capture and return a Profile.

Protocol, per rank (`run_rank`):

1. build the model (preset or config.json, switches, TP/EP slice, device, dtype);
2. warm up (one untimed `generate`);
3. **plain timing**: the same workload `repeats` times with no profiler and scopes switched off; the median
   prefill and decode times are what the run costs without instrumentation;
4. **captured run(s)**: the same workload under torch.profiler (`CaptureSession`), `full` (shapes for every
   op) and/or `light` (shapes for the prefill step only, then kernels, ops and scopes without shapes). The
   profiled times over the plain ones are the *dilation*: how much the profiler stretched what it measured.

Then (`assemble`) the kept capture's trace is imported with the Kineto importer, the dispatch log of the
same captured run becomes the `dispatch` table, and `meta.run` / `meta.capture` record the workload, the
switches and both timings. Multi-rank runs (`--tp N`) start their ranks through `mmprof.capture.rank_launcher`;
each rank captures its own trace and the ranks' results are merged into one Profile.

Nothing here prints; progress goes to an optional callback `progress(stage, done, total)`.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mmprof._version import __version__
from mmprof.capture.rank_launcher import RankContext, join_torchrun, spawn_ranks, torchrun_world
from mmprof.capture.workflows.run_options import Progress, RunOptions, validate
from mmprof.capture.session import CaptureSession
from mmprof.errors import BadInput, CaptureUnavailable
from mmprof.importers import kineto
from mmprof.importers.graph_replays import attribute_replays
from mmprof.profiles.io import save_profile
from mmprof.profiles.profile import Profile, ProfileBuilder, merge_profiles
from mmprof.runtime import Workload, build_model, generate, set_scopes_enabled


# -- one rank ---------------------------------------------------------------------------------------
@dataclass
class RankOutcome:
    """What one rank measured: timings per run kind, the kept trace, and the kept run's dispatch rows."""

    rank: int
    world_size: int
    timings: dict[str, dict[str, Any]] = field(default_factory=dict)  # plain | full | light -> timings
    trace: str | None = None
    dispatch: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tokens: list[list[int]] | None = None
    peaks: dict[str, Any] | None = None  # measured on CPU runs (a CPU has no datasheet peak in mmprof.hardware)
    graphs: dict[str, Any] | None = None  # with --graphs: the kept run's eager / captured / replayed decode steps

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RankOutcome":
        return cls(**d)


def _timing(prefill_ms: list[float], decode_ms: list[float], per_step: list[float], opts: RunOptions,
            **extra: Any) -> dict[str, Any]:
    """Median prefill/decode times over repeats and the tokens/s they give (whole batch)."""
    pre = statistics.median(prefill_ms)
    dec = statistics.median(decode_ms)
    return {
        "prefill_ms": pre, "decode_ms": dec, "decode_step_ms": per_step, "repeats": len(prefill_ms),
        "prefill_ms_all": prefill_ms, "decode_ms_all": decode_ms,
        "prefill_tok_s": opts.batch * opts.prompt_len / (pre / 1e3) if pre > 0 else 0.0,
        "decode_tok_s": opts.batch * opts.decode_steps / (dec / 1e3) if dec > 0 else 0.0,
        **extra,
    }


def _captured_run(model, workload, opts: RunOptions, mode: str, work_dir: Path, rank: int, world: int):
    """One generate() under a CaptureSession; returns (GenerateResult, trace path, switch ms, notes)."""

    session = CaptureSession(work_dir, quiet=True, mode=mode, rank=rank, world_size=world, name=f"rank{rank}.{mode}",
                             activities="gpu" if opts.device == "cuda" else "cpu", step_markers=())
    switch_ms = [0.0]
    switched = []

    def to_light(step: int) -> None:  # light mode: shapes for the prefill step only; drop them from here on
        if step != 0:
            return
        t = time.perf_counter()
        session.step("mmprof.prefill")
        switch_ms[0] = (time.perf_counter() - t) * 1e3
        switched.append(True)

    model.dispatch.clear()
    session.start()
    try:
        # generate() calls back after each step's ranges have closed: the safe point to restart the profiler
        res = generate(model, workload, on_step_end=to_light if mode == "light" else None)
    finally:
        trace = session.export()
    if trace is None:
        raise CaptureUnavailable(f"rank {rank}: the {mode} capture produced no trace ({'; '.join(session.notes)})")
    notes = list(session.notes)
    if mode == "light" and not switched:
        notes.append("the prefill step never ended, so shapes were recorded for the whole run")
    return res, trace, switch_ms[0], notes


def run_rank(opts: RunOptions, work_dir: str | os.PathLike, rank: int = 0, world: int = 1, group=None,
             device: str | None = None, progress: Progress | None = None) -> RankOutcome:
    """Build, warm up, time without the profiler, then capture: one rank's share of `mmprof run`."""
    import torch


    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    modes = opts.modes()
    total = 1 + opts.warmup + opts.repeats + len(modes)
    done = 0

    def tick(stage: str) -> None:
        nonlocal done
        if progress is not None:
            progress(stage, done, total)
        done += 1

    tick("building the model")
    args = opts.model_args()
    dev = device or opts.device
    model = build_model(args, opts.switches(), tp=opts.tp, ep=opts.ep, rank=rank, device=dev,
                        dtype=getattr(torch, opts.dtype), group=group, seed=opts.seed)
    model.dispatch.rank = rank
    if dev == "cpu":
        out_peaks = measure_cpu_peaks_alone(opts.dtype, rank, world, group)
    workload = Workload(batch=opts.batch, prompt_len=opts.prompt_len, decode_steps=opts.decode_steps, seed=opts.seed)
    out = RankOutcome(rank=rank, world_size=world)
    if dev == "cpu":
        out.peaks = out_peaks
    for i in range(opts.warmup):
        tick(f"warm-up {i + 1}/{opts.warmup}")
        generate(model, workload)
    pre, dec, steps, cap = [], [], [], []
    prev = set_scopes_enabled(False)
    try:
        for i in range(opts.repeats):
            tick(f"timing without the profiler {i + 1}/{opts.repeats}")
            r = generate(model, workload)
            pre.append(r.prefill_ms)
            dec.append(sum(r.decode_ms))
            steps.append(r.decode_ms)
            if r.graph_capture_ms is not None:
                cap.append(r.graph_capture_ms)
    finally:
        set_scopes_enabled(prev)
    extra = {"graph_capture_ms": statistics.median(cap)} if cap else {}
    out.timings["plain"] = _timing(pre, dec, [statistics.median(s) for s in zip(*steps)], opts, **extra)
    for k, mode in enumerate(modes):
        tick(f"{mode} capture")
        res, trace, switch_ms, notes = _captured_run(model, workload, opts, mode, work_dir, rank, world)
        pre_ms = res.prefill_ms - switch_ms
        extra = {"graph_capture_ms": res.graph_capture_ms} if res.graph_capture_ms is not None else {}
        out.timings[mode] = _timing([pre_ms], [sum(res.decode_ms)], list(res.decode_ms), opts,
                                    segment_switch_ms=switch_ms, **extra)
        out.notes.extend(f"{mode} capture: {n}" for n in notes)
        if k == 0:
            out.trace = str(trace)
            out.dispatch = model.dispatch.rows()
            out.tokens = res.tokens.tolist()
            out.graphs = res.graphs
        else:
            Path(trace).unlink(missing_ok=True)
    if not modes:  # --capture none: the dispatch log of one more (uninstrumented) run
        model.dispatch.clear()
        res = generate(model, workload)
        out.dispatch = model.dispatch.rows()
        out.tokens = res.tokens.tolist()
        out.graphs = res.graphs
    if progress is not None:
        progress("done", total, total)
    return out


def measure_cpu_peaks_alone(dtype: str, rank: int = 0, world: int = 1, group=None) -> dict[str, Any]:
    """`measure_cpu_peaks` on one rank at a time (the others wait in a barrier), so that no rank measures while
    another computes: the ranks of a CPU run share the machine, and a peak measured under contention is too low."""
    import torch.distributed as dist

    if world <= 1 or not dist.is_available() or not dist.is_initialized():
        return measure_cpu_peaks(dtype)
    peaks: dict[str, Any] = {}
    for r in range(world):
        if r == rank:
            peaks = measure_cpu_peaks(dtype)
        dist.barrier(group=group)
    return peaks


_LEVEL_BYTES = (32 * 2**10, 256 * 2**10, 2 * 2**20, 16 * 2**20, 64 * 2**20)  # per array: L1 .. DRAM


def _rates(dtypes: list, budget_s: float = 0.03) -> tuple[dict[str, float], list[float]]:
    """GEMM TFLOP/s per dtype name and bandwidth TB/s per working-set size, with the current torch threads."""
    import torch

    def best(fn, reps: int = 3) -> float:
        fn()
        times: list[float] = []
        t_end = time.perf_counter() + budget_s
        while len(times) < reps or (time.perf_counter() < t_end and len(times) < 200):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    gemm = {}
    for name, dt in dtypes:
        rate = 0.0
        for n in (256, 512, 1024):
            a = torch.randn(n, n).to(dt)
            b = torch.randn(n, n).to(dt)
            rate = max(rate, 2 * n**3 / best(lambda: a @ b) / 1e12)
        gemm[name] = rate
    bw = []
    for size in _LEVEL_BYTES:
        x = torch.ones(size // 4)
        y = torch.ones_like(x)
        z = torch.empty_like(x)
        copy = 2 * size / best(lambda: z.copy_(x))
        add = 3 * size / best(lambda: torch.add(x, y, out=z))
        bw.append(max(copy, add) / 1e12)
    return gemm, bw


def measure_cpu_peaks(dtype: str) -> dict[str, Any]:
    """This CPU's GEMM rate per dtype and its bandwidth per cache level for this process's torch thread count, so
    a CPU run gets a roofline its ops can be compared with.

    A CPU has no datasheet entry in mmprof.hardware: its peaks depend on cores, clocks, ISA and the thread count.
    Measured: the best n x n matmul rate (n = 256 .. 1024) for float32 and the run's dtype, and the best copy / add
    bandwidth (bytes read + written) at working sets from 32 KiB to 64 MiB per array, each with one thread and
    with the run's T threads. The peak for T threads is the larger of the T-thread figure and min(T, cores) times
    the one-thread figure: on a shared host the threads of a parallel region wait for each other whenever another
    process holds a core, so the T-thread measurement alone can land far below what an op of the run reaches in
    a quiet moment (a peak is a ceiling, not a typical rate). `mem_levels` keeps the bandwidth per working set (a
    small one streams at its cache's rate); the largest is DRAM (`hbm_tbs`).
    """
    import torch

    threads = torch.get_num_threads()
    scale = max(min(threads, os.cpu_count() or 1), 1)
    dts = [("fp32", torch.float32)] + ([("bf16", torch.bfloat16)] if dtype == "bfloat16" else [])
    gemm_t, bw_t = _rates(dts)
    torch.set_num_threads(1)
    try:
        gemm_1, bw_1 = _rates(dts)
    finally:
        torch.set_num_threads(threads)
    peaks: dict[str, Any] = {f"{k}_tflops": max(gemm_t[k], scale * gemm_1[k]) for k in gemm_t}
    levels = [[2 * size, max(t, scale * o)] for size, t, o in zip(_LEVEL_BYTES, bw_t, bw_1)]
    peaks.update(mem_levels=levels, hbm_tbs=levels[-1][1], threads=threads, alone=True,
                 measured={"threads": {f"{k}_tflops": v for k, v in gemm_t.items()} | {"mem_tbs": bw_t},
                           "one_thread": {f"{k}_tflops": v for k, v in gemm_1.items()} | {"mem_tbs": bw_1}})
    peaks["source"] = (f"measured by mmprof run on this CPU ({os.cpu_count()} cores, torch {torch.__version__}), one "
                       f"rank at a time, for {threads} torch threads: max(the {threads}-thread rate, {scale} x the "
                       "one-thread rate) of n x n matmuls (n <= 1024) per dtype and of copy/add at 32 KiB - 64 MiB "
                       "working sets")
    return peaks


# -- the whole run ----------------------------------------------------------------------------------
def run_workload(opts: RunOptions, progress: Progress | None = None, work_dir: str | os.PathLike | None = None):
    """Run `opts` (all ranks) and return the Profile. Under torchrun, non-zero ranks return None."""
    validate(opts)
    env_world = torchrun_world()
    own_tmp = work_dir is None
    if env_world > 1 and own_tmp:  # torchrun: the ranks need one directory they all see (one host)
        env = os.environ
        wd = Path(tempfile.gettempdir()) / (f"mmprof-run.{env.get('MASTER_ADDR', 'local')}.{env.get('MASTER_PORT', '0')}."
                                            f"{env.get('TORCHELASTIC_RUN_ID', '')}")
    else:
        wd = Path(tempfile.mkdtemp(prefix="mmprof-run.")) if own_tmp else Path(work_dir)
    try:
        if env_world > 1:
            if opts.tp not in (1, env_world):
                raise BadInput(f"--tp {opts.tp} but torchrun started {env_world} ranks; drop --tp or make them match")
            opts.tp = env_world
            docs = join_torchrun(RANK_MAIN, opts.to_dict(), wd, opts.device, progress)
            if docs is None:
                own_tmp = False  # rank 0 cleans up once it has read everything
                return None
            outcomes = [RankOutcome.from_dict(d) for d in docs]
        elif opts.tp > 1:
            outcomes = [RankOutcome.from_dict(d) for d in spawn_ranks(RANK_MAIN, opts.to_dict(), opts.tp, wd,
                                                                       opts.device, progress)]
        else:
            outcomes = [run_rank(opts, wd, progress=progress)]
        if progress is not None:
            progress("importing the trace", 0, 1)
        return assemble(opts, outcomes)
    finally:
        if own_tmp:
            shutil.rmtree(wd, ignore_errors=True)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def dilation(plain: dict[str, Any], profiled: dict[str, Any]) -> dict[str, float | None]:
    """Profiled time / plain time, per phase and for prefill + decode together (1.0 = no distortion)."""
    return {
        "prefill": _ratio(profiled["prefill_ms"], plain["prefill_ms"]),
        "decode": _ratio(profiled["decode_ms"], plain["decode_ms"]),
        "total": _ratio(profiled["prefill_ms"] + profiled["decode_ms"], plain["prefill_ms"] + plain["decode_ms"]),
    }


def run_meta(opts: RunOptions, outcomes: list[RankOutcome], args) -> dict[str, Any]:
    """`meta.run`: preset, switches, workload, device, dtype, timings, tokens/s and dilation (rank 0's clock)."""
    r0 = min(outcomes, key=lambda o: o.rank)
    t = r0.timings
    tok = {k: {"prefill": v["prefill_tok_s"], "decode": v["decode_tok_s"]} for k, v in t.items()}
    kept = opts.modes()[0] if opts.modes() else None
    if kept:
        tok["profiled"] = tok[kept]
    dil = {m: (dilation(t["plain"], t[m])["total"] if m in t else None) for m in ("full", "light", "kernels")}
    by_phase = {m: dilation(t["plain"], t[m]) for m in ("full", "light", "kernels") if m in t}
    import torch

    return {
        "preset": args.name if opts.config is None else None,
        "config": opts.config,
        "switches": dataclasses.asdict(opts.switches()),
        "switch_base": opts.base,
        "workload": {"batch": opts.batch, "prompt_len": opts.prompt_len, "decode_steps": opts.decode_steps,
                     "seed": opts.seed},
        "device": opts.device,
        "dtype": opts.dtype,
        "torch": torch.__version__,
        "repeats": opts.repeats,
        "warmup": opts.warmup,
        "timings": t,
        "timings_by_rank": {str(o.rank): o.timings for o in outcomes},
        "tokens_per_s": tok,
        "dilation": dil,
        "dilation_by_phase": by_phase,
        "generated_tokens": r0.tokens,
        # with --graphs: the capture before decode step 1 (one eager static step, then the capture) and the
        # replayed steps; the dispatch rows of a replayed step are copies of the captured ones
        "graphs": r0.graphs,
    }


def assemble(opts: RunOptions, outcomes: list[RankOutcome]):
    """Import the ranks' kept traces, attach their dispatch rows, and write mmprof-run metadata."""

    args = opts.model_args()
    outcomes = sorted(outcomes, key=lambda o: o.rank)
    traces = [Path(o.trace) for o in outcomes if o.trace]
    if traces:
        imported = kineto.load(traces)
        attribute_replays(imported)  # --graphs: the replayed decode steps get the ops captured at step 2
    else:
        imported = Profile.empty({"ranks": [{"rank": o.rank, "devices": []} for o in outcomes]})
    meta = dict(imported.meta)
    warnings = list(meta.get("warnings", []))
    for o in outcomes:
        warnings.extend(f"rank {o.rank}: {n}" for n in o.notes)
    meta.update(
        mmprof_version=__version__,
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        source={"format": "mmprof-run", "files": [], "tool": f"mmprof {__version__} reference runtime",
                "importer": "kineto" if traces else None, "traces": [t.name for t in traces]},
        command=opts.command if opts.command is not None else list(sys.argv),
        model=args.to_dict(),
        parallel={"tp": opts.tp, "ep": opts.ep, "world_size": len(outcomes)},
        run=run_meta(opts, outcomes, args),
        capture={"mode": opts.modes()[0] if opts.modes() else "none", "modes_run": opts.modes(),
                 "tool": "torch.profiler", "record_shapes": {"full": "every op", "light": "prefill step only",
                                                            "kernels": None, "none": None}[opts.modes()[0] if opts.modes() else "none"],
                 "dilation": None},
    )
    meta["capture"]["dilation"] = meta["run"]["dilation"]
    meta.setdefault("clock", {"unit": "ns", "note": "per-rank profiler clock"})
    if not meta.get("ranks"):
        meta["ranks"] = [{"rank": o.rank} for o in outcomes]
    for o in outcomes:
        if o.peaks:  # CPU run: the host is the device; its roofline comes from the measured peaks
            rm = next((r for r in meta["ranks"] if r.get("rank") == o.rank), None)
            if rm is not None and not rm.get("devices"):

                rm["devices"] = [{"index": -1, "name": platform.processor() or platform.machine() or "cpu",
                                  "vendor": "cpu", "arch": platform.machine(), "peak_key": None, "peaks": o.peaks}]
    b = ProfileBuilder({})
    for o in outcomes:
        for row in o.dispatch:
            b.row("dispatch", **row)
    profile = merge_profiles([imported, b.build()], meta=meta)
    if traces:
        warnings.extend(scope_warnings(profile, opts.device))
    if warnings:
        profile.meta["warnings"] = warnings
    return profile


def scope_warnings(profile, device: str) -> list[str]:
    """Say so when the imported events do not carry the runtime's phase/step scopes (they always should)."""

    out = []
    table = "kernels" if profile.n("kernels") else "ops"
    n = profile.n(table)
    if n == 0:
        out.append(f"the {device} capture holds no {table}: nothing ran under the profiler")
        return out
    phased = int(np.count_nonzero(profile.tables[table]["phase"] >= 0))
    if phased < n / 2:
        out.append(f"only {phased} of {n} {table} carry a prefill/decode phase: the runtime's scopes were not "
                   "seen by the importer")
    return out


def run_to_file(opts: RunOptions, output: str, progress: Progress | None = None):
    """`run_workload` and save the Profile to `output`; returns it (None on non-zero torchrun ranks)."""
    profile = run_workload(opts, progress=progress)
    if profile is not None:
        save_profile(profile, output)
    return profile


RANK_MAIN = "mmprof.capture.workflows.run:rank_main"


def rank_main(payload: dict[str, Any], ctx: RankContext) -> dict[str, Any]:
    """One rank of a multi-rank `mmprof run`, started by `mmprof.capture.rank_launcher`."""
    opts = RunOptions(**payload)
    return run_rank(opts, ctx.work_dir, rank=ctx.rank, world=ctx.world_size, group=ctx.group, device=ctx.device,
                    progress=ctx.progress).to_dict()
