"""The checks that read the engine's log (docs/logs.md): the `kind = "log"` assertion (LG001), the built-in
log-vs-trace check (LG002), and `cite_log`, which adds the log's facts to the evidence of the other checks whose
regions they concern ("engine log: default MoE config for E=32,N=512 ... concerns fused_moe_kernel x120, 3.2 ms").

Every verdict names the facts with the kernels and time they concern. No log, or a log that states nothing the
rules know, is never a pass.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from mmprof.analysis.checks.context import CheckResult, Context
from mmprof.analysis.checks.registry import check
from mmprof.analysis.checks.spec import Assertion

NO_LOG = ("the profile holds no engine log (`mmprof record` keeps the command's output; for a run recorded "
          "elsewhere give it with --log FILE)")
MAX_CITED = 3


def _result(a: Assertion, status: str, message: str, evidence: list[str] | None = None, **data: Any) -> CheckResult:
    return CheckResult(id=a.id, code=a.code, kind=a.kind, status=status, message=message, description=a.description,
                       evidence=list(evidence or [])[:12], data=data)


def fact_line(k: Any) -> str:
    """One fact with what it concerns: `<what it says> (EngineCore pid=1745, line 57); concerns layers.*.moe.routed,
    family grouped_gemm: fused_moe_kernel x24; 24 kernels, 266.5 us (20% of kernel time)`."""
    g = k.group
    head = f"{g.first.says()} ({g.origin()})"
    if k.judged_by == "nothing":
        return head
    tail = f"; concerns {k.where}: {k.kernels_text()}"
    if k.verdict and k.verdict != "agrees":
        tail += f"; {k.verdict_text()}"
    return head + tail


def _formats_seen(rep: Any, engines: tuple[str, ...]) -> bool:
    """Did the log hold lines of the engine(s) the query names (of any known engine when it names none)?"""
    seen = rep.facts.engines()
    if not engines:
        return bool(seen) or bool(rep.facts.groups)
    fmt_engines = {f.rule.engine for g in rep.facts.groups for f in g.facts}
    known = set(seen) | fmt_engines
    return any(fnmatch.fnmatchcase(e, g) for e in known for g in engines)


@check("LG001", "log")
def log_assertion(a: Assertion, ctx: Context) -> CheckResult:
    q = a.log
    rep = ctx.log
    if rep is None or not rep.present:
        return _result(a, "no_evidence", NO_LOG)
    chosen = [k for k in rep.kernels if q.selects(k.group.kind, k.group.rule.id, k.group.subject, k.group.rule.engine)]
    hits = [k for k in chosen if q.value_ok(k.group.value)]
    others = [k for k in chosen if not q.value_ok(k.group.value)]
    what = q.describe() + (f" = {'|'.join(q.value)}" if q.value else "")
    data = {"query": q.to_dict(), "facts": [k.to_dict() for k in hits + others], "log": rep.facts.describe()}
    if q.expect == "absent":
        if hits:
            return _result(a, "fail", f"the log states {what}: " + "; ".join(fact_line(k) for k in hits[:MAX_CITED]),
                           [fact_line(k) for k in hits], **data)
        if not _formats_seen(rep, q.engine):
            return _result(a, "no_evidence", f"the log ({rep.facts.describe()}) holds no line of "
                           f"{'|'.join(q.engine) or 'an engine the log rules know'}: its silence proves nothing",
                           **data)
        return _result(a, "pass", f"the log ({rep.facts.describe()}) states no {what}", **data)
    if not chosen:
        said = sorted({f"{k.group.subject} {k.group.kind}" for k in rep.kernels})
        return _result(a, "no_evidence", f"the log ({rep.facts.describe()}) states no {q.describe()}; it states: "
                       f"{', '.join(said[:12]) or 'nothing the log rules know'}", **data)
    if others:
        return _result(a, "fail", f"expected {what}; the log states "
                       + "; ".join(fact_line(k) for k in others[:MAX_CITED]), [fact_line(k) for k in others], **data)
    if not hits:  # unreachable: chosen is hits + others
        return _result(a, "no_evidence", f"the log states no {what}", **data)
    return _result(a, "pass", "; ".join(fact_line(k) for k in hits[:MAX_CITED]), [fact_line(k) for k in hits], **data)


@check("LG002")
def log_agrees_with_trace(ctx: Context):
    """The backends the log names against the kernels that ran (runs when the profile holds a log)."""
    rep = ctx.log
    if rep is None or not rep.present:
        return "not_applicable", NO_LOG, [], {}
    if not rep.kernels:
        return ("no_evidence", f"the log ({rep.facts.describe()}) states nothing the log rules know (is it the "
                "engine's log, of a supported version? docs/logs.md)", [], {"log": rep.facts.describe()})
    compared = [k for k in rep.kernels if k.verdict in ("agrees", "partly", "disagrees")]
    data = {"log": rep.facts.describe(), "compared": len(compared), "findings": len(rep.findings),
            "fallbacks": len(rep.fallbacks), "judged_from": "the engine's log (rules/logs.toml) and the kernels each "
                                                             "backend fact concerns"}
    evidence = [fact_line(k) for k in rep.findings] + [fact_line(k) for k in rep.fallbacks]
    fb = ""
    if rep.fallbacks:
        fb = f"; {len(rep.fallbacks)} fallback(s) logged: " + "; ".join(
            f"{k.group.subject} {k.group.kind} {k.group.value} ({k.kernels_text()})" for k in rep.fallbacks[:MAX_CITED])
    if rep.findings:
        return ("fail", "; ".join(f"{k.group.subject}: {k.verdict_text()} ({k.where})" for k in rep.findings) + fb,
                evidence, data)
    if not compared:
        return ("no_evidence", f"the log ({rep.facts.describe()}) names no backend whose kernels ran in this trace"
                + fb, evidence, data)
    agree = "; ".join(f"{k.group.subject} {k.group.value}" + (f" ({k.backend_share:.0%} of the time of the kernels it "
                      "concerns)" if k.backend_share is not None else "") for k in compared[:4])
    return "pass", f"log and kernels agree: {agree}" + fb, evidence + [fact_line(k) for k in compared], data


# which regions each built-in check judges: the facts concerning them are cited in its evidence
CHECK_REGIONS = {"FP001": ("layers.*.moe.shared",), "FP002": ("layers.*.attn.indexer",),
                 "FP003": ("layers.*.moe.routed",), "FP004": ("*",)}


def _overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    return any(x == "*" or y == "*" or fnmatch.fnmatchcase(x, y) or fnmatch.fnmatchcase(y, x) for x in a for y in b)


def cite_log(results: list[CheckResult], assertions: list[Assertion], rep: Any) -> None:
    """Add to each built-in check and region assertion the log facts about its regions (fallbacks and backends
    first), as evidence lines beside the kernel evidence (in place)."""
    if rep is None or not rep.kernels:
        return
    by_id = {a.id: a for a in assertions}
    for r in results:
        if r.code.startswith("LG"):
            continue
        a = by_id.get(r.id)
        regions = tuple(a.region) if a is not None and a.region else CHECK_REGIONS.get(r.code, ())
        if not regions:
            continue
        cited = [k for k in rep.kernels if k.group.rule.regions and _overlap(k.group.rule.regions, regions)
                 and (k.group.fallback or k.group.kind in ("backend", "config") or k.finding)]
        if regions == ("*",):
            cited = [k for k in rep.kernels if k.group.fallback or k.finding]
        cited.sort(key=lambda k: (not k.finding, not k.group.fallback))
        lines = [f"engine log: {fact_line(k)}" for k in cited[:MAX_CITED]]
        if lines:
            r.evidence = (r.evidence + lines)[: max(12, len(r.evidence) + len(lines))]
            r.data.setdefault("log_facts", [k.group.rule.id + "=" + k.group.value for k in cited])
