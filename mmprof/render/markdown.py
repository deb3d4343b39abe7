"""Markdown for a pull-request comment: `mmprof diff --markdown FILE` (and the report, for completeness).

Trace strings are escaped three times over: control characters become visible escapes (`mmprof.render.safe`),
HTML-significant characters become entities (GitHub renders inline HTML) and Markdown punctuation is
backslash-escaped, so a kernel name can neither inject markup, nor break a table, nor start a line of its own.
"""

from __future__ import annotations

import re

from mmprof.render.safe import visible
from mmprof.units import fmt_ns, fmt_pct

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


def diff_markdown(d, top: int = 10) -> str:
    """The DiffResult as a Markdown comment: verdict first, then tables."""
    lines = [f"### mmprof diff: {md_escape(d.before)} → {md_escape(d.after)} ({md_escape(d.phase)}"
             + (f", rank {d.rank}" if d.rank is not None else "") + ")", ""]
    pre = list(getattr(d, "preface", []) or [])
    lines += [x for w in pre for x in (f"> ⚠ {md_escape(w)}", "")]  # what is compared, before the verdict
    lines += [f"**Verdict:** {md_escape(d.verdict)}", ""]
    if d.plain:  # the timing without the profiler, right under the profiled verdict
        lines += [md_escape(d.plain["text"]), ""]
    lines += _table(["phase", "before", "after", "change"],
                    [[md_escape(s.phase), fmt_ns(s.before_ns), fmt_ns(s.after_ns), fmt_pct(s.change, True)] for s in d.steps])
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
        if not (d.plain and n == d.plain["text"]):
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


CHECKS_HEADER = """# Check codes

Stable codes in the style of ruff's registry: `FP` for fast-path checks and assertion kinds, `SH` for shape
findings. `mmprof/rules/checks.toml` is the machine-readable source; `mmprof rules` lists them (`--json`, or
`mmprof rules CODE` for one) and this section is generated from it (`mmprof rules --markdown`); a test keeps
the two in sync. FP000-FP004 run as built-in checks (select them with `checks = [...]` in a spec); FP003-FP006
are also the codes spec assertions report under (`require` / `dispatch` -> FP003, `forbid` -> FP004,
`max_launches` -> FP005, `forbid_pattern` -> FP006). LG codes judge the engine's own log (docs/logs.md): `kind = "log"`
assertions report under LG001, and LG002 runs whenever the profile holds a log. SH codes are the findings of
`mmprof shapes`.
"""


def checks_markdown(checks) -> str:
    """The documentation of every check code (CheckInfo objects), one section each."""
    parts = [CHECKS_HEADER]
    for c in checks:
        parts.append(f"## {c.code} {c.name}\n\nStatus: {c.status}; severity: {c.severity}.\n\n{c.summary}\n\n"
                     f"**What it does.** {c.what}\n\n**Why is this bad?** {c.why}\n\n**Example.** {c.example}\n\n"
                     f"**Known problems.** {c.known_problems}\n")
    return "\n".join(parts)
