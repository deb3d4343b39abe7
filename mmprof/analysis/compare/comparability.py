"""What `mmprof diff` says about the two sides before any verdict: what is compared (`RunFacts` of each side, row by
row), the differences that change what the numbers mean (flagged), what makes a comparison meaningless (the same
trace twice, two different models: refused unless forced), and the profiler's own cost on host time (a trace with
Python stacks or synchronous launches inflates it) with how to take a cleaner trace. docs/diff.md "What is
compared" lists every rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mmprof.analysis.compare.runfacts import ProfilerSettings, RunFacts

CONTEXT_SHIFT = 0.25   # mean decode context (prompt + half the decode steps) differing by more than this: flagged


@dataclass
class Row:
    label: str
    before: str
    after: str
    same: bool | None          # None: unknown on a side

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Comparability:
    rows: list[Row]
    flags: list[str]                  # differences that change what the numbers mean
    refusal: str | None               # why the two should not be compared at all (None: they may)
    caveats: list[str] = field(default_factory=list)   # the profiler's cost on host time, per side
    facts: tuple[RunFacts, RunFacts] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [r.to_dict() for r in self.rows], "flags": self.flags, "refusal": self.refusal,
                "caveats": self.caveats,
                "facts": {"before": self.facts[0].to_dict(), "after": self.facts[1].to_dict()} if self.facts else None}


def _same(fb, fa) -> bool | None:
    if fb.key is None or fa.key is None:
        return None
    return fb.key == fa.key


CLEANER = ("a cleaner trace: torch.profiler(record_shapes=True, with_stack=False) without CUDA_LAUNCH_BLOCKING; "
           "in vLLM --profiler-config.torch_profiler_with_stack=false")


def trace_caveats(p: ProfilerSettings, side: str = "") -> list[str]:
    """What one trace's profiler settings did to its host time (synchronous launches, Python stacks)."""
    who = f"{side}: " if side else ""
    out = []
    if p.synchronous:
        out.append(f"{who}the launches were synchronous ({p.sync_launches:.0%} of {p.sync_of:,} kernels ended before "
                   "their launch call returned: CUDA_LAUNCH_BLOCKING=1 or a sync after each launch), so host time "
                   "includes every kernel's run time and the step time is not the engine's")
    if p.stacks:
        what = (f"{p.python_events:,} Python-function events" if p.python_events
                else f"{p.module_events:,} nn.Module events")
        out.append(f"{who}traced with Python stacks ({what}): the Python tracer slows the host, so host time, "
                   "host-bound shares and profiled step times are inflated (kernel times are not)")
    return out


def profiler_caveats(fb: RunFacts, fa: RunFacts) -> list[str]:
    """What the profiler's settings did to each side's host time, and how to take a cleaner trace."""
    out = [c for side, f in (("before", fb), ("after", fa)) for c in trace_caveats(f.profiler, side)
           if "synchronous" in c]
    stacked = [(side, f.profiler) for side, f in (("before", fb), ("after", fa)) if f.profiler.stacks]
    if stacked:
        who = " and ".join(side for side, _ in stacked)
        what = " / ".join(f"{p.python_events:,} Python-function events" if p.python_events
                          else f"{p.module_events:,} nn.Module events" for _, p in stacked)
        out.append(f"{who}: traced with Python stacks ({what}): the Python tracer slows the host, so host time, "
                   "host-bound shares and profiled step times are inflated (kernel times are not)")
    if out:
        out.append(CLEANER)
    return out


