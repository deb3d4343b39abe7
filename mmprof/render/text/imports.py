"""Terminal rendering of `mmprof import` (its result dict)."""

from __future__ import annotations

from mmprof.render.safe import markup


def render_import(result: dict, inputs: int, con) -> None:
    ranks = ", ".join(map(str, result["ranks"])) or "none"
    ws = f" of {result['world_size']}" if result["world_size"] else ""
    n = result["rows"]
    con.print(f"[bold]imported[/] {inputs} input(s) as {markup(result['format'])}: rank(s) {ranks}{ws}")
    con.print(f"  kernels {n['kernels']:,}  ops {n['ops']:,}  launches {n['launches']:,}  memcpy {n['memcpy']:,}  "
              f"collectives {n['collectives']:,}  scopes {n['scopes']:,}")
    if n["kernels"] == 0 and n["memcpy"] == 0:
        con.print("  [yellow]no GPU events[/] (CPU-only trace)")
    for w in result["warnings"]:
        con.print(f"  [yellow]warning:[/] {markup(w)}")
    con.print(f"  wrote {markup(result['output'])} ({result['import_s']:.2f}s import, {result['save_s']:.2f}s save)")
    if result.get("store"):
        con.print(f"  added to the store {markup(result['store']['dir'])} as run {markup(result['store']['run'])}")
