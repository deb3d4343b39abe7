#!/usr/bin/env python3
"""Build a small vLLM-style Qwen2-MoE Kineto trace from the real vLLM 0.26 MiniMax M3 eager trace's layout.

    python tests/data/vllm_qwen2_moe/make_fixture.py tests/data/samples/vllm/m3_eager_b8.pt.trace.json.xz \
        tests/data/vllm_qwen2_moe/qwen2_moe_eager.pt.trace.json.gz

What it does (README.md beside this file says why): from two engine steps of the M3 trace (the first prefill
step and one decode step) it takes the CPU thread's events (nn.Module frames, CPU ops, CUDA runtime/driver
calls) as a tree, with the GPU kernels and copies each call launched, and rebuilds every forward as vLLM's
Qwen2-MoE module tree (vllm/model_executor/models/qwen2_moe.py) would run it:

    Qwen2MoeForCausalLM > Qwen2MoeModel > VocabParallelEmbedding, N x Qwen2MoeDecoderLayer, RMSNorm
    Qwen2MoeDecoderLayer > RMSNorm, Qwen2MoeAttention (QKVParallelLinear, RotaryEmbedding, Attention,
                           RowParallelLinear), RMSNorm, Qwen2MoeSparseMoeBlock
    Qwen2MoeSparseMoeBlock > ReplicatedLinear (gate), MoERunner > vllm::moe_forward_shared >
                           SharedExperts > Qwen2MoeMLP (MergedColumnParallelLinear, SiluAndMul,
                           RowParallelLinear, Linear = shared_expert_gate), then the routed experts' ops
                           (_moe_C::topk_softmax, _moe_C::moe_align_block_size, fused_moe_kernel x2, moe_sum)

Every decoder layer is a copy of M3's layer 1 (full attention + MoE: Qwen2-MoE has no sparse attention and
no dense layers with decoder_sparse_step=1); the shared_expert_gate is a copy of the shared expert's
down-projection GEMM call (a Linear on the same input). Timestamps are re-laid out in order (gaps and
durations kept), kernels keep their offset from their launch, ids (correlation, External id) of each copy
are shifted by a per-copy stride so they stay unique and keep linking op, call and kernel.
Python stack frames other than nn.Module are dropped (they only make the file big).
"""

from __future__ import annotations

import copy
import gzip
import json
import re
import sys

N_LAYERS = 4
ID_STRIDE = 10**8  # > any correlation / External id of the source trace
KEEP_CATS = {"python_function", "cpu_op", "cuda_runtime", "cuda_driver", "user_annotation"}
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
RENAME_MODULE = {  # M3 class -> the vLLM Qwen2-MoE class that plays its part
    "MiniMaxM3SparseForCausalLM": "Qwen2MoeForCausalLM", "MiniMaxM3Model": "Qwen2MoeModel",
    "MiniMaxM3DecoderLayer": "Qwen2MoeDecoderLayer", "MiniMAXGemmaRMSNorm": "RMSNorm",
    "MiniMaxM3Attention": "Qwen2MoeAttention", "GateLinear": "ReplicatedLinear",
    "MiniMaxM3MoE": "Qwen2MoeSparseMoeBlock", "MiniMaxM3MLP": "Qwen2MoeMLP", "SiluAndMulWithClamp": "SiluAndMul",
}
RENAME_OP = {"_C::silu_and_mul_with_clamp": "_C::silu_and_mul", "_moe_C::topk_sigmoid": "_moe_C::topk_softmax",
             "_C::fused_minimax_m3_qknorm_rope_kv_insert": "_C::rotary_embedding"}
_MOD = re.compile(r"^nn\.Module: (\w+?)_(\d+)$")


class Node:
    def __init__(self, ev: dict):
        self.ev = ev
        self.children: list[Node] = []
        self.gpu: list[dict] = []
        self.copy = -1  # which decoder-layer copy this node belongs to (module instances: one per layer)

    @property
    def name(self) -> str:
        return self.ev["name"]

    @property
    def cls(self) -> str | None:
        m = _MOD.match(self.name)
        return m.group(1) if m else None

    def find(self, pred) -> list["Node"]:
        out = [self] if pred(self) else []
        for c in self.children:
            out += c.find(pred)
        return out


def build_tree(events: list[dict], tid, lo: float, hi: float, gpu_by_corr: dict) -> Node:
    cpu = [e for e in events if e.get("ph") == "X" and e.get("tid") == tid and e.get("cat") in KEEP_CATS
           and lo <= e["ts"] <= hi and (e["cat"] != "python_function" or e["name"].startswith("nn.Module: "))]
    cpu.sort(key=lambda e: (e["ts"], -e["dur"]))
    root = Node({"name": "<root>", "ts": lo, "dur": hi - lo})
    stack = [root]
    for e in cpu:
        while len(stack) > 1 and stack[-1].ev["ts"] + stack[-1].ev["dur"] <= e["ts"]:
            stack.pop()
        n = Node(e)
        if e["cat"] in ("cuda_runtime", "cuda_driver"):
            n.gpu = gpu_by_corr.get(e.get("args", {}).get("correlation"), [])
        stack[-1].children.append(n)
        stack.append(n)
    return root


