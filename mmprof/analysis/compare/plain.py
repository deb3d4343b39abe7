"""Time measured without the profiler, beside the profiled time: where a profile's run was also timed plain.

Three sources, one type (`PlainTiming`):

- `mmprof run` stores its plain and profiled timings in the Profile (`meta.run.timings`): per decode step of the
  plain run, per repeat, and the same under the profiler (`from_run_meta`);
- `benchmarks/h200/vllm_families.py` writes `CASE/summary.json` beside `CASE/trace.pt.trace.json.gz`: repeated
  prefill-subtracted decode times per step (`from_vllm_families`);
- the vLLM kit (`../shared/tools/vllm-kit/run/record.py`) writes a summary beside each trace
  (`NAME.summary.json` / `summary_CASE.json`) with vLLM's own timing of an unprofiled warm-up, an unprofiled timed
  generate and the profiled generate, plus the engine arguments (`from_vllm_kit`); a generate's wall time includes
  its prefill, so the ms per decode step it gives is an upper bound;
- a number the user passes (`--plain-before 4.3ms`, `--plain-after 230tok/s`) or a JSON line of a benchmark with
  `decode_ms_per_step` (and `repeats_ms`) (`from_value`, `from_benchmark`).

`plain_change` compares the two sides only where the figures measure the same thing, with the run-to-run spread
when there are repeats; an upper bound decides only when it is below the other side's figure.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from mmprof.analysis.compare.bands import Band, runs_band
from mmprof.errors import BadInput

NO_PLAIN = ("no plain timing on either side (mmprof run stores one in the Profile; the vllm-kit's NAME.summary.json "
            "beside a trace; or --plain-before / --plain-after)")
WHOLE_GENERATE = "output tok/s of the whole generate (prefill included)"
DECODE_TOK_S = "decode tok/s"


@dataclass
class PlainTiming:
    """What one run measured without the profiler (ms per decode step and / or tokens/s) and, where known, the
    same run under the profiler: the profiler's cost."""

    source: str                         # where the figures come from, in words
    step_ms: float | None = None        # plain ms per decode step (mmprof run: the median repeat's mean step)
    bound: bool = False                 # step_ms is an upper bound (a whole generate's wall time per step)
    runs_ms: list[float] = field(default_factory=list)   # step_ms of each repeated plain run (the spread)
    tok_s: float | None = None          # plain tokens/s
    tok_s_what: str = DECODE_TOK_S
    tok_s_runs: list[float] = field(default_factory=list)
    profiled_step_ms: float | None = None   # the same figure under the profiler
    profiled_tok_s: float | None = None
    workload: dict[str, Any] = field(default_factory=dict)  # batch, prompt_len, steps, tp, model, env, profiler

    @property
    def cost(self) -> float | None:
        """The profiler's cost: profiled time / plain time of the same measure (> 1: the profiler slowed the run)."""
        if self.profiled_step_ms and self.step_ms and not self.bound:
            return self.profiled_step_ms / self.step_ms
        if self.profiled_tok_s and self.tok_s:
            return self.tok_s / self.profiled_tok_s
        return None

    @property
    def spread(self) -> float | None:
        """Run-to-run spread of the plain figure: (max - min) / median of the repeats; None with one run."""
        xs = [x for x in (self.runs_ms or self.tok_s_runs) if x and x > 0]
        if len(xs) < 2:
            return None
        med = statistics.median(xs)
        return (max(xs) - min(xs)) / med if med else None

    def text(self) -> str:
        """'<= 19.58 ms/step, 421.7 tok/s whole generate, 2 runs ±20% (SOURCE)'."""
        parts = []
        if self.step_ms is not None:
            parts.append(f"{'<= ' if self.bound else ''}{self.step_ms:,.2f} ms/step")
        if self.tok_s is not None:
            parts.append(f"{self.tok_s:,.1f} tok/s" + (" whole generate" if self.tok_s_what == WHOLE_GENERATE
                                                        else ""))
        sp = self.spread
        if sp is not None:
            parts.append(f"{len(self.runs_ms or self.tok_s_runs)} runs ±{sp / 2:.0%}")
        return ", ".join(parts) + f" ({self.source})"

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "cost": self.cost, "spread": self.spread, "text": self.text()}


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x and x > 0 else None


