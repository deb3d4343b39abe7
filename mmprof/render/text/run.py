"""Terminal rendering of `mmprof run` (a RunSummary)."""

from __future__ import annotations

from mmprof.render.safe import markup
from mmprof.render.text.layout import Col, fit_table


def _f(v, fmt: str = "{:,.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def render_run(s, con) -> None:
    """Print a RunSummary (mmprof.analysis.timeline.runinfo)."""
    r = s.run
    sw = r["switches"]
    wl = r["workload"]
    con.print(f"[bold]{markup(r['preset'] or r['config'])}[/] on {markup(r['device'])} ({markup(r['dtype'])}), "
              f"tp={s.parallel['tp']} ep={s.parallel['ep']}: batch {wl['batch']}, prompt {wl['prompt_len']}, "
              f"{wl['decode_steps']} decode steps")
    con.print(f"switches: experts={sw['moe_impl']}, shared expert={sw['shared_expert']}, "
              f"block reuse K={sw['block_reuse']}, attention={sw['attention']}, "
              f"graphs={'on' if sw.get('graphs') else 'off'}")
    cols = [Col("run", keep=10, wrap=True), Col("prefill tok/s", "right", keep=9, wrap=True),
            Col("decode tok/s", "right", keep=9, wrap=True),
            Col("dilation (prefill / decode / total)", "right", keep=7, wrap=True)]
    tok = r["tokens_per_s"]
    rows = [["plain (no profiler)", _f(tok["plain"]["prefill"]), _f(tok["plain"]["decode"]), "1.00x"]]
    for mode in ("full", "light", "kernels"):
        if mode in tok:
            d = r["dilation_by_phase"][mode]
            kept = " (kept)" if s.capture["mode"] == mode else ""
            rows.append([f"{mode} capture{kept}", _f(tok[mode]["prefill"]), _f(tok[mode]["decode"]),
                         " / ".join(_f(d[k], "{:.2f}x") for k in ("prefill", "decode", "total"))])
    con.print(fit_table(con, cols, rows, title="tokens/s (whole batch; median of plain runs)"))
    c = s.counts
    con.print(f"wrote {markup(s.output)}: {c['kernels']:,} kernels, {c['ops']:,} ops, "
              f"{c['collectives']:,} collectives, {c['dispatch']:,} dispatch rows ({markup(s.capture['mode'])} capture)")
    for w in s.warnings:
        con.print(f"[yellow]warning:[/] {markup(w)}")
