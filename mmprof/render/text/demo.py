"""Terminal rendering of `mmprof demo` (a DemoResult): the story in the order a user reads it."""

from __future__ import annotations

import json
from typing import Any

from rich.padding import Padding
from rich.text import Text

from mmprof.render.safe import markup
from mmprof.render.text.layout import Col, fit_table


def _line(con, indent: int, text: str) -> None:
    """A markup line indented by `indent`, its wrapped continuation lines too (rich wraps to column 0 otherwise)."""
    con.print(Padding(Text.from_markup(text), (0, 0, 0, indent)))


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _noise(res, phase: str) -> str:
    """The speed-up's noise band from the plain repeats (the time's change over every pair of runs, as `mmprof diff`
    judges it); flagged when the speed-up lies inside it."""
    n = (getattr(res, "speedup_noise", None) or {}).get(phase) or {}
    b = n.get("band")
    if not b:
        return " (no noise band: one plain run)"
    span = f"time {b['lo']:+.0%} to {b['hi']:+.0%} over the runs"
    if n.get("inside"):
        return f" [yellow](within noise: {span}; not a measured change)[/]"
    return f" ({span})"


def _step_line(con, s, what: str) -> bool:
    """Print why a step has nothing to show; True when it does have data."""
    if s is None:
        return False
    if s.data is None:
        _line(con, 2, f"{what}: [red]could not run[/] (exit {s.exit_code}): {markup(s.message)}")
        return False
    return True


def render_demo(res, con) -> None:
    """Print a DemoResult (mmprof.capture.workflows.demo): the two runs, then what each command said about them."""
    con.rule("[bold]mmprof demo[/]: tiny MiniMax M3 on CPU, before vs after")
    cols = [Col("run", keep=10), Col("experts / shared / K", keep=8),
            Col("prefill tok/s", "right", keep=9, wrap=True), Col("decode tok/s", "right", keep=9, wrap=True),
            Col("profiler dilation (decode)", "right", keep=6, wrap=True)]
    rows = []
    for label, run in res.runs.items():
        tok = run["tokens_per_s"]["plain"]
        sw = run["switches"]
        rows.append([label, f"{sw['moe_impl']} / {sw['shared_expert']} / K={sw['block_reuse']}",
                     f"{tok['prefill']:,.0f}", f"{tok['decode']:,.1f}", _x(run.get("decode_dilation"))])
    con.print(fit_table(con, cols, rows))
    for label, run in res.runs.items():
        _line(con, 2, f"{markup(label)}: {markup(run['what'])} -> {markup(run['profile'])}")
    for label, run in res.runs.items():
        for w in run.get("warnings") or []:
            _line(con, 2, f"[yellow]warning[/] ({markup(label)}): {markup(w)}")
    con.print(f"speed-up after/before (no profiler): prefill {_x(res.speedup.get('prefill'))}"
              f"{_noise(res, 'prefill')}, decode {_x(res.speedup.get('decode'))}{_noise(res, 'decode')}")
    _render_summary(con, res)
    _render_verify(con, res)
    _render_diff(con, res)
    _render_overlap(con, res)
    _render_shapes(con, res)
    con.print(f"\nProfiles in {markup(res.out_dir)}/ (try: mmprof report {markup(res.out_dir)}/before.json.gz). "
              f"Demo took {res.seconds:.0f} s.")


def _render_summary(con, res) -> None:
    con.rule("top ops (mmprof summary)")
    for label in ("before", "after"):
        s = res.step(f"summary:{label}")
        if not _step_line(con, s, f"summary {label}"):
            continue
        try:
            r0 = s.data["ranks"][0]
            tops = ", ".join(f"{o['name']} {o['self_ns'] / 1e6:,.0f} ms" for o in r0["top_ops"][:4])
            _line(con, 2, f"{label}: {markup(tops)}")
        except (KeyError, IndexError, TypeError) as e:
            _line(con, 2, f"{label}: [dim]summary output not understood ({markup(repr(e))})[/]")


