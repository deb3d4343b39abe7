"""Verdicts on vLLM 0.26.0 model families the rules were not written for: excerpts of the H200 family traces
(tests/data/vllm_families, README there; tune split of the recording's hold-out rule), one test per truth.

The truth each test expects is what vLLM's code does (paths in vLLM 0.26.0's tree):
- model_executor/layers/fused_moe/runner/moe_runner.py `_select_forward`: a fused-MoE layer runs through
  `vllm::moe_forward` when it has no shared experts and `vllm::moe_forward_shared` when it has (CUDA);
- models/qwen3_moe.py `Qwen3MoeSparseMoeBlock.__init__`: no `shared_expert_intermediate_size` in the config ->
  `self.shared_expert = None` -> FP001 (shared expert fused) is NOT APPLICABLE, never FAIL or NO EVIDENCE;
- models/deepseek_v2.py `DeepseekV2MoE.__init__`: `n_shared_experts` = 2 -> `DeepseekV2MLP` passed as
  `FusedMoE(shared_experts=...)`, run as its own MLP (moe_runner.py `_maybe_apply_shared_experts`) -> FP001 FAIL;
- models/qwen3_moe.py `FusedMoE(gate=self.gate)` and moe_runner.py `_forward_impl` (`self.gate(hidden_states)`
  when `is_internal_router`): the router GEMM runs inside the fused-MoE runner; it is the router, not a routed
  expert GEMM -> FP009 (no per-expert loop GEMMs) PASS, one router GEMM per MoE layer call;
- models/llama.py: a dense `LlamaMLP`, no experts -> the MoE checks NOT APPLICABLE.
"""

from __future__ import annotations

import json
from collections import Counter

import pandas as pd
import pytest

from mmprof.analysis.checks.context import Context, model_has
from mmprof.analysis.checks.verify import verify
from mmprof.analysis.shapes.engines import EngineGuess, engine_of
from mmprof.analysis.timeline.events import events_of
from mmprof.importers import import_paths

from .conftest import data_file, open_data

CASES = ("qwen3moe_eager_b8", "qwen3moe_graphs_b8", "dsv2lite_eager_b8", "llama_graphs_b8")


def _path(case: str):
    return data_file("vllm_families", f"{case}.pt.trace.json.xz")


@pytest.fixture(scope="module")
def results():
    out = {}
    for case in CASES:
        prof = import_paths([_path(case)])
        out[case] = (prof, {r.code: r for r in verify(prof, engine=engine_of(prof)).results})
    return out


def _raw_ops(case: str) -> Counter:
    with open_data(_path(case)) as f:
        events = json.load(f)["traceEvents"]
    return Counter(e["name"] for e in events if e.get("cat") == "cpu_op" and "moe_forward" in e.get("name", ""))


@pytest.mark.parametrize("case", ["qwen3moe_eager_b8", "qwen3moe_graphs_b8"])
def test_a_model_without_shared_expert_is_not_applicable_for_fp001(results, case):
    ops = _raw_ops(case)   # independently: vLLM ran its MoE layers through moe_forward only
    assert ops["vllm::moe_forward"] > 0 and ops["vllm::moe_forward_shared"] == 0
    r = results[case][1]["FP001"]
    assert r.status == "not_applicable", r.message
    assert "vllm::moe_forward" in r.message


def test_a_model_with_shared_experts_still_fails_fp001(results):
    assert _raw_ops("dsv2lite_eager_b8")["vllm::moe_forward_shared"] > 0
    r = results["dsv2lite_eager_b8"][1]["FP001"]
    assert r.status == "fail" and "separate MLP" in r.message


@pytest.mark.parametrize("case", ["qwen3moe_eager_b8", "dsv2lite_eager_b8"])
def test_the_router_inside_vllms_moe_runner_is_no_expert_gemm(results, case):
    prof, res = results[case]
    assert res["FP009"].status == "pass", res["FP009"].message
    assert res["FP007"].status == "pass", res["FP007"].message
    df = events_of(prof).frame()
    k = df[df["kind"] == "kernel"]
    router_gemms = k[(k["role"] == "moe.router") & (k["family"] == "gemm")]
    calls = k[k["name"] == "fused_moe_kernel"].groupby(["step", "layer"]).ngroups   # MoE layer calls
    assert calls > 0 and len(router_gemms) == calls   # one router GEMM per MoE layer call
    assert not len(k[(k["role"] == "moe.routed") & (k["family"] == "gemm")])


def test_qwen3_moe_under_graphs_passes_the_whole_spec(results):
    res = results["qwen3moe_graphs_b8"][1]
    assert {c: r.status for c, r in res.items()} == {
        "FP000": "pass", "FP001": "not_applicable", "FP002": "not_applicable", "FP003": "pass", "FP004": "pass",
        "FP007": "pass", "FP009": "pass"}


def test_llama_has_no_moe_checks_to_judge(results):
    res = results["llama_graphs_b8"][1]
    assert {res[c].status for c in ("FP001", "FP007", "FP009")} == {"not_applicable"}


def _ctx(platform: str, ops: set[str]) -> Context:
    return Context(events=pd.DataFrame(), dispatch=pd.DataFrame(), source="kernels", meta={},
                   engine=EngineGuess("vllm", platform, "test"), op_names=frozenset(ops))


def test_moe_forward_alone_says_no_shared_expert_only_on_cuda():
    # ROCm with AITER's fused shared experts passes shared_experts=None (models/deepseek_v2.py
    # `is_fusion_moe_shared_experts_enabled`): moe_forward alone then says nothing
    assert model_has(_ctx("cuda", {"vllm::moe_forward"}), "shared_expert")[0] is False
    assert model_has(_ctx("rocm", {"vllm::moe_forward"}), "shared_expert") == (None, "")
    assert model_has(_ctx("cuda", {"vllm::moe_forward", "vllm::moe_forward_shared"}), "shared_expert")[0] is True
    assert model_has(_ctx("cuda", set()), "shared_expert") == (None, "")