def compare_facts(fb: RunFacts, fa: RunFacts) -> Comparability:
    """The what-is-compared block of two sides (module docstring)."""
    rows = [Row(label, b.text or "unknown", a.text or "unknown",
                _same(b, a) if label != "profiler" else (b.text == a.text))
            for (label, b), (_, a) in zip(fb.rows(), fa.rows())]
    flags: list[str] = []
    refusal = []
    if fb.fingerprint and fb.fingerprint == fa.fingerprint:
        refusal.append("the two inputs hold the same trace (same content hash): a run compared with itself shows "
                       "no change")
    if fb.model.key and fa.model.key and fb.model.key != fa.model.key:
        refusal.append(f"different models: {fb.model.text} ({fb.model.source}) vs {fa.model.text} ({fa.model.source})")
    elif fb.layers.key and fa.layers.key and fb.layers.key != fa.layers.key:
        refusal.append(f"different models: {fb.layers.key} vs {fa.layers.key} layers ({fb.layers.source} vs "
                       f"{fa.layers.source})")
    if _same(fb.engine, fa.engine) is False:
        flags.append(f"different engines ({fb.engine.text} vs {fa.engine.text}): the host time of a step is each "
                     "engine's own scheduling and Python; GPU work per step (busy and kernel time by region) is the "
                     "like-for-like part")
    if _same(fb.parallel, fa.parallel) is False:
        flags.append(f"parallelism differs ({fb.parallel.text} vs {fa.parallel.text}): each rank does a different "
                     "share of the model")
    if _same(fb.batch, fa.batch) is False:
        flags.append(f"batch differs ({fb.batch.text} vs {fa.batch.text} per decode step): per-step time grows with "
                     "the batch; compare tokens/s")
    elif _same(fb.tokens, fa.tokens) is False:
        flags.append(f"tokens per decode step differ ({fb.tokens.text} vs {fa.tokens.text})")
    if _same(fb.prompt, fa.prompt) is False:
        flags.append(f"prompt length differs ({fb.prompt.text} vs {fa.prompt.text}): every decode step attends over "
                     "a different KV length")
    db, da = (f.steps.key.get("decode") if isinstance(f.steps.key, dict) else None for f in (fb, fa))
    if db and da and db != da:
        if fb.prompt.key and fa.prompt.key:
            cb, ca = fb.prompt.key + db / 2, fa.prompt.key + da / 2
            if abs(ca / cb - 1.0) > CONTEXT_SHIFT:
                flags.append(f"decode steps differ ({db} vs {da}): the mean context of a decode step is {cb:,.0f} vs "
                             f"{ca:,.0f} tokens, so attention reads different KV lengths")
        elif max(db, da) > 2 * min(db, da) and abs(db - da) > 2:
            flags.append(f"decode steps differ ({db} vs {da}): later steps read longer KV, so the per-step figures "
                         "average different context lengths")
    if _same(fb.device, fa.device) is False:
        flags.append(f"different devices ({fb.device.text} vs {fa.device.text}): a change of hardware, not of code")
        flags.insert(0, flags.pop())   # first: every number below rests on it
    if fb.tiled != fa.tiled:
        eng, other = ("before", "after") if fb.tiled else ("after", "before")
        flags.append(f"the steps are measured differently: the {eng} side's are a serving engine's (step-to-step, "
                     f"with the host time between steps), the {other} side's run from their first to their last "
                     "device event (the host time between its steps is outside them)")
    pb, pa = fb.profiler, fa.profiler
    if pb.tool and pa.tool and pb.tool != pa.tool:
        flags.append(f"recorded by different profilers ({pb.tool} vs {pa.tool}): their kernel timestamps, launch "
                     "records and overheads differ, so small differences are the tools'")
    if pb.stacks != pa.stacks:
        flags.append(f"only the {'before' if pb.stacks else 'after'} trace has Python stacks: its host time is "
                     "inflated by the Python tracer and the other's is not")
    if pb.synchronous != pa.synchronous:
        flags.append(f"only the {'before' if pb.synchronous else 'after'} trace was taken with synchronous launches: "
                     "its host time includes the kernels' run time")
    caveats = profiler_caveats(fb, fa)
    return Comparability(rows, flags, "; ".join(refusal) or None, caveats, (fb, fa))
