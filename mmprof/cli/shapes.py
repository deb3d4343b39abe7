"""`mmprof shapes`: the tensor shapes that land on each rank after TP/EP sharding, with findings.

Three sources, one result object: analytic (meta-device build per rank, the default), `--live` (real ranks
of the reference runtime, shapes captured at dispatch level) and `--profile P` (GEMM-like ops recorded with
shapes in per-rank traces). `--check` exits 1 on an error-level finding.
"""

from __future__ import annotations

import click

from mmprof.cli._common import console, echo_json, json_option


@click.command("shapes")
@click.option("--tp", type=int, default=None, help="Tensor-parallel size (default 8 analytic; from the profile's meta with --profile).")
@click.option("--ep", type=int, default=1, show_default=True, help="Expert-parallel size: 1 (TP-MoE) or equal to --tp.")
@click.option("--model", "model", default=None, help="m3 (default), another runtime preset, or a config.json / checkpoint dir.")
@click.option("--batch", type=click.IntRange(1), default=None, help="Sequences (default 1 analytic, 2 live).")
@click.option("--seq", type=click.IntRange(1), default=None, help="Context / prompt length (default 1024 analytic, 64 live).")
@click.option("--phase", type=click.Choice(["prefill", "decode"]), default="decode", show_default=True,
              help="Which phase's GEMM M to show (analytic).")
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp32"]), default="bf16", show_default=True,
              help="Weight / KV dtype for byte counts.")
@click.option("--live", is_flag=True, help="Start real ranks of the runtime and compare what they receive.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Live ranks on CPU (gloo) or one GPU each (NCCL).")
@click.option("--decode-steps", type=click.IntRange(1, 64), default=2, show_default=True, help="Live decode steps.")
@click.option("--profile", "profiles", multiple=True, type=click.Path(),
              help="A saved Profile or raw per-rank traces recorded with shapes (repeatable).")
@click.option("--check", is_flag=True, help="Exit 1 when any finding is an error (e.g. SH005 shapes, SH006).")
@json_option
@click.pass_context
def shapes(ctx: click.Context, tp, ep, model, batch, seq, phase, dtype, live, device, decode_steps, profiles,
           check, as_json) -> None:
    """Per-rank weight shapes, GEMM problems (M x N x K), KV/index cache bytes per token and findings.

    \b
    mmprof shapes --tp 8                      # the real M3, analytic (meta device)
    mmprof shapes --tp 8 --ep 8 --phase prefill --batch 4 --seq 8192
    mmprof shapes --tp 2 --live --model tiny   # real gloo ranks on CPU, compared with analytic
    mmprof shapes --profile run.json.gz        # traced shapes: compare ranks (and config if known)
    """
    from mmprof.errors import BadInput

    if live and profiles:
        raise BadInput("--live and --profile are separate modes; pick one")
    if profiles:
        res = _profile_mode(list(profiles), tp, ep, model, dtype)
    elif live:
        res = _live_mode(model or "tiny", tp or 2, ep, device, batch or 2, seq or 64, decode_steps, dtype)
    else:
        from mmprof.analysis.shape_findings import analytic_findings
        from mmprof.analysis.shapes import analytic, resolve_model

        res = analytic(resolve_model(model or "m3"), tp or 8, ep, batch or 1, seq or 1024, phase, dtype)
        res.findings = analytic_findings(res)
    if as_json:
        echo_json(res.to_dict())
    else:
        render(res)
    if check and res.has_errors:
        ctx.exit(1)


