"""`mmprof shapes` as a library: the three ways to get per-rank shapes, each returning one `ShapesResult`.

- `analytic_shapes`: the runtime builds every rank on the meta device (`mmprof.runtime.analytic`), or, with an
  `engine`, the arithmetic of that engine's layout (`mmprof.analysis.shapes.layouts`, rules/layouts.toml: vLLM
  CUDA / ROCm, SGLang, transformers); findings SH001-SH004 and SH007 (which compares with the same model at TP 1);
- `live_shapes`: real ranks of the reference runtime record what each GEMM / attention call receives
  (`mmprof.capture.workflows.shapes_live`), compared with the analytic shapes (SH005, SH006);
- `profile_shapes`: GEMM-like ops recorded with shapes in per-rank traces, compared with each other (SH005) and,
  given a model config, with the per-rank shapes of the layout of the engine that wrote the trace (SH006) at the
  TP size the trace shows (a `tp` that contradicts its shapes is refused).

This sits in the capture layer because it joins the runtime (analytic shapes) with the analyses (findings).
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict

from mmprof.analysis.checks.shapes_analytic import analytic_findings
from mmprof.analysis.checks.shapes_observed import calls_from_profile, compare_calls, cross_rank, role_of
from mmprof.analysis.checks.shapes_traced import traced_findings
from mmprof.analysis.shapes.engines import engine_of
from mmprof.analysis.shapes.layouts import layout_shapes, parse_switches, resolve
from mmprof.analysis.shapes.trace_tp import check_tp
from mmprof.analysis.shapes.shape_match import match_profile, profile_tp
from mmprof.capture.workflows.shapes_live import capture_live
from mmprof.errors import BadInput, NoEvidence
from mmprof.importers import import_paths
from mmprof.modelspec import ModelSpec
from mmprof.runtime import PRESETS, ModelArgs, analytic, from_hf_config, load_config, to_spec
from mmprof.shapes_model import Comparison, ShapesResult, Workload


def resolve_model(model: str) -> ModelArgs:
    """`m3`, another runtime preset, or a config.json / checkpoint dir -> ModelArgs (BadInput when unknown)."""
    return load_config(model)


_MAX_WORKLOAD = 2**24  # sequences or tokens: larger workloads overflow the 64-bit byte counts of the result


def _check_parallel(tp: int, ep: int) -> None:
    if tp < 1:
        raise BadInput(f"--tp must be >= 1, not {tp}")
    if ep < 1:
        raise BadInput(f"--ep must be >= 1, not {ep}")


def _check_workload(batch: int, seq: int) -> None:
    for name, v in (("--batch", batch), ("--seq", seq)):
        if not 1 <= v <= _MAX_WORKLOAD:
            raise BadInput(f"{name} must be in 1..{_MAX_WORKLOAD}, not {v}")


def analytic_shapes(model: str = "m3", tp: int = 8, ep: int = 1, batch: int = 1, seq: int = 1024,
                    phase: str = "decode", dtype: str = "bf16", engine: str = "runtime",
                    layout_opts: tuple[str, ...] = (), platform: str | None = None) -> ShapesResult:
    """Per-rank shapes of `model` at TP `tp` (EP `ep`) in `engine`'s layout, with the analytic findings."""
    _check_parallel(tp, ep)
    _check_workload(batch, seq)
    lay = resolve(engine, platform)
    if lay.id == "runtime" and not layout_opts:
        args = resolve_model(model)
        res = analytic(args, tp, ep, batch, seq, phase, dtype)
        res.findings = analytic_findings(res, unsharded(res))
        return res
    spec = _spec_of(model)
    sw = parse_switches(lay, layout_opts)
    res = layout_shapes(spec, lay, tp, ep, batch, seq, phase, dtype, sw)
    one = layout_shapes(spec, lay, 1, 1, batch, seq, phase, dtype, sw) if tp > 1 else None
    res.findings = analytic_findings(res, one)
    return res