def from_run_meta(meta: dict | None) -> PlainTiming | None:
    """The plain timing `mmprof run` stored in a Profile's meta.run (None when the profile has none)."""
    run = (meta or {}).get("run") if isinstance(meta, dict) else None
    if not isinstance(run, dict):
        return None
    tim = run.get("timings") if isinstance(run.get("timings"), dict) else {}
    plain, full = tim.get("plain") or {}, tim.get("full") or {}
    wl = run.get("workload") if isinstance(run.get("workload"), dict) else {}
    steps = int(wl.get("decode_steps") or 0)

    def per_step(t: dict) -> float | None:
        total = _num(t.get("decode_ms"))     # the median repeat's decode time (what run's tokens/s come from)
        return total / steps if total and steps else None

    step = per_step(plain) if isinstance(plain, dict) else None
    tok = _num(((run.get("tokens_per_s") or {}).get("plain") or {}).get("decode"))
    if step is None and tok is None:
        return None
    runs = [x / steps for x in (plain.get("decode_ms_all") or []) if _num(x)] if steps else []
    return PlainTiming("mmprof run", step, False, runs, tok, DECODE_TOK_S, [],
                       per_step(full) if isinstance(full, dict) else None,
                       _num(((run.get("tokens_per_s") or {}).get("full") or {}).get("decode")),
                       {"batch": wl.get("batch"), "prompt_len": wl.get("prompt_len"), "steps": steps or None,
                        "preset": run.get("preset"), "switches": run.get("switches")})


def from_vllm_kit(doc: dict, name: str) -> PlainTiming | None:
    """vLLM's own timings from a vllm-kit summary (record.py: `{"meta": ..., "child": {...}}`), `name` the file."""
    child = doc.get("child") if isinstance(doc, dict) else None
    if not isinstance(child, dict):
        return None
    timed, warm, prof = (child.get(k) if isinstance(child.get(k), dict) else {}
                         for k in ("timed_unprofiled", "warmup", "profiled_generate"))
    tok = _num(timed.get("output_tok_per_s"))
    if tok is None:
        return None
    max_tokens = int(((child.get("sampling") or {}).get("max_tokens")) or 0)
    decode_steps = max(max_tokens - 1, 1) if max_tokens else 0

    def bound(t: dict) -> float | None:
        wall = _num(t.get("wall_s"))
        return wall * 1000.0 / decode_steps if wall and decode_steps else None

    eng = child.get("engine_args") if isinstance(child.get("engine_args"), dict) else {}
    res = child.get("resolved") if isinstance(child.get("resolved"), dict) else {}
    cfg = ((doc.get("meta") or {}).get("model_config") or {}) if isinstance(doc.get("meta"), dict) else {}
    text_cfg = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    archs = cfg.get("architectures") if isinstance(cfg.get("architectures"), list) else []
    runs = [x for x in (tok, _num(warm.get("output_tok_per_s"))) if x]
    wl = {"batch": child.get("batch"), "prompt_len": child.get("prompt_len"), "output_tokens": max_tokens or None,
          "tp": eng.get("tensor_parallel_size"),
          # vLLM shards experts over the TP ranks only with enable_expert_parallel (default off: EP 1)
          "ep": (eng.get("tensor_parallel_size") if eng.get("enable_expert_parallel") else 1)
          if isinstance(eng.get("tensor_parallel_size"), int) else None, "model": str(archs[0]) if archs else None,
          "layers": text_cfg.get("num_hidden_layers") if isinstance(text_cfg, dict) else None,
          "env": child.get("env") if isinstance(child.get("env"), dict) else {},
          "profiler": child.get("profiler_config") if isinstance(child.get("profiler_config"), dict) else {},
          "cudagraph_mode": res.get("cudagraph_mode"), "enforce_eager": res.get("enforce_eager")}
    src = f"vLLM's own timing, {name}: timed generate" + (" and warm-up" if len(runs) > 1 else "")
    return PlainTiming(src, bound(timed), True, [b for b in (bound(timed), bound(warm)) if b] if len(runs) > 1 else [],
                       tok, WHOLE_GENERATE, runs, bound(prof), _num(prof.get("output_tok_per_s")), wl)