def wrap(name: str, children: list[Node], cat: str = "python_function") -> Node:
    """A new enclosing event around `children` (its time is set by the layout)."""
    first, last = children[0].ev, children[-1].ev
    n = Node({"ph": "X", "cat": cat, "name": name, "pid": first.get("pid"), "tid": first.get("tid"),
              "ts": first["ts"] - 0.5, "dur": last["ts"] + last["dur"] - first["ts"] + 1.0, "args": {}})
    n.children = children
    return n


def qwen2_layer(m3_layer: Node, k: int) -> Node:
    """M3's layer 1 (full attention + MoE) reshaped into vLLM's Qwen2MoeDecoderLayer number k."""
    layer = copy.deepcopy(m3_layer)
    attn = next(c for c in layer.children if c.cls == "MiniMaxM3Attention")
    kids = attn.children
    i = next(k for k, c in enumerate(kids) if c.name == "_C::fused_minimax_m3_qknorm_rope_kv_insert")
    kids[i] = wrap("nn.Module: RotaryEmbedding_0", [kids[i]])  # get_rope() -> RotaryEmbedding, its op inside
    shared_mlp = layer.find(lambda n: n.cls == "MiniMaxM3MLP")[0]  # SharedExperts > MiniMaxM3MLP
    down = [c for c in shared_mlp.children if c.cls == "RowParallelLinear"][-1]
    gate_call = copy.deepcopy(next(c for c in down.children if c.name == "aten::linear"))
    shared_mlp.children.append(wrap("nn.Module: Linear_0", [gate_call]))  # shared_expert_gate (nn.Linear)
    for n in layer.find(lambda n: True):
        n.copy = k
    return layer


def layout(n: Node, start: float, ids: dict, out: list[dict]) -> float:
    """Emit `n` at `start` (children keep their gaps and durations); returns its end."""
    ev = dict(n.ev)
    ev["args"] = dict(ev.get("args", {}))
    cursor, prev = start, n.ev["ts"]
    for c in n.children:
        cursor += max(0.01, c.ev["ts"] - prev)  # siblings never touch (a tie would nest them)
        prev = c.ev["ts"] + c.ev["dur"]
        cursor = layout(c, cursor, ids, out)
    end = max(cursor + max(0.0, n.ev["ts"] + n.ev["dur"] - prev), start + (n.ev["dur"] if not n.children else 0))
    if ev["name"] == "<root>":
        return end
    ev["ts"], ev["dur"] = round(start, 3), round(end - start, 3)
    m = _MOD.match(ev["name"])
    if m:
        cls = RENAME_MODULE.get(m.group(1), m.group(1))
        key = (cls, n.ev["name"], n.copy)  # the same module object in every step, one per layer copy
        inst = ids["mod"].setdefault(key, len([k for k in ids["mod"] if k[0] == cls]))
        ev["name"] = f"nn.Module: {cls}_{inst}"
    else:
        ev["name"] = RENAME_OP.get(ev["name"], ev["name"])
    shift = (n.copy + 1) * ID_STRIDE  # copies get their own ids; the cpu op <-> call <-> kernel links are kept
    for key in ("External id", "correlation"):
        if isinstance(ev["args"].get(key), int):
            ev["args"][key] += shift
    for g in n.gpu:
        k = dict(g)
        k["args"] = dict(g.get("args", {}))
        for key in ("External id", "correlation"):
            if isinstance(k["args"].get(key), int):
                k["args"][key] += shift
        k["ts"] = round(start + (g["ts"] - n.ev["ts"]), 3)
        out.append(k)
    out.append(ev)
    return end


def main(src: str, dst: str) -> None:
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    gpu_by_corr: dict = {}
    for e in events:
        if e.get("cat") in GPU_CATS:
            gpu_by_corr.setdefault(e.get("args", {}).get("correlation"), []).append(e)
    steps = sorted((e for e in events if e.get("cat") == "user_annotation"
                    and e["name"].startswith("execute_context_")), key=lambda e: e["ts"])
    picked = [steps[0], next(s for s in steps if s["name"] == "execute_context_0(0)_generation_8(8)")]
    out: list[dict] = [e for e in events if e.get("ph") == "M"]
    ids: dict = {"mod": {}}
    cursor = picked[0]["ts"]
    for st in picked:
        root = build_tree(events, st["tid"], st["ts"], st["ts"] + st["dur"], gpu_by_corr)
        step = root.children[0]
        assert step.name == st["name"], step.name
        model = step.find(lambda n: n.cls == "MiniMaxM3Model")[0]
        layers = [c for c in model.children if c.cls == "MiniMaxM3DecoderLayer"]
        template = layers[1]
        new_layers = [qwen2_layer(template, k) for k in range(N_LAYERS)]
        first = model.children.index(layers[0])
        last = model.children.index(layers[-1])
        model.children[first:last + 1] = new_layers
        cursor = layout(root, cursor, ids, out) + 500.0
    doc = {k: v for k, v in doc.items() if k != "traceEvents"}
    doc["traceEvents"] = out
    with gzip.open(dst, "wt", compresslevel=9) as f:
        json.dump(doc, f, separators=(",", ":"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
