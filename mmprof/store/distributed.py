"""The store's cross-run questions on Dask, for stores too large for one machine (docs/scale.md).

The same Parquet partitions DuckDB reads (`mmprof.store.query`) are read by `dask.dataframe.read_parquet`, and the
same aggregates are computed on a Dask cluster: `step_times` is `query.STEP_TIMES` (per run and phase: median,
quartiles and count over the steps of the slowest rank's span), `variant_changes` is `query.VARIANT_CHANGES` (runs
whose dominant variant of a region differs from the run before in their series). Pass a `dask.distributed.Client`
to run on its cluster (a LocalCluster, or a scheduler on many machines reading the store from shared storage:
NFS, S3 or GCS through fsspec); without one, Dask's local scheduler runs them.

Dask rather than Ray or Spark: it reads the Parquet partitions with pyarrow as they are, runs the same pandas
code the store's writer uses, installs from PyPI as pure-Python wheels (dask, distributed: ~2.5 MB beside pyarrow),
and a LocalCluster of worker processes tests it on one machine in seconds (Spark needs a JVM; Ray a 60+ MB wheel
and its own object store).
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from mmprof.errors import BadInput
from mmprof.store.catalog import store_dir

SERIES = ("model", "engine", "tp", "batch")


def _dd():
    try:
        import dask.dataframe as dd
    except ImportError:
        raise BadInput("the distributed engine needs dask: pip install 'mmprof[distributed]'") from None
    return dd


def _read(root: Path, view: str, columns: list[str]):
    dd = _dd()
    folder = root / "derived" / view if view != "runs" else root / "runs"
    if not any(folder.glob("*/*.parquet")):
        raise BadInput(f"{root}: the store holds no {view}")
    df = dd.read_parquet(str(folder), columns=[c for c in columns if c != "run"] + ["run"],
                         dataset={"partitioning": "hive"})
    return df.assign(run=df["run"].astype(str))


def _stats(g: pd.DataFrame) -> pd.DataFrame:
    """Median, quartiles and count of one (run, phase)'s step times, as STEP_TIMES computes them."""
    use = g[g["step"] >= 0] if (g["step"] >= 0).any() else g
    s = use["span_ns"].astype("float64")
    return pd.DataFrame({"steps": [len(s)], "median_ns": [s.median()], "q25_ns": [s.quantile(0.25)],
                         "q75_ns": [s.quantile(0.75)]})


def step_times(store: str | os.PathLike, client=None) -> pd.DataFrame:
    """`query.STEP_TIMES` computed by Dask: run, phase, steps, median_ns, q25_ns, q75_ns (sorted by run, phase)."""
    root = store_dir(store)
    steps = _read(root, "steps", ["run", "phase", "step", "span_ns"])
    per_step = steps.groupby(["run", "phase", "step"])["span_ns"].max().reset_index()
    meta = pd.DataFrame({"steps": pd.Series(dtype="int64"), "median_ns": pd.Series(dtype="float64"),
                         "q25_ns": pd.Series(dtype="float64"), "q75_ns": pd.Series(dtype="float64")})
    out = per_step.groupby(["run", "phase"]).apply(_stats, meta=meta)
    res = (client.compute(out).result() if client is not None else out.compute()).reset_index()
    res = res.drop(columns=[c for c in res.columns if c.startswith("level_")])
    return res.sort_values(["run", "phase"]).reset_index(drop=True)[["run", "phase", "steps", "median_ns", "q25_ns",
                                                                     "q75_ns"]]


def _changes(g: pd.DataFrame) -> pd.DataFrame:
    g = g.sort_values(["date", "run"])
    g = g.assign(before=g["variant"].shift(1), before_run=g["run"].shift(1))
    return g[g["before"].notna() & (g["before"] != g["variant"])]


def variant_changes(store: str | os.PathLike, pattern: str = "layers.*.moe.routed", client=None) -> pd.DataFrame:
    """`query.VARIANT_CHANGES` computed by Dask: run, date, model, engine, tp, batch, phase, before_run, before,
    variant (sorted by date, run, phase)."""
    root = store_dir(store)
    v = _read(root, "variants", ["run", "phase", "pattern", "family", "variant", "library", "dominant"])
    v = v[v["dominant"] & (v["pattern"] == pattern)]
    v = v.assign(variant=v["family"] + " / " + v["variant"] + " (" + v["library"] + ")")[["run", "phase", "variant"]]
    runs = _read(root, "runs", ["run", "date", *SERIES])
    d = v.merge(runs, on="run", how="inner")
    # a NULL series key (no TP, say) is one group, as in SQL's PARTITION BY
    key = None
    for c in (*SERIES, "phase"):
        part = d[c].astype("string").fillna("\x00")
        key = part if key is None else key + "|" + part
    d = d.assign(series=key)
    cols = ["run", "date", *SERIES, "phase", "before_run", "before", "variant"]
    meta = pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    out = d.groupby("series").apply(lambda g: _changes(g)[cols], meta=meta)
    res = client.compute(out).result() if client is not None else out.compute()
    return res.sort_values(["date", "run", "phase"]).reset_index(drop=True)[cols]
