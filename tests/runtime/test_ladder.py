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
    assert [r["rung"] for r in rows] == [r for r, _ in ladder.RUNGS]
    assert rows[0]["dispatch"]["moe.experts"] == ["loop"] and rows[0]["dispatch"]["moe.shared"] == ["separate"]
    assert rows[2]["dispatch"]["moe.experts"] == ["grouped_mm"] and rows[2]["dispatch"]["moe.shared"] == ["fused"]
    assert rows[4]["dispatch"]["attn.indexer"] == ["computed", "reused"]
    assert all(r["decode_tok_s"] > 0 and r["prefill_tok_s"] > 0 for r in rows)
    assert 0.0 <= rows[0]["overlap_mean_jaccard"] <= 1.0
    assert "goal 3.14x decode" in capsys.readouterr().out
