"""Markdown for a pull-request comment: `mmprof diff --markdown FILE`, `verify-fastpath --markdown` (the gate's
verdict per check), `shapes --markdown` (per-rank shapes), and the report.

Trace strings are escaped three times over: control characters become visible escapes (`mmprof.render.safe`),
HTML-significant characters become entities (GitHub renders inline HTML) and Markdown punctuation is
backslash-escaped, so a kernel name can neither inject markup, nor break a table, nor start a line of its own.
"""

from __future__ import annotations

import re

from mmprof.render.safe import visible
from mmprof.render.shapes_tables import comparison_line, headline, shape_tables
from mmprof.units import fmt_ms, fmt_ns, fmt_ns_pair, fmt_pct

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-!|~])")


def md_escape(s: object) -> str:
    text = visible(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def _short(s: str, n: int = 70) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _compared_md(d) -> list[str]:
    """The what-is-compared table, the flags and the profiler's cost, before the verdict."""
    comp = getattr(d, "compared", None)
    out: list[str] = []
    if comp is not None:
        rows = [[md_escape(r.label), md_escape(r.before), md_escape(r.after), "≠" if r.same is False else ""]
                for r in comp.rows if not (r.before == "unknown" and r.after == "unknown")]
        out += _table(["what is compared", md_escape(d.before), md_escape(d.after), ""], rows) + [""]
    out += [x for w in (getattr(d, "preface", []) or []) for x in (f"> ⚠ {md_escape(w)}", "")]
    for side in ("before", "after"):
        t = (d.plain or {}).get(side)
        if t:
            cost = f"; profiler's cost {t['cost']:.2f}x" if t.get("cost") else ""
            out += [f"- plain {side}: {md_escape(t['text'] + cost)}"]
    out += [f"- profiler: {md_escape(c)}" for c in (comp.caveats if comp else [])]
    return out + ([""] if out and out[-1] != "" else [])


def diff_markdown(d, top: int = 10) -> str:
    """The DiffResult as a Markdown comment: what is compared, the verdict and its reasons, then tables."""
    lines = [f"### mmprof diff: {md_escape(d.before)} → {md_escape(d.after)} ({md_escape(d.phase)}"
             + (f", rank {d.rank}" if d.rank is not None else "") + ")", ""]
    pre = list(getattr(d, "preface", []) or [])
    lines += _compared_md(d)
    lines += [f"**Verdict:** {md_escape(d.verdict)}", ""]
    ans = getattr(d, "answer", None)
    if ans is not None:
        lines += [f"- {md_escape(('missing data' if k == 'missing' else k) + ': ' + t)}" for k, t in ans.lines]
        lines += [f"- {md_escape(s.line)}" for s in d.steps if s.phase != d.phase and s.line] + [""]
    lines += _table(["phase", "before", "after", "change", "noise band", "steps"],
                    [[md_escape(s.phase), *fmt_ns_pair(s.before_ns, s.after_ns), fmt_pct(s.change, True),
                      (f"{s.band['lo']:+.1%} to {s.band['hi']:+.1%}" + (" (within noise)" if s.within_noise else ""))
                      if s.band else "-", f"{s.before_steps} / {s.after_steps}"] for s in d.steps])
    lines += ["", f"**Where the wall time went ({md_escape(d.phase)})**", ""]
    lines += _table(["category", "before", "after", "delta"],
                    [[(f"**{c.label}**" if c.category in d.dominant else c.label), fmt_pct(c.before_share),
                      fmt_pct(c.after_share), f"{c.delta_pp:+.1f} pp"] for c in d.categories])
    lines += ["", "**Path changes** (kernel variants that vanished / appeared per region)", ""]
    if d.path_changes:
        lines += [f"- {md_escape(_short(p.summary, 200))}" for p in d.path_changes[:top]]
        if len(d.path_changes) > top:
            lines.append(f"- … {len(d.path_changes) - top} more")
    else:
        lines.append("- none: the same kernel variants ran in every region")
    unit = "per step" if d.per_step else "total"
    for title, rows, detail in ((f"Matched work (region / family), {unit}", d.matched, True),
                                (f"By scope, {unit}", d.by_scope, False), (f"By layer, {unit}", d.by_layer, False),
                                ("By rank, median step time", d.by_rank, False)):
        if not rows:
            continue
        lines += ["", f"<details><summary>{md_escape(title)}</summary>", ""]
        header = ["key", "before", "after", "delta", "change"] + (["variants before → after"] if detail else [])
        body = []
        for r in rows[:top]:
            row = [md_escape(_short(r.key)), fmt_ns(r.before_ns), fmt_ns(r.after_ns), fmt_ns(r.delta_ns),
                   fmt_pct(r.change, True)]
            if detail:
                row.append(md_escape(f"{r.before_detail or '-'} -> {r.after_detail or '-'}"))
            body.append(row)
        lines += _table(header, body) + ["", "</details>"]
    for n in d.notes:
        lines += ["", f"_note: {md_escape(n)}_"]
    for w in d.warnings:
        if w not in pre:
            lines += ["", f"> ⚠ {md_escape(w)}"]
    return "\n".join(lines) + "\n"


def report_markdown(report, top: int = 10) -> str:
    lines = ["### mmprof report", ""]
    if report.graphs is not None:
        lines += [md_escape(report.graphs.line()), ""]
    for ph in report.phases:
        lines += [f"**{md_escape(ph.phase)}**: {md_escape(ph.bottleneck)} (step {fmt_ns(ph.step.median_ns)})", ""]
        lines += _table(["kernel", "family", "time", "share", "bound", "efficiency"],
                        [[md_escape(_short(k.display_name)), md_escape(k.family), fmt_ns(k.time_ns), fmt_pct(k.share),
                          k.bound, fmt_pct(k.efficiency)] for k in ph.top_kernels[:top]])
        lines.append("")
    lines.append(md_escape(report.checks.get("summary", "checks: not available")))
    for w in report.warnings:
        lines += ["", f"> ⚠ {md_escape(w)}"]
    return "\n".join(lines) + "\n"


_STATUS = {"pass": "✅ PASS", "fail": "❌ FAIL", "no_evidence": "⚠️ NO EVIDENCE", "not_applicable": "➖ N/A"}
_VERDICT = {0: "✅ PASS", 1: "❌ FAIL", 2: "⚠️ NO EVIDENCE (never a pass)"}


def verify_markdown(result, verbose: bool = False) -> str:
    """The VerifyResult as a PR comment: the gate's verdict first, one row per check with its detail and the
    evidence it was judged from, then what ran per region."""
    c = result.counts()
    lines = [f"### mmprof verify-fastpath: {_VERDICT[result.exit_code]}", "",
             f"spec `{md_escape(result.spec_id)}` ({md_escape(result.spec_source)}) on "
             f"{md_escape(result.profile or '-')}: "
             f"{c['pass']} passed, {c['fail']} failed, {c['no_evidence']} without evidence, "
             f"{c['not_applicable']} not applicable; {result.events:,} events, {result.attributed:,} in regions", ""]
    lines += [f"> ⚠ {md_escape(w)}" for w in result.warnings] + ([""] if result.warnings else [])
    rows = []
    for r in result.results:
        detail = md_escape(_short(r.message, 400))
        if r.evidence and (r.status != "pass" or verbose):
            detail += "<br>" + "<br>".join("• " + md_escape(_short(x, 160)) for x in r.evidence[:6])
        rows.append([r.code, md_escape(r.id), _STATUS[r.status], detail, md_escape(r.judged_from or "-")])
    lines += _table(["code", "check", "result", "detail", "judged from"], rows)
    if result.regions:
        lines += ["", "<details><summary>what ran per region</summary>", ""]
        lines += _table(["region (layers)", "family / variant", "library", "count", "ms", "share"], [
            [md_escape(f"{g.region} ({g.layers})" if g.layers else g.region),
             md_escape(f"{v['family']} / {_short(str(v['variant']), 50)}")
             + (" (fallback)" if v["path"] == "fallback" else ""),
             md_escape(v["library"]), f"{v['count']:,}", fmt_ms(v["time_ns"]), f"{100 * v['share']:.0f}%"]
            for g in result.regions for v in g.variants[:3]])
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def shapes_markdown(res) -> str:
    """The ShapesResult as Markdown: the layout's per-rank tables, the comparison with a trace, the findings."""
    lines = ["### mmprof shapes", ""]
    if res.ranks:
        lines += [f"**{md_escape(headline(res))}**", ""]
        for t in shape_tables(res):
            lines += [f"**{md_escape(t.title)}**", ""]
            lines += _table([md_escape(h) for h in t.header], [[md_escape(x) for x in r] for r in t.rows]) + [""]
    line = comparison_line(res)
    if line:
        lines += [md_escape(line), ""]
        lines += [f"- rank {u['rank']} `{md_escape(u['scope'])}`: {md_escape(u['why'])}"
                  for u in res.comparison.unmatched[:8]]
        lines += [""] if res.comparison.unmatched else []
    if res.findings:
        lines += _table(["code", "severity", "finding", "detail"],
                        [[f.code, f.severity, md_escape(f.title), md_escape(_short(f.message, 300))]
                         for f in res.findings])
    else:
        lines.append("no findings")
    lines += [""] + [f"> {md_escape(n)}" for n in res.notes]
    return "\n".join(lines) + "\n"


CHECKS_HEADER = """# Check codes

Stable codes in the style of ruff's registry: `FP` for fast-path checks and assertion kinds, `SH` for shape
findings. `mmprof/rules/checks.toml` is the machine-readable source; `mmprof rules` lists them (`--json`, or
`mmprof rules CODE` for one) and this section is generated from it (`mmprof rules --markdown`); a test keeps
the two in sync. Each code is one check, named after what a pass means. FP000-FP004 run as built-in checks
(select them with `checks = [...]` in a spec); FP005-FP009 are the codes spec assertions report under
(`max_launches` -> FP005, `forbid_pattern` -> FP006, `require` -> FP007, `dispatch` -> FP008, `forbid` ->
FP009). LG codes judge the engine's own log (docs/logs.md): `kind = "log"` assertions report under LG001, and
LG002 runs whenever the profile holds a log. SH codes are the findings of `mmprof shapes`. **Evidence** says what a
check needs to pass: without it a check is NO EVIDENCE or NOT APPLICABLE, never a pass. **Formerly** records a
renamed check or a code that took over part of another's meaning (docs/fastpath.md, "Migration").
"""


def checks_markdown(checks) -> str:
    """The documentation of every check code (CheckInfo objects), one section each."""
    parts = [CHECKS_HEADER]
    for c in checks:
        parts.append(f"## {c.code} {c.name}\n\nStatus: {c.status}; severity: {c.severity}.\n\n{c.summary}\n\n"
                     f"**What it does.** {c.what}\n\n**Why is this bad?** {c.why}\n\n**Example.** {c.example}\n\n"
                     f"**Known problems.** {c.known_problems}\n"
                     + (f"\n**Evidence.** {c.evidence}\n" if c.evidence else "")
                     + (f"\n**Formerly.** {c.formerly}\n" if c.formerly and c.formerly != "-" else ""))
    return "\n".join(parts)
