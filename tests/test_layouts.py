"""Engine layouts as data (rules/layouts.toml, mmprof/analysis/shapes/layouts.py): per-rank weights and GEMMs of
every layer after TP and EP in each engine's own terms, the engine a trace came from, and the TP size a trace
shows. The truths are vLLM 0.26's model code (/tmp/kit/site/vllm; file named per test), SGLang's
python/sglang/srt/models/minimax_m3.py, and the reference runtime's meta-device build."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from mmprof.analysis.shapes.engines import engine_of
from mmprof.analysis.shapes.layouts import layout_shapes, load_layouts, parse_switches, resolve
from mmprof.analysis.shapes.trace_tp import check_tp, trace_tp
from mmprof.capture.workflows.shapes import analytic_shapes, profile_shapes, resolve_model
from mmprof.errors import BadInput
from mmprof.importers import import_paths
from mmprof.modelspec import ModelSpec
from mmprof.runtime import analytic, to_spec
from tests.conftest import data_file, open_data

M3_TINY = data_file("samples", "vllm", "config", "m3_tiny_config.json")
VLLM_M3 = [("samples", "vllm", "m3_eager_b8.pt.trace.json.xz"), ("samples", "vllm", "m3_graphs_b8.pt.trace.json.xz"),
           ("vllm_own", "m3_graphs_b1.pt.trace.json.xz")]
QWEN2 = [("vllm_own", "qwen2moe_graphs_b1.pt.trace.json.xz"), ("vllm_own", "qwen2moe_eager_b8_first3.pt.trace.json.xz")]


def _gemms(res, rank: int = 0, kind: str | None = None) -> dict[str, tuple]:
    k = next(x for x in res.ranks[rank].kinds if kind is None or x.kind == kind)
    return {g.name: (g.n, g.k, g.groups, g.weight_groups) for g in k.gemms}


def _weights(res, rank: int = 0, kind: str = "sparse/moe") -> dict[str, list[int]]:
    return next(x for x in res.ranks[rank].kinds if x.kind == kind).weights


# ------------------------------------------------------------------------------------------------ the runtime
@pytest.mark.parametrize("preset", ["tiny", "small", "m3"])
def test_runtime_layout_arithmetic_equals_the_runtime_build(preset):
    """The runtime's row of the data, through the same arithmetic as every engine, gives exactly what the runtime
    builds on the meta device (every GEMM, heads, cache bytes, LM head) at TP 1-8 and EP 8: the arithmetic cannot
    drift from the runtime, so it is tested where the truth is a build."""
    args = resolve_model(preset)
    spec = to_spec(args)
    for tp, ep in ((1, 1), (2, 1), (4, 1), (8, 1), (8, 8)):
        built, data = analytic(args, tp, ep), layout_shapes(spec, resolve("runtime"), tp, ep)
        for ra, rb in zip(built.ranks, data.ranks):
            assert ra.model_gemms[0].n == rb.model_gemms[0].n
            for ka, kb in zip(ra.kinds, rb.kinds):
                key = lambda g: (g.scope, g.n, g.k, g.groups, g.weight_groups, g.extra_rows)  # noqa: E731
                assert sorted(map(key, ka.gemms)) == sorted(key(g) for g in kb.gemms), (preset, tp, ep, ka.kind)
                a, b = ka.attention, kb.attention
                assert (a.q_heads, a.kv_heads, a.index_q_heads, a.index_k_heads) == \
                    (b.q_heads, b.kv_heads, b.index_q_heads, b.index_k_heads)
                assert (ka.kv_bytes_per_token, ka.index_bytes_per_token) == \
                    (kb.kv_bytes_per_token, kb.index_bytes_per_token)


# ------------------------------------------------------------------------------------------------ vLLM
def test_vllm_cuda_m3_layout_from_its_model_code():
    """vllm/models/minimax_m3/nvidia/model.py at TP 8 on the tiny M3 (16 q / 4 KV heads of 128, index dim 128,
    32 experts of intermediate 768, one shared expert, hidden 2048):
    - MinimaxM3QKVParallelLinearWithIndexer (layers/linear.py): [q | k | v | index_q | index_k] per rank =
      (16/8 + 2 * 1 + 1) * 128 + 128 = 768 (4 KV heads over 8 ranks: one each, replicated twice; index_q shards
      like the KV heads, index_k is one head on every rank);
    - the shared expert is its own MiniMaxM3MLP (intermediate_size * n_shared = 768), MergedColumnParallel over 8
      ranks: gate_up N = 192, down K = 96; routed FusedMoE w13 [32, 192, 2048], w2 [32, 2048, 96];
    - GateLinear router fp32 [32, 2048] (replicated)."""
    res = analytic_shapes(str(M3_TINY), tp=8, engine="vllm-cuda")
    assert res.layout == "vllm-cuda"
    g = _gemms(res, 0, "sparse/moe")
    assert g["attn.qkv"][:2] == (768, 2048) and g["attn.o_proj"][:2] == (2048, 256)
    assert g["moe.shared.gate_up"][:2] == (192, 2048) and g["moe.shared.down"][:2] == (2048, 96)
    assert g["moe.routed.gate_up"] == (192, 2048, 32, 32) and g["moe.routed.down"] == (2048, 96, 32, 32)
    w = _weights(res)
    assert w["block_sparse_moe.experts.w13_weight"] == [32, 192, 2048]
    assert w["block_sparse_moe.shared_experts.gate_up_proj.weight"] == [192, 2048]
    k = next(x for x in res.ranks[0].kinds if x.kind == "sparse/moe")
    assert k.weight_dtypes["block_sparse_moe.gate.weight"] == "fp32"
    assert (k.attention.q_heads, k.attention.kv_heads, k.attention.kv_replicas) == (2, 1, 2)
    assert any(f.code == "SH001" for f in res.findings)  # 4 KV heads over 8 ranks: replicated


def test_vllm_rocm_layout_fused_shared_and_its_limits():
    """vllm/models/minimax_m3/amd/model.py: with VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS the shared expert is
    the routed GEMM's last slot (FusedMoE(n_shared_experts=1): determine_expert_counts, expert_map_manager appends
    the fused slots to the local experts) and no shared_experts module is built; `_fuse_shared_experts_enabled` is
    False under expert parallelism, so EP 8 runs a separate shared MLP again; without the switch it is separate
    (the default). With use_index_cache + index_topk_freq 4 one sparse layer in 4 computes the block selection."""
    lay = resolve("vllm", "rocm")
    assert lay.id == "vllm-rocm"
    off = layout_shapes(ModelSpec.load(M3_TINY), lay, 2)
    assert "moe.shared.gate_up" in _gemms(off, 0, "sparse/moe")
    on = layout_shapes(ModelSpec.load(M3_TINY), lay, 2, switches=parse_switches(lay, ["fused_shared=on"]))
    g = _gemms(on, 0, "sparse/moe")
    assert "moe.shared.gate_up" not in g and g["moe.routed.gate_up"] == (768, 2048, 32, 33)
    assert _weights(on)["block_sparse_moe.experts.w13_weight"] == [33, 768, 2048]
    ep = layout_shapes(ModelSpec.load(M3_TINY), lay, 8, 8, switches=parse_switches(lay, ["fused_shared=on"]))
    ge = _gemms(ep, 0, "sparse/moe")
    assert ge["moe.routed.gate_up"] == (1536, 2048, 4, 4) and ge["moe.shared.gate_up"][:2] == (192, 2048)
    reuse = layout_shapes(ModelSpec.load(M3_TINY), lay, 1, switches=parse_switches(lay, ["index_topk_freq=4"]))
    assert any("computed in sparse layers 2 (1 in 4), reused in the other 3" in n for n in reuse.notes)
    with pytest.raises(BadInput, match="has no switch 'fse'"):
        parse_switches(lay, ["fse=on"])


def test_sglang_fuses_the_shared_expert_and_replicates_it_under_deepep():
    """SGLang minimax_m3.py: num_fused_shared_experts = n_shared_experts unless fusion is disabled (experts built
    with num_local_experts + 1 slots); under DeepEP the shared MLP is built with tp_size=1 (replicated)."""
    spec = ModelSpec.load(M3_TINY)
    lay = resolve("sglang")
    g = _gemms(layout_shapes(spec, lay, 4), 0, "sparse/moe")
    assert g["moe.routed.gate_up"] == (384, 2048, 32, 33) and "moe.shared.gate_up" not in g
    ge = _gemms(layout_shapes(spec, lay, 8, 8), 0, "sparse/moe")
    assert ge["moe.shared.gate_up"][:2] == (1536, 2048)  # whole: 2 x 768 on every rank
    gd = _gemms(layout_shapes(spec, lay, 4, switches=parse_switches(lay, ["shared_fusion=off"])), 0, "sparse/moe")
    assert gd["moe.shared.gate_up"][:2] == (384, 2048)


def test_uneven_expert_parallel_split_follows_vllms_expert_map():
    """expert_map_manager: base = E // ep, the first E % ep ranks get one more: 32 experts over 6 ranks -> 6,6,5,5,5,5
    (SH004 names the uneven ranks). TP 6 needs heads divisible by 6, so a config with 12 q heads / 6 KV heads."""
    cfg = json.loads(M3_TINY.read_text())
    tc = cfg["text_config"]
    tc.update(num_attention_heads=12, num_key_value_heads=6, dense_intermediate_size=4104)
    tc["sparse_attention_config"]["sparse_num_index_heads"] = 6
    spec = ModelSpec.from_hf(cfg)
    res = layout_shapes(spec, resolve("vllm-cuda"), 6, 6)
    per = [_gemms(res, r, "sparse/moe")["moe.routed.gate_up"][2] for r in range(6)]
    assert per == [6, 6, 5, 5, 5, 5]
    res2 = analytic_shapes("tiny", tp=2, engine="runtime")
    assert res2.layout == "runtime"


@pytest.mark.parametrize("trace", VLLM_M3 + QWEN2, ids=lambda t: t[-1].split(".")[0])
def test_vllm_traces_match_the_vllm_layout_call_by_call(trace):
    """Done-when (issue 32): on vLLM's own M3 and Qwen2-MoE traces, `shapes --profile` finds the engine (vLLM, from
    its execute_context_* steps), and every parallel linear it finds has the vllm-cuda layout's per-rank shape. The
    count of linears is taken from the raw JSON independently (json, not mmprof): every aten::linear with a 2-D
    weight, and each (N, K) of them must be a GEMM of the layout."""
    cfg = M3_TINY if "m3" in trace[-1] else data_file("vllm_own", "qwen2moe_config.json")
    res = profile_shapes([str(data_file(*trace))], model=str(cfg))
    c = res.comparison
    assert res.layout == "vllm-cuda" and res.engine["engine"] == "vllm" and res.tp == 1
    assert c.compared and c.differ == 0 and c.missing == 0 and c.matched == c.calls - c.unscoped > 0
    raw = json.load(open_data(data_file(*trace)))["traceEvents"]
    linears = Counter(tuple(e["args"]["Input Dims"][1]) for e in raw if e.get("cat") == "cpu_op"
                      and e.get("name") == "aten::linear" and len(e["args"].get("Input Dims", [[], []])[1]) == 2)
    layout = {(g.n, g.k) for k in res.ranks[0].kinds for g in k.gemms} | {(g.n, g.k) for g in res.ranks[0].model_gemms}
    assert linears and set(linears) <= layout, set(linears) - layout


def test_rocm_layout_judges_fused_moe_calls_with_their_weights(tmp_path):
    """An AITER fused-MoE call takes both expert weights (hidden [T, H], w1 [E, 2I, H], w2 [E, H, I]): under the
    ROCm FSE layout w1 has 33 slots for 32 experts; the same call against the CUDA layout (32 slots) differs, and a
    separate shared expert against the FSE layout is a mismatch (that layout builds no shared MLP)."""
    from mmprof.profiles.io import save_profile
    from mmprof.profiles.profile import ProfileBuilder

    def trace(ops, name):
        b = ProfileBuilder({"source": {"format": "kineto"}, "ranks": [{"rank": 0}], "clock": {"unit": "ns"},
                            "mmprof_version": "test"})
        for i, (scope, op, dims) in enumerate(ops):
            b.row("ops", rank=0, tid=1, start_ns=i * 1000, dur_ns=500, name=op, input_dims=json.dumps(dims),
                  scope=scope, scope_path=f"mmprof.decode > mmprof.step.1 > {scope}", phase="decode", step=1)
        path = tmp_path / name
        save_profile(b.build(), path)
        return str(path)

    T, H = 4, 2048
    fused = trace([("layers.2.attn.qkv", "aten::linear", [[T, H], [3712, H]]),
                   ("layers.2.moe.router", "aten::linear", [[T, H], [32, H]]),
                   ("layers.2.moe.routed", "vllm::rocm_aiter_fused_moe", [[T, H], [33, 1536, H], [33, H, 768]])],
                  "fse.json")
    on = profile_shapes([fused], model=str(M3_TINY), engine="vllm-rocm", layout_opts=("fused_shared=on",))
    assert on.comparison.differ == 0 and on.comparison.matched == 3
    cuda = profile_shapes([fused], model=str(M3_TINY), engine="vllm-cuda")
    assert cuda.comparison.differ == 1 and "w1 [33, 1536, 2048]" in cuda.comparison.unmatched[0]["why"]
    sep = trace([("layers.2.moe.shared", "aten::linear", [[T, H], [1536, H]])], "sep.json")
    bad = profile_shapes([sep], model=str(M3_TINY), engine="vllm-rocm", layout_opts=("fused_shared=on",))
    assert bad.comparison.differ == 1 and "fuses the shared expert" in bad.comparison.unmatched[0]["why"]


# ------------------------------------------------------------------------------------------------ engine, TP
def test_engine_of_a_trace():
    cases = {VLLM_M3[0]: ("vllm", "cuda"), ("hf_moe", "m3_grouped_stack.json.gz"): ("transformers", "cpu"),
             ("h200_runtime", "runtime_fast.json.xz"): ("runtime", "cuda"),
             ("vllm_own", "rec_qwen2moe_graphs_b8.json.xz"): ("vllm", "cuda")}
    for path, want in cases.items():
        g = engine_of(import_paths([data_file(*path)]))
        assert (g.engine, g.platform) == want, (path, g)
        assert g.evidence


def test_a_tp_the_trace_contradicts_is_an_error(capsys):
    """Issue 32: `shapes --profile TRACE --model CONFIG --tp 8` on a TP-1 trace said "58 of 63 profile calls differ";
    now it says what the trace shows. The transformers TP-2 traces (hf_moe m3_tp2_rank*) show TP 2."""
    from mmprof.cli import main

    p = import_paths([data_file(*VLLM_M3[0])])
    spec = ModelSpec.load(M3_TINY)
    shown = trace_tp(p, spec)
    assert shown.tp == 1 and shown.scores[1] == shown.gemms
    with pytest.raises(BadInput, match=r"--tp 8 contradicts the trace: 1 rank; 90 of 90 weight GEMMs have TP 1's"):
        check_tp(p, spec, 8)
    for cmd in (["shapes", "--profile"], ["verify-fastpath"]):
        with pytest.raises(SystemExit) as e:
            main([*cmd, str(data_file(*VLLM_M3[0])), "--model", str(M3_TINY), "--tp", "8"])
        assert e.value.code == 2 and "--tp 8 contradicts the trace" in capsys.readouterr().err
    tp2 = import_paths([data_file("hf_moe", f"m3_tp2_rank{r}.json.gz") for r in (0, 1)])
    assert trace_tp(tp2, ModelSpec.load(data_file("hf_moe", "configs", "m3.json"))).tp == 2


def test_unknown_engine_names_the_nearest():
    with pytest.raises(BadInput, match="nearest: vllm"):
        resolve("vlm")
    assert {x.engine for x in load_layouts().values()} >= {"runtime", "vllm", "sglang", "transformers"}
    for lay in load_layouts().values():  # every layout says which code it was read from
        assert lay.source and lay.description


def test_vllm_deepseek_mla_and_qwen2_shared_gate_layouts():
    """vLLM deepseek_v2.py (DeepSeek V3 config of tests/data/hf_moe: 4 q heads, q_lora 32, kv_lora 16, rope 8,
    nope 16, v 16, hidden 64) at TP 2: DeepSeekV2FusedQkvAProjLinear [q_a | kv_a | rope] replicated (disable_tp):
    N = 32 + 16 + 8 = 56; q_b_proj ColumnParallel N = 2 heads x 24; kv_b_proj N = 2 x (16 + 16); o_proj K = 2 x 16;
    decode absorbs kv_b into W_UK / W_UV, one bmm over the 2 local heads each; DeepseekV2MLP shared expert sharded.
    qwen2_moe.py: shared_expert_gate is a ReplicatedLinear(hidden, 1), beside the TP-sharded shared expert."""
    ds = layout_shapes(ModelSpec.load(data_file("hf_moe", "configs", "dsv3.json")), resolve("vllm-cuda"), 2)
    g = _gemms(ds, 0, "full/moe")
    assert g["attn.qkv.fused_qkv_a"][:2] == (56, 64) and g["attn.qkv.q_b"][:2] == (48, 32)
    assert g["attn.qkv.kv_b"][:2] == (64, 16) and g["attn.o_proj"][:2] == (64, 32)
    assert g["attn.core.w_uk"] == (16, 16, 2, 2) and g["attn.core.w_uv"] == (16, 16, 2, 2)
    assert g["moe.shared.gate_up"][:2] == (32, 64)  # 2 x moe_intermediate 32 x 1 shared expert / TP 2
    hf = layout_shapes(ModelSpec.load(data_file("hf_moe", "configs", "dsv3.json")), resolve("transformers"), 1)
    assert "attn.qkv.q_a" in _gemms(hf, 0, "full/moe") and "attn.core.w_uk" not in _gemms(hf, 0, "full/moe")
    qw = layout_shapes(ModelSpec.load(data_file("vllm_own", "qwen2moe_config.json")), resolve("vllm-cuda"), 2)
    gq = _gemms(qw, 0)
    assert gq["moe.shared.expert_gate"][:2] == (1, qw.config["hidden_size"]) and "moe.shared.gate_up" in gq
    assert _weights(qw, 0, qw.ranks[0].kinds[0].kind)["mlp.shared_expert.gate_up_proj.weight"]


@pytest.mark.parametrize("cfg", ["dsv3", "dsv32", "gptoss", "m3", "mixtral", "qwen3moe"])
def test_every_family_lays_out_in_every_engine(cfg):
    spec = ModelSpec.load(data_file("hf_moe", "configs", f"{cfg}.json"))
    for lay in load_layouts().values():
        for tp, ep in ((1, 1), (2, 1), (2, 2)):
            res = layout_shapes(spec, lay, tp, ep)
            assert len(res.ranks) == tp and all(k.gemms for r in res.ranks for k in r.kinds)
            assert sum(len(k.layers) for k in res.ranks[0].kinds) == spec.n_layers


@pytest.mark.parametrize("name", ["m3_grouped", "m3_eager", "qwen3moe_grouped", "dsv3_eager", "dsv32_grouped",
                                  "mixtral_eager", "gptoss_grouped"])
def test_transformers_traces_match_the_transformers_layout(name):
    """transformers 5.17's own traces (tests/data/hf_moe, with_stack: its model classes name the engine): every
    weight GEMM in a known region has the transformers layout's shape (separate q / k / v, DeepSeek's q_a / kv_a,
    M3's merged gate_up, experts as grouped_mm or the eager loop); the indexer's products of activations have no
    weight shape to judge (unjudged, never a match). The vLLM layout was written from vLLM's code before any trace
    was compared; of the transformers families, M3 (merged gate_up) and DeepSeek V3.2 (separate wk /
    weights_proj) were corrected on their traces, the other four matched as first written."""
    cfg = {"m3": "m3", "qwen3moe": "qwen3moe", "dsv3": "dsv3", "dsv32": "dsv32", "mixtral": "mixtral",
           "gptoss": "gptoss"}[name.split("_")[0]]
    res = profile_shapes([str(data_file("hf_moe", f"{name}_stack.json.gz"))],
                         model=str(data_file("hf_moe", "configs", f"{cfg}.json")))
    c = res.comparison
    assert res.layout == "transformers" and res.engine["engine"] == "transformers"
    assert c.differ == 0 and c.missing == 0 and c.matched >= 0.85 * c.calls
