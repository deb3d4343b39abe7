"""mmprof.labels is the only parser of phase / step / rank / region labels: one table of labels, run through the
parser and through every importer path (Kineto annotations; rocprofv3 CSV markers and Nsight Systems NVTX
ranges, which share the importers' scope helper), must give the same phase, step, layer and role everywhere."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from mmprof.analysis.timeline.events import events_of
from mmprof.importers import import_paths
from mmprof.errors import BadInput
from mmprof.labels import (is_marker, load_roles, module_event, parse_label, parse_path, phase_of, rank_from_name,
                           rank_from_text, region_pattern, roles, step_of)

from .conftest import data_file

# (label chain, outermost first) -> (phase, step, layer, role) of a kernel launched inside the innermost label
TABLE = [
    (["mmprof.decode", "mmprof.step.3", "layers.12.moe.routed"], ("decode", 3, 12, "moe.routed")),
    (["mmprof.prefill", "mmprof.step.0", "layers.0.attn.indexer"], ("prefill", 0, 0, "attn.indexer")),
    (["ProfilerStep#7", "model.layers.4.mlp.shared_experts.down_proj"], (None, 7, 4, "moe.shared")),
    (["decode_step", "model.layers.0.self_attn.indexer"], ("decode", -1, 0, "attn.indexer")),
    (["LlamaDecoderLayer", "model.layers.5.self_attn.o_proj"], (None, -1, 5, "attn.o_proj")),  # not "decode"
    (["mmprof.decode", "prefill_chunk", "lm_head"], ("decode", -1, -1, "lm_head")),  # the outermost phase wins
    (["ProfilerStep#99999999999999999999", "model.layers.2.mlp.experts"], (None, -1, 2, "moe.routed")),
    (["mmprof.step.5", "my_custom_range"], (None, 5, -1, None)),
    (["model.layers.7.block_sparse_moe.gate"], (None, -1, 7, "moe.router")),
    (["mmprof.decode", "layers.3.moe.routed.expert_11"], ("decode", -1, 3, "moe.routed")),
]


@pytest.mark.parametrize("chain, want", TABLE)
def test_parser(chain, want):
    phase, step, layer, role = want
    assert next((p for p in map(phase_of, chain) if p), None) == phase
    assert max([step_of(c) for c in chain] + [-1]) == step
    r = parse_path(" > ".join(chain))
    assert ((r.layer, r.role) if r else (-1, None)) == (layer, role)


def test_markers_ranks_and_modules():
    assert is_marker("mmprof.step.12") and is_marker("ProfilerStep#3") and not is_marker("layers.3.mlp")
    assert parse_label("mmprof.decode") is None and parse_label("nn.Module: Linear_3") is None
    assert parse_label("model.layers.3.self_attn").role == "attn.core"  # the six copies disagreed here
    assert parse_label("model.layers.3.mlp (Qwen3MoeSparseMoeBlock)").name == "layers.3.moe"  # a MoE block, by class
    assert parse_label("model.layers.3.mlp (Qwen3MoeMLP)").name == "layers.3.mlp"
    # vLLM: SharedExperts is created inside FusedMoE (fused_moe/shared_experts.py), the routed experts are `experts`
    assert parse_label("model.layers.3.mlp.experts.shared_experts (SharedExperts)").name == "layers.3.moe.shared"
    assert parse_label("model.layers.3.mlp.experts (FusedMoE)").name == "layers.3.moe.routed"
    assert parse_label("model.layers.3.mlp.shared_expert_gate").name == "layers.3.moe.shared"
    assert [rank_from_name(n) for n in ("rank-3.json", "trace_rank3.db", "out.rank_12.csv", "crank3.json",
                                         "rank30x.json", "x.json")] == [3, 3, 12, None, None, None]
    assert rank_from_text("MPI Rank 3") == 3 and rank_from_text("no rank here") is None
    assert module_event("nn.Module: MiniMaxM3VLSparseMoeBlock_0") == ("MiniMaxM3VLSparseMoeBlock", 0)
    assert module_event("aten::mm") is None
    assert region_pattern("layers.12.moe.routed") == "layers.*.moe.routed"
    assert step_of("mmprof.step.2147483648") == -1 and step_of("ProfilerStep#x") == -1


def test_role_rules_are_data_with_checked_examples():
    r = roles()
    assert r.paths and r.model and r.classes and r.contexts
    assert r.kind("MiniMaxM3VLSparseMoeBlock") == "moe_block" and r.kind("Qwen3MoeRotaryEmbedding") == "rotary"
    assert r.context_role("mlp", "moe_block") == "moe.shared" and r.context_role("norm", "model") == "final_norm"


# vLLM's module classes -> kind, from vLLM's source: vllm/model_executor/layers/linear.py (the parallel linears),
# fused_moe/layer.py (FusedMoE, SharedFusedMoE), fused_moe/runner/ (MoERunner), fused_moe/shared_experts.py
# (SharedExperts), logits_processor.py, v1/sample/sampler.py, and the model files named beside each MoE block.
VLLM_CLASSES = [
    ("QKVParallelLinear", "linear"), ("MergedColumnParallelLinear", "linear"), ("RowParallelLinear", "linear"),
    ("ReplicatedLinear", "linear"), ("GateLinear", "linear"), ("ColumnParallelLinear", "linear"),
    ("MinimaxM3QKVParallelLinearWithIndexer", "linear"),  # a projection with the index q/k fused in, not an indexer
    ("FusedMoE", "fused_moe"), ("SharedFusedMoE", "fused_moe"), ("MoERunner", "fused_moe"),
    ("SharedExperts", "shared_experts"), ("LogitsProcessor", "lm_head"), ("Sampler", "sampler"),
    ("VocabParallelEmbedding", "embedding"), ("Attention", "attention"), ("MLAAttention", "attention"),
    ("MultiHeadLatentAttentionWrapper", "attention"), ("DeepseekV2MLAAttention", "attention"),
    ("MiniMaxM3SparseAttention", "attention"), ("OAIAttention", "attention"),
    ("MiniMaxM3Indexer", "indexer"), ("Indexer", "indexer"),  # deepseek_v2.py (V3.2's lightning indexer)
    ("MiniMaxM3MoE", "moe_block"), ("DeepseekV2MoE", "moe_block"), ("Qwen2MoeSparseMoeBlock", "moe_block"),
    ("Qwen3MoeSparseMoeBlock", "moe_block"), ("MixtralMoE", "moe_block"), ("Glm4MoE", "moe_block"),
    ("MiniMaxM3DecoderLayer", "decoder_layer"), ("DeepseekV2DecoderLayer", "decoder_layer"),
    ("TransformerBlock", "decoder_layer"),  # gpt_oss.py; its MoE block `MLPBlock` is one by its experts child
    ("Qwen2MoeMLP", "mlp"), ("DeepseekV2MLP", "mlp"), ("MiniMaxM3MLP", "mlp"), ("MiniMAXGemmaRMSNorm", "norm"),
]

# vLLM's custom ops -> the region they anchor (registered with direct_register_custom_op / TORCH_LIBRARY)
VLLM_OPS = [
    ("vllm::moe_forward", "moe.routed"), ("vllm::moe_forward_shared", "moe.routed"),
    ("_moe_C::moe_align_block_size", "moe.routed"), ("_moe_C::moe_sum", "moe.routed"),
    ("_moe_C::topk_softmax", "moe.router"), ("_moe_C::topk_sigmoid", "moe.router"),
    ("_moe_C::grouped_topk", "moe.router"),
    ("vllm::unified_attention", "attn.core"), ("vllm::unified_attention_with_output", "attn.core"),
    ("vllm::unified_kv_cache_update", "attn.core"), ("_C_cache_ops::reshape_and_cache_flash", "attn.core"),
    ("_vllm_fa3_C::fwd", "attn.core"), ("vllm::sparse_attn_indexer", "attn.indexer"),
    ("_C::rotary_embedding", "attn.norm_rope"), ("_C::fused_minimax_m3_qknorm_rope_kv_insert", "attn.norm_rope"),
    # not anchors: per-step metadata, activations and norms (their module says where they run)
    ("_vllm_fa3_C::get_scheduler_metadata", None), ("_C::silu_and_mul", None), ("_C::rms_norm", None),
    ("aten::mm", None),
]


@pytest.mark.parametrize("cls, kind", VLLM_CLASSES)
def test_vllm_classes(cls, kind):
    assert roles().kind(cls) == kind


@pytest.mark.parametrize("op, role", VLLM_OPS)
def test_vllm_custom_ops(op, role):
    assert roles().op_role(op) == role


def test_vllm_contexts():
    """SharedExperts is the shared expert wherever it is called (inside FusedMoE's op included); an MLP called
    inside vLLM's fused-MoE layer is the shared expert (vLLM has no per-expert modules)."""
    r = roles()
    assert r.context_role("shared_experts", "fused_moe") == "moe.shared"
    assert r.context_role("mlp", "fused_moe") == "moe.shared"
    assert r.context_role("fused_moe", "moe_block") == "moe.routed"
    assert r.context_role("lm_head", None) == "lm_head" and r.context_role("sampler", None) == "sampler"


def test_bad_op_rule_is_refused(tmp_path):
    p = tmp_path / "roles.toml"
    p.write_text('[[op]]\nrole = "moe.routed"\npattern = "^vllm::moe("\n')
    with pytest.raises(BadInput, match="bad regex"):
        load_roles(p)
    p.write_text('[[op]]\nrole = "moe.routed"\npattern = "^vllm::moe_forward$"\nexample = "vllm::other"\n')
    with pytest.raises(BadInput, match="does not match"):
        load_roles(p)


# --------------------------------------------------------------------------------------- importer paths
def _kineto(tmp: Path) -> Path:
    """One cpu_op + launch + kernel inside each chain of nested user_annotation ranges, one chain per 1 ms."""
    ev = []
    for i, (chain, _) in enumerate(TABLE):
        t0 = 1000.0 * i
        for d, label in enumerate(chain):
            ev.append({"ph": "X", "cat": "user_annotation", "name": label, "pid": 1, "tid": 1, "ts": t0 + d,
                       "dur": 900 - 2 * d})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t0 + 20, "dur": 50,
                   "args": {"External id": i + 1}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t0 + 30,
                   "dur": 5, "args": {"External id": i + 1, "correlation": 100 + i}})
        ev.append({"ph": "X", "cat": "kernel", "name": f"kernel_{i}", "pid": 0, "tid": 7, "ts": t0 + 40, "dur": 10,
                   "args": {"External id": i + 1, "correlation": 100 + i, "device": 0, "stream": 7}})
    p = tmp / "rank-0.trace.json.gz"
    p.write_bytes(gzip.compress(json.dumps({"traceEvents": ev}).encode()))
    return p


