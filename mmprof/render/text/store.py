"""Terminal rendering of `mmprof store add` (the runs written)."""

from __future__ import annotations

from mmprof.render.safe import markup
from mmprof.render.text.layout import Col, fit_table


def render_store_add(infos: list, store: str, con) -> None:
    cols = [Col("run", keep=10), Col("profile", fold=True, keep=9), Col("model", keep=4), Col("engine", keep=3),
            Col("TP", "right", keep=2), Col("kernels", "right", keep=6), Col("steps", "right", keep=5),
            Col("checks", "right", keep=1)]
    rows = [[i.run, i.profile, str(i.meta.get("model") or "-"), str(i.meta.get("engine") or "-"),
             str(i.meta.get("tp") or "-"), f"{i.rows['kernels']:,}", f"{i.rows['steps']:,}", f"{i.rows['checks']:,}"]
            for i in infos]
    con.print(fit_table(con, cols, rows, title=f"added {len(infos)} run(s) to {store}"))
    for i in infos:
        if i.replaced:
            con.print(f"  run {markup(i.run)}: replaced (the same profile was added before)")
        for n in i.notes:
            con.print(f"  [yellow]note:[/] {markup(i.run)}: {markup(n)}")
