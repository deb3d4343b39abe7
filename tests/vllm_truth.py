"""The layer and part of each kernel of a vLLM torch-profiler trace, from the raw JSON and vLLM's model code, not
from mmprof: the truth the graph-replay placement (analysis/attribution/graph_align.py, layer_order.py,
side_streams.py) is measured against in tests/test_vllm_placement.py and benchmarks/vllm_traces.py.

What vLLM 0.26's code runs, per engine step (the `execute_context_*` range; a kernel belongs to the step its
launch call, or its graph launch, ran in), on the step's main stream, in device order:

- `*Model.forward`: the embedding, then every decoder layer, then the final norm
  (vllm/model_executor/models/{llama,qwen2_moe,qwen3_moe,mixtral,deepseek_v2,glm4_moe}.py,
  vllm/models/minimax_m3/nvidia/model.py);
- `*DecoderLayer.forward`: `input_layernorm(hidden, residual)`, `self_attn(...)`,
  `post_attention_layernorm(hidden, residual)`, `mlp(...)`: the decoder norms are RMSNorms *with* the residual
  (vLLM's `fused_add_rms_norm`, flashinfer's `FusedAddRMSNorm`, Inductor's `..._fused_add_rms_norm_N`), except
  layer 0's input norm (no residual yet: the forward's first norm kernel). So a forward holds 2L + 1 decoder norms
  (L layers): norm 2k opens layer k, norm 2k + 1 is its post-attention norm, norm 2L the final norm. The q/k norms
  (Qwen3) and MLA's kv_a_layernorm are RMSNorms without residual: inside the attention.
- the attention (between the two norms): its input projection first (every GEMM before the RoPE kernel, or before
  the attention kernel when no RoPE kernel is named), then RoPE / q-k norm, the indexer (M3's sparse layers), the
  attention kernels (KV-cache write included: `unified_kv_cache_update`), and o_proj last (the last GEMM before the
  post-attention norm; MLA's absorbed W_UK / W_UV GEMMs, between the RoPE and o_proj, run inside the attention op);
- the MoE block (after the post-attention norm; vllm/model_executor/layers/fused_moe/runner/moe_runner.py
  `_forward_impl`, `_apply_quant_method`): the router gate GEMM first (outside the block's op or inside it), then,
  without the side stream, the shared expert (`SharedExpertsOrder.NO_OVERLAP` runs it before the top-k), the
  top-k (router), the routed experts (`moe_align_block_size` or, for a few tokens, a Fill; `fused_moe_kernel` per
  projection, the activation between, `moe_sum`); with the side stream the shared expert runs there, one block of
  kernels per MoE layer in layer order (`_run_in_aux_stream`); a dense layer runs its MLP.

Kernels these rules do not name (copies, fills, casts, the combine add) have no truth (None) and are not judged.
Forwards whose decoder-norm count is not 2L + 1 are not judged either.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

DECODER_NORM = re.compile(r"fused_add_rms_?norm|FusedAddRMSNorm|add_rms_norm", re.I)
ANY_NORM = re.compile(r"rms_?norm|RMSNorm|layer_?norm", re.I)
GEMM = re.compile(r"nvjet|gemm|Gemm|cublas|gemv|dot_kernel|splitKreduce|reduce_1Block|\bbmm")
REDUCE = re.compile(r"splitKreduce|reduce_1Block")
ATTN = re.compile(r"flash::|FlashAttn|fmha|FlashMLA|flash_mla|mla_decode|reshape_and_cache|concat_and_cache|"
                  r"paged_attention|BatchDecode|BatchPrefill|_gqa_sparse|_merge_topk_attn|merge_attn_states|"
                  r"decode_attention|unified_attention|_fwd_kernel")
INDEXER = re.compile(r"_decode_index_score|_index_block_score|_topk_index|indexer|top_k_per_row|mqa_logits")
ROPE = re.compile(r"rotary|Rope|rope_", re.I)
TOPK = re.compile(r"topkGating|topk_softmax|topk_sigmoid|grouped_topk|noaux_tc|topk_gating|biased_grouped")
ROUTED = re.compile(r"fused_moe|moe_align|moe_sum|count_and_sort_expert|moe_permute|moe_unpermute|act_and_mul|"
                    r"FillFunctor")
EMBED = re.compile(r"indexSelect|embedding", re.I)
MLP = re.compile(r"act_and_mul|silu|gelu", re.I)


@dataclass
class Model:
    """What the model's code has, from its config.json."""

    layers: int
    moe_layers: set[int]
    shared: bool
    mla: bool
    indexer_layers: set[int] = field(default_factory=set)


