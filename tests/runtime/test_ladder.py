"""CPU smoke run of the H200 ladder script (tiny preset): it must run every rung and record what ran."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]


def test_ladder_quick_cpu(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "benchmarks" / "h200"))
    try:
        import ladder
    finally:
        sys.path.pop(0)
    rc = ladder.main(["--device", "cpu", "--quick", "--batches", "1", "--prompt", "64", "--steps", "1",
                      "--repeats", "1", "--out", str(tmp_path)])
    from mmprof.runtime import scopes

    assert scopes._ENABLED  # the script turns scopes off while timing and restores them
    assert rc == 0
    data = json.loads((tmp_path / "ladder.json").read_text())
    rows = data["rows"]
    assert [r["rung"] for r in rows] == [r for r, sw in ladder.RUNGS if not sw.get("graphs")]  # no graphs on CPU
    assert {r for r, sw in ladder.RUNGS if sw.get("graphs")} == {"fused+graphs", "all+graphs", "all+compile", "all+kernels"}
    assert rows[0]["dispatch"]["moe.experts"] == ["loop"] and rows[0]["dispatch"]["moe.shared"] == ["separate"]
    assert rows[2]["dispatch"]["moe.experts"] == ["grouped_mm"] and rows[2]["dispatch"]["moe.shared"] == ["fused"]
    assert rows[4]["dispatch"]["attn.indexer"] == ["computed", "reused"]
    assert all(r["decode_tok_s"] > 0 and r["prefill_tok_s"] > 0 for r in rows)
    assert 0.0 <= rows[0]["overlap_mean_jaccard"] <= 1.0
    out = capsys.readouterr().out
    assert "goal 3.14x decode" in out
    assert "skipping fused+graphs, all+graphs, all+compile, all+kernels: CUDA/HIP graphs need a GPU" in out


def test_ladder_graph_functions_on_cpu():
    """The graphs rungs' two functions, driven by a fake capture: replays decode the eager path's tokens."""
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks" / "h200"))
    try:
        import ladder
    finally:
        sys.path.pop(0)
    from mmprof.runtime import Switches, Workload, build_model, get_preset
    from mmprof.runtime.kvcache import make_cache

    from .test_graph_runner import FakeGraph

    model = build_model(get_preset("tiny"), Switches(graphs=True), seed=0)
    caches = make_cache(model, 2, 80)
    prompt = Workload(batch=2, prompt_len=64, seed=3).tokens(512, "cpu")
    tok0 = model(prompt, 0, caches, last_only=True)[:, -1].argmax(-1, keepdim=True)
    start, stop = ladder._timer(torch.device("cpu"))
    eager = ladder.decode(model, caches, tok0, 64, 4)
    fake = FakeGraph()
    runner, capture_ms = ladder.capture_graph(model, caches, tok0, 64, start, stop, capture=fake)
    model.dispatch.clear()
    graphed = ladder.decode_graphed(runner, model, tok0, 64, 4)
    assert torch.equal(graphed, eager) and capture_ms >= 0
    assert fake.captures == 1 and fake.replays == 4
    assert sorted({r.step for r in model.dispatch.records}) == [1, 2, 3, 4]
    assert ladder.dispatch_summary(model)["moe.experts"] == ["grouped_mm"]
