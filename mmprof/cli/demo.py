"""`mmprof demo`: the whole story on the embedded default (tiny M3, CPU) in about a minute.

Runs a "before" (loop experts, separate shared expert, block selection per layer) and an "after" (all fast
paths) with `mmprof run`'s library, saves both Profiles, and then shows what the other commands say about
them: tokens/s and speed-up, the top ops (`summary`), the fast-path verdicts (`verify-fastpath`), where the
bottleneck moved (`diff`), whether block-selection reuse is safe (the measured overlap of adjacent layers'
selections), and the per-rank shapes of the real M3 at TP=8 (`shapes --tp 8`).

Each of those steps calls the command in-process with `--json` and reads its result; a command that has not
landed (or fails) is reported as such and the demo goes on. Nothing here computes an analysis of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from mmprof.cli._common import console, echo_json, json_option

# label, base switches, what the switches mean
SIDES = (
    ("before", "baseline", "loop experts, separate shared expert, selection per layer (K=1)"),
    ("after", "fast", "grouped experts, fused shared expert, selection reused (K=4)"),
)


@dataclass
class Step:
    """One part of the demo: which command, whether it ran, and what it said."""

    name: str
    command: list[str]
    status: str  # ok | violations | unavailable | error
    exit_code: int | None = None
    data: Any = None
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class DemoResult:
    out_dir: str
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> profile path, switches, tok/s
    speedup: dict[str, float | None] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    overlap: dict[str, Any] | None = None
    seconds: float = 0.0

    def step(self, name: str) -> Step | None:
        return next((s for s in self.steps if s.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"out_dir": self.out_dir, "runs": self.runs, "speedup": self.speedup,
                "steps": [s.to_dict() for s in self.steps], "overlap": self.overlap, "seconds": self.seconds}


def invoke(name: str, args: list[str]) -> Step:
    """Run `mmprof ARGS --json` in-process; parse its JSON. Missing commands become status 'unavailable'."""
    import importlib.util

    from mmprof.cli import COMMANDS, cli
    from mmprof.errors import MmprofError

    cmd = args[0]
    if cmd not in COMMANDS or importlib.util.find_spec(COMMANDS[cmd][0]) is None:
        return Step(name, ["mmprof", *args], "unavailable", message=f"`mmprof {cmd}` is not available yet")
    buf, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
            rc = cli.main(args=[*args, "--json"], prog_name="mmprof", standalone_mode=False)
        rc = rc if isinstance(rc, int) else 0
    except MmprofError as e:
        return Step(name, ["mmprof", *args], "error", exit_code=e.exit_code, message=str(e))
    except click.exceptions.Exit as e:
        rc = e.exit_code
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except click.ClickException as e:
        return Step(name, ["mmprof", *args], "error", exit_code=2, message=e.format_message())
    except Exception as e:  # another command's bug must not stop the demo; say what happened
        return Step(name, ["mmprof", *args], "error", message=f"{type(e).__name__}: {e}")
    try:
        data = json.loads(buf.getvalue())
    except ValueError:
        tail = (err.getvalue().strip().splitlines() or buf.getvalue().strip().splitlines() or ["no output"])[-1]
        return Step(name, ["mmprof", *args], "error", exit_code=rc, message=f"no JSON output ({tail[:160]})")
    return Step(name, ["mmprof", *args], "ok" if rc == 0 else ("violations" if rc == 1 else "error"), rc, data)


def run_demo(out_dir: str | Path, batch: int = 1, prompt_len: int = 128, decode_steps: int = 8, repeats: int = 3,
             progress=None) -> DemoResult:
    """Run before and after, save both, and collect what the other commands say about them."""
    from mmprof.capture.runtime_run import RunOptions, run_workload
    from mmprof.profiles import save_profile

    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    res = DemoResult(str(out))
    opts = {}
    for label, base, what in SIDES:
        o = RunOptions(base=base, batch=batch, prompt_len=prompt_len, decode_steps=decode_steps, repeats=repeats,
                       command=["mmprof", "demo"])
        cb = (lambda stage, done, total, label=label: progress(f"{label}: {stage}", done, total)) if progress else None
        profile = run_workload(o, progress=cb)
        path = out / f"{label}.json.gz"
        save_profile(profile, path)
        r = profile.meta["run"]
        res.runs[label] = {"profile": str(path), "what": what, "switches": r["switches"],
                           "tokens_per_s": r["tokens_per_s"], "dilation": r["dilation"]}
        opts[label] = o
    b, a = (res.runs[k]["tokens_per_s"]["plain"] for k in ("before", "after"))
    res.speedup = {ph: (a[ph] / b[ph] if b[ph] else None) for ph in ("prefill", "decode")}
    paths = {k: res.runs[k]["profile"] for k in res.runs}
    for label in ("before", "after"):
        if progress:
            progress(f"summary, verify-fastpath: {label}", 0, 0)
        res.steps.append(invoke(f"summary:{label}", ["summary", paths[label], "--top", "5"]))
        res.steps.append(invoke(f"verify:{label}", ["verify-fastpath", paths[label]]))
    if progress:
        progress("diff before after", 0, 0)
    res.steps.append(invoke("diff", ["diff", paths["before"], paths["after"]]))
    if progress:
        progress("block-selection overlap", 0, 0)
    res.overlap = selection_overlap(opts["after"])
    if progress:
        progress("shapes --tp 8 (real M3)", 0, 0)
    res.steps.append(invoke("shapes", ["shapes", "--tp", "8"]))
    res.seconds = time.perf_counter() - t0
    return res


SAFE_SHARED = 0.75  # reuse keeps at least this share of a layer's blocks in the next layer: call it safe


def selection_overlap(opts) -> dict[str, Any]:
    """How much adjacent sparse layers' block selections overlap on the demo prompt (runtime measurement)."""
    import torch

    from mmprof.errors import MmprofError
    from mmprof.runtime import Workload, build_model, measure_selection_overlap

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


