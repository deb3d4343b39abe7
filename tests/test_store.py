"""The profile store (mmprof/store/, docs/scale.md): every Profile table round-trips through Parquet, the SQL views
answer what the analyses answer, `history --check` fails on a variant change and on a step time beyond noise, and
passes on the same work; bad input is one line and exit 2.

Truths: `tests/profile_builder.decode_run` places every kernel by hand, back to back: per layer qkv 30 us, attention
25 us, o_proj 20 us (+ a 20 us all-reduce with 2 ranks), router 5 us, routed experts 4 x 12 us (loop) or one 20 us
grouped GEMM, shared expert 15 us; a step's window is its kernels' span (analysis/timeline/breakdown.py), so a
decode step of 2 layers spans 2 x 163 us with loop experts.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")

from mmprof.analysis.timeline.breakdown import timeline  # noqa: E402
from mmprof.cli import main  # noqa: E402
from mmprof.profiles import save_profile  # noqa: E402
from mmprof.profiles.schema import TABLES  # noqa: E402
from mmprof.store.catalog import add_profile  # noqa: E402
from mmprof.store.history import gate, load_history, variant_changes  # noqa: E402
from mmprof.store.query import STEP_TIMES, connect, query, run_sql  # noqa: E402
from tests.profile_builder import decode_run  # noqa: E402


def _run(day: int, **kw):
    p = decode_run(ranks=2, **kw)
    p.meta["created"] = f"2026-11-{day:02d}T08:00:00+00:00"
    return p


def _cli(capsys, *args) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = e.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def test_every_table_round_trips(tmp_path):
    """Each Profile table's rows, per rank, come back from SQL with the same values: ints, strings decoded, refs as
    the target's `row` (a join on them gives the same op name as the Profile's own link)."""
    p = _run(1)
    info = add_profile(tmp_path / "st", p, "p")
    con = connect(tmp_path / "st")
    for t in TABLES:
        got = run_sql(con, f'SELECT rank, count(*) FROM "{t}" GROUP BY rank ORDER BY rank').rows
        ranks, counts = np.unique(p.tables[t]["rank"], return_counts=True)
        assert got == list(zip(ranks.tolist(), counts.tolist())), t
    rows = run_sql(con, "SELECT row, name, start_ns, dur_ns, step, phase FROM kernels ORDER BY row").rows
    names = p.col("kernels", "name", decode=True)
    phases = p.col("kernels", "phase", decode=True)
    assert [r[0] for r in rows] == list(range(p.n("kernels")))
    assert [r[1] for r in rows] == names.tolist()
    assert [r[2] for r in rows] == p.tables["kernels"]["start_ns"].tolist()
    assert [r[4] for r in rows] == p.tables["kernels"]["step"].tolist()
    assert [r[5] for r in rows] == phases.tolist()
    joined = run_sql(con, "SELECT k.row, o.name FROM kernels k JOIN ops o ON k.run = o.run AND k.op = o.row "
                          "ORDER BY k.row").rows
    op = p.tables["kernels"]["op"]
    opname = p.col("ops", "name", decode=True)
    assert joined == [(i, opname[op[i]]) for i in range(p.n("kernels")) if op[i] >= 0]
    # the kernels table carries the event frame's classes
    fam = dict(run_sql(con, "SELECT DISTINCT name, family FROM kernels").rows)
    assert fam["Cijk_Alik_Bljk_BBS_BH_MT64x64_expert"] == "gemm"
    assert fam["ncclDevKernel_AllReduce_Sum_bf16_RING_LL"] == "communication"
    assert info.rows["kernels"] == p.n("kernels")


def test_any_arrow_tool_reads_it(tmp_path):
    """pyarrow.dataset reads a table as hive partitions (run, rank) with no mmprof code."""
    import pyarrow.dataset as ds

    p = _run(1)
    info = add_profile(tmp_path / "st", p, "p")
    t = ds.dataset(tmp_path / "st" / "tables" / "kernels", format="parquet", partitioning="hive").to_table()
    assert t.num_rows == p.n("kernels")
    assert set(t.column("run").to_pylist()) == {info.run}
    assert sorted(set(int(x) for x in t.column("rank").to_pylist())) == [0, 1]


def test_step_times_match_the_timeline(tmp_path):
    """STEP_TIMES (SQL) gives the timeline's own step statistic, and the hand count: 2 layers of 163 us (loop)."""
    p = _run(1)
    add_profile(tmp_path / "st", p, "p")
    rows = {ph: (n, med) for _run_id, ph, n, med, _q25, _q75 in run_sql(connect(tmp_path / "st"), STEP_TIMES).rows}
    st = timeline(p).step_stats("decode")
    assert rows["decode"] == (st.steps, st.median_ns)
    assert rows["decode"] == (4, 2 * (30 + 25 + 20 + 20 + 5 + 4 * 12 + 15) * 1000)