def _spec_of(model: str) -> ModelSpec:
    """A runtime preset or any family's config.json as a ModelSpec."""
    if model in PRESETS:
        return to_spec(resolve_model(model))
    return ModelSpec.load(model)


def unsharded(res: ShapesResult) -> ShapesResult | None:
    """The same model and workload at TP 1 (one more meta build, milliseconds), for SH007; None at TP 1."""
    if res.tp == 1:
        return None
    wl = res.workload
    return analytic(ModelArgs(**res.config), 1, 1, wl.batch, wl.seq, wl.phase, res.dtype)


def live_shapes(model: str = "tiny", tp: int = 2, ep: int = 1, device: str = "cpu", batch: int = 2, seq: int = 64,
                decode_steps: int = 2, dtype: str = "bf16") -> ShapesResult:
    """Start `tp` real ranks of the runtime, record the shapes they receive, compare with the analytic ones."""
    _check_parallel(tp, ep)
    _check_workload(batch, seq)
    args = resolve_model(model)
    if seq + decode_steps > args.max_seq_len:
        raise BadInput(f"--seq {seq} + {decode_steps} decode steps exceeds {args.name}'s max_seq_len "
                       f"{args.max_seq_len}")
    res = analytic(args, tp, ep, batch, seq, "prefill", "fp32" if device == "cpu" else dtype)
    lc = capture_live(model, tp, ep, device, batch, seq, decode_steps, weight_bytes_per_rank=res.ranks[0].weight_bytes)
    res.findings = analytic_findings(res, unsharded(res))
    res.comparison = compare_calls(lc.calls, res, "live", tokens=lc.tokens, batch=batch)
    res.findings.extend(res.comparison.findings)
    res.notes.append(f"live: {tp} ranks on {device}, batch {batch}, prompt {seq}, {decode_steps} decode steps; "
                     f"{len(lc.calls)} calls captured at dispatch level")
    return res


