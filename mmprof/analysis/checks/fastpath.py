"""The built-in fast-path checks FP000-FP004, registered by code; each a function of the evaluation Context.

Each returns (status, message, evidence lines, data); `data["judged_from"]` names the evidence used. They judge
from the best evidence available, in order: the runtime's dispatch log, the structure of the profile (regions from
annotations, module events or shapes), the kernels' classes (FP003: fast / fallback per region; FP004) and, for
FP002, kernel names and counts per step. A pass needs evidence of what it says (FP001 passes on a fused shared
expert, not on a missing shared-expert region); without it they return no_evidence or, when the model has no such
part, not_applicable, never pass.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from mmprof.analysis.checks.context import (LABEL_SOURCE, Context, dense_attention_only, model_has,
                                            no_indexer_anywhere, top_kernels)
from mmprof.analysis.checks.registry import check
from mmprof.analysis.shapes.gemm_calls import canonical
from mmprof.labels import region_pattern
from mmprof.units import fmt_ns, fmt_ranges

Verdict = tuple[str, str, list[str], dict[str, Any]]


@check("FP000")
def fp000(ctx: Context) -> Verdict:
    ev = ctx.events
    what = "kernel" if ctx.source == "kernels" else "outermost compute CPU op"
    if not len(ev):
        return ("no_evidence", "the profile has no kernel events and no CPU ops: nothing to verify "
                "(was the GPU activity captured?)", [], {"events": 0, "judged_from": "the profile's device events"})
    attributed = int(ev["region"].notna().sum())
    return ("pass", f"{len(ev)} {what} events ({fmt_ns(ev['dur_ns'].sum())}), {attributed} attributed to regions, "
            f"{len(ctx.dispatch)} dispatch rows", [], {"events": int(len(ev)), "attributed": attributed,
                                                         "dispatch_rows": int(len(ctx.dispatch)),
                                                         "judged_from": f"the profile's {what} events"})


def _not_applicable_fp001(ctx: Context) -> Verdict | None:
    """No experts, or experts without a shared expert: there is no shared expert to fuse."""
    d = ctx.dispatch
    if len(d) and (d["op"] == "moe.shared").any():
        return None
    for part, what in (("experts", "no MoE layers"), ("shared_expert", "no shared expert")):
        has, src = model_has(ctx, part)
        if has is False:
            return "not_applicable", f"the model has {what} (from {src}): nothing to fuse", [], {"judged_from": src}
    return None


def _not_applicable_fp002(ctx: Context) -> Verdict | None:
    """No block-selection indexer in the model, or dense attention in the run: nothing to reuse."""
    if dense_attention_only(ctx):
        return ("not_applicable", "the run used dense attention (dispatch log: attn.core = dense in every call, no "
                "attn.indexer calls): no block selection to reuse", [], {"judged_from": "dispatch log"})
    has, src = model_has(ctx, "indexer")
    if has is False:
        return ("not_applicable", f"the model has no sparse-attention indexer (from {src}): no block selection to "
                "reuse", [], {"judged_from": src})
    if has is None and _sparse_layers(ctx) is None and no_indexer_anywhere(ctx):
        return ("not_applicable", "no indexer in this profile: no attn.indexer dispatch rows or regions and none of "
                "the kernels of block selection (indexer_score, index_topk, sparse_attention); a model without "
                "sparse attention has nothing to reuse (pass --model or --sparse-layers if it should have one)",
                [], {"judged_from": "kernel families"})
    return None


@check("FP001")
def fp001(ctx: Context) -> Verdict:
    """Shared expert fused: dispatch `moe.shared`=fused, or a model known to have a shared expert whose MoE layers
    ran with no layers.*.moe.shared region. Fails on `separate` rows or events under layers.*.moe.shared."""
    ev, d = ctx.events, ctx.dispatch
    na = _not_applicable_fp001(ctx)
    if na:
        return na
    evidence: list[str] = []
    verdicts = []
    judged: list[str] = []
    rows = d[d["op"] == "moe.shared"] if len(d) else d
    if len(rows):
        judged.append("dispatch log")
        sep = rows[rows["impl"] == "separate"]
        if len(sep):
            verdicts.append("fail")
            evidence.append(f"dispatch log: moe.shared = separate in layers {fmt_ranges(sep['layer'])} "
                            f"({len(sep)} calls; requested {', '.join(sorted(map(str, sep['requested'].dropna().unique()))) or '-'})")
        else:
            verdicts.append("pass")
            evidence.append(f"dispatch log: moe.shared = {', '.join(sorted(map(str, rows['impl'].dropna().unique())))} "
                            f"in {len(rows)} calls")
    moe = ev[ev["role"].astype(str).str.startswith("moe.")] if len(ev) and ev["role"].notna().any() else ev.iloc[:0]
    shared = moe[moe["role"] == "moe.shared"]
    if len(shared):
        judged.append(_sources(shared))
        verdicts.append("fail")
        gemms = shared[shared["family"].isin(["gemm", "grouped_gemm"])]
        per = gemms.groupby(["rank", "step", "layer"]).size()
        evidence.append(f"{len(shared)} events ({fmt_ns(shared['dur_ns'].sum())}) under layers.*.moe.shared in "
                        f"layers {fmt_ranges(shared['layer'])}; {int(per.max()) if len(per) else 0} GEMMs per "
                        "layer-step")
        evidence += top_kernels(shared, 4)
    elif len(moe) and not len(rows):
        has, src = model_has(ctx, "shared_expert")
        unsure = (ev["role"] == "moe").any()  # a block whose part the shape matching could not tell
        slot = _fused_slot(ctx, moe)
        if slot and has is not False:
            judged.append(f"{_sources(moe)} and op shapes")
            verdicts.append("pass")
            evidence.append(slot)
        elif has and not unsure and not src.startswith("vLLM's MoE custom op"):  # that op runs it on its own
            # (moe_forward_shared runs the shared expert as its own MLP: never evidence that it was fused)
            judged.append(f"{_sources(moe)} and {src}")
            verdicts.append("pass")
            evidence.append(f"the model has a shared expert (from {src}); its MoE layers {fmt_ranges(moe['layer'])} "
                            f"ran ({len(moe)} events in layers.*.moe.*) with no layers.*.moe.shared region: it ran "
                            "inside the routed experts")
        else:
            why = ("some MoE events are placed in a layer's MoE block without telling routed from shared"
                   if unsure else "the model may have no shared expert at all")
            return ("no_evidence", "MoE layers ran with no layers.*.moe.shared region, which does not show the shared "
                    f"expert fused ({why}); pass --model CONFIG (a config that says whether the model has a shared "
                    "expert) or record the dispatch log", evidence, {"judged_from": _sources(moe)})
    data = {"judged_from": "; ".join(judged)}
    if "fail" in verdicts:
        hint = _engine_hint(ctx)
        return "fail", "the shared expert ran as a separate MLP in MoE layers" + hint, evidence, data
    if "pass" in verdicts:
        return "pass", "the shared expert ran fused into the routed experts", evidence, data
    return ("no_evidence", "no dispatch log and no MoE regions (layers.*.moe.*) to judge the shared expert from; "
            "record with scope labels (mmprof record / mmprof run), a with_stack trace, or --model CONFIG for a trace "
            "with shapes", evidence, data)


def _fused_slot(ctx: Context, moe: Any) -> str | None:
    """Evidence of a fused shared expert in the shapes: the routed grouped GEMM holds more expert slots than the
    router scores experts (the reference runtime, SGLang and vLLM's ROCm FSE append the shared expert as a slot)."""
    if "op_dims" not in moe:
        return None
    experts = ctx.model.n_experts if ctx.model is not None and ctx.model.n_experts else None
    src = "--model"
    if experts is None:
        router = moe[(moe["role"] == "moe.router").to_numpy(dtype=bool) & moe["op_dims"].notna().to_numpy(dtype=bool)]
        ns = {c[1] for c in (_mnkg(o, d) for o, d in zip(router["op_name"], router["op_dims"])) if c and c[3] == 1}
        if len(ns) != 1:
            return None
        experts, src = ns.pop(), "the router GEMM's N"
    routed = moe[(moe["role"] == "moe.routed").to_numpy(dtype=bool)
                 & (moe["family"] == "grouped_gemm").to_numpy(dtype=bool)]
    groups = {c[3] for c in (_mnkg(o, d) for o, d in zip(routed["op_name"], routed["op_dims"])) if c and c[3] > 1}
    if len(groups) != 1:
        return None
    g = groups.pop()
    if g <= experts:
        return None
    return (f"the routed experts' grouped GEMM holds {g} expert slots for {experts} routed experts ({src}): "
            f"{g - experts} shared slot(s) fused into it, in layers {fmt_ranges(routed['layer'])}")


def _mnkg(op: Any, dims: Any) -> tuple[int, int, int, int] | None:
    if not isinstance(op, str) or not isinstance(dims, str):
        return None
    try:
        shapes = json.loads(dims)
    except ValueError:
        return None
    return canonical(op, shapes) if isinstance(shapes, list) else None


def _sources(ev: Any) -> str:
    """The evidence the events' regions stand on, in words (scope labels, module events, op shapes, ...)."""
    if "label_source" not in ev or not len(ev):
        return "region labels"
    srcs = sorted({LABEL_SOURCE.get(x, str(x)) for x in ev["label_source"].dropna().unique()})
    return " and ".join(srcs) or "region labels"


def _engine_hint(ctx: Context, code: str = "FP001") -> str:
    """What the engine that wrote the trace offers instead (rules/layouts.toml), for a failing FP001 / FP002."""
    eng = getattr(ctx, "engine", None)
    if eng is None or eng.engine not in ("vllm", "sglang"):
        return ""
    hints = {
        ("FP001", "vllm", "cuda"): "vLLM's CUDA path always runs it as its own MLP, SharedExperts via "
                                   "moe_forward_shared: no fused path exists there; leave FP001 out of a vLLM CUDA spec",
        ("FP001", "vllm", "rocm"): "vLLM on ROCm fuses it with VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS=1 (not "
                                   "under expert parallelism)",
        ("FP001", "sglang", "cuda"): "SGLang fuses it unless --disable-shared-experts-fusion (or under DeepEP)",
        ("FP001", "sglang", "rocm"): "SGLang fuses it unless --disable-shared-experts-fusion (or under DeepEP)",
        ("FP002", "vllm", "cuda"): "vLLM's CUDA path computes the selection in every sparse layer: no reuse exists "
                                   "there; leave FP002 out of a vLLM CUDA spec",
        ("FP002", "vllm", "rocm"): "vLLM on ROCm reuses it with --hf-overrides use_index_cache=true, "
                                   "index_topk_freq=K",
    }
    hint = hints.get((code, eng.engine, eng.platform))
    return f" ({hint})" if hint else ""


def _sparse_layers(ctx: Context) -> list[int] | int | None:
    """Sparse-attention layer indices (or just their count) from the option, the model config, or the log."""
    v = ctx.sparse_layers
    if v is None:
        model = ctx.meta.get("model") or (ctx.meta.get("run") or {}).get("model") or {}
        if isinstance(model, dict):
            cfg = model.get("sparse_attention_config") if isinstance(model.get("sparse_attention_config"), dict) else {}
            freq = model.get("sparse_attention_freq") or cfg.get("sparse_attention_freq")
            if not freq and isinstance(model.get("attn_types"), list):  # the reference runtime's ModelArgs
                freq = [t == "sparse" for t in model["attn_types"]]
            if isinstance(freq, list) and freq:
                v = [i for i, f in enumerate(freq) if f]
            for key in ("sparse_layers", "num_sparse_layers", "n_sparse_layers"):
                if v is None and model.get(key) is not None:
                    v = model[key]
            n = model.get("num_hidden_layers", model.get("n_layers"))
            if v is None and isinstance(n, int):
                for key in ("first_sparse_layer", "n_dense_layers", "num_dense_layers", "first_k_dense", "first_k_dense_replace"):
                    if isinstance(model.get(key), int):
                        v = list(range(model[key], n))
                        break
    if v is None and len(ctx.dispatch):
        rows = ctx.dispatch[ctx.dispatch["op"] == "attn.indexer"]
        if len(rows):
            v = sorted({int(x) for x in rows["layer"] if x >= 0})
    if isinstance(v, list):
        return sorted(int(x) for x in v)
    if isinstance(v, int) and v > 0:
        return v
    return None


def _adjacent_pairs(computed: set[int], sparse: list[int] | None) -> list[tuple[int, int]]:
    order = sparse if sparse else sorted(computed)
    pairs = []
    for a, b in zip(order, order[1:]):
        adjacent = True if sparse else (b == a + 1)
        if adjacent and a in computed and b in computed:
            pairs.append((a, b))
    return pairs


@check("FP002")
def fp002(ctx: Context) -> Verdict:
    """Block selection recomputed on adjacent sparse layers."""
    ev, d = ctx.events, ctx.dispatch
    na = _not_applicable_fp002(ctx)
    if na:
        return na
    sparse = _sparse_layers(ctx)
    sparse_list = sparse if isinstance(sparse, list) else None
    per_step: dict[tuple[int, int], set[int]] = {}
    judged = None
    rows = d[d["op"] == "attn.indexer"] if len(d) else d
    if len(rows):
        judged = "dispatch log"
        for (rank, step), g in rows.groupby(["rank", "step"]):
            per_step[(int(rank), int(step))] = {int(x) for x in g.loc[g["impl"] == "computed", "layer"]}
    elif len(ev) and ev["role"].notna().any() and (ev["role"] == "attn.indexer").any():
        idx = ev[ev["role"] == "attn.indexer"]
        judged = _sources(idx)
        for (rank, step), g in idx.groupby(["rank", "step"]):
            per_step[(int(rank), int(step))] = {int(x) for x in g["layer"]}
        # steps in which no indexer ran at all still count as steps (everything reused)
    if judged:
        bad = {k: _adjacent_pairs(v, sparse_list) for k, v in per_step.items()}
        bad = {k: v for k, v in bad.items() if v}
        n_sparse = len(sparse_list) if sparse_list else (sparse if isinstance(sparse, int) else None)
        computed = [len(v) for v in per_step.values()]
        data = {"judged_from": judged, "steps": len(per_step), "sparse_layers": n_sparse,
                "computed_per_step": max(computed) if computed else 0}
        if bad:
            (rank, step), pairs = next(iter(sorted(bad.items())))
            evid = [f"rank {rank} step {step}: selection computed in layers {fmt_ranges(per_step[(rank, step)])}"
                    f"{f' of {n_sparse} sparse layers' if n_sparse else ''}; adjacent pairs {pairs[:6]}"]
            return ("fail", f"block selection recomputed on adjacent sparse layers in {len(bad)} of {len(per_step)} "
                    f"steps (from the {judged}){_engine_hint(ctx, 'FP002')}", evid, data)
        if not per_step:
            return "no_evidence", "no indexer calls found", [], data
        return ("pass", f"no two adjacent sparse layers computed the selection in any of {len(per_step)} steps "
                f"(at most {data['computed_per_step']} computations per step, from the {judged})", [], data)
    # Names only: count indexer-score kernels per forward against the number of sparse layers.
    if len(ev):
        idx = ev[(ev["family"] == "indexer_score")]
        if not len(idx):
            idx = ev[(ev["family"] == "topk") & (ev["variant"] == "index_topk")]
        if len(idx):
            if sparse is None:
                return ("no_evidence", f"{len(idx)} indexer kernels but the number of sparse layers is unknown; "
                        "pass --sparse-layers N (or set sparse_layers in the spec)", [], {"indexer_events": int(len(idx))})
            if not (idx["step"] >= 0).any():
                return ("no_evidence", "indexer kernels found but no step boundaries (ProfilerStep / mmprof.step "
                        "annotations) to count them per forward", [], {"indexer_events": int(len(idx))})
            n_sparse = len(sparse) if isinstance(sparse, list) else int(sparse)
            counts = idx[idx["step"] >= 0].groupby(["rank", "step"]).size()
            limit = math.ceil(n_sparse / 2)
            worst = int(counts.max())
            data = {"judged_from": "kernel counts", "sparse_layers": n_sparse, "max_per_step": worst, "limit": limit,
                    "steps": int(len(counts))}
            evid = [f"up to {worst} indexer-score launches per step for {n_sparse} sparse layers",
                    *top_kernels(idx, 2)]
            if worst > limit:
                return ("fail", f"{worst} selections per step for {n_sparse} sparse layers (> {limit}): some adjacent "
                        "sparse layers recompute the block selection", evid, data)
            return ("pass", f"at most {worst} selections per step for {n_sparse} sparse layers (<= {limit})", evid, data)
    return ("no_evidence", "no dispatch log, no layers.*.attn.indexer regions and no indexer kernels the rules know: "
            "cannot judge block-selection reuse", [], {})


@check("FP003")
def fp003(ctx: Context) -> Verdict:
    """The requested implementations ran (dispatch log), else no region ran a fallback kernel in place of a fast
    one (the kernels' fast / fallback classification)."""
    d = ctx.dispatch
    if not len(d):
        return _fp003_kernels(ctx)
    req = d["requested"].notna().to_numpy(dtype=bool)
    impl = d["impl"].astype(object).to_numpy()
    want = d["requested"].astype(object).to_numpy()
    # `<requested>_<variant>` (e.g. sparse_masked for sparse) is a variant of the requested implementation.
    same = np.array([i == w or (isinstance(i, str) and isinstance(w, str) and i.startswith(w + "_"))
                     for i, w in zip(impl, want)], dtype=bool)
    mism = d[req & ~same]
    variants = d[req & same & (d["impl"] != d["requested"]).to_numpy(dtype=bool)]
    data = {"judged_from": "dispatch log", "rows": int(len(d)), "mismatched": int(len(mism)),
            "variants": int(len(variants))}
    if len(mism):
        ev = []
        for (op, req_impl, impl, reason), g in mism.groupby(["op", "requested", "impl", "reason"], dropna=False):
            ev.append(f"{op}: requested {req_impl}, ran {impl} in layers {fmt_ranges(g['layer'])} ({len(g)} calls)"
                      + (f"; reason: {reason}" if isinstance(reason, str) else ""))
        return "fail", f"{len(mism)} of {len(d)} dispatched calls did not run the requested implementation", ev, data
    ops = ", ".join(sorted({str(o) for o in d["op"].dropna()}))
    notes = [f"{op}: {impl_} for requested {req_impl} in layers {fmt_ranges(g['layer'])} ({len(g)} calls)"
             + (f"; {reason}" if isinstance(reason, str) else "")
             for (op, req_impl, impl_, reason), g in variants.groupby(["op", "requested", "impl", "reason"], dropna=False)]
    return "pass", f"all {len(d)} dispatched calls ran the requested implementation ({ops})", notes, data


def _fp003_kernels(ctx: Context) -> Verdict:
    """Per region (layer index as *), phase and family: kernels the rules mark fast or fallback. A family that ran
    on the fallback path there (alone, or beside its fast path) is a fast path missing."""
    ev = ctx.events
    judged = "kernel classes (fast / fallback per region; no dispatch log)"
    if not len(ev):
        return "no_evidence", "no device events and no dispatch log", [], {"judged_from": judged}
    cls = ev[ev["path"].isin(["fast", "fallback"]).to_numpy(dtype=bool)]
    if not len(cls):
        return ("no_evidence", f"no dispatch log, and none of the {len(ev)} events is a kernel the rules mark fast "
                "or fallback (all neutral): nothing says whether a fast path ran (mark kernels with --rules)",
                [], {"judged_from": judged})
    reg = cls["region"].astype(object).map(lambda r: region_pattern(r) if isinstance(r, str) else "(no region)")
    cls = cls.assign(rp=reg.to_numpy(), ph=cls["phase"].fillna("-").to_numpy())
    bad, good = [], []
    for (rp, ph, fam), g in cls.groupby(["rp", "ph", "family"], sort=True, dropna=False):
        fb = g[g["path"] == "fallback"]
        where = f"{rp}" + (f" ({ph})" if ph != "-" else "")
        if len(fb):
            fast = g[g["path"] == "fast"]
            bad.append((where, fam, fb, len(fast)))
        else:
            good.append((rp, fam, ph))
    data = {"judged_from": judged, "groups": len(good) + len(bad), "fallback_groups": len(bad)}
    if bad:
        evid = []
        for where, fam, fb, n_fast in bad[:6]:
            evid.append(f"{where}: {fam} ran the fallback path in {len(fb)} events ({fmt_ns(fb['dur_ns'].sum())})"
                        + (f" beside {n_fast} fast-path ones" if n_fast else " and never its fast path"))
            evid += top_kernels(fb, 2)
        return ("fail", f"a fallback path ran in place of the fast one in {len(bad)} of {len(good) + len(bad)} "
                "region / phase / family groups", evid, data)
    listed: dict[str, set[str]] = {}
    for rp, fam, _ in good:
        listed.setdefault(rp, set()).add(str(fam))
    order = sorted(listed, key=lambda r: (not r.startswith("layers."), r))
    lines = [f"{rp}: {', '.join(sorted(listed[rp]))} on the fast path" for rp in order]
    phases = sorted({ph for _, _, ph in good if ph != "-"})
    return ("pass", f"only fast-path kernels ran in all {len(good)} region / phase / family groups the rules classify "
            f"({len(cls)} of {len(ev)} events are marked fast or fallback, the rest neutral"
            + (f"; phases {', '.join(phases)}" if phases else "") + ")", lines[:MAX_LISTED], data)


MAX_LISTED = 12


@check("FP004")
def fp004(ctx: Context) -> Verdict:
    """Events classified as a fallback path."""
    ev = ctx.events
    judged = "kernel classes (every event's path)"
    if not len(ev):
        return "no_evidence", "no device events", [], {"judged_from": judged}
    fb = ev[ev["path"] == "fallback"]
    if len(fb):
        regions = fb["region"].dropna().astype(str).str.replace(r"^layers\.\d+\.", "layers.*.", regex=True).unique()
        return ("fail", f"{len(fb)} fallback events ({fmt_ns(fb['dur_ns'].sum())}) in "
                f"{', '.join(sorted(regions)) or 'unattributed code'}", top_kernels(fb),
                {"events": int(len(fb)), "rules": sorted(map(str, fb["rule"].dropna().unique())),
                 "judged_from": judged})
    return ("pass", f"none of {len(ev)} events is classified as a fallback path", [],
            {"events": int(len(ev)), "judged_from": judged})
