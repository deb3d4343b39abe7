"""CPU smoke run of benchmarks/h200/decode_kernels.py (tiny preset, 4 layers, the graph rung through the CPU stand-in
capture): the script's timing (replays, generate(), the generate-difference figure vLLM's side is measured with),
its JSON and its mmprof profile, which mmprof reads back. The kernels rung itself is checked end to end by
test_triton_rung.py (under Triton's interpreter it is minutes here); on the H200 the script runs every rung."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]


def _script():
    sys.path.insert(0, str(ROOT / "benchmarks" / "h200"))
    try:
        import decode_kernels
    finally:
        sys.path.pop(0)
    return decode_kernels


def test_decode_kernels_cpu_smoke(tmp_path):
    dk = _script()
    rc = dk.main([str(tmp_path), "--device", "cpu", "--preset", "tiny", "--layers", "4", "--batches", "1",
                  "--rungs", "graphs", "--profile-rungs", "graphs", "--phases", "timing,profiles,sweep",
                  "--sweep-batches", "1", "--sweep-rung", "graphs", "--prompt", "24",
                  "--steps", "1", "--repeats", "2", "--warmup", "1", "--short", "1", "--long", "3",
                  "--diff-repeats", "2", "--profile-steps", "2"])
    from mmprof.runtime import scopes

    assert scopes._ENABLED  # the script turns scopes off while timing and back on
    data = json.loads((tmp_path / "decode_kernels.json").read_text())
    assert rc == 0 and data["errors"] == {} and data["skipped"] == []
    [row] = data["rows"]
    assert (row["batch"], row["rung"]) == (1, "graphs") and len(row["repeats_ms"]) == 2
    assert len(row["diff_repeats_ms"]) == 2 and row["diff_ms_per_step"] == statistics.median(row["diff_repeats_ms"])
    assert row["spread_ms"] == [min(row["repeats_ms"]), max(row["repeats_ms"])]
    assert row["floor_ms"] > 0 and row["impls"] == ["moe.experts=grouped_mm"] and row["fallbacks"] == []
    assert data["env"]["capacity"] == 24 + 3 + 8 and data["env"]["device"] == "cpu"
    # the profile is an mmprof Profile of the rung: its dispatch rows and regions read back
    from mmprof.analysis.views.report import build_report
    from mmprof.profiles.io import load_profile

    assert data["profiles"]["graphs"]["file"] == "graphs_b1.json.xz"
    prof = load_profile(tmp_path / "graphs_b1.json.xz")
    assert prof.meta["run"]["switches"]["graphs"] is True and prof.meta["run"]["workload"]["decode_steps"] == 2
    ops = {prof.string(int(i)) for i in prof.tables["dispatch"]["op"]}
    assert {"moe.experts", "attn.indexer", "attn.core"} <= ops
    assert build_report(prof) is not None
    from mmprof.analysis.timeline.events import events_of

    roles = set(events_of(prof).frame()["role"].dropna())  # the profiled run kept the region scopes
    assert {"moe.routed", "attn.core", "attn.qkv"} <= roles
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decode_kernels.json", "graphs_b1.json.xz"]
    # the sweep tried every alternative configuration of every kernel once and kept one per kernel (on the graph
    # rung here, which launches none of them: the loop, not the choice, is what this checks)
    from mmprof.runtime.kernels import support

    tried = {(t["kernel"], t["config"]) for t in data["sweep"]}
    assert tried == {(k, i) for k, alts in support.CONFIGS.items() for i in range(1, len(alts))}
    assert set(data["best_configs"]["1"]) == set(support.CONFIGS) and data["tuned_ms"]["1"] > 0
    for k in support.CONFIGS:
        support.set_config(k, 0)


def test_decode_kernels_refuses_an_unknown_rung(tmp_path, capsys):
    assert _script().main([str(tmp_path), "--device", "cpu", "--rungs", "graphs,turbo"]) == 2
    assert "unknown rung(s) turbo" in capsys.readouterr().err


def test_versus_vllm_pairs_the_same_method_per_batch(tmp_path):
    """vllm_decode.py's JSON lines (its format: one line per batch, an error line for a batch that crashed) against
    the runtime rows' diff_ms (the same generate-difference method): the speedup is vLLM's ms over the runtime's."""
    lines = ['{"vllm": "0.26.0"}',
             '{"engine": "vllm", "batch": 1, "prompt": 512, "decode_ms_per_step": 1.9, "repeats_ms": [1.9, 1.6, 2.0]}',
             '{"engine": "vllm", "batch": 8, "error": "EngineDeadError: ..."}']
    (tmp_path / "v.jsonl").write_text("\n".join(lines) + "\nnot json\n")
    rows = [dict(batch=1, rung="kernels", diff_ms_per_step=0.95), dict(batch=8, rung="kernels", diff_ms_per_step=2.0)]
    [pair] = _script().versus_vllm(rows, tmp_path / "v.jsonl")
    assert (pair["batch"], pair["rung"], pair["vllm_ms"], pair["runtime_ms"]) == (1, "kernels", 1.9, 0.95)
    assert pair["speedup"] == 2.0 and pair["vllm_repeats_ms"] == [1.9, 1.6, 2.0]