def profile_shapes(paths: list[str], tp: int | None = None, ep: int = 1, model: str | None = None,
                   dtype: str = "bf16", engine: str | None = None, layout_opts: tuple[str, ...] = ()) -> ShapesResult:
    """Traced shapes of per-rank traces (or a saved Profile), compared across ranks and, when the model is known
    (`model`: a preset or any family's config.json; else the profile's meta), with the per-rank shapes of the layout
    of the engine that wrote the trace (`engine` overrides it): GEMMs and attention labelled by annotations, module
    events or shape matching; findings SH005, SH006, SH008 (work replicated across TP ranks) and SH009 (GEMMs the
    config does not explain). The TP size is the trace's (its metadata, else its shapes); a `tp` its shapes
    contradict is bad input."""
    if tp is not None:
        _check_parallel(tp, ep)
    profile = import_paths(paths)
    guess = engine_of(profile)
    if engine:
        lay = resolve(engine, guess.platform)
    else:
        lay = resolve(guess.engine if guess.engine in ("vllm", "sglang", "transformers") else "runtime",
                      guess.platform)
    args, spec = _resolve_any(model, profile)
    par = profile.meta.get("parallel") or {}
    shown = check_tp(profile, spec, tp, ep)
    if tp is not None and isinstance(par.get("tp"), int) and par["tp"] != tp:
        raise BadInput(f"--tp {tp} contradicts the trace: its metadata says TP {par['tp']} ({shown.evidence()}); "
                       "leave --tp out")
    tp = tp or par.get("tp") or shown.tp or (profile_tp(profile) if spec is not None else None)
    ep = ep if ep != 1 else par.get("ep", 1) or 1
    ss = match_profile(profile, spec, tp, ep) if spec is not None else None
    # calls without region labels take the regions the shape matching gave them (one labelling for both counts)
    calls = calls_from_profile(profile, ss.regions if ss is not None else None)
    if not calls and spec is None:
        raise NoEvidence(f"{', '.join(map(str, paths))}: no GEMM-like or attention ops with input shapes; record "
                         "with shapes (torch.profiler record_shapes=True, or mmprof record)")
    ranks = sorted({c.rank for c in calls}) or profile.ranks
    why = f"engine {guess.engine} ({guess.evidence})" if guess.engine != "unknown" else \
        ("engine unknown (no runtime dispatch log, engine steps, custom ops or module classes mmprof knows): the "
         "reference runtime's layout; pass --engine NAME for the engine that wrote the trace")
    if spec is not None and tp:
        if lay.id == "runtime" and args is not None and not layout_opts:
            res = analytic(args, tp, ep, dtype=dtype)
        else:
            res = layout_shapes(spec, lay, tp, ep, dtype=dtype, switches=parse_switches(lay, layout_opts))
        res.comparison = compare_calls(calls, res, "profile")
        res.notes.append(f"profile: compared the {len(calls)} traced calls in known regions (mmprof's labels, module "
                         f"events or shape matching) with the {lay.id} layout of {res.model} at TP {tp} "
                         f"({'--engine' if engine else why}; TP {_tp_source(tp, shown)})")
    else:
        name = (spec.model_type or spec.family) if spec is not None else "(unknown)"
        res = ShapesResult(model=name, tp=tp or len(ranks), ep=ep, dtype=dtype, workload=Workload(), ranks=[],
                           config=spec.to_dict() if spec is not None else {}, layout=lay.id)
        res.comparison = Comparison("profile", len(calls), 0, [], 0, 0, _per_rank(calls), cross_rank(calls),
                                    compared=False)
        if spec is None:
            res.notes.append("profile meta has no model config / TP size: ranks compared with each other only "
                             "(pass --model CONFIG to compare with the model's per-rank shapes too)")
    res.engine = guess.to_dict()
    res.findings.extend(res.comparison.findings)
    if ss is not None:
        res.findings.extend(traced_findings(ss.report, profile))
        rep = ss.report
        res.notes.append(f"shape matching against {spec.model_type or spec.family} at TP {rep.tp}: {rep.matched} of "
                         f"{rep.gemms} weight GEMMs have a shape some part of the config explains (in any layout: separate "
                         f"or fused projections, sharded or whole), {len(rep.ambiguous)} ambiguous, "
                         f"{len(rep.unexplained)} unexplained; {rep.forwards_layered} of {rep.forwards} forwards "
                         "split into the config's layers")
        res.notes.extend(rep.warnings)
    res.notes.append(f"profile: {len(calls)} GEMM-like/attention calls with shapes on ranks {ranks}")
    return res


def _resolve_any(model: str | None, profile) -> tuple[ModelArgs | None, ModelSpec | None]:
    """(runtime ModelArgs when the reference runtime can build it, ModelSpec of any family) for `model` or the
    profile's meta model."""
    if model:
        if model in PRESETS:
            args = resolve_model(model)
            return args, to_spec(args)
        spec = ModelSpec.load(model)
        return (resolve_model(model) if spec.family == "minimax_m3" else None), spec
    meta_model = profile.meta.get("model")
    if isinstance(meta_model, dict):
        args = _args_from_meta(meta_model)
        return args, to_spec(args)
    return None, None


def _tp_source(tp: int, shown) -> str:
    if shown.tp == tp:
        return f"from the trace: {shown.evidence()}"
    return f"from --tp or the profile's metadata ({shown.evidence()})"


def _per_rank(calls) -> dict[int, dict[str, int]]:
    out: dict[int, Counter] = defaultdict(Counter)
    for c in calls:
        ro = role_of(c.scope)
        out[c.rank][ro[1] if ro else "(unscoped)"] += 1
    return {r: dict(v) for r, v in sorted(out.items())}


def _args_from_meta(d: dict) -> ModelArgs:
    """The profile meta's model: a runtime ModelArgs dict or a Hugging Face config."""
    fields = {f.name for f in dataclasses.fields(ModelArgs)}
    if "n_layers" in d and set(d) <= fields:
        return ModelArgs(**d)
    return from_hf_config(d, name=str(d.get("model_type", "profile")))