def model_of(config: dict) -> Model:
    """The parts vLLM builds for a Hugging Face config (the families in this module's docstring)."""
    c = config.get("text_config", config)
    n = int(c["num_hidden_layers"])
    experts = c.get("num_experts") or c.get("num_local_experts") or c.get("n_routed_experts") or 0
    if not experts:
        moe = set()
    elif "moe_layer_freq" in c and isinstance(c["moe_layer_freq"], list):          # MiniMax M3
        moe = {i for i, f in enumerate(c["moe_layer_freq"]) if f}
    elif "first_k_dense_replace" in c:                                              # DeepSeek V2/V3, GLM-4.5
        moe = set(range(int(c["first_k_dense_replace"]), n))
    else:                                                                           # Qwen2/3-MoE, Mixtral
        dense = set(c.get("mlp_only_layers") or [])
        step = int(c.get("decoder_sparse_step", 1) or 1)
        moe = {i for i in range(n) if i not in dense and (i + 1) % step == 0}
    shared = bool(c.get("n_shared_experts") or c.get("shared_expert_intermediate_size")
                  or c.get("shared_intermediate_size"))
    sac = c.get("sparse_attention_config") or {}
    idx = {i for i, f in enumerate(sac.get("sparse_attention_freq", [])) if f} if sac.get("use_sparse_attention") else set()
    return Model(n, moe, shared, bool(c.get("kv_lora_rank")), idx)


def _steps(ev: list[dict]) -> list[tuple[int, float, float]]:
    out = []
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("execute_"):
            out.append((e["tid"], e["ts"], e["ts"] + e["dur"]))
    return sorted(out, key=lambda s: s[1])


def _groups(ev: list[dict]) -> list[list[dict]]:
    """The kernels of each engine step, by their launch call's (or graph launch's) place."""
    steps = _steps(ev)
    launch = {}
    for e in ev:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launch[e["args"]["correlation"]] = e
    out: list[list[dict]] = [[] for _ in steps]
    for k in ev:
        if k.get("cat") != "kernel":
            continue
        la = launch.get(k["args"].get("correlation"))
        if la is None:
            continue
        for j, (tid, a, b) in enumerate(steps):
            if la["tid"] == tid and a <= la["ts"] <= b:
                out[j].append(k)
                break
    return out


