"""Terminal rendering of `mmprof run` (a RunSummary)."""

from __future__ import annotations

from rich.table import Table


def _f(v, fmt: str = "{:,.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def render_run(s, con) -> None:
    """Print a RunSummary (mmprof.analysis.runinfo)."""
    r = s.run
    sw = r["switches"]
    wl = r["workload"]
    con.print(f"[bold]{r['preset'] or r['config']}[/] on {r['device']} ({r['dtype']}), tp={s.parallel['tp']} "
              f"ep={s.parallel['ep']}: batch {wl['batch']}, prompt {wl['prompt_len']}, {wl['decode_steps']} decode steps")
    con.print(f"switches: experts={sw['moe_impl']}, shared expert={sw['shared_expert']}, "
              f"block reuse K={sw['block_reuse']}, attention={sw['attention']}, "
              f"graphs={'on' if sw.get('graphs') else 'off'}")
    t = Table(title="tokens/s (whole batch; median of plain runs)", title_justify="left")
    t.add_column("run")
    t.add_column("prefill tok/s", justify="right")
    t.add_column("decode tok/s", justify="right")
    t.add_column("dilation (prefill / decode / total)", justify="right")
    tok = r["tokens_per_s"]
    t.add_row("plain (no profiler)", _f(tok["plain"]["prefill"]), _f(tok["plain"]["decode"]), "1.00x")
    for mode in ("full", "light"):
        if mode in tok:
            d = r["dilation_by_phase"][mode]
            kept = " (kept)" if s.capture["mode"] == mode else ""
            t.add_row(f"{mode} capture{kept}", _f(tok[mode]["prefill"]), _f(tok[mode]["decode"]),
                      " / ".join(_f(d[k], "{:.2f}x") for k in ("prefill", "decode", "total")))
    con.print(t)
    c = s.counts
    con.print(f"wrote {s.output}: {c['kernels']:,} kernels, {c['ops']:,} ops, {c['collectives']:,} collectives, "
              f"{c['dispatch']:,} dispatch rows ({s.capture['mode']} capture)")
    for w in s.warnings:
        con.print(f"[yellow]warning:[/] {w}")