@click.command("demo")
@click.option("--out-dir", default="mmprof-demo", show_default=True, help="Where the before/after Profiles go.")
@click.option("--batch", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--prompt-len", type=click.IntRange(min=16), default=128, show_default=True)
@click.option("--decode-steps", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True, help="Plain timing runs per side.")
@json_option
def demo(out_dir: str, batch: int, prompt_len: int, decode_steps: int, repeats: int, as_json: bool) -> None:
    """The whole story on the embedded default (tiny M3, CPU): before vs after, and what each command says."""
    from mmprof.cli.run import progress_bar

    with progress_bar(not as_json) as cb:
        res = run_demo(out_dir, batch=batch, prompt_len=prompt_len, decode_steps=decode_steps, repeats=repeats,
                       progress=cb)
    if as_json:
        echo_json(res.to_dict())
    else:
        render(res)


# -- rendering --------------------------------------------------------------------------------------
def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _step_line(con, s: Step | None, what: str) -> bool:
    """Print why a step has nothing to show; True when it does have data."""
    if s is None:
        return False
    if s.status == "unavailable":
        con.print(f"  {what}: [dim]not available yet[/] ({s.message})")
        return False
    if s.data is None:
        con.print(f"  {what}: [red]could not run[/] (exit {s.exit_code}): {s.message}")
        return False
    return True


def render(res: DemoResult) -> None:
    from rich.table import Table

    con = console()
    con.rule("[bold]mmprof demo[/]: tiny MiniMax M3 on CPU, before vs after")
    t = Table(title_justify="left")
    for col, j in (("run", "left"), ("experts/shared/K", "left"), ("prefill tok/s", "right"),
                   ("decode tok/s", "right"), ("profiler dilation", "right")):
        t.add_column(col, justify=j)
    for label, run in res.runs.items():
        tok = run["tokens_per_s"]["plain"]
        sw = run["switches"]
        t.add_row(label, f"{sw['moe_impl']}/{sw['shared_expert']}/K={sw['block_reuse']}", f"{tok['prefill']:,.0f}",
                  f"{tok['decode']:,.1f}", _x(run["dilation"].get("full")))
    con.print(t)
    for label, run in res.runs.items():
        con.print(f"  {label}: {run['what']} -> {run['profile']}")
    con.print(f"speed-up after/before (no profiler): prefill {_x(res.speedup.get('prefill'))}, "
              f"decode {_x(res.speedup.get('decode'))}")
    _render_summary(con, res)
    _render_verify(con, res)
    _render_diff(con, res)
    _render_overlap(con, res)
    _render_shapes(con, res)
    con.print(f"\nProfiles in {res.out_dir}/ (try: mmprof report {res.out_dir}/before.json.gz). "
              f"Demo took {res.seconds:.0f} s.")


def _render_summary(con, res: DemoResult) -> None:
    con.rule("top ops (mmprof summary)")
    for label in ("before", "after"):
        s = res.step(f"summary:{label}")
        if not _step_line(con, s, f"summary {label}"):
            continue
        try:
            r0 = s.data["ranks"][0]
            tops = ", ".join(f"{o['name']} {o['self_ns'] / 1e6:,.0f} ms" for o in r0["top_ops"][:4])
            con.print(f"  {label}: {tops}")
        except (KeyError, IndexError, TypeError) as e:
            con.print(f"  {label}: [dim]summary output not understood ({e!r})[/]")


def _render_verify(con, res: DemoResult) -> None:
    con.rule("fast paths (mmprof verify-fastpath)")
    for label in ("before", "after"):
        s = res.step(f"verify:{label}")
        if not _step_line(con, s, f"verify-fastpath {label}"):
            continue
        d = s.data
        verdict = {"pass": "[green]PASS[/]", "fail": "[red]FAIL[/]"}.get(d.get("status"), str(d.get("status")).upper())
        c = d.get("counts", {})
        con.print(f"  {label}: {verdict} (exit {s.exit_code}): {c.get('pass', '?')} passed, {c.get('fail', '?')} failed, "
                  f"{c.get('no_evidence', '?')} without evidence")
        for r in d.get("results", []):
            if r.get("status") not in ("pass", None):
                con.print(f"    {r.get('code')} {r.get('id')}: {r.get('message')}")


def _render_diff(con, res: DemoResult) -> None:
    con.rule("before -> after (mmprof diff)")
    s = res.step("diff")
    if not _step_line(con, s, "diff"):
        return
    d = s.data
    con.print(f"  verdict (from the profiled runs): [bold]{d.get('verdict')}[/]")
    if d.get("plain"):  # the profiler stretches step times; the plain timing is the one to trust for speed
        con.print(f"  {d['plain']['text']}")
    con.print("  kernel paths that changed, per region:")
    for p in (d.get("path_changes") or [])[:6]:
        con.print(f"    {p.get('summary') or _path_change(p)}")


def _path_change(p: dict[str, Any]) -> str:
    keys = ("region", "change", "before", "after", "summary", "text")
    parts = [f"{k}={p[k]}" for k in keys if k in p and p[k] not in (None, "", [])]
    return "; ".join(parts) if parts else json.dumps(p)[:160]


def _render_overlap(con, res: DemoResult) -> None:
    con.rule("is block-selection reuse safe? (adjacent sparse layers' selections)")
    o = res.overlap or {}
    if "error" in o:
        con.print(f"  could not measure: {o['error']}")
        return
    pairs = ", ".join(f"{a}->{b} {f:.0%}" for (a, b), f in zip(o["pairs"], o["shared_fraction"]))
    con.print(f"  share of a layer's blocks the next sparse layer also picks: {pairs} "
              f"(mean {o['mean_shared_fraction']:.0%}, Jaccard {o['mean_jaccard']:.2f}; "
              f"{o['n_selected']} of {o['n_blocks_total']} blocks selected)")
    if o["safe"]:
        con.print(f"  [green]reuse looks safe[/]: adjacent layers keep >= {o['threshold']:.0%} of the blocks")
    else:
        con.print(f"  [yellow]reuse changes what attention sees[/]: adjacent layers share under {o['threshold']:.0%} of "
                  "their blocks here (random tiny weights); check accuracy on the real checkpoint before K > 1")


def _render_shapes(con, res: DemoResult) -> None:
    con.rule("real M3 per-rank shapes at TP=8 (mmprof shapes --tp 8)")
    s = res.step("shapes")
    if not _step_line(con, s, "shapes"):
        return
    for f in s.data.get("findings") or []:
        msg = str(f.get("message", ""))
        con.print(f"  {f.get('code')} {f.get('title')}: {msg[:150]}{'…' if len(msg) > 150 else ''}")
    if not s.data.get("findings"):
        con.print("  no findings")