def _gemm_groups(seq: list[dict], idx: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for i in idx:
        n = seq[i]["name"]
        if not GEMM.search(n):
            continue
        if out and REDUCE.search(n) and out[-1][-1] == i - 1:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _forward(seq: list[dict], side: list[dict], m: Model, out: dict) -> bool:
    """Truth for one step's main-stream kernels `seq` (device order) and side-stream kernels; False when the
    decoder norms do not count 2L + 1."""
    norms = [i for i, k in enumerate(seq) if ANY_NORM.search(k["name"])]
    if not norms:
        return False
    dec = [norms[0]] + [i for i in norms[1:] if DECODER_NORM.search(seq[i]["name"])]
    if len(dec) != 2 * m.layers + 1:
        return False

    def put(k, layer, role):
        out[_key(k)] = (layer, role)

    for i in range(dec[0]):
        if EMBED.search(seq[i]["name"]):
            put(seq[i], -1, "embed")
    put(seq[dec[-1]], -1, "final_norm")
    for lay in range(m.layers):
        a, p, b = dec[2 * lay], dec[2 * lay + 1], dec[2 * lay + 2]
        put(seq[a], lay, "norm")
        put(seq[p], lay, "norm")
        A = list(range(a + 1, p))
        att = [i for i in A if ATTN.search(seq[i]["name"]) or INDEXER.search(seq[i]["name"])]
        rope = [i for i in A if ROPE.search(seq[i]["name"]) or ANY_NORM.search(seq[i]["name"])]
        first_att = att[0] if att else p
        first_rope = rope[0] if rope else None
        last_att = att[-1] if att else None
        gg = _gemm_groups(seq, A)
        after = [g for g in gg if last_att is not None and g[0] > last_att]
        for i in A:
            n = seq[i]["name"]
            if INDEXER.search(n):
                put(seq[i], lay, "attn.indexer")
            elif ATTN.search(n):
                put(seq[i], lay, "attn.core")
            elif ROPE.search(n) or ANY_NORM.search(n):
                put(seq[i], lay, "attn.norm_rope")
        for g in gg:
            if g[0] < (first_rope if first_rope is not None else (first_att if not m.mla else -1)):
                role = "attn.qkv"
            elif after and g is after[-1]:
                role = "attn.o_proj"
            elif g in after or (m.mla and first_rope is not None and first_rope < g[0] < first_att):
                role = "attn.core"
            else:
                continue
            for i in g:
                put(seq[i], lay, role)
        B = list(range(p + 1, b))
        if lay not in m.moe_layers:
            for i in B:
                if GEMM.search(seq[i]["name"]) or MLP.search(seq[i]["name"]):
                    put(seq[i], lay, "mlp")
            continue
        gg = _gemm_groups(seq, B)
        topk = [i for i in B if TOPK.search(seq[i]["name"])]
        if not topk:
            continue
        t = topk[0]
        if gg and gg[0][0] < t:
            for i in gg[0]:
                put(seq[i], lay, "moe.router")
        put(seq[t], lay, "moe.router")
        if m.shared and not side and gg and gg[0][0] < t:
            for i in range(gg[0][-1] + 1, t):
                put(seq[i], lay, "moe.shared")
        for i in B:
            if i > t and ROUTED.search(seq[i]["name"]):
                put(seq[i], lay, "moe.routed")
    if side and m.shared and m.moe_layers:
        moe = sorted(m.moe_layers)
        if len(side) % len(moe) == 0:
            per = len(side) // len(moe)
            for j, k in enumerate(side):
                put(k, moe[j // per], "moe.shared")
    return True


def _key(k: dict) -> tuple[int, int, str]:
    return (int(k["args"]["stream"]), int(round(k["ts"] * 1000)), k["name"])


def truth(doc: dict, m: Model) -> tuple[dict[tuple, tuple[int, str]], int, int]:
    """(kernel key (stream, start ns, name) -> (layer, role), steps judged, steps not judged)."""
    ev = doc["traceEvents"]
    out: dict[tuple, tuple[int, str]] = {}
    judged = skipped = 0
    for ks in _groups(ev):
        if not ks:
            continue
        main = Counter(k["args"]["stream"] for k in ks).most_common(1)[0][0]
        seq = sorted((k for k in ks if k["args"]["stream"] == main), key=lambda k: k["ts"])
        side = sorted((k for k in ks if k["args"]["stream"] != main), key=lambda k: k["ts"])
        if _forward(seq, side, m, out):
            judged += 1
        else:
            skipped += 1
    return out, judged, skipped


@dataclass
class Judged:
    """mmprof's regions against the truth, in kernel time (ns)."""

    kernels: int = 0           # kernels with a truth
    ns: int = 0
    placed_ns: int = 0         # of those, with a region
    wrong: list = field(default_factory=list)   # (name, mmprof region, truth)
    wrong_ns: int = 0

    @property
    def share_placed(self) -> float:
        return self.placed_ns / self.ns if self.ns else 0.0


def agrees(region: str, layer: int, role: str) -> bool:
    """Whether an mmprof region (`layers.3.moe.routed`, `embed+layers.0.norm`, `final_norm`) names the truth."""
    want = role if layer < 0 else f"layers.{layer}.{role}"
    if region == want:
        return True
    parts = region.split("+")
    base = re.match(r"^(layers\.\d+)\.", region)
    names = set()
    for q in parts:
        names.add(q if q.startswith("layers.") or not base or q in ("embed", "final_norm", "lm_head") else
                  f"{base.group(1)}.{q}")
    return want in names


def judge(profile, ev, tr: dict) -> Judged:
    """Compare the event frame's regions with the truth (kernels only)."""
    K = profile.tables["kernels"]
    out = Judged()
    for i in range(len(ev)):
        if ev.table[i] != 0:
            continue
        r = ev.row[i]
        key = (int(K["stream"][r]), int(K["start_ns"][r]), profile.string(int(K["name"][r])))
        t = tr.get(key)
        if t is None:
            continue
        d = int(ev.dur[i])
        out.kernels += 1
        out.ns += d
        reg = ev.region[i]
        if reg is None:
            continue
        out.placed_ns += d
        if not agrees(reg, *t):
            out.wrong.append((key[2][:60], reg, t, str(ev.label_source[i])))
            out.wrong_ns += d
    return out


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from mmprof.analysis.timeline.events import events_of
    from mmprof.importers import import_paths
    from tests.conftest import open_data

    trace, config = argv[0], argv[1]
    m = model_of(json.loads(Path(config).read_text()))
    tr, judged, skipped = truth(json.load(open_data(Path(trace))), m)
    p = import_paths([Path(trace)])
    j = judge(p, events_of(p), tr)
    print(f"{Path(trace).name}: {judged} steps judged ({skipped} not), {j.kernels} kernels with a truth, "
          f"{j.share_placed:.1%} of their time placed, {len(j.wrong)} wrong ({j.wrong_ns / max(j.ns, 1):.2%})")
    for w in Counter((a, b, c, d) for a, b, c, d in j.wrong).most_common(20):
        print("   ", w)


if __name__ == "__main__":
    main(sys.argv[1:])