def _csv(tmp: Path) -> Path:
    """rocprofv3 CSV: roctx markers (marker_api_trace), a hipLaunchKernel per chain, its kernel."""
    d = tmp / "csv"
    d.mkdir()
    api = ['"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp","End_Timestamp"']
    mk = list(api)
    kern = ['"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name",'
            '"Correlation_Id","Start_Timestamp","End_Timestamp","Private_Segment_Size","Group_Segment_Size",'
            '"Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"']
    for i, (chain, _) in enumerate(TABLE):
        t0 = 1_000_000 * (i + 1)
        for k, label in enumerate(chain):
            mk.append(f'"MARKER_CORE_API","{label}",9,9,{5000 + 10 * i + k},{t0 + k},{t0 + 900_000 - 2 * k}')
        api.append(f'"HIP_RUNTIME_API","hipLaunchKernel",9,9,{i + 1},{t0 + 30_000},{t0 + 35_000}')
        kern.append(f'"KERNEL_DISPATCH",2,1,1,9,{i + 1},1,"kernel_{i}",{i + 1},{t0 + 40_000},{t0 + 50_000},0,0,64,1,1,64,1,1')
    for name, rows in (("9_marker_api_trace.csv", mk), ("9_hip_api_trace.csv", api), ("9_kernel_trace.csv", kern)):
        (d / name).write_text("\n".join(rows) + "\n")
    return d


