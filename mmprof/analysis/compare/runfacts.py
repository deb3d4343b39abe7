"""What one profile says about the run it holds: model, engine, execution mode, TP / EP, batch and tokens per step,
prompt length, steps, the profiler's settings and the device, each with where it was read (docs/diff.md "What is
compared"). Nothing is guessed: a fact no evidence gives is `unknown`.

Sources, best first: the runtime's own metadata (`mmprof run`: meta.model, meta.run, meta.parallel, meta.capture);
a plain-timing sidecar (the vllm-kit summary's engine arguments, `mmprof.analysis.compare.plain`); the trace
itself: a serving engine's step annotations (`execute_context_N(T)_generation_M(G)`, SGLang's `step[...]`:
batch, tokens per step, prompt length), nn.Module events (the model class, its layers), the regions' layers, the
graph replays and Inductor kernel names (the mode), the ops' recorded shapes and the Python-function event count
of the Kineto trace (profiler settings), the launch calls against their kernels (synchronous launches).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mmprof.analysis.timeline.engine_steps import engine_steps
from mmprof.analysis.timeline.columns import TABLE_KERNELS
from mmprof.analysis.timeline.events import content_hash
from mmprof.labels import module_event

ENGINES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
RUNTIME = "mmprof reference runtime"
SYNC_SHARE = 0.9       # share of one-by-one launched kernels whose launch returned after they ended: synchronous
SYNC_MIN = 50          # ... out of at least this many
_TOP_CLASS = re.compile(r"(For(CausalLM|ConditionalGeneration)|LMHeadModel)$")
_SUFFIXES = ("Sparse", "VL", "Text", "Model")
_INDUCTOR = re.compile(r"^(triton|cpp)_(poi|red|per|tem|fused)")


@dataclass
class Fact:
    """One fact about a run: in words (None: unknown), a comparable key and where it was read."""

    text: str | None
    key: Any = None
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "key": self.key if isinstance(self.key, (str, int, float, type(None)))
                else str(self.key), "source": self.source}


@dataclass
class ProfilerSettings:
    """How the trace was taken, as far as the trace or its metadata shows."""

    shapes: float | None = None          # share of CPU ops with recorded input shapes (None: no ops)
    python_events: int | None = None     # Python-function events (with_stack / Python tracer); None: not counted
    module_events: int = 0               # nn.Module events (with_stack traces carry them)
    sync_launches: float | None = None   # share of one-by-one launched kernels whose launch returned after them
    sync_of: int = 0
    capture: str | None = None           # `mmprof run` capture mode (full / light / kernels)
    tool: str | None = None              # the profiler that recorded the trace (one name per tool family)

    @property
    def stacks(self) -> bool:
        return bool(self.python_events) or self.module_events > 0

    @property
    def synchronous(self) -> bool:
        return self.sync_launches is not None and self.sync_of >= SYNC_MIN and self.sync_launches >= SYNC_SHARE

    def text(self) -> str:
        parts = []
        if self.shapes is not None:
            parts.append("shapes" if self.shapes >= 0.5 else f"shapes on {self.shapes:.0%} of ops" if self.shapes
                         else "no shapes")
        if self.python_events:
            parts.append(f"Python stacks ({self.python_events:,} python_function events)")
        elif self.module_events:
            parts.append(f"module events ({self.module_events:,})")
        elif self.python_events == 0:
            parts.append("no Python stacks")
        if self.synchronous:
            parts.append(f"synchronous launches ({self.sync_launches:.0%} of {self.sync_of:,})")
        if self.capture:
            parts.append(f"{self.capture} capture")
        return (f"{self.tool}: " if self.tool else "") + (", ".join(parts) or "settings unknown")

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "stacks": self.stacks, "synchronous": self.synchronous, "text": self.text()}


@dataclass
class RunFacts:
    model: Fact
    layers: Fact
    engine: Fact
    mode: Fact
    parallel: Fact
    batch: Fact
    tokens: Fact          # tokens per decode step
    prompt: Fact
    steps: Fact           # steps per phase, in words; key {phase: n}
    device: Fact
    profiler: ProfilerSettings
    tiled: bool           # the steps own the time between them (a serving engine's steps)
    fingerprint: tuple = field(repr=False, default=())

    def rows(self) -> list[tuple[str, Fact]]:
        return [("model", self.model), ("layers", self.layers), ("engine", self.engine), ("mode", self.mode),
                ("TP / EP", self.parallel), ("batch", self.batch), ("tokens per decode step", self.tokens),
                ("prompt", self.prompt), ("steps", self.steps), ("device", self.device),
                ("profiler", Fact(self.profiler.text(), None, "the trace"))]

    def to_dict(self) -> dict[str, Any]:
        return {**{k: f.to_dict() for k, f in self.rows() if k != "profiler"}, "profiler": self.profiler.to_dict(),
                "tiled": self.tiled}


def model_base(cls: str | None) -> str | None:
    """'minimaxm3' from MiniMaxM3SparseForCausalLM / MiniMaxM3VLForCausalLM; 'qwen2moe' from Qwen2MoeForCausalLM."""
    if not cls:
        return None
    base = _TOP_CLASS.sub("", cls)
    changed = True
    while changed and base:
        changed = False
        for suf in _SUFFIXES:
            if base.endswith(suf) and len(base) > len(suf):
                base, changed = base[: -len(suf)], True
    return re.sub(r"[^a-z0-9]", "", base.lower()) or None


_FINGERPRINT = {"kernels": ("rank", "stream", "start_ns", "dur_ns", "name"), "memcpy": ("rank", "start_ns", "dur_ns"),
                "scopes": ("rank", "start_ns", "dur_ns", "name"), "ops": ("start_ns", "name")}


def fingerprint(profile) -> tuple:
    """What the trace holds, hashed: the timing and name columns of its kernels, copies, ranges and ops, every
    table's length and the string table. Two imports of one file give the same fingerprint; the metadata (import
    time, paths) is left out."""
    cols = tuple((t, c, len(profile.tables[t][c]), content_hash(profile.tables[t][c]))
                 for t, names in _FINGERPRINT.items() if t in profile.tables for c in names if c in profile.tables[t])
    cols += tuple((t, profile.n(t)) for t in sorted(profile.tables))
    strings = content_hash(np.frombuffer("\x00".join(profile.strings).encode("utf-8", "surrogatepass"), np.uint8))
    return cols, len(profile.strings), strings


def _module_classes(profile) -> Counter:
    if profile.n("scopes") == 0:
        return Counter()
    names = profile.col("scopes", "name")
    uniq, counts = np.unique(names[names >= 0], return_counts=True)
    out: Counter = Counter()
    for u, c in zip(uniq.tolist(), counts.tolist()):
        m = module_event(profile.string(int(u)))
        if m:
            out[m[0]] += c
    return out


def profiler_tool(src: dict) -> str | None:
    """The profiler family that wrote a trace, from meta.source (the runtime and `record` traces are Kineto's)."""
    fmt = str(src.get("importer") or src.get("format") or "")
    tool = str(src.get("tool") or "")
    if fmt == "kineto" or "Kineto" in tool or "torch.profiler" in tool:
        return "PyTorch profiler (Kineto)"
    if fmt.startswith(("rocpd", "rocprofv3")) or tool.startswith("rocprofv3"):
        return "rocprofv3"
    if fmt.startswith("nsys") or tool.startswith("Nsight Systems"):
        return "Nsight Systems"
    return tool.split(",")[0].strip() or fmt or None


def profiler_settings(profile, ev) -> ProfilerSettings:
    meta = profile.meta if isinstance(profile.meta, dict) else {}
    src = meta.get("source") if isinstance(meta.get("source"), dict) else {}
    counts = src.get("event_counts") if isinstance(src.get("event_counts"), dict) else None
    cap = meta.get("capture") if isinstance(meta.get("capture"), dict) else {}
    st = ProfilerSettings(capture=cap.get("mode"), tool=profiler_tool(src))
    if counts is not None:
        st.python_events = int(counts.get("python_function") or 0)
    if profile.n("ops"):
        st.shapes = float(np.mean(profile.col("ops", "input_dims") >= 0))
    if profile.n("scopes"):
        srcs = profile.col("scopes", "source")
        sid = [i for i, s in enumerate(profile.strings) if s == "module"]
        st.module_events = int(np.isin(srcs, sid).sum()) if sid else 0
    # synchronous launches (CUDA_LAUNCH_BLOCKING=1, a sync after each launch): the launch call returns after the
    # kernel it launched has ended; with asynchronous launches that happens only for a few tiny kernels
    if len(ev) and ev.source == "kernels":
        one = (ev.table == TABLE_KERNELS) & (ev.graph < 0) & (ev.launch_end >= 0)
        if one.any():
            st.sync_launches = float(np.mean(ev.launch_end[one] >= ev.end[one]))
            st.sync_of = int(one.sum())
    return st


def _engine(profile, ev, es, classes: Counter) -> Fact:
    meta = profile.meta if isinstance(profile.meta, dict) else {}
    if len(es):
        names = sorted({ENGINES.get(e, e) for e in es["engine"]})
        return Fact(" / ".join(names), names[0].lower(), "its engine step annotations")
    if isinstance(meta.get("run"), dict) or (meta.get("source") or {}).get("format") == "mmprof-run":
        return Fact(RUNTIME, "mmprof", "meta.run (mmprof run)")
    scope_names = {profile.string(int(u)) for u in np.unique(profile.col("scopes", "name"))} if profile.n("scopes") \
        else set()
    if profile.n("ops"):
        ops = {profile.string(int(u)) or "" for u in np.unique(profile.col("ops", "name"))}
        for prefix, eng in (("vllm::", "vLLM"), ("sglang::", "SGLang")):
            if any(o.startswith(prefix) for o in ops):
                return Fact(eng, eng.lower(), f"its {prefix}* ops")
    if any(n and n.startswith("mmprof.step.") for n in scope_names) and any(
            n and n.startswith("layers.") for n in scope_names):
        return Fact(RUNTIME, "mmprof", "its mmprof.step.N and layers.* annotations")
    if classes:
        return Fact("nn.Module model, no engine markers (transformers-style classes)", "modules", "nn.Module events")
    return Fact(None, None, "no engine markers in the trace")


def _mode(profile, ev) -> Fact:
    meta = profile.meta if isinstance(profile.meta, dict) else {}
    sw = ((meta.get("run") or {}).get("switches") or {}) if isinstance(meta.get("run"), dict) else {}
    graphs = bool(sw.get("graphs")) or (len(ev) > 0 and bool((ev.graph >= 0).any()))
    compiled = bool(sw.get("compile"))
    if not compiled and len(ev) and ev.source == "kernels":
        names = ev.name[ev.table == TABLE_KERNELS]
        uniq = np.unique(names[names >= 0])
        compiled = any(_INDUCTOR.match(profile.string(int(u)) or "") for u in uniq.tolist())
    vendor = {d.get("vendor") for r in meta.get("ranks") or [] if isinstance(r, dict)
              for d in r.get("devices") or [] if isinstance(d, dict)}
    g = "HIP graphs" if "amd" in vendor else "CUDA graphs"
    parts = (["torch.compile"] if compiled else []) + ([g] if graphs else [])
    return Fact(" + ".join(parts) or "eager", " + ".join(parts) or "eager",
                "meta.run switches" if sw else "graph replays / Inductor kernel names in the trace")


def _layers(profile, ev, plain) -> Fact:
    model = (profile.meta or {}).get("model") if isinstance(profile.meta, dict) else None
    if isinstance(model, dict) and isinstance(model.get("n_layers"), int):
        return Fact(str(model["n_layers"]), int(model["n_layers"]), "meta.model")
    wl = plain.workload if plain else {}
    if isinstance(wl.get("layers"), int):
        return Fact(str(wl["layers"]), int(wl["layers"]), "the model config in the plain-timing summary")
    if len(ev):
        src = np.asarray(ev.label_source, dtype=object)
        ok = (ev.layer >= 0) & np.isin(src, ["annotation", "module"])
        if ok.any():
            n = int(ev.layer[ok].max()) + 1
            return Fact(str(n), n, "the regions' layer numbers")
    return Fact(None, None, "no layer regions")


def _model(profile, classes: Counter, plain) -> Fact:
    meta = profile.meta if isinstance(profile.meta, dict) else {}
    model = meta.get("model") if isinstance(meta.get("model"), dict) else None
    if model and (isinstance(meta.get("run"), dict) or "n_experts" in model):
        return Fact(f"MiniMax M3 ({model.get('name')} preset)" if model.get("name") else "MiniMax M3", "minimaxm3",
                    "meta.model (the runtime builds MiniMax M3)")
    tops = [(c, n) for c, n in classes.items() if _TOP_CLASS.search(c)]
    if tops:
        cls = max(tops, key=lambda x: (x[1], x[0]))[0]
        return Fact(cls, model_base(cls), "nn.Module events")
    wl = plain.workload if plain else {}
    if wl.get("model"):
        return Fact(str(wl["model"]), model_base(str(wl["model"])), "the plain-timing summary's model config")
    if model and model.get("name"):
        return Fact(str(model["name"]), None, "meta.model")
    return Fact(None, None, "no model class or config in the trace")


def _parallel(profile, plain) -> Fact:
    meta = profile.meta if isinstance(profile.meta, dict) else {}
    par = meta.get("parallel") if isinstance(meta.get("parallel"), dict) else {}
    if par.get("tp"):
        return Fact(f"TP {par['tp']}, EP {par.get('ep') or 1}", (int(par["tp"]), int(par.get("ep") or 1)),
                    "meta.parallel")
    wl = plain.workload if plain else {}
    if isinstance(wl.get("tp"), int):
        ep = wl.get("ep") if isinstance(wl.get("ep"), int) else None
        return Fact(f"TP {wl['tp']}" + (f", EP {ep}" if ep else ""), (int(wl["tp"]), ep) if ep else (int(wl["tp"]),),
                    "the plain-timing summary's engine arguments")
    ws = par.get("world_size") or (meta.get("distributed") or {}).get("world_size") or len(profile.ranks)
    return Fact(f"world size {ws} (TP not recorded)", None,
                "the trace's ranks / distributed info")


def _workload(profile, es, plain) -> tuple[Fact, Fact, Fact]:
    """(batch, tokens per decode step, prompt length)."""
    meta = profile.meta if isinstance(profile.meta, dict) else {}
    wl = ((meta.get("run") or {}).get("workload") or {}) if isinstance(meta.get("run"), dict) else {}
    if wl.get("batch"):
        b, p = int(wl["batch"]), wl.get("prompt_len")
        return (Fact(_requests(b), b, "meta.run.workload"), Fact(f"{b}", b, "meta.run.workload (one per request)"),
                Fact(f"{int(p)} tokens", int(p), "meta.run.workload") if p else Fact(None))
    batch = tokens = prompt = Fact(None, None, "no engine step annotations or run metadata")
    if len(es):
        dec = es[(es["phase"] == "decode") & (es["gen_reqs"] >= 0)]
        if len(dec):
            b = int(np.median(dec["gen_reqs"]))
            vals = sorted(set(dec["gen_reqs"].tolist()))
            batch = Fact(_requests(b) + (f" (steps of {', '.join(map(str, vals))})" if len(vals) > 1 else ""), b,
                         "decode engine steps")
            gt = dec[dec["gen_tokens"] >= 0]["gen_tokens"]
            if len(gt):
                tokens = Fact(str(int(np.median(gt))), int(np.median(gt)), "decode engine steps")
        ctx = es[(es["ctx_reqs"] > 0) & (es["ctx_tokens"] >= 0)]
        if len(ctx):
            p = int(round(ctx["ctx_tokens"].sum() / ctx["ctx_reqs"].sum()))
            prompt = Fact(f"{p} tokens", p, "prefill engine steps (tokens / requests)")
    side = plain.workload if plain else {}
    if batch.key is None and isinstance(side.get("batch"), int):
        batch = Fact(_requests(int(side["batch"])), int(side["batch"]), "the plain-timing summary")
    if prompt.key is None and isinstance(side.get("prompt_len"), int):
        prompt = Fact(f"{side['prompt_len']} tokens", int(side["prompt_len"]), "the plain-timing summary")
    return batch, tokens, prompt


def _requests(n: int) -> str:
    return f"{n} request{'s' if n != 1 else ''}"


def _device(profile) -> Fact:
    meta = profile.meta if isinstance(profile.meta, dict) else {}
    names = Counter(str(d.get("name")) for r in meta.get("ranks") or [] if isinstance(r, dict)
                    for d in r.get("devices") or [] if isinstance(d, dict) and d.get("name"))
    if not names:
        return Fact(None, None, "no device in the metadata")
    text = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in sorted(names.items()))
    return Fact(text, tuple(sorted(names)), "the trace's device info")


def run_facts(profile, ev, tl, plain=None) -> RunFacts:
    """The facts of one profile (see the module docstring); `tl` its timeline, `plain` a PlainTiming or None."""
    es = engine_steps(profile) if ev.source == "kernels" else engine_steps(profile).iloc[0:0]
    classes = _module_classes(profile)
    batch, tokens, prompt = _workload(profile, es, plain)
    per_phase = {}
    for ph in tl.phases:
        if ph == "other":
            continue
        n = len(tl.step_rows(ph))
        per_phase[ph] = n
    steps = Fact(", ".join(f"{n} {ph}" for ph, n in per_phase.items()) or "no step markers", per_phase,
                 "engine step annotations" if len(es) else "step markers")
    return RunFacts(_model(profile, classes, plain), _layers(profile, ev, plain), _engine(profile, ev, es, classes),
                    _mode(profile, ev), _parallel(profile, plain), batch, tokens, prompt, steps, _device(profile),
                    profiler_settings(profile, ev), bool(tl.engine), fingerprint(profile))
