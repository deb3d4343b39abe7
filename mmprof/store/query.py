"""SQL over a store with DuckDB (embedded: nothing to start): one view per Profile table, per derived view and
`runs`, then the user's statement. The cross-run questions `mmprof history` asks are SQL here too
(`STEP_TIMES`, `VARIANT_CHANGES`), and `mmprof.store.distributed` computes the same with Dask.

Views: `runs`; every table of the Profile schema (`kernels`, `ops`, `launches`, `memcpy`, `collectives`, `scopes`,
`dispatch`, and whatever the schema adds), each with `run` and `rank` from its partition folders and `row` (the
row's index in its Profile: refs name it); the derived `steps`, `regions`, `variants`, `checks`. A table no run
has rows of is an empty view of the schema's columns, so a statement never fails for an absent file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmprof.errors import BadInput
from mmprof.profiles.schema import TABLES, column_kind, ref_target
from mmprof.store.catalog import RUN_COLUMNS, VIEWS, store_dir

MAX_ROWS = 10_000  # rows a query returns to the terminal or JSON (the rest counted, not fetched)

# Step time of every run and phase: per step the slowest rank's window span (as `mmprof report`), then the median,
# quartiles and count over the steps (the run's windows without step markers when it has no marked step).
STEP_TIMES = """
WITH per_step AS (
  SELECT run, phase, step, max(span_ns) AS span_ns FROM steps GROUP BY run, phase, step),
marked AS (SELECT run, phase, bool_or(step >= 0) AS has FROM per_step GROUP BY run, phase)
SELECT p.run, p.phase, count(*) AS steps, median(p.span_ns) AS median_ns,
       quantile_cont(p.span_ns, 0.25) AS q25_ns, quantile_cont(p.span_ns, 0.75) AS q75_ns
FROM per_step p JOIN marked m ON p.run = m.run AND p.phase = m.phase
WHERE p.step >= 0 OR NOT m.has
GROUP BY p.run, p.phase
ORDER BY p.run, p.phase
"""

# The dominant kernel variant of a region pattern per run, and the runs where it differs from the run before in
# the same series (model, engine, TP, batch), in date order.
VARIANT_CHANGES = """
WITH d AS (
  SELECT v.run, r.date, r.model, r.engine, r.tp, r.batch, v.phase, v.pattern,
         v.family || ' / ' || v.variant || ' (' || v.library || ')' AS variant
  FROM variants v JOIN runs r ON v.run = r.run
  WHERE v.dominant AND v.pattern = $pattern),
w AS (
  SELECT *, lag(variant) OVER (PARTITION BY model, engine, tp, batch, phase ORDER BY date, run) AS before,
         lag(run) OVER (PARTITION BY model, engine, tp, batch, phase ORDER BY date, run) AS before_run
  FROM d)
SELECT run, date, model, engine, tp, batch, phase, before_run, before, variant FROM w
WHERE before IS NOT NULL AND before <> variant
ORDER BY date, run, phase
"""


def _duckdb():
    try:
        import duckdb
    except ImportError:
        raise BadInput("mmprof query needs duckdb and pyarrow: pip install 'mmprof[store]'") from None
    return duckdb


def _sql_path(p: Path) -> str:
    return str(p).replace("'", "''")


def _empty_view(name: str, cols: list[tuple[str, str]]) -> str:
    body = ", ".join(f"CAST(NULL AS {typ}) AS \"{c}\"" for c, typ in cols)
    return f"CREATE VIEW \"{name}\" AS SELECT {body} WHERE false"


def _profile_columns(table: str) -> list[tuple[str, str]]:
    cols = [("run", "VARCHAR"), ("rank", "BIGINT"), ("row", "BIGINT")]
    for c, ctype, _ in TABLES[table]:
        if c != "rank":
            kind = column_kind(ctype)
            cols.append((c, "VARCHAR" if kind == "str" and ref_target(ctype) is None else
                         "DOUBLE" if kind == "float" else "BIGINT"))
    return cols


def connect(store: str | os.PathLike):
    """An in-memory DuckDB connection with the store's views."""
    duckdb = _duckdb()
    root = store_dir(store)
    con = duckdb.connect(":memory:")
    con.execute(f"SET threads TO {max(1, len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else 1)}")

    def view(name: str, folder: Path, depth: int, cols: list[tuple[str, str]]) -> None:
        if not any(folder.glob("/".join(["*"] * depth) + "/*.parquet")):
            con.execute(_empty_view(name, cols))
            return
        glob = _sql_path(folder) + "/" + "/".join(["*"] * depth) + "/*.parquet"
        hive = "{'run': VARCHAR, 'rank': BIGINT}" if depth == 2 else "{'run': VARCHAR}"
        con.execute(f"CREATE VIEW \"{name}\" AS SELECT * FROM read_parquet('{glob}', hive_partitioning = true, "
                    f"hive_types = {hive}, union_by_name = true)")

    if not any((root / "runs").glob("*/*.parquet")):
        raise BadInput(f"{root}: the store holds no runs (add some: mmprof store add PROFILE --store {root})")
    view("runs", root / "runs", 1, [(c, "VARCHAR") for c in RUN_COLUMNS])
    for t in TABLES:
        view(t, root / "tables" / t, 2, _profile_columns(t))
    for v in VIEWS:
        view(v, root / "derived" / v, 1, [("run", "VARCHAR")])
    return con


@dataclass
class QueryResult:
    sql: str
    columns: list[str]
    types: list[str]
    rows: list[tuple]
    total: int  # rows the statement gave (rows holds at most MAX_ROWS of them)

    def to_dict(self) -> dict[str, Any]:
        return {"sql": self.sql, "columns": self.columns, "types": self.types, "total": self.total,
                "rows": [dict(zip(self.columns, (_jsonable(v) for v in r))) for r in self.rows]}


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def run_sql(con, sql: str, params: dict[str, Any] | None = None, limit: int = MAX_ROWS) -> QueryResult:
    """Execute one statement; a DuckDB error (syntax, unknown column) is one BadInput line."""
    duckdb = _duckdb()
    try:
        cur = con.execute(sql, params or {})
        if cur.description is None:
            return QueryResult(sql, [], [], [], 0)
        cols = [d[0] for d in cur.description]
        types = [str(d[1]) for d in cur.description]
        rows = cur.fetchmany(limit)
        rest = len(cur.fetchall()) if len(rows) == limit else 0
    except duckdb.Error as e:
        msg = " ".join(str(e).split())
        raise BadInput(f"query failed: {msg[:300]}") from None
    return QueryResult(sql, cols, types, rows, len(rows) + rest)


def query(store: str | os.PathLike, sql: str, limit: int = MAX_ROWS) -> QueryResult:
    """`mmprof query`: one SQL statement over the store's views."""
    if not sql.strip():
        raise BadInput("no SQL given (e.g. mmprof query \"SELECT run, model, date FROM runs\" --store DIR)")
    con = connect(store)
    try:
        return run_sql(con, sql, limit=limit)
    finally:
        con.close()
