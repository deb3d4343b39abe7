"""`mmprof run`: the reference MiniMax M3 runtime under capture -> a Profile, with the profiler's dilation."""

from __future__ import annotations

import os
import sys

import click

from mmprof.cli._common import console, echo_json, json_option


def switch_options(f):
    """The runtime switches as options (shared with `mmprof demo`'s documentation)."""
    opts = [
        click.option("--fast", "base", flag_value="fast", default=True,
                     help="Start from the fast paths: grouped experts, fused shared expert, block reuse K=4, sparse."),
        click.option("--baseline", "base", flag_value="baseline",
                     help="Start from the baseline: loop experts, separate shared expert, selection per layer."),
        click.option("--moe-impl", type=click.Choice(["loop", "grouped"]),
                     help="Routed experts: per-expert loop or one grouped GEMM."),
        click.option("--shared-expert", type=click.Choice(["separate", "fused"]),
                     help="Shared expert as its own MLP or fused into the routed GEMM."),
        click.option("--block-reuse", type=click.IntRange(min=1), metavar="K",
                     help="One sparse layer computes the block selection, the next K-1 reuse it "
                          "(1 = every layer computes)."),
        click.option("--attention", type=click.Choice(["sparse", "dense"]),
                     help="Sparse (MSA) or dense attention in the sparse layers."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def workload_options(f):
    """Model, device and workload options (shared with `mmprof verify-fastpath --run`)."""
    opts = [
        click.option("--preset", default="tiny", show_default=True,
                     type=click.Choice(["tiny", "small", "m3-rank-slice", "m3"]),
                     help="Model size: tiny (CPU, seconds), small (one GPU), m3-rank-slice (one TP=8 rank of M3), m3."),
        click.option("--config", "config", type=click.Path(), default=None,
                     help="A Hugging Face config.json (or checkpoint directory) instead of a preset."),
        click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True),
        click.option("--dtype", type=click.Choice(["float32", "bfloat16"]), default=None,
                     help="Weights and activations [default: float32 on cpu, bfloat16 on cuda]."),
        click.option("--batch", type=int, default=1, show_default=True, help="Sequences decoded together (concurrency)."),
        click.option("--prompt-len", type=int, default=128, show_default=True, help="Prompt tokens per sequence."),
        click.option("--decode-steps", type=int, default=8, show_default=True,
                     help="Greedy decode steps after the prefill."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed for the weights and the random prompt."),
    ]
    for o in reversed(opts):
        f = o(f)
    return switch_options(f)


def run_options(preset, config, device, dtype, batch, prompt_len, decode_steps, seed, base, moe_impl, shared_expert,
                block_reuse, attention, **rest):
    """RunOptions from the values of `workload_options` (+ capture/tp/... in `rest`)."""
    from mmprof.capture.runtime_run import RunOptions

    dtype = dtype or ("bfloat16" if device == "cuda" else "float32")
    return RunOptions(preset=preset, config=config, device=device, dtype=dtype, batch=batch, prompt_len=prompt_len,
                      decode_steps=decode_steps, seed=seed, base=base, moe_impl=moe_impl, shared_expert=shared_expert,
                      block_reuse=block_reuse, attention=attention,
                      command=["mmprof", *sys.argv[1:]] if sys.argv and sys.argv[0].endswith("mmprof") else None,
                      **rest)


@click.command("run")
@workload_options
@click.option("--capture", type=click.Choice(["full", "light", "none"]), default="full", show_default=True,
              help="full: shapes for every op; light: kernels and scopes, shapes for the prefill step only; none: "
                   "timings and dispatch log only.")
@click.option("--measure-dilation", is_flag=True,
              help="Capture both full and light and report how much each stretched the run (keeps --capture's trace).")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="Runs without the profiler; their median is the plain timing.")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Tensor-parallel ranks, started here (gloo on cpu, nccl on cuda); under torchrun, the job's ranks.")
@click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True, help="Expert parallel: 1 or equal to --tp.")
@click.option("-o", "--output", default="mmprof-run.json.gz", show_default=True, help="Where to write the Profile.")
@json_option
def run(preset, config, device, dtype, batch, prompt_len, decode_steps, seed, base, moe_impl, shared_expert, block_reuse,
        attention, capture, measure_dilation, repeats, tp, ep, output, as_json) -> None:
    """Run the reference MiniMax M3 runtime under capture and write a Profile.

    The same workload runs first without the profiler (the plain timing) and then under torch.profiler, so the
    Profile holds both and the dilation (profiled / plain time) says how much the capture distorted it.
    """
    opts = run_options(preset, config, device, dtype, batch, prompt_len, decode_steps, seed, base, moe_impl,
                       shared_expert, block_reuse, attention, capture=capture, measure_dilation=measure_dilation,
                       tp=tp, ep=ep, repeats=repeats)
    profile = execute(opts, output, show_progress=not as_json)
    if profile is None:  # a non-zero torchrun rank: rank 0 writes and reports
        return
    result = RunSummary.of(profile, output)
    if as_json:
        echo_json(result.to_dict())
    else:
        render(result)


