"""The profile store: every run's tables as Parquet, queried with SQL (DuckDB) or a distributed engine (Dask).

A store is a folder (docs/scale.md):

    DIR/runs/run=<id>/part-0.parquet                      one row per run: model, engine, TP, batch, git revision, date
    DIR/tables/<table>/run=<id>/rank=<r>/part-0.parquet   every table of the Profile schema, partitioned by run and rank
    DIR/derived/<view>/run=<id>/part-0.parquet            what the analyses said about the run at `store add` time:
                                                          steps, regions, variants, checks

Hive-style partitions (`key=value` folders), Arrow types, strings as dictionary-encoded UTF-8: any Arrow tool reads
it (DuckDB, pyarrow.dataset, Dask, Spark, Polars). Needs the `store` extra (pyarrow, duckdb); `distributed` needs
dask[dataframe] and distributed as well.
"""