def test_new_schema_tables_flow_through(tmp_path, monkeypatch):
    """A table added to the Profile schema (as issue 34 added `log`) is stored and queryable with no store code: a
    table the schema does not have yet, added here."""
    assert "probe" not in TABLES
    monkeypatch.setitem(TABLES, "probe", [("rank", "int", "rank"), ("start_ns", "int", "t"), ("text", "str", "line")])
    p = _run(1)
    p.tables["probe"] = {"rank": np.array([0, 1, 1]), "start_ns": np.array([5, 6, 7]),
                         "text": np.array([0, 1, -1], dtype=np.int32)}
    add_profile(tmp_path / "st", p, "p")
    got = run_sql(connect(tmp_path / "st"), "SELECT rank, start_ns, text FROM probe ORDER BY start_ns").rows
    assert got == [(0, 5, p.strings[0]), (1, 6, p.strings[1]), (1, 7, None)]


def test_gate_variant_change_and_step_regression(tmp_path):
    """loop -> loop: pass; loop -> grouped: the routed-experts variant changed; grouped -> grouped with GEMMs 1.2x
    slower: decode step +x% beyond noise (identical steps: no spread); 1.02x: inside the 5% threshold."""
    st = tmp_path / "st"
    for day, kw in ((1, dict(moe="loop")), (2, dict(moe="loop"))):
        add_profile(st, _run(day, **kw), f"d{day}", {"model": "m3"})
    h = gate(load_history(st))
    assert h.findings == [] and h.exit_code == 0
    add_profile(st, _run(3, moe="grouped"), "d3", {"model": "m3"})
    h = gate(load_history(st))
    assert [f.kind for f in h.findings] == ["variant", "variant"]  # decode and prefill
    assert h.findings[0].message.startswith("the routed-experts variant changed (decode): gemm / ")
    assert "-> grouped_gemm / " in h.findings[0].message
    add_profile(st, _run(4, moe="grouped", gemm_scale=1.2), "d4", {"model": "m3"})
    h = gate(load_history(st))
    steps = [f for f in h.findings if f.kind == "step" and f.phase == "decode"]
    assert len(steps) == 1 and "beyond noise" in steps[0].message
    base, cand = h.runs[-2].steps["decode"]["median_ns"], h.runs[-1].steps["decode"]["median_ns"]
    assert f"{cand / base - 1:+.1%}" in steps[0].message
    add_profile(st, _run(5, moe="grouped", gemm_scale=1.22), "d5", {"model": "m3"})
    assert gate(load_history(st)).findings == []  # +1.2% < 5%
    changes = variant_changes(st)
    assert [(c[6], c[8].split(" / ")[0], c[9].split(" / ")[0]) for c in changes] == [
        ("decode", "gemm", "grouped_gemm"), ("prefill", "gemm", "grouped_gemm")]


def test_gate_is_per_series_and_needs_an_earlier_run(tmp_path):
    from mmprof.errors import NoEvidence

    st = tmp_path / "st"
    add_profile(st, _run(1, moe="loop"), "a", {"model": "m3", "tp": 2})
    add_profile(st, _run(2, moe="grouped"), "b", {"model": "m3", "tp": 4})  # another series
    with pytest.raises(NoEvidence, match="no earlier run in its series"):
        gate(load_history(st))
    assert len(gate(load_history(st), baseline=load_history(st).runs[0].run).findings) >= 1