def _nsys(tmp: Path) -> Path:
    """The real saxpy export (NVTX + CUDA runtime) with one NVTX push/pop chain around each kernel's launch."""
    p = tmp / "saxpy.sqlite"
    shutil.copy(data_file("samples", "nsys", "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"), p)
    con = sqlite3.connect(p)
    launches = con.execute("SELECT min(r.start), max(r.end), r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN "
                           "CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId GROUP BY k.correlationId "
                           "ORDER BY k.start").fetchall()
    assert len(launches) == 5  # the export's 5 kernels, each launched from the main thread
    con.execute("DELETE FROM NVTX_EVENTS WHERE eventType = 59")
    want = []
    for (chain, w), (start, end, tid) in zip(TABLE, launches):
        for k, label in enumerate(chain):
            con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?, ?, 59, ?, ?)",
                        (start - 1000 + k, end + 1000 - k, label, tid))
        want.append(w)
    con.commit()
    con.close()
    return p, want


def _observed(profile) -> list[tuple]:
    frame = events_of(profile)
    k = frame.table == 0
    order = frame.start[k].argsort()
    phases = [profile.string(int(x)) for x in frame.phase[k][order]]
    return [(ph, int(st), int(ly), ro) for ph, st, ly, ro in zip(phases, frame.step[k][order], frame.layer[k][order],
                                                                   frame.role[k][order])]


def test_kineto_path(tmp_path):
    assert _observed(import_paths([_kineto(tmp_path)])) == [w for _, w in TABLE]


def test_rocprofv3_csv_path(tmp_path):
    assert _observed(import_paths([_csv(tmp_path)])) == [w for _, w in TABLE]


def test_nsys_path(tmp_path):
    p, want = _nsys(tmp_path)
    assert _observed(import_paths([p])) == want