def from_vllm_families(doc: dict, name: str) -> PlainTiming | None:
    """A `benchmarks/h200/vllm_families.py` case summary: repeated unprofiled pairs of a prefill-only and a full
    generate, the decode time per step = (full - prefill) / (out - 1) (exact, prefill subtracted); the profiled
    generate's wall time against the full one's gives the profiler's cost when both generated as many tokens."""
    timed = doc.get("timed_unprofiled") if isinstance(doc, dict) else None
    if not isinstance(timed, list):
        return None
    runs = [float(t["decode_ms_per_step"]) for t in timed if isinstance(t, dict) and _num(t.get("decode_ms_per_step"))]
    if not runs:
        return None
    step = float(statistics.median(runs))
    fulls = [float(t["full_s"]) for t in timed if isinstance(t, dict) and _num(t.get("full_s"))]
    prof = doc.get("profiled_generate") if isinstance(doc.get("profiled_generate"), dict) else {}
    same = doc.get("prof_out") == doc.get("out_len") and fulls and _num(prof.get("wall_s"))
    profiled = step * float(prof["wall_s"]) / float(statistics.median(fulls)) if same else None
    eng = doc.get("engine_args") if isinstance(doc.get("engine_args"), dict) else {}
    tp = eng.get("tensor_parallel_size")
    wl = {"batch": doc.get("batch"), "prompt_len": doc.get("prompt_len"), "output_tokens": doc.get("out_len"),
          "tp": tp, "ep": (tp if eng.get("enable_expert_parallel") else 1) if isinstance(tp, int) else None,
          "env": doc.get("env") if isinstance(doc.get("env"), dict) else {}}
    return PlainTiming(f"vLLM's own timing, {name}: prefill-subtracted generates", step, False, runs, None,
                       DECODE_TOK_S, [], profiled, None, wl)


def from_benchmark(doc: dict, name: str) -> PlainTiming | None:
    """A benchmark's JSON line with `decode_ms_per_step` (and optionally `repeats_ms`, `decode_tok_s`)."""
    if not isinstance(doc, dict) or _num(doc.get("decode_ms_per_step")) is None:
        return None
    runs = [float(x) for x in (doc.get("repeats_ms") or []) if _num(x)]
    return PlainTiming(f"{name}", float(doc["decode_ms_per_step"]), False, runs, _num(doc.get("decode_tok_s")),
                       DECODE_TOK_S, [], None, None,
                       {"batch": doc.get("batch"), "prompt_len": doc.get("prompt") or doc.get("prompt_len"),
                        "engine": doc.get("engine")})


_VALUE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ms|tok/s)\s*$", re.I)


def from_value(text: str, option: str) -> PlainTiming:
    """A plain figure the user gives: '4.3ms' (ms per decode step) or '230tok/s' (decode tokens/s)."""
    m = _VALUE.match(text or "")
    if not m or float(m.group(1)) <= 0:
        raise BadInput(f"{option} {text!r}: give ms per decode step ('4.3ms'), decode tokens/s ('230tok/s') or a "
                       "vllm-kit summary / benchmark JSON file")
    v, unit = float(m.group(1)), m.group(2).lower()
    src = f"{option} {v:g} {unit}"
    if unit == "ms":
        return PlainTiming(src, v)
    return PlainTiming(src, None, tok_s=v)


def from_document(doc: Any, name: str) -> PlainTiming | None:
    """Whichever reader knows this JSON document (a vllm-kit summary, a benchmark line)."""
    if isinstance(doc, dict) and isinstance(doc.get("results"), list) and len(doc["results"]) == 1:
        doc = {"meta": doc.get("meta"), **doc["results"][0]}   # record.py's summary.json of one case
    return from_vllm_kit(doc, name) or from_vllm_families(doc, name) or from_benchmark(doc, name)


