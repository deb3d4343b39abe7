"""Every kernel of vLLM's own traces in its layer and part: graph replays, compiled code, side streams, the window's
parts. The truth is tests/vllm_truth.py's, read from the raw JSON with vLLM 0.26's model code (its docstring says
what each rule comes from), never from mmprof. Real data: tests/data/samples/vllm (MiniMax M3 eager / graphs at
batch 8) and tests/data/vllm_own (M3 graphs batch 1, Qwen2-MoE eager batch 8 and compiled graphs batch 1); the
full traces in ../shared/samples/vllm are judged too when present.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from mmprof.analysis.attribution import layer_order, side_streams
from mmprof.analysis.timeline.events import events_of
from mmprof.analysis.timeline.window import CAPTURE, SERVING, STARTUP, serving, window_parts
from mmprof.importers import import_paths
from mmprof.labels import roles
from mmprof.profiles.io import load_profile
from tests import vllm_truth as T
from tests.conftest import SHARED_SAMPLES, data_file, open_data

M3 = ("samples", "vllm", "config", "m3_tiny_config.json")
QWEN2 = ("vllm_own", "qwen2moe_config.json")
TRACES = [(("samples", "vllm", "m3_eager_b8.pt.trace.json.xz"), M3),
          (("samples", "vllm", "m3_graphs_b8.pt.trace.json.xz"), M3),
          (("vllm_own", "m3_graphs_b1.pt.trace.json.xz"), M3),
          (("vllm_own", "qwen2moe_eager_b8_first3.pt.trace.json.xz"), QWEN2),
          (("vllm_own", "qwen2moe_graphs_b1.pt.trace.json.xz"), QWEN2)]
FULL = [SHARED_SAMPLES / "vllm" / "m3_graphs_b8.pt.trace.json.gz", SHARED_SAMPLES / "vllm" / "m3_eager_b8.pt.trace.json.gz"]


def _model(cfg) -> T.Model:
    return T.model_of(json.loads(data_file(*cfg).read_text()))


def _judge(path, cfg, profile=None):
    m = _model(cfg)
    tr, judged, skipped = T.truth(json.load(open_data(path)), m)
    p = profile or import_paths([path])
    ev = events_of(p)
    return p, ev, T.judge(p, ev, tr), judged, skipped


@pytest.mark.parametrize("trace,cfg", TRACES, ids=[t[0][-1].split(".")[0] for t in TRACES])
def test_every_kernel_with_a_truth_is_in_it(trace, cfg):
    # every engine step of the excerpts is judged (2L + 1 decoder norms each); every kernel the truth names is
    # placed, and in its layer and part (compiled projections by the layer order, replays by the alignment, the
    # shared expert's side stream by the main stream it forks from)
    p, ev, j, judged, skipped = _judge(data_file(*trace), cfg)
    assert judged >= 3 and skipped == 0
    assert j.kernels > 200 and j.share_placed >= 0.995, j.share_placed
    assert j.wrong == []
    # and the whole trace: at least 95% of all device time (kernels and copies) is in a region
    assert ev.dur[ev.region != None].sum() / ev.dur.sum() >= 0.95  # noqa: E711


@pytest.mark.parametrize("full", FULL, ids=["m3_graphs_b8_full", "m3_eager_b8_full"])
def test_full_shared_traces(full):
    if not full.exists():
        pytest.skip("the full trace is in ../shared/samples only (the excerpt is judged above)")
    p, ev, j, judged, skipped = _judge(full, M3)
    assert judged == 33 and skipped == 0 and j.share_placed >= 0.995 and j.wrong == []


def test_the_truth_reads_every_familys_config():
    # what vLLM 0.26 builds for the tiny configs of benchmarks/h200/vllm_configs: DeepSeek V2/V3 and GLM-4.5 keep
    # `first_k_dense_replace` dense layers (deepseek_v2.py / glm4_moe.py: DeepseekV2MLP for layer_idx <
    # first_k_dense_replace), MLA where kv_lora_rank is set, a shared expert where n_shared_experts > 0;
    # Qwen3-MoE and Mixtral are MoE in every layer with no shared expert; Llama is dense
    from tests.conftest import ROOT

    got = {d.name: T.model_of(json.loads((d / "config.json").read_text()))
           for d in sorted((ROOT / "benchmarks" / "h200" / "vllm_configs").iterdir())}
    assert got["llama_dense"] == T.Model(4, set(), False, False)
    assert got["qwen3_moe"] == got["mixtral"] == T.Model(4, {0, 1, 2, 3}, False, False)
    assert got["deepseek_v2_lite"] == got["deepseek_v3"] == T.Model(4, {1, 2, 3}, True, True)
    assert got["glm4_moe"] == T.Model(4, {1, 2, 3}, True, False)
    assert _model(M3) == T.Model(6, {1, 2, 3, 4, 5}, True, False, {2, 3, 4, 5})


def test_the_truth_catches_a_wrong_placement():
    # the judge is no tautology: a router GEMM moved to the shared expert (the mistake the issue measured on
    # Qwen2-MoE in graph mode) and a fused_moe_kernel moved to the next layer are both counted wrong
    path = data_file("vllm_own", "qwen2moe_graphs_b1.pt.trace.json.xz")
    m = _model(QWEN2)
    tr, _, _ = T.truth(json.load(open_data(path)), m)
    p = import_paths([path])
    ev = events_of(p)
    names = [p.string(int(c)) or "" for c in ev.name]
    router = next(i for i, n in enumerate(names) if ev.region[i] == "layers.1.moe.router" and "nvjet" in n)
    moe = next(i for i, n in enumerate(names) if ev.region[i] == "layers.1.moe.routed" and n == "fused_moe_kernel")
    ev.region[router], ev.region[moe] = "layers.1.moe.shared", "layers.2.moe.routed"
    assert len(T.judge(p, ev, tr).wrong) == 2


def test_agrees_reads_fused_regions():
    assert T.agrees("embed+layers.0.norm", 0, "norm") and T.agrees("embed+layers.0.norm", -1, "embed")
    assert T.agrees("layers.3.attn.norm_rope+attn.core", 3, "attn.core")
    assert not T.agrees("layers.3.moe.routed", 4, "moe.routed") and not T.agrees("final_norm", 3, "norm")


def test_the_indexer_layers_in_every_step():
    # vLLM's M3 runs its lightning indexer in every sparse layer of every step (vllm/models/minimax_m3/nvidia/
    # model.py: MiniMaxM3SparseAttention._run_attention; sparse_attention_freq [0,0,1,1,1,1] in the config): the
    # indexer kernels of each engine step, eager or replayed, are in layers 2-5, and all four in every step
    sparse = _model(M3).indexer_layers
    assert sparse == {2, 3, 4, 5}
    for trace in ("m3_graphs_b1.pt.trace.json.xz", "m3_graphs_b8.pt.trace.json.xz"):
        d = ("vllm_own",) if "b1" in trace else ("samples", "vllm")
        p = import_paths([data_file(*d, trace)])
        ev = events_of(p)
        idx = ev.role == "attn.indexer"
        steps = sorted(set(ev.step[ev.step >= 0].tolist()))
        assert steps and all(set(ev.layer[idx & (ev.step == s)].tolist()) == sparse for s in steps)


def test_side_stream_in_the_replays_and_main_stream_in_the_prefill():
    # vLLM runs the shared expert on its side stream only for steps of <= 256 tokens
    # (VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD; runner/shared_experts.py): a batch-8 prefill of 64-token prompts
    # (512 tokens) runs it on the main stream, after the gate GEMM and before the top-k (SharedExpertsOrder.
    # NO_OVERLAP, runner/moe_runner.py `_apply_quant_method`), the decode replays on the side stream, so the eager
    # steps have no side-stream pattern. Built from the real Qwen2-MoE trace by moving each layer's 6 eager
    # side-stream kernels to the main stream right before its topkGating: every replayed side-stream kernel still
    # gets the shared expert of the layer it forked from, and the replay's router GEMM (at batch 1 the same cuBLAS
    # kernel and grid as the shared expert's gate GEMM) stays the router (the truth for the replays is unchanged:
    # their kernels are untouched)
    path = data_file("vllm_own", "qwen2moe_graphs_b1.pt.trace.json.xz")
    p = import_paths([path])
    K = p.tables["kernels"]
    main = np.bincount(K["stream"]).argmax()
    eager = K["graph"] < 0
    side = np.flatnonzero(eager & (K["stream"] != main))
    assert len(side) == 24      # the prefill's shared expert: 6 kernels x 4 layers
    side = side[np.argsort(K["start_ns"][side])]
    topk = np.flatnonzero(eager & np.array(["topkGating" in (p.string(int(c)) or "") for c in K["name"]]))
    topk = topk[np.argsort(K["start_ns"][topk])][:4]
    for j, t in enumerate(topk.tolist()):
        blk = side[6 * j:6 * (j + 1)]
        K["stream"][blk] = main
        K["start_ns"][blk] = K["start_ns"][t] - 60 + 10 * np.arange(6)
        K["start_ns"][t] += 1
    _, ev, j, _, _ = _judge(path, QWEN2, profile=p)
    side = (ev.graph >= 0) & (ev.stream != main) & (ev.table == 0)
    assert side.sum() == 2 * 28 and set(ev.role[side]) == {"moe.shared"}
    assert set(ev.label_source[side]) == {"replay-stream"}
    assert j.wrong == [] and j.share_placed >= 0.99


# ---------------------------------------------------------------------------------------- the layer order
def test_family_roles_are_parts_of_the_layer_order():
    fams = roles().families
    assert fams["gemm"] and all(r in layer_order.ORDER for rs in fams.values() for r in rs)


class _Reg:
    def __init__(self, regions):
        n = len(regions)
        self.region = np.array(regions, dtype=object)
        # `embed+layers.0.norm` (the embedding Inductor fuses into the first norm): layer 0, role embed+norm
        parts = [(r.split("+", 1) if r and "+layers." in r else ("", r)) for r in regions]
        self.layer = np.array([int(r.split(".")[1]) if r and r.startswith("layers.") else -1 for _, r in parts])
        self.role = np.array([(f"{m}+" if m else "") + r.split(".", 2)[2] if r and r.startswith("layers.") else r
                              for m, r in parts], dtype=object)
        self.source = np.full(n, None, dtype=object)


class _P:
    """A profile of one step on one stream: kernels in order with names and families."""

    def __init__(self, names):
        self.strings = list(names)
        n = len(names)
        self.tables = {"kernels": {"rank": np.zeros(n, np.int64), "step": np.zeros(n, np.int64),
                                   "graph": np.full(n, -1, np.int64), "stream": np.full(n, 7, np.int64),
                                   "start_ns": np.arange(n, dtype=np.int64) * 10, "dur_ns": np.ones(n, np.int64),
                                   "name": np.arange(n, dtype=np.int64)}}

    def n(self, t):
        return len(self.strings)

    def string(self, i):
        return self.strings[i]


def _fill(seq, hints=None):
    """seq: (name, family, region or None); returns the regions after layer_order.fill."""
    p = _P([s[0] for s in seq])
    reg = _Reg([s[2] for s in seq])
    fam = np.array([s[1] for s in seq], dtype=object)
    layer_order.fill(p, reg, fam, np.ones(len(seq), bool), hints=hints)
    return list(reg.region), list(reg.source)


def test_order_places_a_compiled_layers_projections_and_router():
    # vLLM's compiled Qwen2-MoE prefill (tests/data/vllm_own/qwen2moe_graphs_b1, step 0): Inductor's norms, the
    # attention and MoE ops are placed; the QKV, o_proj and router GEMMs (compiled: no module) are not
    seq = [("norm", "reduction", "layers.0.norm"), ("nvjet_qkv", "gemm", None), ("triton_poi_fused_1", "elementwise", None),
           ("reshape_and_cache", "kv_cache", "layers.0.attn.core"), ("flash_fwd", "attention", "layers.0.attn.core"),
           ("nvjet_o", "gemm", None), ("norm", "reduction", "layers.0.norm"), ("nvjet_gate", "gemm", None),
           ("topkGating", "moe", "layers.0.moe.router"), ("fused_moe_kernel", "grouped_gemm", "layers.0.moe.routed")]
    got, src = _fill(seq)
    assert got[1] == "layers.0.attn.qkv" and got[5] == "layers.0.attn.o_proj" and got[7] == "layers.0.moe.router"
    # between the QKV projection and the attention op, Qwen2MoeAttention.forward runs only the split and the
    # rotary embedding (vllm/model_executor/models/qwen2_moe.py: qkv_proj, qkv.split, rotary_emb, attn): the
    # element-wise kernel there (Inductor's fused split + RoPE) is the layer's norm_rope
    assert got[2] == "layers.0.attn.norm_rope"
    assert src[1] == src[2] == src[5] == src[7] == "order"


def test_order_never_chooses():
    # M3 with the side stream off runs its shared expert between the router GEMM and the router's top-k
    # (SharedExpertsOrder.NO_OVERLAP, moe_runner.py): a GEMM between two kernels of one region is not placed
    seq = [("norm", "norm", "layers.1.norm"), ("gemm_router", "gemm", "layers.1.moe.router"), ("gemm_x", "gemm", None),
           ("topk", "moe", "layers.1.moe.router")]
    assert _fill(seq)[0][2] is None
    # a GEMM after the router and before the experts could be the router's or the shared expert's: not placed
    seq = [("norm", "norm", "layers.1.norm"), ("gemm_r", "gemm", "layers.1.moe.router"), ("gemm_x", "gemm", None),
           ("act", "activation", "layers.1.moe.shared")]
    assert _fill(seq)[0][2] is None
    # a GEMM between a MoE layer's experts and the next layer's input norm: a shared expert, the routed loop or
    # the next layer's... nothing fits one way
    seq = [("fused_moe_kernel", "grouped_gemm", "layers.1.moe.routed"), ("gemm_x", "gemm", None),
           ("norm", "norm", "layers.2.norm")]
    assert _fill(seq)[0][1] is None
    # a dense layer's MLP GEMM is placed only where the layer's other kernels say it is dense
    # (the norm after the layer's o_proj is its post-attention norm; without the attention before it, it could be
    # the input norm and the GEMM the QKV projection: not placed)
    seq = [("nvjet_o", "gemm", "layers.0.attn.o_proj"), ("norm", "norm", "layers.0.norm"), ("gemm_up", "gemm", None),
           ("act", "activation", "layers.0.mlp"), ("norm", "norm", "layers.1.norm")]
    assert _fill(seq)[0][2] == "layers.0.mlp"
    assert _fill(seq[1:])[0][1] is None
    seq = [("nvjet_o", "gemm", "layers.0.attn.o_proj"), ("norm", "norm", "layers.0.norm"), ("gemm_up", "gemm", None),
           ("norm", "norm", "layers.1.norm")]
    assert _fill(seq)[0][2] is None
    # the attention kernels FlashAttention runs only in decode (its split-KV combine) take the attention
    seq = [("flash_fwd", "attention", "layers.3.attn.core"), ("FlashAttnFwdCombine", "attention", None),
           ("nvjet_o", "gemm", "layers.3.attn.o_proj")]
    assert _fill(seq)[0][1] == "layers.3.attn.core"
    # a layer skipped: no guess
    seq = [("fused_moe_kernel", "grouped_gemm", "layers.1.moe.routed"), ("flash_fwd", "attention", None),
           ("nvjet_o", "gemm", "layers.3.attn.o_proj")]
    assert _fill(seq)[0][1] is None


def test_order_places_a_compiled_dense_layer():
    # vLLM's compiled Llama (vllm/model_executor/models/llama.py LlamaDecoderLayer.forward under torch.compile):
    # Inductor's norms (placed by name), the attention op's kernels (placed by the op), and nothing else: QKV,
    # RoPE, o_proj, the MLP's GEMMs and activation. Between the post-attention norm and the next input norm only
    # the MLP runs (no MoE kernel in the layer); the final norm closes the last layer's MLP
    def layer(i, last=False):
        return [("triton_norm", "reduction", f"layers.{i}.norm"), ("nvjet_qkv", "gemm", None),
                ("triton_poi_fused_cos_sin", "elementwise", None), ("reshape_and_cache", "kv_cache", f"layers.{i}.attn.core"),
                ("flash_fwd", "attention", f"layers.{i}.attn.core"), ("nvjet_o", "gemm", None),
                ("triton_norm", "reduction", f"layers.{i}.norm"), ("nvjet_gate_up", "gemm", None),
                ("triton_poi_fused_mul_silu", "elementwise", None), ("nvjet_down", "gemm", None)]
    seq = layer(0) + layer(1) + [("triton_norm", "reduction", "final_norm")]
    got, src = _fill(seq)
    # (the element-wise kernel between the QKV projection and the attention: LlamaAttention.forward's
    # rotary_emb after qkv.split, so the layer's norm_rope)
    want = ["layers.0.norm", "layers.0.attn.qkv", "layers.0.attn.norm_rope", "layers.0.attn.core", "layers.0.attn.core",
            "layers.0.attn.o_proj", "layers.0.norm", "layers.0.mlp", "layers.0.mlp", "layers.0.mlp"]
    assert got == want + [w.replace("layers.0", "layers.1") if w else None for w in want] + ["final_norm"]
    # a MoE layer's expert kernels are no dense MLP
    moe = layer(0)[:7] + [("nvjet_gate", "gemm", None), ("topkGating", "moe", None), ("fused_moe_kernel", "grouped_gemm", None),
                          ("triton_norm", "reduction", "layers.1.norm"), ("nvjet_qkv", "gemm", None),
                          ("flash_fwd", "attention", "layers.1.attn.core")]
    got = _fill(moe)[0]
    assert got[7:10] == [None, None, None] and got[11] == "layers.1.attn.qkv"


def test_order_finds_a_compiled_layers_unnamed_norms():
    # vLLM's compiled Llama (benchmarks/h200/vllm_configs/llama_dense, the H200 recording of 2026-12-02, llama_graphs_b8, step 0):
    # only the first norm (Inductor's `..._embedding_rms_norm_0`, the embedding fused in) and the attention op's
    # kernels are placed; the later decoder norms (`triton_per_fused_fused_add_rms_norm_N`, family reduction) are
    # norms by their op names only (a hint). LlamaDecoderLayer.forward (llama.py) runs input_layernorm, self_attn,
    # post_attention_layernorm, mlp; LlamaModel.forward ends with self.norm: so the first norm after layer k's
    # attention is its post-attention norm, the next one layer k+1's input norm, and the last one after the last
    # layer's MLP the final norm (no norm runs inside o_proj or the MLP)
    def layer(i):
        first = [("triton_per_fused__to_copy_embedding_rms_norm_0", "reduction", "embed+layers.0.norm")] if i == 0 \
            else [("triton_per_fused_fused_add_rms_norm_2", "reduction", None)]
        return first + [("nvjet_qkv", "gemm", None), ("triton_poi_fused_3", "elementwise", None),
                        ("reshape_and_cache", "kv_cache", f"layers.{i}.attn.core"),
                        ("flash_fwd", "attention", f"layers.{i}.attn.core"), ("nvjet_o", "gemm", None),
                        ("triton_per_fused_fused_add_rms_norm_0", "reduction", None), ("nvjet_gate_up", "gemm", None),
                        ("triton_poi_fused_mul_silu_slice_1", "elementwise", None), ("nvjet_down", "gemm", None)]
    seq = layer(0) + layer(1) + [("triton_per_fused_fused_add_rms_norm_2", "reduction", None)]
    hints = np.array(["norm" if "rms_norm" in s[0] and s[2] is None else None for s in seq], dtype=object)
    got, src = _fill(seq, hints=hints)
    want = ["layers.{i}.norm", "layers.{i}.attn.qkv", "layers.{i}.attn.norm_rope", "layers.{i}.attn.core",
            "layers.{i}.attn.core", "layers.{i}.attn.o_proj", "layers.{i}.norm", "layers.{i}.mlp", "layers.{i}.mlp",
            "layers.{i}.mlp"]
    assert got == ["embed+layers.0.norm"] + [w.format(i=0) for w in want[1:]] + [w.format(i=1) for w in want] \
        + ["final_norm"]
    assert src[-1] == src[6] == src[10] == "order"
    # without the attention after it, a norm after a post-attention norm could be the next input norm or the final
    # norm of a shorter forward: only the tail of the step (no attention after it) makes it the final norm
    tail = layer(0)[:7] + [("nvjet_gate_up", "gemm", None), ("triton_per_fused_fused_add_rms_norm_2", "reduction", None),
                           ("flash_fwd", "attention", None)]
    h = np.array(["norm" if "rms_norm" in s[0] and s[2] is None else None for s in tail], dtype=object)
    assert _fill(tail, hints=h)[0][8] is None


def test_a_norm_inside_the_attention():
    # Qwen3-MoE's q_norm / k_norm (qwen3_moe.py Qwen3MoeAttention.forward: RMSNorm per head, then RoPE) and MLA's
    # kv_a_layernorm run after the layer's input norm and before its attention: attention parts, no decoder norm
    seq = [("norm", "norm", "layers.2.norm"), ("nvjet_qkv", "gemm", None), ("rms_norm_kernel", "norm", None),
           ("rms_norm_kernel", "norm", None), ("flash_fwd", "attention", "layers.2.attn.core")]
    got = _fill(seq)[0]
    assert got[1] == "layers.2.attn.qkv" and got[2] == got[3] == "layers.2.attn.norm_rope"


def test_order_takes_the_part_an_engine_op_names():
    # a top-k kernel under `_moe_C::topk_softmax` with no layer (a trace without the module tree): the op says
    # router, the order says which layer
    seq = [("norm", "norm", "layers.2.norm"), ("topkGating", "moe", None), ("fused_moe_kernel", "grouped_gemm",
                                                                             "layers.2.moe.routed")]
    hints = np.array([None, "moe.router", None], dtype=object)
    assert _fill(seq, hints)[0][1] == "layers.2.moe.router"
    assert _fill(seq)[0][1] is None   # the family `moe` alone names no part


def test_mla_up_projections_are_inside_the_attention():
    # MLA decode (vllm/model_executor/layers/attention/mla_attention.py: W_UV after the attention kernel, inside
    # the attention op), then o_proj, the last GEMM before the post-attention norm
    seq = [("flash_mla", "attention", "layers.4.attn.core"), ("bmm_uv", "gemm", None), ("nvjet_o", "gemm", None),
           ("norm", "norm", "layers.4.norm")]
    got = _fill(seq)[0]
    assert got[1] == "layers.4.attn.core" and got[2] == "layers.4.attn.o_proj"


def test_side_stream_context():
    # main stream: layer 3's post norm, router, experts (placed) then layer 4's norm and attention
    start = np.array([0, 10, 20, 30, 40, 50], np.int64)
    lay = np.array([3, 3, 3, -1, 4, 4])
    role = np.array(["norm", "moe.router", "moe.routed", None, "norm", "attn.qkv"], dtype=object)
    ok = np.array([0, 1, 2, 4, 5])
    assert side_streams._context(25, start, ok, lay, role) == (3, "moe.routed")
    assert side_streams._context(35, start, ok, lay, role) == (3, "moe.routed")  # after an unplaced memcpy
    assert side_streams._context(-5, start, ok, lay, role) == (None, None)
    assert side_streams._context(55, start, ok, lay, role) == (None, None)       # the attention: no fork there


# ---------------------------------------------------------------------------------------- the window's parts
def test_record_window_parts():
    # `mmprof record` around vLLM from the process start (tests/data/samples/vllm/record): its window holds the
    # start-up (dummy weights, profile run), the graph capture (54 captures: one per batch size and piece) and
    # the first generate call. Counted here from the launches table directly: the events launched before the first
    # cudaStreamBeginCapture, up to the end of the last cudaStreamEndCapture, and after it
    # (vLLM opens a range around each capture, `capture_32_PIECEWISE`: its warm-up forward runs inside it, before
    # the capture call, and belongs to the capture part)
    p = load_profile(data_file("samples", "vllm", "record", "rec_graphs_b8.json.xz"))
    names = np.array(p.col("launches", "name", decode=True), dtype=object)
    L, S = p.tables["launches"], p.tables["scopes"]
    b = np.flatnonzero(names == "cudaStreamBeginCapture")
    b0 = b[np.argmin(L["start_ns"][b])]
    t0 = int(L["start_ns"][b0])
    around = [i for i in range(p.n("scopes")) if S["tid"][i] == L["tid"][b0] and S["depth"][i] == 0
              and S["start_ns"][i] <= t0 <= S["start_ns"][i] + S["dur_ns"][i]]
    assert [p.string(int(S["name"][i])) for i in around] == ["capture_32_PIECEWISE"]
    endc = names == "cudaStreamEndCapture"
    first, last = int(S["start_ns"][around[0]]), int((L["start_ns"][endc] + L["dur_ns"][endc]).max())
    ev = events_of(p)
    parts = window_parts(p)
    assert parts.captures == {0: 54} and parts.capture_from == {0: first} and parts.serving_from == {0: last}
    part = parts.part(ev)
    t = np.where(ev.graph >= 0, L["start_ns"][np.maximum(ev.graph, 0)], np.where(ev.launch_start >= 0,
                                                                                 ev.launch_start, ev.start))
    assert ((part == STARTUP) == (t < first)).all() and ((part == SERVING) == (t >= last)).all()
    assert (part == CAPTURE).any() and (part == SERVING).any()
    sub, note = serving(p, ev)
    assert len(sub) == int((part == SERVING).sum()) and "graph capture" in note and "54 graph captures" in note
    assert (sub.graph >= 0).sum() == (ev.graph >= 0).sum()   # every replay is serving


def test_a_vllm_profiler_window_is_all_serving():
    p = import_paths([data_file("vllm_own", "m3_graphs_b1.pt.trace.json.xz")])
    ev = events_of(p)
    assert not window_parts(p) and serving(p, ev) == (ev, None)


def test_order_places_a_compiled_mla_layers_input_projections():
    # vLLM's compiled DeepSeek-V2-Lite (q_lora_rank null: benchmarks/h200/vllm_configs/deepseek_v2_lite; the
    # H200 trace dsv2lite_graphs_b8, step 0): DeepseekV2MLAAttention runs q_proj and kv_a_proj_with_mqa, splits
    # their output, kv_a_layernorm (an RMSNorm with no residual) and the RoPE before the MLA op
    # (vllm/model_executor/models/deepseek_v2.py, vllm/model_executor/layers/mla.py); the absorbed W_UK / W_UV
    # GEMMs run inside the op (placed by it). Every GEMM between the layer's first projection and the op is an
    # input projection, the Inductor kernels there its norm_rope
    seq = [("triton_per_fused__to_copy_embedding_rms_norm_0", "reduction", "embed+layers.0.norm"),
           ("nvjet_q", "gemm", None), ("nvjet_kv_a", "gemm", None), ("triton_poi_fused_1", "elementwise", None),
           ("triton_per_fused_2", "reduction", None), ("concat_and_cache_mla", "kv_cache", "layers.0.attn.core"),
           ("nvjet_w_uk", "gemm", "layers.0.attn.core"), ("flash_fwd", "attention", "layers.0.attn.core"),
           ("nvjet_w_uv", "gemm", "layers.0.attn.core"), ("nvjet_o", "gemm", None)]
    got, src = _fill(seq)
    assert got[1:5] == ["layers.0.attn.qkv", "layers.0.attn.qkv", "layers.0.attn.norm_rope", "layers.0.attn.norm_rope"]
    assert set(src[1:5]) == {"order"}

