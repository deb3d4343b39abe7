"""One self-contained HTML file for a diff, a report, a fast-path verdict (`verify-fastpath --html`) or per-rank
shapes (`shapes --html`): inline CSS and inline SVG plots, no script, no network.

Plots: before/after stacked category bars, time per layer (before vs after), and the top matched-work deltas.
Every string from a trace passes through `mmprof.render.safe.visible` (control characters shown as escapes) and
`html.escape(..., quote=True)` (element text and attribute values alike), so a kernel called
`<script>alert(1)</script>` is shown as text and never runs; the page's Content-Security-Policy forbids scripts
anyway. Kernel names show as display names, the full name on hover (`title`).
"""

from __future__ import annotations

from html import escape as _esc

from mmprof.analysis.timeline.breakdown import CATEGORIES, LABELS
from mmprof.render.safe import visible
from mmprof.render.shapes_tables import comparison_line, headline, shape_tables
from mmprof.units import fmt_ms, fmt_ns, fmt_ns_pair, fmt_pct

COLORS = {"compute_bound": "#d62728", "memory_bound": "#1f77b4", "unattributed": "#9e9e9e",
          "communication": "#ff7f0e", "memcpy": "#8c564b", "idle_host": "#e377c2", "idle_other": "#dddddd",
          "idle_between": "#bcbd22", "idle_prep": "#17becf"}
CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}
.verdict{background:#f4f6fa;border-left:4px solid #1f77b4;padding:8px 12px;font-size:15px}
.warn{color:#8a5300}.note{color:#666}code{font-size:12px;word-break:break-all}svg text{font-size:11px}"""


def e(s: object) -> str:
    return _esc(visible(s), quote=True)


def _page(title: str, body: list[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>{e(title)}</title><style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def _stacked(rows: list[tuple[str, dict[str, float]]], width: int = 760) -> str:
    """Horizontal 100% stacked bars, one per row (label, {category: share})."""
    bar_h, left, top = 26, 70, 8
    h = top + len(rows) * (bar_h + 10) + 46
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + left + 20}" height="{h}" role="img">']
    for i, (label, shares) in enumerate(rows):
        y = top + i * (bar_h + 10)
        out.append(f'<text x="0" y="{y + 17}">{e(label)}</text>')
        x = float(left)
        for c in CATEGORIES:
            w = max(shares.get(c, 0.0), 0.0) * width
            if w <= 0:
                continue
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{COLORS[c]}">'
                       f'<title>{e(LABELS[c])}: {shares[c]:.1%}</title></rect>')
            if w > 34:
                out.append(f'<text x="{x + 3:.1f}" y="{y + 17}" fill="#fff">{shares[c]:.0%}</text>')
            x += w
    ly = top + len(rows) * (bar_h + 10) + 8
    for j, c in enumerate(CATEGORIES):
        lx = left + (j % 4) * 190
        yy = ly + (j // 4) * 16
        out.append(f'<rect x="{lx}" y="{yy}" width="10" height="10" fill="{COLORS[c]}"/>'
                   f'<text x="{lx + 14}" y="{yy + 9}">{e(LABELS[c])}</text>')
    out.append("</svg>")
    return "".join(out)


def _paired_bars(items: list[tuple[str, float, float]], width: int = 760) -> str:
    """Vertical before/after bar pairs per item (label, before, after)."""
    if not items:
        return "<p class=note>no data</p>"
    h, base, left = 200, 170, 50
    step = max(min(width / max(len(items), 1), 60), 8)
    vmax = max(max(b, a) for _, b, a in items) or 1.0
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + step * len(items) + 20:.0f}" height="{h + 20}" role="img">']
    out.append(f'<text x="0" y="12">{e(fmt_ns(vmax))}</text><line x1="{left - 4}" y1="{base}" '
               f'x2="{left + step * len(items):.0f}" y2="{base}" stroke="#999"/>')
    bw = step * 0.38
    for i, (label, b, a) in enumerate(items):
        x = left + i * step
        for k, (v, col, tag) in enumerate(((b, "#9ecae1", "before"), (a, "#08519c", "after"))):
            hh = (v / vmax) * (base - 20)
            out.append(f'<rect x="{x + k * bw:.1f}" y="{base - hh:.1f}" width="{bw:.1f}" height="{hh:.1f}" fill="{col}">'
                       f'<title>{e(label)} {tag}: {e(fmt_ns(v))}</title></rect>')
        if len(items) <= 40 or i % max(len(items) // 20, 1) == 0:
            out.append(f'<text x="{x:.1f}" y="{base + 14}">{e(label.replace("layer ", ""))}</text>')
    out.append(f'<rect x="{left}" y="{h + 4}" width="10" height="10" fill="#9ecae1"/><text x="{left + 14}" y="{h + 13}">before</text>'
               f'<rect x="{left + 70}" y="{h + 4}" width="10" height="10" fill="#08519c"/><text x="{left + 84}" y="{h + 13}">after</text>')
    out.append("</svg>")
    return "".join(out)


def _delta_bars(rows, width: int = 760) -> str:
    """Diverging horizontal bars of the top deltas (green faster, red slower)."""
    if not rows:
        return "<p class=note>no deltas</p>"
    left, mid_w, bar_h = 300, (width - 300) / 2, 18
    vmax = max(abs(r.delta_ns) for r in rows) or 1.0
    mid = left + mid_w
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 20}" height="{len(rows) * (bar_h + 4) + 10}" role="img">']
    for i, r in enumerate(rows):
        y = 4 + i * (bar_h + 4)
        w = abs(r.delta_ns) / vmax * (mid_w - 10)
        x = mid if r.delta_ns >= 0 else mid - w
        col = "#c0392b" if r.delta_ns > 0 else "#27ae60"
        key = r.key if len(r.key) <= 44 else r.key[:41] + "..."
        out.append(f'<text x="0" y="{y + 13}">{e(key)}</text><rect x="{x:.1f}" y="{y}" width="{max(w, 1):.1f}" '
                   f'height="{bar_h}" fill="{col}"><title>{e(r.key)}: {e(fmt_ns(r.before_ns))} -&gt; '
                   f'{e(fmt_ns(r.after_ns))}</title></rect>')
    out.append(f'<line x1="{mid:.1f}" y1="0" x2="{mid:.1f}" y2="{len(rows) * (bar_h + 4) + 6}" stroke="#666"/></svg>')
    return "".join(out)


def _table(header: list[str], rows: list[list[str]]) -> str:
    """`rows` cells must already be escaped."""
    return ("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows) + "</table>")


def _compared_html(d) -> list[str]:
    """What is compared (a table), the flags, the plain timings and the profiler's cost, before the verdict."""
    comp = getattr(d, "compared", None)
    out = []
    if comp is not None:
        out.append("<h2>What is compared</h2>" + _table(["", "before", "after", ""], [
            [e(r.label), e(r.before), e(r.after), "&ne;" if r.same is False else ""]
            for r in comp.rows if not (r.before == "unknown" and r.after == "unknown")]))
    out += [f'<p class="warn">warning: {e(w)}</p>' for w in (getattr(d, "preface", []) or [])]
    for side in ("before", "after"):
        t = (d.plain or {}).get(side)
        if t:
            cost = f"; profiler's cost {t['cost']:.2f}x" if t.get("cost") else ""
            out.append(f'<p class="note">plain {e(side)}: {e(t["text"] + cost)}</p>')
    out += [f'<p class="warn">profiler: {e(c)}</p>' for c in (comp.caveats if comp else [])]
    return out


def diff_html(d, top: int = 15) -> str:
    """A self-contained HTML page for a DiffResult."""
    title = f"mmprof diff: {d.before} -> {d.after}"
    pre = list(getattr(d, "preface", []) or [])
    body = [f"<h1>{e(title)} <small>({e(d.phase)}{', rank ' + e(d.rank) if d.rank is not None else ''})</small></h1>"]
    body += _compared_html(d)  # what is compared, before the verdict
    body.append(f'<p class="verdict">{e(d.verdict)}</p>')
    ans = getattr(d, "answer", None)
    if ans is not None:
        body.append("<ul>" + "".join(f"<li><b>{e('missing data' if k == 'missing' else k)}</b>: {e(t)}</li>"
                                     for k, t in ans.lines)
                    + "".join(f"<li>{e(s.line)}</li>" for s in d.steps if s.phase != d.phase and s.line) + "</ul>")
    body.append("<h2>Step time (median over steps)</h2>" + _table(
        ["phase", "before", "after", "change", "noise band", "steps before", "steps after"], [
            [e(s.phase), *(e(x) for x in fmt_ns_pair(s.before_ns, s.after_ns)), e(fmt_pct(s.change, True)),
             e(f"{s.band['lo']:+.1%} to {s.band['hi']:+.1%}" if s.band else "-"), e(s.before_steps),
             e(s.after_steps)] for s in d.steps]))
    body.append(f"<h2>Where the wall time went ({e(d.phase)})</h2>")
    body.append(_stacked([("before", {c.category: c.before_share for c in d.categories}),
                          ("after", {c.category: c.after_share for c in d.categories})]))
    body.append(_table(["category", "before", "after", "delta"], [
        [e(c.label), e(fmt_pct(c.before_share)), e(fmt_pct(c.after_share)), e(f"{c.delta_pp:+.1f} pp")]
        for c in d.categories]))
    body.append("<h2>Path changes</h2>")
    if d.path_changes:
        body.append("<ul>" + "".join(f"<li><code>{e(p.summary)}</code></li>" for p in d.path_changes[:top]) + "</ul>")
    else:
        body.append("<p>none: the same kernel variants ran in every region</p>")
    unit = "per step" if d.per_step else "total"
    body.append(f"<h2>Time per layer ({unit})</h2>")
    body.append(_paired_bars([(r.key, r.before_ns, r.after_ns) for r in d.layers]))
    body.append(f"<h2>Top deltas: matched work (region / family), {unit}</h2>")
    body.append(_delta_bars(d.matched[:top]))
    for title, rows, detail in (("Matched work", d.matched, True), ("By scope", d.by_scope, False),
                                ("By layer", d.by_layer, False), ("By rank (median step time)", d.by_rank, False)):
        if not rows:
            continue
        header = ["key", "before", "after", "delta", "change"] + (["variants before -> after"] if detail else [])
        body.append(f"<h2>{e(title)}</h2>" + _table(header, [
            [f"<code>{e(r.key)}</code>", e(fmt_ns(r.before_ns)), e(fmt_ns(r.after_ns)), e(fmt_ns(r.delta_ns)),
             e(fmt_pct(r.change, True))] + ([f"<code>{e(r.before_detail or '-')} -&gt; {e(r.after_detail or '-')}</code>"]
                                            if detail else []) for r in rows[:top]]))
    body += [f'<p class="note">note: {e(n)}</p>' for n in d.notes]
    body += [f'<p class="warn">warning: {e(w)}</p>' for w in d.warnings if w not in pre]
    return _page(title, body)


def report_html(report, top: int = 15) -> str:
    """A self-contained HTML page for a Report."""
    body = ["<h1>mmprof report</h1>", f"<p class=note>events: {e(report.source)}</p>"]
    for ph in report.phases:
        body.append(f"<h2>{e(ph.phase)}</h2><p class=verdict>{e(ph.bottleneck)}</p>")
        rows = [("all ranks", ph.breakdown.shares)] + [(f"rank {p.rank}", p.breakdown.shares)
                                                       for p in report.per_rank if p.phase == ph.phase]
        body.append(_stacked(rows))
        body.append(_table(["kernel", "family", "calls", "time", "share", "bound", "efficiency"], [
            [f'<code title="{e(k.name)}">{e(k.display_name)}</code>', e(k.family), e(k.count), e(fmt_ns(k.time_ns)), e(fmt_pct(k.share)),
             e(k.bound), e(fmt_pct(k.efficiency))] for k in ph.top_kernels[:top]]))
    body.append(f"<p>{e(report.checks.get('summary', 'checks: not available'))}</p>")
    body += [f'<p class="note">note: {e(n)}</p>' for n in report.notes]
    body += [f'<p class="warn">warning: {e(w)}</p>' for w in report.warnings]
    return _page("mmprof report", body)


_STATUS = {"pass": ("PASS", "#27ae60"), "fail": ("FAIL", "#c0392b"), "no_evidence": ("NO EVIDENCE", "#b7791f"),
           "not_applicable": ("N/A", "#607d8b")}


def verify_html(result) -> str:
    """A self-contained page for a VerifyResult: the verdict, every check with its detail, evidence and what it
    was judged from, and what ran per region."""
    verdict = {0: "PASS", 1: "FAIL", 2: "NO EVIDENCE (never a pass)"}[result.exit_code]
    c = result.counts()
    title = f"mmprof verify-fastpath: {verdict}"
    body = [f"<h1>{e(title)}</h1>",
            f"<p class=verdict>spec <code>{e(result.spec_id)}</code> ({e(result.spec_source)}) on "
            f"<code>{e(result.profile or '-')}</code>: {c['pass']} passed, {c['fail']} failed, {c['no_evidence']} "
            f"without evidence, {c['not_applicable']} not applicable; {result.events:,} events, "
            f"{result.attributed:,} in regions</p>"]
    body += [f'<p class="warn">warning: {e(w)}</p>' for w in result.warnings]
    rows = []
    for r in result.results:
        label, color = _STATUS[r.status]
        ev = "".join(f"<br>&bull; <code>{e(x)}</code>" for x in r.evidence)
        rows.append([e(r.code), e(r.id), f'<b style="color:{color}">{e(label)}</b>',
                     f"{e(r.message)}{ev}", e(r.judged_from or "-")])
    body.append("<h2>Checks</h2>" + _table(["code", "check", "result", "detail", "judged from"], rows))
    if result.regions:
        body.append("<h2>What ran per region</h2>" + _table(
            ["region (layers)", "family / variant", "library", "count", "time", "share"],
            [[e(f"{g.region} ({g.layers})" if g.layers else g.region),
              f"<code>{e(v['family'])} / {e(v['variant'])}</code>" + (" (fallback)" if v["path"] == "fallback" else ""),
              e(v["library"]), e(f"{v['count']:,}"), e(fmt_ms(v["time_ns"]) + " ms"), e(f"{100 * v['share']:.0f}%")]
             for g in result.regions for v in g.variants]))
    return _page(title, body)


def shapes_html(res) -> str:
    """A self-contained page for a ShapesResult."""
    title = "mmprof shapes"
    body = [f"<h1>{e(title)}</h1>"]
    if res.ranks:
        body.append(f"<p class=verdict>{e(headline(res))}</p>")
        for t in shape_tables(res):
            body.append(f"<h2>{e(t.title)}</h2>" + _table(t.header, [[e(x) for x in r] for r in t.rows]))
    line = comparison_line(res)
    if line:
        body.append(f"<h2>Comparison</h2><p>{e(line)}</p>")
        if res.comparison.unmatched:
            body.append("<ul>" + "".join(f"<li>rank {e(u['rank'])} <code>{e(u['scope'])}</code>: {e(u['why'])}</li>"
                                         for u in res.comparison.unmatched[:20]) + "</ul>")
    body.append("<h2>Findings</h2>" + (_table(["code", "severity", "finding", "detail"],
                                              [[e(f.code), e(f.severity), e(f.title), e(f.message)]
                                               for f in res.findings])
                                       if res.findings else "<p>no findings</p>"))
    body += [f'<p class="note">note: {e(n)}</p>' for n in res.notes]
    return _page(title, body)
