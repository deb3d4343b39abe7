"""Inductor-generated kernels attributed to the regions whose ops they fuse (mmprof/analysis/attribution/inductor.py).

Truths and where they come from:
- kernel names: Inductor names a fused kernel `{triton_poi|triton_red|triton_per|triton_tem|cpp}_fused_{ops}_{n}`
  with the sorted op names of its nodes' origins (torch/_inductor/codegen/simd.py / cpp.py, `get_fused_kernel_name`,
  `descriptive_names = "original_aten"`); the names below are real (tests/data/vllm_own, tests/data/inductor).
- vLLM Qwen2-MoE (tests/data/vllm_own/qwen2moe_graphs_b1, 4 layers): vllm/model_executor/models/qwen2_moe.py,
  `Qwen2MoeDecoderLayer.forward`: layer 0 runs `input_layernorm(hidden_states)` alone (residual None), fused by
  Inductor with the embedding gather of `Qwen2MoeModel.embed_input_ids`; every layer runs
  `post_attention_layernorm(hidden_states, residual)` (vLLM's fused_add_rms_norm); layers 1..3 run
  `input_layernorm(hidden_states, residual)` and `Qwen2MoeModel.forward` ends with `self.norm(hidden_states,
  residual)`: the same fused add + norm after the MoE (its extra `add` is the MoE's output sum).
- the CPU fixture (tests/data/inductor, made by make_fixture.py): the model in that script - layer 0 dense MLP,
  layer 1 a router (softmax + top-2) and one shared expert.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

from mmprof.analysis.attribution import inductor, layer_order
from mmprof.analysis.timeline.events import events_of
from mmprof.cli import cli, main
from mmprof.errors import BadInput
from mmprof.importers import import_paths
from mmprof.importers.inductor_provenance import attach, load, stack_calls
from tests.conftest import open_data, data_file

QWEN = ("vllm_own", "qwen2moe_graphs_b1.pt.trace.json.xz")
CPU = ("inductor", "cpu_compiled.pt.trace.json.gz")
PROV = ("inductor", "provenance")


def test_kernel_names_split_into_op_tokens():
    # the longest listed op name wins at each place (op names hold underscores themselves)
    assert inductor.split_ops("_to_copy_embedding_rms_norm") == ["_to_copy", "embedding", "rms_norm"]
    assert inductor.split_ops("add_fused_add_rms_norm") == ["add", "fused_add_rms_norm"]
    assert inductor.split_ops("mul_silu_slice") == ["mul", "silu", "slice"]
    assert inductor.split_ops("add_frobnicate_rsqrt") == ["add", "?frobnicate", "rsqrt"]
    assert inductor.name_roles("triton_per_fused__to_copy_embedding_rms_norm_0") == {"embed", "norm"}
    assert inductor.name_roles("triton_per_fused_add_fused_add_rms_norm_1") == {"norm"}
    assert inductor.name_roles("triton_poi_fused_mul_silu_slice_0") == {"mlp.act"}
    assert inductor.name_roles("graph_0_cpp_fused__softmax__unsafe_view_6") == set()  # softmax: router or attention
    assert inductor.name_roles("triton_poi_fused_1") == set()  # Inductor listed no op it knows by name
    assert inductor.is_inductor("triton_tem_fused_mm_0") and not inductor.is_inductor("fused_moe_kernel")


def test_every_token_role_is_a_known_role():
    from mmprof.labels import roles  # noqa: PLC0415
    toks = inductor.tokens()
    assert len(toks) > 40 and toks["rms_norm"] == "norm"
    assert roles().path_role("mlp.shared_expert") == "moe.shared"  # what the stack-trace paths resolve through


def _raw_kernels(path) -> Counter:
    with open_data(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    return Counter(e["name"] for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel")


def test_qwen2moe_compiled_norms_placed_by_name_and_position():
    path = data_file(*QWEN)
    p = import_paths([path])
    ev = events_of(p)
    names = np.array([p.string(int(c)) for c in ev.name], dtype=object)
    eager = ev.graph < 0
    # the independent count: Inductor kernels in the raw JSON
    raw = _raw_kernels(path)
    n_raw = sum(v for k, v in raw.items() if re.match(r"triton_(poi|per|red|tem)_fused", k))
    assert ev.inductor.kernels == n_raw > 0  # (544 on the full trace of commit 01f295c; the excerpt keeps 3 steps)
    for step in sorted(set(ev.step[eager & (names == "triton_per_fused__to_copy_embedding_rms_norm_0")].tolist())):
        sel = eager & (ev.step == step)
        got = Counter(zip(names[sel], ev.region[sel]))
        assert got[("triton_per_fused__to_copy_embedding_rms_norm_0", "embed+layers.0.norm")] == 1  # spans two
        for k in range(4):
            assert got[("triton_per_fused_fused_add_rms_norm_0", f"layers.{k}.norm")] == 1  # post-attention
        for k in (1, 2, 3):
            assert got[("triton_per_fused_add_fused_add_rms_norm_1", f"layers.{k}.norm")] == 1  # next input norm
        assert got[("triton_per_fused_add_fused_add_rms_norm_1", "final_norm")] == 1
    src = set(ev.label_source[eager & np.isin(names, ["triton_per_fused_fused_add_rms_norm_0"])].tolist())
    assert src == {"inductor-name"}
    # replays take their eager twins' regions
    rep = ~eager & (names == "triton_per_fused_add_fused_add_rms_norm_1")
    n_name = raw["triton_per_fused_add_fused_add_rms_norm_1"]
    assert rep.sum() == n_name - int((eager & (names == "triton_per_fused_add_fused_add_rms_norm_1")).sum()) > 0
    assert set(ev.region[rep].tolist()) == {"layers.1.norm", "layers.2.norm", "layers.3.norm", "final_norm"}
    # nameless pointwise kernels (`triton_poi_fused_N`: no op in the name) are placed by their position (issue 37,
    # analysis/attribution/layer_order.py): between a layer's QKV GEMM and its attention op runs the q/k split and
    # RoPE (vllm/model_executor/models/qwen2_moe.py Qwen2MoeAttention.forward: qkv_proj, split, rotary_emb, attn),
    # so each is that layer's attn.norm_rope, one per layer and step (layer 0's is _1, layers 1-3's _2)
    nameless = np.isin(names, ["triton_poi_fused_1", "triton_poi_fused_2"])
    assert nameless.sum() == raw["triton_poi_fused_1"] + raw["triton_poi_fused_2"] > 0
    for n, layers in (("triton_poi_fused_1", {0}), ("triton_poi_fused_2", {1, 2, 3})):
        sel = names == n
        assert set(ev.region[sel].tolist()) == {f"layers.{k}.attn.norm_rope" for k in layers}, n
    assert sum(v[0] for v in ev.inductor.unplaced.values()) == 0
    assert any(f"Inductor kernels: {n_raw}" in n for n in ev.notes)


def test_the_model_is_never_a_moe_block():
    # with compiled decoder layers vLLM's SharedExperts sits directly under Qwen2MoeForCausalLM: the model is not
    # a MoE block, so the compiled region's GEMMs get no layer-less `moe` region (they stay unattributed)
    p = import_paths([data_file(*QWEN)])
    ev = events_of(p)
    assert "moe" not in set(ev.region.tolist())


def _truth() -> list[str]:
    # make_fixture.py's model, in the order its compiled call runs the cpp kernels
    return ["embed+layers.0.norm", "layers.0.attn.norm_rope+attn.core", "embed+layers.0.norm", "layers.0.mlp",
            "embed+layers.1.norm", "layers.1.attn.norm_rope+attn.core", "embed+layers.1.norm", "layers.1.moe.router",
            "layers.1.moe.shared", "final_norm"]


def _cpu_regions(with_prov: bool):
    p = import_paths([data_file(*CPU)])
    if with_prov:
        attach(p, load([data_file(*PROV)]))
    ev = events_of(p)
    names = [p.string(int(c)) for c in ev.name]
    idx = [i for i, n in enumerate(names) if "cpp_fused" in n]
    return ev, [ev.region[i] for i in idx], [ev.label_source[i] for i in idx]


def test_cpu_compiled_model_with_provenance_matches_the_model():
    ev, regs, srcs = _cpu_regions(True)
    assert regs == _truth()
    assert set(srcs) == {"inductor-provenance"}
    assert ev.inductor.unplaced == {} and ev.inductor.kernels == 10
    # the embedding gather Inductor recomputes inside the norms, the rope inside the attention kernel: spans
    assert ev.inductor.spans_ns > 0


def test_cpu_compiled_model_by_name_places_only_what_it_can_tell():
    ev, regs, srcs = _cpu_regions(False)
    truth = _truth()
    placed = [(r, t) for r, t in zip(regs, truth) if r is not None]
    assert placed and all(r == t for r, t in placed)  # never a wrong region, only fewer
    assert regs[3] is None and regs[8] is None  # silu by name: a dense MLP's or a shared expert's, unknown
    assert regs[7] is None  # softmax alone: a router's or an attention's
    assert sum(v[0] for v in ev.inductor.unplaced.values()) == regs.count(None)
    assert set(s for s in srcs if s) == {"inductor-name"}


def test_provenance_loader_reads_what_torch_writes():
    d = load([data_file(*PROV)])
    k = d["kernels"]["cpp_fused__unsafe_view_mul_silu_split_3"]
    assert [h["handle"] for h in k] == [8, 20]  # one entry per call, in codegen order
    assert "silu" not in k[0]["ops"] and "mul" in k[0]["ops"]  # post-grad node names (silu is decomposed)
    assert ["layer", "self.mlp", "self.shared_expert", "F.silu"] in k[1]["calls"]
    assert inductor.stack_region(["layer", "self.mlp", "self.shared_expert", "F.silu"])[1] == "moe.shared"
    assert inductor.stack_region(["self.model", "self.layers[3]", "self.input_layernorm", "x.pow"])[:2] == (3, "norm")
    assert inductor.stack_region(["self.embed_tokens"])[1] == "embed"


def test_stack_calls_reads_the_highlighted_call():
    t = ('  File "m.py", line 9, in forward\n    x = layer(x, cos)\n        ^^^^^^^^^^^^\n'
         '  File "m.py", line 4, in forward\n    return x + self.mlp(self.norm(x))\n'
         '               ^^^^^^^^^^^^^^^^^^^^^\n'
         '  File "/usr/lib/python3/site-packages/torch/nn/modules/linear.py", line 1, in forward\n'
         '    return F.linear(input, self.weight, self.bias)\n           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n')
    assert stack_calls(t) == ["layer", "self.mlp"]


@pytest.mark.parametrize("text, msg", [
    ("{not json", "not valid JSON"),
    ('{"k:1": 3}', "does not map to a list"),
    ("[1, 2]", "not an Inductor node-mapping file"),
])
def test_bad_provenance_is_one_line(tmp_path, capsys, text, msg):
    f = tmp_path / "inductor_provenance_tracking_node_mappings.json"
    f.write_text(text)
    with pytest.raises(BadInput, match=msg):
        load([f])
    for cmd in (["report", str(data_file(*CPU))], ["import", str(data_file(*CPU)), "-o", str(tmp_path / "o.json")]):
        with pytest.raises(SystemExit) as e:
            main(cmd + ["--inductor-provenance", str(f)])
        err = capsys.readouterr().err
        assert e.value.code == 2 and "Traceback" not in err
        assert err.strip().count("\n") == 0 and err.startswith("mmprof: error: ") and msg in err
    assert not (tmp_path / "o.json").exists()


def test_import_stores_provenance_and_report_uses_it(tmp_path):
    out = tmp_path / "p.json.gz"
    r = CliRunner().invoke(cli, ["import", str(data_file(*CPU)), "--inductor-provenance", str(data_file(*PROV)),
                                 "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    from mmprof.profiles import load_profile  # noqa: PLC0415
    ev = events_of(load_profile(out))
    assert set(ev.label_source[[i for i, n in enumerate(ev.name) if "cpp_fused" in (ev.profile.string(int(n)))]]
               .tolist()) == {"inductor-provenance"}
    r = CliRunner().invoke(cli, ["report", str(out), "--json"])
    assert r.exit_code == 0 and "placed by inductor-provenance 100%" in r.output


def test_torch_trace_log_is_read(tmp_path):
    # the line format of a TORCH_TRACE log (torch._logging.trace_structured; seen in the log make_fixture.py reads):
    # a glog-style line with the artifact's metadata JSON, then its payload on the next line after a tab
    mapping = (data_file(*PROV) / "inductor_provenance_tracking_node_mappings.json").read_text().strip()
    stacks = json.dumps(json.loads((data_file(*PROV) / "kernel_stack_traces.json").read_text()))
    head = 'V1201 12:32:56.665000 9868 torch/_inductor/compile_fx.py:1624] {"artifact": {"name": "%s", ' \
           '"encoding": "json"}, "frame_id": 0, "frame_compile_id": 0, "attempt": 0, "has_payload": "x"}'
    log = tmp_path / "dedicated_log_torch_trace_x.log"
    log.write_text("\n".join([head % "inductor_provenance_tracking_node_mappings", "\t" + mapping,
                              head % "inductor_provenance_tracking_kernel_stack_traces", "\t" + stacks, ""]))
    assert load([log])["kernels"] == {k: [dict(h, graph=f"{log.name}:0/0/0") for h in v]
                                      for k, v in load([data_file(*PROV)])["kernels"].items()}
    p = import_paths([data_file(*CPU)])
    attach(p, load([tmp_path]))  # a folder holding the log
    assert events_of(p).inductor.by_source == {"inductor-provenance": events_of(p).inductor.time_ns}


def test_a_name_in_two_compiled_graphs_is_not_cycled(tmp_path):
    # Inductor numbers handles per compiled graph: the same kernel name in two graphs (two folders) cannot be
    # told apart by occurrence, so provenance is used only where all its entries agree; the silu kernel's do not
    # (the dense MLP's and the shared expert's) and it falls back to its name, which does not place it
    import shutil  # noqa: PLC0415
    for g in ("a", "b"):
        shutil.copytree(data_file(*PROV), tmp_path / g)
    p = import_paths([data_file(*CPU)])
    attach(p, load([tmp_path]))
    ev = events_of(p)
    names = [p.string(int(c)) for c in ev.name]
    silu = [ev.region[i] for i, n in enumerate(names) if "silu" in n]
    assert silu == [None, None]
    router = [ev.region[i] for i, n in enumerate(names) if "softmax" in n]
    assert router == ["layers.1.moe.router"]  # one entry per graph, and the two agree


def test_place_follows_the_order_of_a_pre_norm_layer():
    # the order of a pre-norm decoder layer (transformers' / vLLM's *DecoderLayer.forward): input norm, qkv,
    # rope, attention, o_proj, post-attention norm, router, experts / MLP; ords from layer_order.ORDER
    core, moe, router = 4, 8, 7
    assert layer_order.place("norm", (3, core), (3, router)) == 3      # post-attention norm of layer 3
    assert layer_order.place("norm", (3, moe), (4, 2)) == 4            # layer 4's input norm (next anchor: its rope)
    assert layer_order.place("norm", (11, moe), None) == -2            # after the last layer's MoE: the final norm
    assert layer_order.place("norm", (3, core), (4, core)) is None     # post of 3 or input of 4: not fixed
    assert layer_order.place("moe.router", (3, core), (4, core)) == 3
    assert layer_order.place("attn.qkv", (3, moe), (5, core)) is None  # a layer skipped: no guess


def test_no_layer_context_crosses_a_model_level_kernel():
    # a capture run after an annotated step (the runtime's `mmprof.graph.capture`, seen on its compile rung):
    # after the LM head a new forward starts, so layer 11's MoE is no anchor for the next norm
    gid = np.zeros(10, np.int64)
    apos = np.array([0], np.int64)
    anchors = {0: (11, ["moe.routed"])}
    none = np.zeros(0, np.int64)
    assert inductor._neighbours(5, gid, apos, anchors, none, none)[:2] == ((11, 8), None)
    assert inductor._neighbours(5, gid, apos, anchors, none, np.array([2], np.int64))[:2] == (None, None)


def test_record_profile_places_only_the_model_forward_kernels():
    # tests/data/vllm_own/rec_qwen2moe_graphs_b8: `mmprof record` from process start, so it also holds the kernels
    # Inductor ran while compiling (inside the first forward, outside any `## Call CompiledFxGraph` range); the
    # truth per kernel name is the same as on qwen2moe_graphs_b1 (qwen2_moe.py), and a placement must be one of it
    p = import_paths([data_file("vllm_own", "rec_qwen2moe_graphs_b8.json.xz")])
    ev = events_of(p)
    names = np.array([p.string(int(c)) for c in ev.name], dtype=object)
    by_name = np.array([s == "inductor-name" for s in ev.label_source])
    truth = {"triton_per_fused_fused_add_rms_norm_0": {f"layers.{k}.norm" for k in range(4)},
             "triton_per_fused_add_fused_add_rms_norm_1": {"layers.1.norm", "layers.2.norm", "layers.3.norm",
                                                           "final_norm"},
             "triton_per_fused__to_copy_embedding_rms_norm_0": {"embed+layers.0.norm"}}
    got = Counter(zip(names[by_name], ev.region[by_name]))
    assert got and all(r in truth[n] for n, r in got)
    for n in list(truth)[:2]:  # whole forwards: layers 1-3's norms equally often
        assert len({v for (m, r), v in got.items() if m == n and r in ("layers.1.norm", "layers.2.norm",
                                                                         "layers.3.norm")}) == 1
    # the excerpt (tests/data/samples/cut_profile.py keeps the two generate calls) no longer holds the kernels
    # Inductor ran while compiling; their filter is checked on a synthetic trace below


def test_kernels_outside_every_compiled_call_are_compile_time_runs(tmp_path):
    """torch wraps each call of a compiled graph in a `## Call CompiledFxGraph <hash> ##` range
    (torch/_inductor/output_code.py, CompiledFxGraph.__call__ under the profiler); Inductor's autotuning and
    benchmarking launch the same Triton kernels outside it, at compile time. Such a kernel is never placed: counted
    with that reason."""
    import json

    from mmprof.importers import kineto

    name = "triton_per_fused_fused_add_rms_norm_0"
    ev = [{"ph": "X", "cat": "user_annotation", "name": "## Call CompiledFxGraph fabc ##", "pid": 1, "tid": 1,
           "ts": 100.0, "dur": 50.0}]
    for corr, ts in ((1, 10.0), (2, 110.0)):  # 1: outside the compiled call (compile time), 2: inside it
        ev += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": 1.0,
                "args": {"correlation": corr}},
               {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts + 5, "dur": 2.0,
                "args": {"correlation": corr, "device": 0, "stream": 7}}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    e = events_of(kineto.load([path]))
    assert e.inductor.kernels == 2
    un = e.inductor.unplaced
    assert un["ran outside a compiled graph's call (compile-time benchmarking)"][0] == 1
