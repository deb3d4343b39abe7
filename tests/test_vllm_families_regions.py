"""vLLM 0.26 compiled graph mode on families the placement was not written for: a dense Llama and a Qwen3-MoE
(no shared expert; its router gate is called by FusedMoE inside `vllm::moe_forward`), torch.compile +
FULL_AND_PIECEWISE CUDA graphs, batch 8, their first 4 engine steps (tests/data/vllm_own/README.md: how they were recorded and cut). The truth is
tests/vllm_truth.py's, read from the raw JSON with vLLM's model code (its docstring says which file each rule comes
from), never from mmprof.

Before issue 37's second pass on these traces: Llama 57% of kernel time in regions (Inductor's decoder norms
`triton_per_fused_fused_add_rms_norm_N` unplaced, so every projection and MLP GEMM of the compiled layers with
them), Qwen3-MoE 44 router GEMMs in `lm_head` (the gate module, called from inside the compiled graph, read as a
linear directly under the CausalLM).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mmprof.analysis.checks.verify import verify
from mmprof.analysis.timeline.events import events_of
from mmprof.importers import import_paths
from tests import vllm_truth as T
from tests.conftest import data_file, open_data

CONFIGS = Path(__file__).resolve().parents[1] / "benchmarks" / "h200" / "vllm_configs"
LLAMA = ("vllm_own", "llama_graphs_b8_first4.pt.trace.json.xz")
QWEN3 = ("vllm_own", "qwen3moe_graphs_b8_first4.pt.trace.json.xz")


def _judged(trace, config):
    path = data_file(*trace)
    m = T.model_of(json.loads((CONFIGS / config / "config.json").read_text()))
    tr, judged, skipped = T.truth(json.load(open_data(path)), m)
    p = import_paths([path])
    ev = events_of(p)
    return p, ev, T.judge(p, ev, tr), judged, skipped


@pytest.fixture(scope="module")
def llama():
    return _judged(LLAMA, "llama_dense")


@pytest.fixture(scope="module")
def qwen3():
    return _judged(QWEN3, "qwen3_moe")


def test_compiled_dense_llama_every_kernel_in_its_layer(llama):
    # LlamaDecoderLayer.forward (vllm/model_executor/models/llama.py): input_layernorm, self_attn (qkv_proj, split,
    # rotary_emb, attn, o_proj), post_attention_layernorm, mlp (gate_up_proj, SiluAndMul, down_proj); LlamaModel
    # ends with self.norm. Compiled, only the attention op and the first norm (embedding fused in) name a part:
    # the decoder norms are found by their op names and the order, the rest by the order between them; the
    # replays (3 decode steps' graph launches) take their eager twins' places
    p, ev, j, judged, skipped = llama
    assert judged == 4 and skipped == 0
    assert j.share_placed == 1.0 and j.wrong == []
    dur = ev.dur.astype(np.float64)
    reg = np.array([r is not None for r in ev.region])
    assert dur[reg].sum() / dur.sum() >= 0.99
    rep = ev.graph >= 0
    assert rep.sum() >= 100 and dur[rep & reg].sum() / dur[rep].sum() >= 0.98
    # every layer's MLP is dense (no MoE part in any layer), and the final norm closes each forward
    roles = {str(r) for r in ev.role[reg]}
    assert not any(r.startswith("moe") for r in roles) and "mlp" in roles and "final_norm" in roles


def test_compiled_dense_llama_verdicts(llama):
    # a dense model has no experts: the MoE checks are not applicable (in graph mode as in eager)
    p = llama[0]
    got = {r.code: r.status for r in verify(p).results}
    assert got["FP001"] == got["FP007"] == got["FP009"] == "not_applicable"


def test_compiled_qwen3moe_router_gate_is_the_router(qwen3):
    # Qwen3MoeSparseMoeBlock passes `gate=` to FusedMoE and MoERunner._forward_impl calls it inside the
    # `vllm::moe_forward` op (vllm/model_executor/models/qwen3_moe.py, layers/fused_moe/runner/moe_runner.py): the
    # gate GEMM (one per layer and step) is the router, never the LM head nor a routed expert; the LM head is
    # LogitsProcessor's GEMM, once per step, outside the model forward
    p, ev, j, judged, skipped = qwen3
    assert judged == 4 and skipped == 0
    assert j.share_placed == 1.0 and j.wrong == []
    K = p.tables["kernels"]
    k = ev.table == 0
    gemm = k & (ev.family == "gemm")
    lm = gemm & (ev.region == "lm_head")
    steps = np.unique(K["step"][ev.row[k]])
    assert lm.sum() <= len(steps[steps >= 0])
    router = gemm & np.array([r is not None and r.endswith("moe.router") for r in ev.region])
    assert router.sum() >= 4 * 4  # 4 layers x 4 steps
    dur = ev.dur.astype(np.float64)
    reg = np.array([r is not None for r in ev.region])
    assert dur[reg].sum() / dur.sum() >= 0.98
