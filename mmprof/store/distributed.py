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
import warnings
from pathlib import Path

import pandas as pd

from mmprof.errors import BadInput
from mmprof.store.catalog import store_dir

SERIES = ("model", "engine", "tp", "batch")
PARTITION_BYTES = 64 << 20


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
    # whole files (one per run) combined into partitions of about PARTITION_BYTES: a run is never split, and a
    # store of thousands of small runs is not thousands of tasks
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        df = dd.read_parquet(str(folder), columns=[c for c in columns if c != "run"] + ["run"],
                             dataset={"partitioning": "hive"}, aggregate_files=True, blocksize=PARTITION_BYTES)
    return df.assign(run=df["run"].astype(str))


def _stats(g: pd.DataFrame) -> pd.DataFrame:
    """Median, quartiles and count of one (run, phase)'s per-step spans, as STEP_TIMES computes them."""
    use = g[g["step"] >= 0] if (g["step"] >= 0).any() else g
    s = use["span_ns"].astype("float64")
    return pd.DataFrame({"steps": [len(s)], "median_ns": [s.median()], "q25_ns": [s.quantile(0.25)],
                         "q75_ns": [s.quantile(0.75)]})


STEP_COLUMNS = ["run", "phase", "steps", "median_ns", "q25_ns", "q75_ns"]


def _run_steps(part: pd.DataFrame) -> pd.DataFrame:
    """STEP_TIMES of the runs of one partition (a partition holds whole runs: the store writes one file per run and
    `_read` combines whole files)."""
    if not len(part):
        return pd.DataFrame({c: pd.Series(dtype="int64" if c == "steps" else "float64" if c.endswith("_ns")
                                          else "object") for c in STEP_COLUMNS})
    per_step = part.groupby(["run", "phase", "step"], observed=True)["span_ns"].max().reset_index()
    out = per_step.groupby(["run", "phase"], observed=True)[["step", "span_ns"]].apply(_stats).reset_index()
    return out[STEP_COLUMNS].astype({"run": object, "phase": object, "steps": "int64"})


def step_times(store: str | os.PathLike, client=None) -> pd.DataFrame:
    """`query.STEP_TIMES` computed by Dask: run, phase, steps, median_ns, q25_ns, q75_ns (sorted by run, phase).
    Each partition (one run's file) is reduced where it is read; only the per-run rows travel."""
    root = store_dir(store)
    steps = _read(root, "steps", ["run", "phase", "step", "span_ns"])
    meta = _run_steps(pd.DataFrame({"run": [], "phase": [], "step": [], "span_ns": []}))
    out = steps.map_partitions(_run_steps, meta=meta)
    res = client.compute(out).result() if client is not None else out.compute()
    return res.sort_values(["run", "phase"]).reset_index(drop=True)


CHANGE_COLUMNS = ["run", "date", *SERIES, "phase", "before_run", "before", "variant"]


def _changes(d: pd.DataFrame) -> pd.DataFrame:
    """Per series (model, engine, TP, batch, phase; a NULL key is one group, as in SQL's PARTITION BY), in date
    order: the rows whose variant differs from the row before."""
    if not len(d):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in CHANGE_COLUMNS})
    d = d.sort_values(["date", "run"], kind="stable")
    key = [d[c].astype("string").fillna("\x00") for c in (*SERIES, "phase")]
    grp = d.groupby(key, sort=False, dropna=False)
    d = d.assign(before=grp["variant"].shift(1), before_run=grp["run"].shift(1))
    hit = d["before"].notna() & (d["before"] != d["variant"]).fillna(False)
    return d[hit.astype(bool)][CHANGE_COLUMNS]


def variant_changes(store: str | os.PathLike, pattern: str = "layers.*.moe.routed", client=None) -> pd.DataFrame:
    """`query.VARIANT_CHANGES` computed by Dask: run, date, model, engine, tp, batch, phase, before_run, before,
    variant (sorted by date, run, phase). The scan, filter and join run on the partitions; the few dominant rows
    left are ordered in one partition for the run-to-run comparison."""
    root = store_dir(store)
    v = _read(root, "variants", ["run", "phase", "pattern", "family", "variant", "library", "dominant"])
    v = v[v["dominant"] & (v["pattern"] == pattern)]
    v = v.assign(variant=v["family"] + " / " + v["variant"] + " (" + v["library"] + ")")[["run", "phase", "variant"]]
    runs = _read(root, "runs", ["run", "date", *SERIES])
    d = v.merge(runs, on="run", how="inner").repartition(npartitions=1)
    meta = _changes(pd.DataFrame({c: [] for c in ["run", "phase", "variant", "date", *SERIES]}))
    out = d.map_partitions(_changes, meta=meta)
    res = client.compute(out).result() if client is not None else out.compute()
    return res.sort_values(["date", "run", "phase"]).reset_index(drop=True)[CHANGE_COLUMNS]