def _live_mode(model, tp, ep, device, batch, seq, steps, dtype):
    from mmprof.analysis.shape_findings import analytic_findings, compare_calls
    from mmprof.analysis.shapes import analytic, resolve_model
    from mmprof.capture.shapes_live import capture_live

    args = resolve_model(model)
    res = analytic(args, tp, ep, batch, seq, "prefill", "fp32" if device == "cpu" else dtype)
    if seq + steps > args.max_seq_len:
        from mmprof.errors import BadInput

        raise BadInput(f"--seq {seq} + {steps} decode steps exceeds {args.name}'s max_seq_len {args.max_seq_len}")
    lc = capture_live(model, tp, ep, device, batch, seq, steps, weight_bytes_per_rank=res.ranks[0].weight_bytes)
    res.findings = analytic_findings(res)
    res.comparison = compare_calls(lc.calls, res, "live", tokens=lc.tokens, batch=batch)
    res.findings.extend(res.comparison.findings)
    res.notes.append(f"live: {tp} ranks on {device}, batch {batch}, prompt {seq}, {steps} decode steps; "
                     f"{len(lc.calls)} calls captured at dispatch level")
    return res


def _profile_mode(paths, tp, ep, model, dtype):
    from mmprof.analysis.shape_findings import calls_from_profile, compare_calls, cross_rank
    from mmprof.analysis.shapes import ShapesResult, Workload, analytic, resolve_model
    from mmprof.errors import NoEvidence
    from mmprof.importers import import_paths

    profile = import_paths(paths)
    calls = calls_from_profile(profile)
    if not calls:
        raise NoEvidence(f"{', '.join(paths)}: no GEMM-like or attention ops with input shapes; record with shapes "
                         "(torch.profiler record_shapes=True, or mmprof record)")
    args = None
    meta_model = profile.meta.get("model")
    par = profile.meta.get("parallel") or {}
    if model:
        args = resolve_model(model)
    elif isinstance(meta_model, dict):
        args = _args_from_meta(meta_model)
    tp = tp or par.get("tp")
    ep = ep if ep != 1 else par.get("ep", 1) or 1
    ranks = sorted({c.rank for c in calls})
    if args is not None and tp:
        res = analytic(args, tp, ep, dtype=dtype)
        res.comparison = compare_calls(calls, res, "profile")
        res.notes.append(f"profile: compared {len(calls)} traced calls with the analytic shapes of {args.name} at TP {tp}")
    else:
        from mmprof.analysis.shape_findings import Comparison

        res = ShapesResult(model="(unknown)", tp=tp or len(ranks), ep=ep, dtype=dtype, workload=Workload(),
                           ranks=[], config={})
        res.comparison = Comparison("profile", len(calls), 0, [], 0, 0, _per_rank(calls), cross_rank(calls))
        res.notes.append("profile meta has no model config / TP size: ranks compared with each other only "
                         "(pass --model and --tp to compare with the analytic shapes too)")
    res.findings.extend(res.comparison.findings)
    res.notes.append(f"profile: {len(calls)} GEMM-like/attention calls with shapes on ranks {ranks}")
    return res


def _per_rank(calls):
    from collections import Counter, defaultdict

    from mmprof.analysis.shape_findings import role_of

    out: dict[int, Counter] = defaultdict(Counter)
    for c in calls:
        ro = role_of(c.scope)
        out[c.rank][ro[1] if ro else "(unscoped)"] += 1
    return {r: dict(v) for r, v in sorted(out.items())}


def _args_from_meta(d: dict):
    """The profile meta's model: a runtime ModelArgs dict or a Hugging Face config."""
    import dataclasses

    from mmprof.runtime import ModelArgs, from_hf_config

    fields = {f.name for f in dataclasses.fields(ModelArgs)}
    if "n_layers" in d and set(d) <= fields:
        return ModelArgs(**d)
    return from_hf_config(d, name=str(d.get("model_type", "profile")))


# ------------------------------------------------------------------------------------------------ render
def _gib(b: int) -> str:
    return f"{b / 2**30:,.2f} GiB"


def _m(x: float) -> str:
    return f"{x:g}" if x == int(x) else f"{x:.3f}"