def test_cli_store_query_history(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    save_profile(_run(1, moe="loop"), a)
    save_profile(_run(2, moe="grouped"), b)
    st = str(tmp_path / "st")
    code, out, err = _cli(capsys, "store", "add", str(a), str(b), "--store", st, "--model", "m3", "--git-rev", "abc")
    assert code == 0 and "added 2 run(s)" in out, err
    code, out, _ = _cli(capsys, "query", "SELECT model, git_rev, count(*) AS n FROM runs GROUP BY ALL", "--store", st,
                        "--json")
    assert code == 0 and json.loads(out)["rows"] == [{"model": "m3", "git_rev": "abc", "n": 2}]
    code, out, _ = _cli(capsys, "history", "--store", st)
    assert code == 0 and "2 run(s)" in out
    assert all(len(line) <= 80 for line in out.splitlines())
    code, out, _ = _cli(capsys, "history", "--store", st, "--check")
    assert code == 1 and "the routed-experts variant changed" in " ".join(out.split())
    # re-adding a profile replaces its run
    code, out, _ = _cli(capsys, "store", "add", str(a), "--store", st, "--json")
    assert code == 0 and json.loads(out)["runs"][0]["replaced"] is True
    assert query(st, "SELECT count(*) FROM runs").rows == [(2,)]


@pytest.mark.parametrize("args, msg", [
    (["query", "SELECT nope FROM runs"], "query failed: Binder Error"),
    (["query", "   "], "no SQL given"),
    (["history"], "no such store"),
])
def test_bad_input_is_one_line(tmp_path, capsys, args, msg):
    st = tmp_path / "st"
    if args[0] == "query":
        add_profile(st, _run(1), "p")
    code, out, err = _cli(capsys, *args, "--store", str(st))
    assert code == 2 and msg in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_query_on_an_empty_folder(tmp_path, capsys):
    (tmp_path / "st").mkdir()
    code, _, err = _cli(capsys, "query", "SELECT 1", "--store", str(tmp_path / "st"))
    assert code == 2 and "holds no runs" in err


def test_import_with_store(tmp_path, capsys):
    """`mmprof import TRACE -o P --store DIR` writes the Profile and adds it: the stored kernels are the Profile's."""
    from mmprof.profiles import load_profile
    from tests.conftest import data_file

    trace = data_file("samples/kineto/triton_example.json.gz")
    out, st = tmp_path / "p.json.gz", tmp_path / "st"
    code, text, err = _cli(capsys, "import", str(trace), "-o", str(out), "--store", str(st), "--json")
    assert code == 0, err
    run = json.loads(text)["store"]["run"]
    p = load_profile(out)
    assert query(st, f"SELECT count(*) FROM kernels WHERE run = '{run}'").rows == [(p.n("kernels"),)]
    assert p.n("kernels") > 0


def _point(run: str, day: int, routed: list[tuple[str, float]], med: float = 1e6, steps: int = 8):
    from mmprof.store.history import RunPoint

    p = RunPoint(run, f"2026-11-{day:02d}", "m3", "vllm", 8, 8, None, None)
    p.steps["decode"] = {"steps": steps, "median_ns": med, "q25_ns": med * 0.99, "q75_ns": med * 1.01}
    p.variants["decode"] = {"layers.*.moe.routed": routed[0][0]}
    p.ran["decode"] = {"layers.*.moe.routed": [v for v, share in routed if share >= 0.10]}
    return p


def test_gate_rules_by_hand():
    """Two variants that both ran trading places is not a change; a new one is. +8% with a 2% band fails, +4%
    (under the threshold) passes, +8% with one step is not judged (no evidence: exit 2); +8% inside a 10% band
    passes."""
    from mmprof.store.history import History

    def judge(a, b):
        return gate(History("st", None, [a, b]))

    A, B, C = "gemm / x (cuBLAS)", "gemm / y (cuBLAS)", "grouped_gemm / g (CUTLASS)"
    assert judge(_point("r1", 1, [(A, .55), (B, .45)]), _point("r2", 2, [(B, .55), (A, .45)])).findings == []
    h = judge(_point("r1", 1, [(A, .55), (B, .45)]), _point("r2", 2, [(C, .9), (A, .1)]))
    assert [f.message for f in h.findings] == [f"the routed-experts variant changed (decode): {A} -> {C}"]
    h = judge(_point("r1", 1, [(A, 1)]), _point("r2", 2, [(A, 1)], med=1.08e6))
    assert len(h.findings) == 1 and h.findings[0].message.startswith("decode step +8.0% beyond noise")
    assert judge(_point("r1", 1, [(A, 1)]), _point("r2", 2, [(A, 1)], med=1.04e6)).findings == []
    from mmprof.errors import NoEvidence

    with pytest.raises(NoEvidence, match="decode step \\+8.0% not judged: 1 step"):
        judge(_point("r1", 1, [(A, 1)], steps=1), _point("r2", 2, [(A, 1)], med=1.08e6, steps=1))
    wide = _point("r2", 2, [(A, 1)], med=1.08e6)
    wide.steps["decode"].update(q25_ns=0.95 * 1.08e6, q75_ns=1.05 * 1.08e6)
    h = judge(_point("r1", 1, [(A, 1)]), wide)
    assert h.findings == [] and "within the noise band" in h.notes[0]
