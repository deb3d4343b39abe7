"""Terminal rendering of `mmprof history` (runs over time and the gate's findings)."""

from __future__ import annotations

from mmprof.render.safe import markup
from mmprof.render.text.layout import Col, fit_table


def _ms(s: dict | None) -> str:
    if not s:
        return "-"
    spread = (s["q75_ns"] - s["q25_ns"]) / s["median_ns"] if s["median_ns"] else 0.0
    return f"{s['median_ns'] / 1e6:,.3f} ±{spread / 2:.0%}"


def _phases(h) -> list[str]:
    seen = {p for r in h.runs for p in r.steps}
    order = {"prefill": 0, "mixed": 1, "decode": 2}
    return sorted(seen, key=lambda p: (order.get(p, 3), p))


def _runs_table(h, con) -> None:
    phases = _phases(h)
    cols = [Col("run", keep=10), Col("date", keep=3), Col("model", keep=4), Col("TP", "right", keep=2),
            Col("git", keep=1)] + [Col(f"{p} step ms", "right", keep=9) for p in phases] + [
            Col("top regions", wrap=True, keep=6), Col("routed experts", fold=True, keep=7)]
    rows = []
    for r in h.runs:
        ph = h.phase or ("decode" if "decode" in r.regions else next(iter(r.regions), None))
        top = ", ".join(f"{pat} {share:.0%}" for pat, share in r.regions.get(ph, [])) if ph else ""
        var = (r.variants.get(ph) or {}).get("layers.*.moe.routed", "-") if ph else "-"
        rows.append([r.run, r.date[:16], str(r.model or "-"), str(r.tp or "-"), str(r.git_rev or "-")[:10]]
                    + [_ms(r.steps.get(p)) for p in phases] + [top or "-", var])
    con.print(fit_table(con, cols, rows, title=f"{len(h.runs)} run(s) in {h.store} (step: median ± half the "
                                              "interquartile spread)"))


def render_history(h, con) -> None:
    _runs_table(h, con)
    for n in h.notes:
        con.print(f"note: {markup(n)}")
    if not h.checked:
        return
    head = f"gate: run {markup(h.candidate)} against {markup(h.baseline)}"
    if not h.findings:
        con.print(f"{head}: [green]PASS[/] (same dominant variants; no step time beyond {h.threshold:.0%} and noise)")
        return
    con.print(f"{head}: [red]FAIL[/]")
    for f in h.findings:
        con.print(f"  {markup(f.message)}")