@dataclass
class PlainChange:
    """The two sides' plain figures compared: which is faster, by how much, inside the run-to-run spread or not."""

    before: PlainTiming | None
    after: PlainTiming | None
    measure: str | None = None       # what is compared ("ms per decode step", "output tok/s ...")
    change: float | None = None      # relative change of the time (-0.2: after takes 20% less time)
    band: Band | None = None         # the change over every pair of repeated plain runs (`bands.runs_band`)
    faster: str | None = None        # "before" | "after" | None (not decidable from these figures)
    text: str = ""

    @property
    def within_noise(self) -> bool:
        return self.band is not None and self.band.within

    def to_dict(self) -> dict[str, Any]:
        return {"before": self.before.to_dict() if self.before else None,
                "after": self.after.to_dict() if self.after else None, "measure": self.measure,
                "change": self.change, "band": self.band.to_dict() if self.band else None, "faster": self.faster,
                "within_noise": self.within_noise, "text": self.text}


def _times(t: PlainTiming, by_tok: bool) -> list[float]:
    """A side's plain figure per repeated run, as a time (tokens/s inverted)."""
    if by_tok:
        return [1.0 / x for x in (t.tok_s_runs or [t.tok_s]) if x]
    return [x for x in (t.runs_ms or [t.step_ms]) if x]


def plain_change(b: PlainTiming | None, a: PlainTiming | None) -> PlainChange:
    """Compare the plain figures of two runs where they measure the same thing (see the module docstring)."""
    out = PlainChange(b, a)
    if b is None or a is None:
        have = "before" if b else "after" if a else None
        out.text = (f"only the {have} side was timed without the profiler ({(b or a).text()}): no plain comparison"
                    if have else NO_PLAIN)
        return out
    by_tok = False
    if b.step_ms and a.step_ms and b.bound == a.bound:
        out.measure = "ms per decode step" + (" (whole generate: upper bounds)" if b.bound else "")
        out.change = a.step_ms / b.step_ms - 1.0
    elif b.step_ms and a.step_ms:          # one figure is an upper bound: it decides only when it is the lower one
        out.measure = "ms per decode step (one side an upper bound)"
        lo = b if b.step_ms < a.step_ms else a
        if not lo.bound:
            out.text = (f"{b.text()} vs {a.text()}: the upper bound is above the other side's figure, so these "
                        "figures cannot say which is faster")
            return out
        out.change = a.step_ms / b.step_ms - 1.0
    elif b.tok_s and a.tok_s and b.tok_s_what == a.tok_s_what:
        out.measure, by_tok = b.tok_s_what, True
        out.change = b.tok_s / a.tok_s - 1.0      # as a change of the time
    else:
        out.text = f"{b.text()} vs {a.text()}: not the same measure, not compared"
        return out
    if b.bound == a.bound:
        out.band = runs_band(_times(b, by_tok), _times(a, by_tok))
    if out.within_noise:
        verdict = f"within the run-to-run spread ({out.band.lo:+.0%} to {out.band.hi:+.0%}): not a measured change"
    else:
        out.faster = "after" if out.change < 0 else "before" if out.change > 0 else None
        verdict = (f"{out.faster} is faster" if out.faster else "no change") + (
            f" (outside the run-to-run spread, {out.band.lo:+.0%} to {out.band.hi:+.0%})" if out.band is not None
            else " (an upper bound below a measured time)" if b.bound != a.bound
            else " (one run a side: no run-to-run spread)")
    def fig(t: PlainTiming) -> str:
        if by_tok:
            return f"{t.tok_s:,.1f} tok/s"
        return f"{'<= ' if t.bound else ''}{t.step_ms:,.2f} ms"
    out.text = f"{out.measure}: {fig(b)} -> {fig(a)} (time {out.change:+.1%}), {verdict}"
    return out
