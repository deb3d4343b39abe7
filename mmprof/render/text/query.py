"""Terminal rendering of `mmprof query` (a SQL result as a table)."""

from __future__ import annotations

from mmprof.render.text.layout import Col, fit_table


def _cell(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:,.6g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def render_query(result, con, shown: int = 200) -> None:
    if not result.columns:
        con.print("ok (the statement returned no rows)")
        return
    n = len(result.columns)
    cols = [Col(c, "right" if t in ("BIGINT", "INTEGER", "DOUBLE", "HUGEINT", "FLOAT") or t.startswith("DECIMAL")
                else "left", keep=max(1, 10 - j), fold=t == "VARCHAR") for j, (c, t) in enumerate(zip(result.columns, result.types))]
    rows = [[_cell(v) for v in r] for r in result.rows[:shown]]
    con.print(fit_table(con, cols[:n], rows))
    more = result.total - len(rows)
    con.print(f"{result.total:,} row(s)" + (f"; {more:,} not shown (--json, or LIMIT / WHERE in the SQL)" if more else ""))