def _render_verify(con, res) -> None:
    con.rule("fast paths (mmprof verify-fastpath)")
    for label in ("before", "after"):
        s = res.step(f"verify:{label}")
        if not _step_line(con, s, f"verify-fastpath {label}"):
            continue
        d = s.data
        verdict = {"pass": "[green]PASS[/]", "fail": "[red]FAIL[/]"}.get(d.get("status"), markup(str(d.get("status")).upper()))
        c = d.get("counts", {})
        _line(con, 2, f"{label}: {verdict} (exit {s.exit_code}): {c.get('pass', '?')} passed, {c.get('fail', '?')} failed, "
                  f"{c.get('no_evidence', '?')} without evidence"
                  + (f", {c['not_applicable']} not applicable" if c.get("not_applicable") else ""))
        for r in d.get("results", []):
            if r.get("status") not in ("pass", None):
                _line(con, 4, f"{markup(r.get('code'))} {markup(r.get('id'))}: {markup(r.get('message'))}")


def _render_diff(con, res) -> None:
    con.rule("before -> after (mmprof diff)")
    s = res.step("diff")
    if not _step_line(con, s, "diff"):
        return
    d = s.data
    ans = d.get("answer") or {}
    lines = {x["key"]: x["text"] for x in ans.get("lines") or []}
    # which is faster on what evidence first: the plain timing where it decides, the profiled steps with their
    # noise band otherwise, and why the two disagree when they do (the profiler slows the two runs differently)
    _line(con, 2, f"[bold]{markup(lines.get('faster') or d.get('verdict'))}[/]")
    for key in ("step", "plain", "disagree", "why"):
        if key in lines:
            style = "yellow" if key == "disagree" else ""
            _line(con, 4, f"{key}: " + (f"[{style}]{markup(lines[key])}[/]" if style else markup(lines[key])))
    _line(con, 2, "kernel paths that changed, per region:")
    for p in (d.get("path_changes") or [])[:6]:
        _line(con, 4, f"{markup(p.get('summary') or _path_change(p))}")


def _path_change(p: dict[str, Any]) -> str:
    keys = ("region", "change", "before", "after", "summary", "text")
    parts = [f"{k}={p[k]}" for k in keys if k in p and p[k] not in (None, "", [])]
    return "; ".join(parts) if parts else json.dumps(p)[:160]


def _render_overlap(con, res) -> None:
    con.rule("is block-selection reuse safe? (adjacent sparse layers' selections)")
    o = res.overlap or {}
    if "error" in o:
        _line(con, 2, f"could not measure: {markup(o['error'])}")
        return
    pairs = ", ".join(f"{a}->{b} {f:.0%}" for (a, b), f in zip(o["pairs"], o["shared_fraction"]))
    _line(con, 2, f"share of a layer's blocks the next sparse layer also picks: {pairs} "
              f"(mean {o['mean_shared_fraction']:.0%}, Jaccard {o['mean_jaccard']:.2f}; "
              f"{o['n_selected']} of {o['n_blocks_total']} blocks selected)")
    if o["safe"]:
        _line(con, 2, f"[green]reuse looks safe[/]: adjacent layers keep >= {o['threshold']:.0%} of the blocks")
    else:
        _line(con, 2, f"[yellow]reuse changes what attention sees[/]: adjacent layers share under {o['threshold']:.0%} of "
                  "their blocks here (random tiny weights); check accuracy on the real checkpoint before K > 1")


def _render_shapes(con, res) -> None:
    con.rule("real M3 per-rank shapes at TP=8 (mmprof shapes --tp 8)")
    s = res.step("shapes")
    if not _step_line(con, s, "shapes"):
        return
    for f in s.data.get("findings") or []:
        msg = str(f.get("message", ""))
        _line(con, 2, f"{markup(f.get('code'))} {markup(f.get('title'))}: {markup(_clip_words(msg, 150))}")
    if not s.data.get("findings"):
        _line(con, 2, "no findings")


def _clip_words(text: str, limit: int) -> str:
    """At most about `limit` characters, cut at the last word boundary before it and never inside a word or a
    bracketed number ("(245,760 B/t..." was cut mid-word), with an ellipsis when cut."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    head = text[:cut if cut > limit // 2 else limit].rstrip(" ,;:(")
    if head.count("(") > head.count(")"):  # do not leave an opened parenthesis: cut before it
        head = head[:head.rfind("(")].rstrip(" ,;:")
    return head + " …"
