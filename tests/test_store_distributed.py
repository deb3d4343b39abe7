"""The distributed engine (mmprof/store/distributed.py, docs/scale.md): Dask on a local cluster of two worker
processes computes the store's cross-run aggregates from the same Parquet partitions, and agrees with DuckDB.

dask[dataframe] and distributed are in the test extra, so CI runs this (it is not a skip passed off as coverage)."""

from __future__ import annotations

import pytest

pytest.importorskip("duckdb")
distributed = pytest.importorskip("distributed")

from mmprof.store import distributed as engine  # noqa: E402
from mmprof.store.catalog import add_profile  # noqa: E402
from mmprof.store.query import STEP_TIMES, VARIANT_CHANGES, connect, run_sql  # noqa: E402
from tests.profile_builder import decode_run  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    st = tmp_path_factory.mktemp("store") / "st"
    runs = [("loop", 1.0, 2), ("loop", 1.1, 2), ("grouped", 1.0, 2), ("grouped", 1.0, 4), ("loop", 1.0, 4),
            ("grouped", 1.3, 2)]
    for day, (moe, scale, tp) in enumerate(runs, 1):
        p = decode_run(ranks=2, moe=moe, gemm_scale=scale, steps=3 + day % 3)
        p.meta["created"] = f"2026-10-{day:02d}T00:00:00+00:00"
        add_profile(st, p, f"r{day}", {"model": "m3", "tp": tp})
    return st


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as c:
        yield c


@pytest.fixture(autouse=True)
def one_file_per_partition(monkeypatch):
    """Each run's file its own partition, so the two workers share the work (the default combines small files)."""
    monkeypatch.setattr(engine, "PARTITION_BYTES", 1)


def test_step_times_agree(store, client):
    duck = run_sql(connect(store), STEP_TIMES).rows
    dask = engine.step_times(store, client=client)
    assert len(client.scheduler_info()["workers"]) == 2  # it ran on the two worker processes
    assert [tuple(r) for r in dask.itertuples(index=False)] == [
        (run, ph, n, float(med), float(q25), float(q75)) for run, ph, n, med, q25, q75 in duck]
    assert len(duck) == 12  # 6 runs x (prefill, decode)


def test_variant_changes_agree(store, client):
    duck = run_sql(connect(store), VARIANT_CHANGES, {"pattern": "layers.*.moe.routed"}).rows
    dask = engine.variant_changes(store, client=client)
    got = [(r.run, r.phase, r.before_run, r.before, r.variant) for r in dask.itertuples(index=False)]
    assert got == [(r[0], r[6], r[7], r[8], r[9]) for r in duck]
    # series TP 2: loop, loop, grouped, grouped -> one change (day 3); TP 4: grouped, loop -> one change (day 5)
    assert sorted({r[0][:8] for r in got}) == ["20261003", "20261005"]
    assert len(got) == 4  # each in prefill and decode
