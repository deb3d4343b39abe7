"""The only parser of mmprof's label vocabulary: phase, step and rank markers, and region labels -> (layer, role).

Every importer and analysis reads labels through this module, so one spelling means one thing everywhere:

- **phase**: a label holding the word `prefill` or `decode` (`mmprof.decode`, `decode_step`; not `decoder`,
  not `LlamaDecoderLayer`);
- **step**: `mmprof.step.N` or `ProfilerStep#N`, the whole label (N < 2**31; larger numbers are not steps);
- **engine steps**: the step annotations serving engines write around one scheduler iteration (`engine_step`):
  vLLM's `execute_context_N(T)_generation_M(G)` (vllm/v1/worker/gpu_worker.py `Worker.annotate_profile`, counts
  from vllm/v1/utils.py `compute_iteration_details`), SGLang's `step[DECODE bs=8]` / `step[EXTEND bs=2 toks=130]`
  (python/sglang/srt/utils/profile_utils.py `build_step_span_name`) and TensorRT-LLM's
  `[Executor] _forward_step 12: 1 ctx reqs, 7 gen reqs` (tensorrt_llm/_torch/pyexecutor/py_executor.py
  `_forward_step`). On a rank that has them they are THE steps, numbered 0.. in the order their CPU ranges start
  (`step_values`); their phase is prefill (context requests only), decode (generation only), mixed (both) or none
  (an empty step); they are markers, never regions;
- **rank** from a file name: `rank-3`, `rank_3`, `trace.rank3.db` (a separate word; not `crank3`, not `rank30x`);
- **regions**: a scope label or module path -> `Region(layer, role, name, source)`. The role tables live in
  `mmprof/rules/roles.toml` (data): module-path suffixes after the layer index (`model.layers.12.mlp.experts`
  -> `moe.routed`), model-level names (`lm_head`), nn.Module class names -> kinds -> roles for the module
  trees of `with_stack` traces, and engine custom ops (`vllm::moe_forward_shared`) -> roles, as region anchors
  (used by `mmprof.analysis.attribution.structure`).

A region records where it came from (`source`): `annotation` (an explicit label: mmprof's scope labels, module
paths in record_function / NVTX / roctx ranges, `mmprof record`'s module ranges), `module` (nn.Module events
nested into a module tree) or `shape` (op shapes matched against a model config).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

from mmprof.errors import BadInput
from mmprof.fileio import read_toml
from mmprof.profiles.schema import MAX_RANK as _MAX_RANK
from mmprof.regex_safety import BoundedRegex, compile_bounded

ROLES_FILE = Path(__file__).resolve().parent / "rules" / "roles.toml"
SOURCES = ("annotation", "module", "op", "shape")  # + the frame's own: replay-* (graph_align), family (sampler)
PHASES = ("prefill", "decode", "mixed")
MAX_STEP = 2**31 - 1
MAX_RANK = _MAX_RANK  # ranks and world sizes beyond this are not ranks (a file that says so is refused)
SEP = " > "  # joins the labels of a scope path, outermost first

_PHASE = re.compile(r"(?<![a-z])(prefill|decode)(?![a-z])")
_STEP = re.compile(r"^(?:mmprof\.step\.|ProfilerStep#)(\d{1,10})$")
_RANK = re.compile(r"(?:^|[^a-z0-9])rank[_\-.]?(\d{1,9})(?![0-9a-z])", re.IGNORECASE)
_RANK_TEXT = re.compile(r"\brank\s*[#:=]?\s*(\d{1,9})(?![0-9])", re.IGNORECASE)
# a layer index inside a label: `layers.12`, `layer_3`, `h.4` (GPT-2), `blocks.7`, `decoder_layers.2`
_LAYER = re.compile(r"(?:^|[.\s/:_-])(?:layers?|h|blocks?|decoder_layers?)[._](\d{1,6})(?:[._]([A-Za-z_][\w.]*))?$")
_MODULE_EVENT = re.compile(r"^nn\.Module: ([A-Za-z_]\w*?)_(\d+)$")
# engine step annotations (see `engine_step`); counts are bounded to 9 digits
_N = r"(\d{1,9})"
_VLLM_STEP = re.compile(r"^execute_(?:\d{1,9}_)?context_" + _N + r"\((?:sq)?" + _N + r"(?:sk\d{1,12}sqsq\d{1,18}sqsk\d{1,18})?\)"
                        r"_generation_" + _N + r"\((?:sq)?" + _N + r"(?:sk\d{1,12}sqsq\d{1,18}sqsk\d{1,18})?\)$")
_SGLANG_STEP = re.compile(r"^step\[([A-Z][A-Z0-9_]{0,30}) bs=" + _N + r"(?: toks=" + _N + r")?(?: [^\]]{0,200})?\]$")
_TRTLLM_STEP = re.compile(r"^\[Executor\] _forward_step(?: " + _N + r")?: " + _N + r" ctx reqs, (?:" + _N
                          + r" ctx tokens, )?" + _N + r" gen reqs$")
_SGLANG_DRAFT = re.compile(r"^draft step\[[^\]]{0,240}\]$")
# SGLang's ForwardMode (python/sglang/srt/model_executor/forward_batch_info.py) -> phase; IDLE (a DP-attention
# worker with nothing to run) and modes not listed have no phase
_SGLANG_PHASE = {"EXTEND": "prefill", "SPLIT_PREFILL": "prefill", "PREBUILT": "decode", "DECODE": "decode",
                 "TARGET_VERIFY": "decode", "MIXED": "mixed", "DLLM_EXTEND": "prefill"}
# labels that mark phases / steps / profiler bookkeeping, never a region
_MARKER = re.compile(r"^(?:mmprof\.(?:prefill|decode|step\.\d+)|ProfilerStep#\d+|## .* ##|PyTorch Profiler.*|"
                     r"Iteration.*|\[memory\])$")


@dataclass(frozen=True)
class EngineStep:
    """One serving-engine step annotation, parsed. Counts the engine's label does not carry are None."""

    engine: str                 # vllm, sglang, trtllm
    phase: str | None           # prefill, decode, mixed, or None (no scheduled work)
    ctx_reqs: int | None        # prefill (context) requests in the step
    ctx_tokens: int | None
    gen_reqs: int | None        # decode (generation) requests
    gen_tokens: int | None      # vLLM: > gen_reqs with speculative decoding (draft tokens are verified)
    mode: str | None = None     # SGLang's ForwardMode name

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _step_phase(ctx: int | None, gen: int | None) -> str | None:
    c, g = bool(ctx), bool(gen)
    return "mixed" if c and g else "prefill" if c else "decode" if g else None