def execute(opts, output: str, show_progress: bool = True):
    """Run with a progress bar on stderr and save the Profile to `output` (None on non-zero torchrun ranks)."""
    from mmprof.capture.runtime_run import run_workload, validate
    from mmprof.profiles import save_profile

    validate(opts)  # refuse bad combinations before the progress bar appears
    show_progress = show_progress and os.environ.get("RANK", "0") in ("", "0")  # under torchrun: rank 0 only
    with progress_bar(show_progress) as cb:
        profile = run_workload(opts, progress=cb)
    if profile is None:
        return None
    save_profile(profile, output)
    return profile


class progress_bar:
    """A rich progress bar on stderr driven by `progress(stage, done, total)` callbacks."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled and console(stderr=True).is_terminal
        self._p = None
        self._task = None

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._p = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                           console=console(stderr=True), transient=True)
        self._p.__enter__()
        self._task = self._p.add_task("starting", total=None)
        return self

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self._p is not None:
            self._p.update(self._task, description=stage, completed=done, total=total)

    def __exit__(self, *exc):
        if self._p is not None:
            self._p.__exit__(*exc)
        return False


class RunSummary:
    """What `mmprof run` reports: where the Profile went, the tokens/s plain and profiled, the dilation."""

    def __init__(self, output: str, run: dict, capture: dict, parallel: dict, counts: dict, warnings: list[str]):
        self.output, self.run, self.capture, self.parallel = output, run, capture, parallel
        self.counts, self.warnings = counts, warnings

    @classmethod
    def of(cls, profile, output: str) -> "RunSummary":
        m = profile.meta
        counts = {t: profile.n(t) for t in ("kernels", "ops", "collectives", "scopes", "dispatch")}
        return cls(output, m["run"], m["capture"], m["parallel"], counts, list(m.get("warnings", [])))

    def to_dict(self) -> dict:
        r = self.run
        return {"output": self.output, "preset": r["preset"], "config": r["config"], "switches": r["switches"],
                "workload": r["workload"], "device": r["device"], "dtype": r["dtype"], "parallel": self.parallel,
                "capture": self.capture["mode"], "tokens_per_s": r["tokens_per_s"], "dilation": r["dilation"],
                "dilation_by_phase": r["dilation_by_phase"], "rows": self.counts, "warnings": self.warnings}


def _f(v, fmt: str = "{:,.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def render(s: RunSummary) -> None:
    from rich.table import Table

    con = console()
    r = s.run
    sw = r["switches"]
    wl = r["workload"]
    con.print(f"[bold]{r['preset'] or r['config']}[/] on {r['device']} ({r['dtype']}), tp={s.parallel['tp']} "
              f"ep={s.parallel['ep']}: batch {wl['batch']}, prompt {wl['prompt_len']}, {wl['decode_steps']} decode steps")
    con.print(f"switches: experts={sw['moe_impl']}, shared expert={sw['shared_expert']}, "
              f"block reuse K={sw['block_reuse']}, attention={sw['attention']}")
    t = Table(title="tokens/s (whole batch; median of plain runs)", title_justify="left")
    t.add_column("run")
    t.add_column("prefill tok/s", justify="right")
    t.add_column("decode tok/s", justify="right")
    t.add_column("dilation (prefill / decode / total)", justify="right")
    tok = r["tokens_per_s"]
    t.add_row("plain (no profiler)", _f(tok["plain"]["prefill"]), _f(tok["plain"]["decode"]), "1.00x")
    for mode in ("full", "light"):
        if mode in tok:
            d = r["dilation_by_phase"][mode]
            kept = " (kept)" if s.capture["mode"] == mode else ""
            t.add_row(f"{mode} capture{kept}", _f(tok[mode]["prefill"]), _f(tok[mode]["decode"]),
                      " / ".join(_f(d[k], "{:.2f}x") for k in ("prefill", "decode", "total")))
    con.print(t)
    c = s.counts
    con.print(f"wrote {s.output}: {c['kernels']:,} kernels, {c['ops']:,} ops, {c['collectives']:,} collectives, "
              f"{c['dispatch']:,} dispatch rows ({s.capture['mode']} capture)")
    for w in s.warnings:
        con.print(f"[yellow]warning:[/] {w}")
