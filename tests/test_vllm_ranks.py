"""vLLM's per-rank trace files as one multi-rank Profile (CPU part of the multi-GPU issue).

Truth (vLLM 0.26, vllm/v1/worker/gpu_worker.py `Worker.profile` and vllm/distributed/utils.py
`get_worker_rank_suffix`): every worker writes its own trace named `{prefix}_dp{d}_pp{p}_tp{t}_dcp{c}_ep{e}_rank{r}`
+ `.{timestamp}.pt.trace.json.gz`, and Kineto's `distributedInfo` holds the worker's global rank and world size.
The files here are derived at test time from the real TP 1 trace tests/data/vllm_own/qwen2moe_graphs_b1 (only the
file name and `distributedInfo` rank / world_size differ per copy), so the shapes are TP 1 shapes on both ranks."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

from mmprof.analysis.timeline.engine_steps import engine_steps
from mmprof.importers import import_paths
from tests.conftest import open_data, data_file

SRC = ("vllm_own", "qwen2moe_graphs_b1.pt.trace.json.xz")


def _raw_steps() -> list[str]:
    """The engine-step annotations of the source trace, from the raw JSON (Worker.annotate_profile,
    vllm/v1/worker/gpu_worker.py): the committed excerpt keeps the first 3 of the run's 33, the prefill
    `execute_context_1(64)_generation_0(0)` and 2 decode steps `execute_context_0(0)_generation_1(1)`."""
    ev = json.load(open_data(data_file(*SRC)))["traceEvents"]
    return [e["name"] for e in sorted(ev, key=lambda e: e.get("ts", 0))
            if e.get("cat") == "user_annotation" and e.get("name", "").startswith("execute_context_")]


def _write_ranks(tmp_path, world: int, with_info: bool):
    doc = json.load(open_data(data_file(*SRC)))
    out = []
    for r in range(world):
        d = dict(doc)
        if with_info:
            d["distributedInfo"] = {**doc["distributedInfo"], "rank": r, "world_size": world}
        else:
            d.pop("distributedInfo", None)
        p = tmp_path / f"qwen_dp0_pp0_tp{r}_dcp0_ep0_rank{r}.176458000{r}.pt.trace.json.gz"
        with gzip.open(p, "wt") as f:
            json.dump(d, f)
        out.append(p)
    return out


def test_rank_files_import_as_one_profile(tmp_path):
    _write_ranks(tmp_path, 2, with_info=True)
    p = import_paths([tmp_path])
    assert p.ranks == [0, 1]
    k = p.df("kernels")
    n = len(k[k["rank"] == 0])
    assert n > 0 and len(k[k["rank"] == 1]) == n  # the same trace on both ranks
    es = engine_steps(p)
    n = len(_raw_steps())
    assert n == 3 and es.groupby("rank").size().tolist() == [n, n]  # every rank keeps vLLM's own engine steps


def test_rank_from_vllm_file_name_without_distributed_info(tmp_path):
    """A trace without `distributedInfo` (a profiler run without torch.distributed metadata) takes its rank from
    vLLM's `..._rank{r}` suffix."""
    _write_ranks(tmp_path, 2, with_info=False)
    assert import_paths([tmp_path]).ranks == [0, 1]


def test_ranks_command_on_vllm_rank_files(tmp_path):
    _write_ranks(tmp_path, 2, with_info=True)
    prof = tmp_path / "p.json.gz"
    r = subprocess.run([sys.executable, "-m", "mmprof", "import", str(tmp_path), "-o", str(prof)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "mmprof", "ranks", str(prof), "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    dec = {int(x["rank"]): x for x in d["per_rank"] if x["phase"] == "decode"}
    n_dec = sum(s.startswith("execute_context_0(0)_generation_") for s in _raw_steps())
    assert n_dec == 2 and sorted(dec) == [0, 1] and dec[0]["steps"] == dec[1]["steps"] == n_dec  # decode steps
    assert dec[0]["step_ns"] == dec[1]["step_ns"]  # identical copies: identical steps
    assert any("engine's own step annotations" in n for n in d["notes"])
    # no collectives: waits unknown; equal ranks are said to be equal (no "+0 ns" straggler)
    verdicts = [x["verdict"] for x in d["phases"]]
    assert all("every rank's steps take the same time" in v and "longest" not in v for v in verdicts), verdicts