@lru_cache(maxsize=65536)
def engine_step(name: str | None) -> EngineStep | None:
    """The engine step a label marks (vLLM / SGLang / TensorRT-LLM, module docstring), or None."""
    if not name or len(name) > 400:
        return None
    if name.startswith("execute_"):
        m = _VLLM_STEP.match(name)
        if m:
            cr, ct, gr, gt = (int(x) for x in m.groups())
            return EngineStep("vllm", _step_phase(cr, gr), cr, ct, gr, gt)
        return None
    if name.startswith("step["):
        m = _SGLANG_STEP.match(name)
        if m:
            mode, bs, toks = m.group(1), int(m.group(2)), m.group(3)
            ph = _SGLANG_PHASE.get(mode)
            if ph == "prefill":
                return EngineStep("sglang", ph if bs else None, bs, int(toks) if toks else None, 0, 0, mode)
            if ph == "decode":  # DECODE: one token per request; a verify step's token count is not in the label
                return EngineStep("sglang", ph if bs else None, 0, 0, bs, bs if mode == "DECODE" else None, mode)
            return EngineStep("sglang", ph if bs else None, None, int(toks) if toks else None, None, None, mode)
        return None
    if name.startswith("[Executor] _forward_step"):
        m = _TRTLLM_STEP.match(name)
        if m:
            _, cr, ct, gr = m.groups()
            cr, gr = int(cr), int(gr)
            return EngineStep("trtllm", _step_phase(cr, gr), cr, int(ct) if ct else None, gr, None)
    return None