def render(res) -> None:
    from rich.table import Table

    from mmprof.analysis.shape_findings import _ranges
    from mmprof.analysis.shapes import rank_label

    con = console()
    wl = res.workload
    if res.ranks:
        groups = res.rank_groups()
        con.print(f"[bold]{res.model}[/] TP {res.tp} EP {res.ep}, {res.dtype}; {wl.phase} batch {wl.batch} seq {wl.seq} "
                  f"(M = {wl.tokens} tokens); " + ("all ranks identical" if len(groups) == 1 else f"{len(groups)} rank groups"))
        reps = [res.ranks[g[0]] for g in groups]
        labels = [rank_label(g) for g in groups]
        for i, k0 in enumerate(reps[0].kinds):
            t = Table(title=f"{k0.kind} layers {_ranges(k0.layers)} ({len(k0.layers)})", title_justify="left")
            t.add_column("item", no_wrap=True)
            for lab in labels:
                t.add_column(lab, justify="right", no_wrap=True)
            kinds = [r.kinds[i] for r in reps]
            a = [k.attention for k in kinds]
            t.add_row("q / KV / index-q / index-k heads",
                      *[f"{x.q_heads} / {x.kv_heads}" + (f" (x{x.kv_replicas} repl.)" if x.kv_replicas > 1 else "")
                        + (f" / {x.index_q_heads} / {x.index_k_heads} (all ranks)" if x.sparse else "") for x in a])
            for g_i, g in enumerate(k0.gemms):
                cells = []
                for k in kinds:
                    gg = k.gemms[g_i]
                    s = f"{_m(gg.m)} x {gg.n} x {gg.k}"
                    if gg.groups > 1:
                        s = f"{gg.groups}x [{s}]" + (f" + {gg.extra_rows} shared rows" if gg.extra_rows else "") + " (est.)"
                    cells.append(s + f" {gg.dtype}")
                t.add_row(f"GEMM {g.name}  M x N x K", *cells)
            for w in k0.weights:
                if len(k0.weights[w]) > 1:
                    t.add_row(f"  weight {w}", *[str(tuple(k.weights[w])) for k in kinds])
            t.add_row("weight bytes / layer", *[_gib(k.weight_bytes) for k in kinds])
            t.add_row("KV + index cache B/token/layer", *[f"{k.kv_bytes_per_token:,} + {k.index_bytes_per_token:,}" for k in kinds])
            con.print(t)
        t = Table(title="per rank (whole model)", title_justify="left")
        t.add_column("item", no_wrap=True)
        for lab in labels:
            t.add_column(lab, justify="right", no_wrap=True)
        t.add_row("GEMM lm_head M x N x K", *[f"{r.model_gemms[0].m} x {r.model_gemms[0].n} x {r.model_gemms[0].k}" for r in reps])
        t.add_row("embed rows (vocab shard)", *[str(r.model_weights.get("embed.weight", ["?"])[0]) for r in reps])
        t.add_row("weight bytes", *[_gib(r.weight_bytes) for r in reps])
        t.add_row("KV cache B/token", *[f"{r.kv_bytes_per_token:,}" for r in reps])
        t.add_row("index cache B/token", *[f"{r.index_bytes_per_token:,}" for r in reps])
        con.print(t)
    c = res.comparison
    if c is not None:
        con.print(f"[bold]{c.source}[/]: {c.calls} calls, {c.matched} match the analytic shapes, "
                  f"{len(c.unmatched)} differ, {c.unjudged} unjudged, {c.unscoped} outside known scopes")
        for u in c.unmatched[:8]:
            con.print(f"  rank {u['rank']} {u['scope']} ({u['phase']} step {u['step']}): {u['why']}")
    if res.findings:
        t = Table(title="findings", title_justify="left")
        for col in ("code", "severity", "finding", "layers", "ranks", "detail"):
            t.add_column(col, overflow="fold")
        color = {"error": "red", "warning": "yellow", "info": "cyan"}
        for f in res.findings:
            t.add_row(f.code, f"[{color[f.severity]}]{f.severity}[/]", f.title, _ranges(f.layers) if f.layers else "-",
                      _ranges(f.ranks) if f.ranks else "-", f.message)
        con.print(t)
    else:
        con.print("no findings")
    for n in res.notes:
        con.print(f"[dim]note: {n}[/]")
