"""`mmprof report`: bottleneck statements, per phase/rank sections, top kernels, checks, CLI outputs."""

from __future__ import annotations

import orjson
import pytest

from mmprof.analysis.views.report import bottleneck_statement, build_report
from mmprof.analysis.attribution.roofline import BoundSummary
from mmprof.analysis.timeline.breakdown import CATEGORIES, Breakdown
from mmprof.importers import import_paths
from mmprof.profiles import save_profile
from tests.conftest import data_file
from tests.profile_builder import decode_run


def _br(dominant: str, share: float = 0.61, comm_total: int = 0, comm_over: int = 0) -> Breakdown:
    span = 1_000_000
    t = {c: 0 for c in CATEGORIES}
    t[dominant] = int(span * share)
    rest = [c for c in CATEGORIES if c != dominant]
    t[rest[0]] = span - t[dominant]
    return Breakdown(span, t, comm_total, comm_over, 1)


BOUNDS = BoundSummary(100, 200, 0, compute_eff=0.35, memory_eff=0.48)


@pytest.mark.parametrize("cat, expected", [
    ("compute_bound", "decode is compute-bound: 61% of the wall time in compute-bound kernels at 35% of peak FLOP/s"),
    ("memory_bound", "decode is memory-bound: 61% of the wall time in memory-bound kernels at 48% of peak bandwidth"),
    ("memcpy", "decode is copy-bound: 61% of the wall time in memory copies"),
    ("idle_host", "decode is launch-bound: the GPU idles 61% of the wall time waiting for kernel launches"),
    ("idle_other", "decode is idle-bound: the GPU idles 61% of the wall time with work already launched "
                   "(synchronisation or dependencies)"),
    ("unattributed", "decode: 61% of the wall time is in work with no roofline (no shapes or no device peak), "
                     "so no bound can be named"),
])
def test_bottleneck_statements(cat, expected):
    assert bottleneck_statement("decode", _br(cat), BOUNDS) == expected


def test_bottleneck_statement_communication_and_cpu():
    s = bottleneck_statement("decode", _br("communication", 0.7, comm_total=1_000, comm_over=250), BOUNDS)
    assert s == ("decode is communication-bound: 70% of the wall time in exposed communication "
                 "(25% of all communication overlapped with compute)")
    cpu = bottleneck_statement("decode", _br("idle_host"), BOUNDS, source="cpu_ops")
    assert cpu == "decode is host-overhead-bound: 61% of the wall time between ops (Python / framework)"
    no_eff = bottleneck_statement("decode", _br("memory_bound"), BoundSummary(0, 1, 0, None, None))
    assert no_eff.endswith("memory-bound kernels")


def test_report_per_phase_and_rank():
    r = build_report(decode_run(steps=3, layers=2, ranks=2))
    assert [p.phase for p in r.phases] == ["prefill", "decode"]
    assert [(p.phase, p.rank) for p in r.per_rank] == [("prefill", 0), ("prefill", 1), ("decode", 0), ("decode", 1)]
    dec = r.phases[1]
    assert dec.bottleneck.startswith("decode is memory-bound: ")
    top = dec.top_kernels[0]
    assert top.name == "Cijk_Alik_Bljk_BBS_BH_MT64x64_expert" and top.bound == "memory" and top.count == 48
    # 18,997,248 bytes per expert GEMM in 12 us on an H200 (4.8 TB/s)
    assert top.efficiency == pytest.approx(18_997_248 / 12e-6 / 4.8e12)
    assert top.tbs == pytest.approx(18_997_248 / 12e-6 / 1e12)
    assert top.intensity == pytest.approx(2 * 8 * 6144 * 1536 / 18_997_248)
    comm = next(k for k in dec.top_kernels if k.family == "communication")
    assert comm.bound == "communication" and comm.efficiency is None
    assert dec.step.median_ns == 2 * (143_000 + 20_000) and dec.step.steps == 3
    assert r.devices == {0: "NVIDIA H200 SXM", 1: "NVIDIA H200 SXM"}
    # the built-in fast-path checks run: this run's shared expert is separate, so one of them fails
    assert r.checks["available"] and r.checks["counts"]["fail"] >= 1
    assert any(c["code"] == "FP001" and c["status"] == "fail" for c in r.checks["results"])
    one = build_report(decode_run(steps=3, layers=2, ranks=2), phase="decode", rank=1)
    assert [(p.phase, p.rank) for p in one.phases] == [("decode", 1)] and one.per_rank == []


def test_report_on_real_h200_trace():
    r = build_report(import_paths([data_file("kineto_own", "h200_probe.json.gz")]))
    dec = r.phases[0]
    assert dec.phase == "decode"
    grouped = next(k for k in dec.top_kernels if k.family == "grouped_gemm")
    assert grouped.bound == "memory" and 0 < grouped.efficiency < 1.5
    assert dec.launch.verdict in ("launch-bound", "not launch-bound") and dec.launch.linked == dec.launch.kernels


def test_report_unknown_device_says_so():
    r = build_report(import_paths([data_file("samples", "kineto", "nccl_data.json.xz")]))
    assert r.devices == {0: None}
    assert any("A100" in w for w in r.warnings)
    assert all(k.bound in ("unknown", "communication", "memcpy") for p in r.phases for k in p.top_kernels)


def _cli(args, capsys):
    from mmprof.cli import main

    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_cli_report(tmp_path, capsys):
    p = tmp_path / "p.json.gz"
    save_profile(decode_run(steps=2, layers=2, ranks=2), p)
    rc, out, err = _cli(["report", str(p), "--json"], capsys)
    assert rc == 0, err
    doc = orjson.loads(out)
    assert doc["phases"][1]["bottleneck"].startswith("decode is memory-bound")
    md, html = tmp_path / "r.md", tmp_path / "r.html"
    rc, out, _ = _cli(["report", str(p), "--markdown", str(md), "--html", str(html)], capsys)
    assert rc == 0 and "decode is memory-bound" in out and "top kernels" in out
    assert "**decode**" in md.read_text() and "<svg" in html.read_text() and "<script" not in html.read_text()
    rc, _, err = _cli(["report", str(p), "--rank", "7"], capsys)
    assert rc == 2 and "rank 7" in err
    rc, _, err = _cli(["report", str(tmp_path / "nope.json")], capsys)
    assert rc == 2 and err.startswith("mmprof: error:")