def step_values(names: Sequence[str], starts: Sequence[int]) -> list[int]:
    """The step number each label of one rank's CPU ranges marks (-1: none). Where engine step annotations exist
    they are the steps, numbered 0.. in start order (ties in list order), and ProfilerStep#N / mmprof.step.N are
    then not steps (they would number the same work twice); otherwise `step_of` of each label."""
    eng = [i for i, n in enumerate(names) if engine_step(n) is not None]
    if not eng:
        return [step_of(n) for n in names]
    out = [-1] * len(names)
    for k, i in enumerate(sorted(eng, key=lambda i: (starts[i], i))):
        out[i] = k
    return out


def phase_of(name: str | None) -> str | None:
    """The phase an engine step label marks, else 'prefill' / 'decode' when the label holds the word; else None."""
    if not name:
        return None
    es = engine_step(name)
    if es is not None:
        return es.phase
    if name.startswith("draft step["):  # SGLang's speculative draft forward: the phase of its mode, but no step
        inner = engine_step(name[6:])
        return inner.phase if inner is not None else None
    m = _PHASE.search(name.lower())
    return m.group(1) if m else None


def phase_of_path(names: Iterable[str]) -> str | None:
    """The phase of a chain of labels, outermost first: the first label that names one."""
    for n in names:
        p = phase_of(n)
        if p:
            return p
    return None


def step_of(name: str | None) -> int:
    """N of `mmprof.step.N` / `ProfilerStep#N` (the whole label); -1 otherwise or when N >= 2**31."""
    if not name:
        return -1
    m = _STEP.match(name)
    if not m:
        return -1
    n = int(m.group(1))
    return n if n <= MAX_STEP else -1


def step_of_path(names: Iterable[str]) -> int:
    """The step of a chain of labels: the innermost label that is a step marker; -1 when none."""
    step = -1
    for n in names:
        s = step_of(n)
        if s >= 0:
            step = s
    return step


def rank_from_name(path: str | Path) -> int | None:
    """Rank from a file name (`rank-3.json`, `trace_rank3.db`, `out.rank_12.csv`); None when it names none."""
    m = _RANK.search(Path(path).name)
    return int(m.group(1)) if m else None


def rank_from_text(text: str | None) -> int | None:
    """Rank named in a free text such as an NVTX thread name (`MPI Rank 3`, `rank: 12`); None when none."""
    m = _RANK_TEXT.search(text or "")
    return int(m.group(1)) if m else None


def is_marker(name: str | None) -> bool:
    """True for phase / step / profiler bookkeeping labels and engine step annotations (never a region)."""
    return bool(name) and (bool(_MARKER.match(name)) or engine_step(name) is not None
                           or bool(_SGLANG_DRAFT.match(name)))


def module_event(name: str | None) -> tuple[str, int] | None:
    """('MiniMaxM3VLSparseMoeBlock', 0) from `nn.Module: MiniMaxM3VLSparseMoeBlock_0`; None otherwise."""
    if not name or not name.startswith("nn.Module: "):
        return None
    m = _MODULE_EVENT.match(name)
    return (m.group(1), int(m.group(2))) if m else None


@dataclass(frozen=True)
class Region:
    layer: int    # -1 for model-level regions
    role: str     # e.g. moe.routed, attn.indexer, embed
    name: str     # layers.12.moe.routed, or the role for model-level regions
    source: str = "annotation"  # annotation | module | shape


@dataclass(frozen=True)
class _Rule:
    key: str      # role (path / model / context) or kind (class)
    regex: BoundedRegex
    parent: str = "*"


@dataclass(frozen=True)
class RoleRules:
    """The tables of rules/roles.toml, compiled."""

    paths: tuple[_Rule, ...]
    model: tuple[_Rule, ...]
    classes: tuple[_Rule, ...]
    contexts: tuple[tuple[str, str, str], ...]  # (kind, parent kind, role)
    ops: tuple[_Rule, ...] = ()                 # CPU op name -> role (engine custom ops as region anchors)

    def path_role(self, suffix: str) -> str | None:
        for r in self.paths:
            m = r.regex.search(suffix)
            if m:
                return r.key.format(m.group(0), *(g or "" for g in m.groups())) if "{" in r.key else r.key
        return None

    def model_role(self, label: str) -> str | None:
        return next((r.key for r in self.model if r.regex.search(label)), None)

    def op_role(self, op: str) -> str | None:
        """Role a CPU op anchors (`vllm::moe_forward_shared` -> moe.routed); None for ops that name no region."""
        return next((r.key for r in self.ops if r.regex.search(op)), None)

    def kind(self, cls: str) -> str | None:
        """Kind of an nn.Module class name (decoder_layer, attention, moe_block, mlp, ...); None when unknown."""
        return next((r.key for r in self.classes if r.regex.search(cls)), None)

    def context_role(self, kind: str, parent: str | None) -> str | None:
        for k, p, role in self.contexts:
            if k == kind and (p == "*" or p == (parent or "-")):
                return role
        return None


def _compile(doc: dict, table: str, key: str, where: str) -> tuple[_Rule, ...]:
    out = []
    for i, r in enumerate(doc.get(table, [])):
        label = f"{where}: [[{table}]] #{i + 1}"
        if not isinstance(r, dict) or not isinstance(r.get(key), str) or not isinstance(r.get("pattern"), str):
            raise BadInput(f"{label}: needs string `{key}` and `pattern`")
        rx = compile_bounded(r["pattern"], label, "pattern")  # bounded work (mmprof.regex_safety)
        ex = r.get("example")
        if ex is not None and not rx.search(ex):
            raise BadInput(f"{label}: its example {ex!r} does not match its own pattern")
        out.append(_Rule(r[key], rx))
    return tuple(out)


def load_roles(path: str | Path = ROLES_FILE) -> RoleRules:
    doc = read_toml(path, "roles")
    where = Path(path).name
    contexts = []
    for i, c in enumerate(doc.get("context", [])):
        if not all(isinstance(c.get(k), str) for k in ("kind", "parent", "role")):
            raise BadInput(f"{where}: [[context]] #{i + 1}: needs string `kind`, `parent` and `role`")
        contexts.append((c["kind"], c["parent"], c["role"]))
    return RoleRules(_compile(doc, "path", "role", where), _compile(doc, "model", "role", where),
                     _compile(doc, "class", "kind", where), tuple(contexts), _compile(doc, "op", "role", where))


@lru_cache(maxsize=1)
def roles() -> RoleRules:
    """The built-in role tables (read once)."""
    return load_roles()


@lru_cache(maxsize=65536)
def parse_label(label: str, source: str = "annotation") -> Region | None:
    """One scope label or module path -> Region, or None when it names no region (markers never do)."""
    s = label.strip()
    if not s or is_marker(s) or s.startswith("nn.Module: "):
        return None
    rules = roles()
    cls_role = None
    if s.endswith(")") and " (" in s:  # `model.layers.3.mlp (Qwen3MoeSparseMoeBlock)`: mmprof record's module ranges
        s, cls = s[:-1].split(" (", 1)
        kind = rules.kind(cls)
        cls_role = rules.context_role(kind, None) if kind else None
    m = _LAYER.search(s)
    if m:
        layer = int(m.group(1))
        suffix = m.group(2) or ""
        role = rules.path_role(suffix) if suffix else None
        if role is None or (role in ("mlp", "layer") and cls_role not in (None, "layer", "embed")):
            role = cls_role or role or suffix or "layer"
        return Region(layer, role, f"layers.{layer}.{role}", source)
    role = rules.model_role(s) or (cls_role if cls_role not in (None, "layer") else None)
    return Region(-1, role, role, source) if role else None


@lru_cache(maxsize=65536)
def parse_path(path: str, source: str = "annotation") -> Region | None:
    """The innermost region named in a scope path (labels joined by ' > ', outermost first).

    A layer-level region wins over a model-level one further in (`layers.3 > ... > norm` is layer 3)."""
    model_level = None
    for label in reversed(path.split(SEP)):
        r = parse_label(label, source)
        if r is not None:
            if r.layer >= 0:
                return r
            model_level = model_level or r
    return model_level


def region_name(layer: int, role: str) -> str:
    return f"layers.{layer}.{role}" if layer >= 0 else role


def region_pattern(region: str) -> str:
    """`layers.12.moe.routed` -> `layers.*.moe.routed` (the same region across layers)."""
    return re.sub(r"^layers\.\d+\.", "layers.*.", region)
