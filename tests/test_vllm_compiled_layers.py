"""vLLM's default mode (torch.compile + CUDA graphs) on another MoE family: the decoder layers run compiled, so
the with_stack trace has no decoder-layer module events, only the engine's custom ops and the modules the custom
ops call eagerly (SharedExperts inside `vllm::moe_forward_shared`).

Truth (vLLM 0.26, vllm/model_executor/models/qwen2_moe.py): every `Qwen2MoeDecoderLayer` calls its attention
(`vllm::unified_kv_cache_update`, then `vllm::unified_attention_with_output`) and then its `Qwen2MoeSparseMoeBlock`
(`vllm::moe_forward_shared`: the routed experts as Triton `fused_moe_kernel`, the shared expert `Qwen2MoeMLP` as
its own GEMMs), in layer order, once per forward. So within one engine step the k-th attention op opens layer k
(mmprof.analysis.attribution.structure.StructureIndex.order_layer), and the seed checks can be judged per layer: routed
experts grouped (FP007 pass), no expert loop (FP009 pass), shared expert separate (FP001 fail); no kernel the rules
mark fallback (FP003 from the kernels' classes, FP004 pass)."""

from __future__ import annotations

import gzip
import json

import numpy as np

from mmprof.analysis.checks.verify import verify
from mmprof.analysis.timeline.events import events_of
from mmprof.importers import import_paths
from tests.conftest import open_data, data_file

TRACE = ("vllm_own", "qwen2moe_graphs_b1.pt.trace.json.xz")
CONFIG = ("vllm_own", "qwen2moe_config.json")


def test_layers_from_the_order_of_the_attention_ops():
    path = data_file(*TRACE)
    n_layers = json.loads(data_file(*CONFIG).read_text())["num_hidden_layers"]
    raw = json.load(open_data(path))["traceEvents"]
    moe_calls = [e for e in raw if e.get("name") == "vllm::moe_forward_shared"]
    assert len(moe_calls) == n_layers == 4  # the one eager forward in the window (the prefill step)
    p = import_paths([path])
    f = events_of(p).frame()
    fused = f[f.name.astype(str).str.startswith("fused_moe_kernel")]
    eager = fused[(events_of(p).graph[fused.index] < 0)]
    # every eager fused-MoE launch is the routed experts of a layer 0..3, two launches (w13, w2) per layer
    assert set(eager.region) == {f"layers.{i}.moe.routed" for i in range(n_layers)}
    assert eager.groupby("layer").size().tolist() == [2] * n_layers
    # the shared expert's GEMMs, eager or replayed with the eager op, never land in moe.routed
    routed_gemm = f[f.region.fillna("").str.endswith("moe.routed") & (f.family == "gemm")]
    assert routed_gemm.empty, routed_gemm.name.value_counts().head()


def test_seed_checks_on_compiled_qwen2_moe():
    p = import_paths([data_file(*TRACE)])
    res = verify(p)
    st = {}
    for r in res.results:
        st.setdefault(r.code, set()).add(r.status)
    assert st["FP001"] == {"fail"}            # SharedExperts runs as its own MLP
    assert st["FP002"] == {"not_applicable"}  # no sparse attention, no indexer
    assert st["FP007"] == {"pass"}            # fused_moe_kernel: grouped
    assert st["FP009"] == {"pass"}            # no per-expert GEMM loop
    assert st["FP003"] == {"pass"} and st["FP004"] == {"pass"}  # no fallback path in any region
    assert res.exit_code == 1
    shared = next(r for r in res.results if r.code == "FP001")
    assert "layers 0-3" in " ".join([shared.message, *shared.evidence])


def test_no_clock_when_layers_call_different_attention_ops():
    """MiniMax M3's full-attention layers (0-1) call `vllm::unified_attention_with_output`, its sparse layers (2-5)
    their own sparse path (vllm/models/minimax_m3/nvidia/model.py): a step has 2 attention anchor ops but 5
    `vllm::moe_forward_shared` calls, so the MoE ops of layers 1-5 would all fall after the last clock op. The
    order rule must refuse such a step (M3's layers come from its module events instead)."""
    from collections import Counter

    from mmprof.analysis.attribution.structure import StructureIndex, _order_layers
    from mmprof.labels import roles
    p = import_paths([data_file("samples", "vllm", "m3_graphs_b8.pt.trace.json.xz")])
    ops = p.tables["ops"]
    per_step: dict[int, Counter] = {}
    for i in range(p.n("ops")):
        nm = p.string(int(ops["name"][i])) or ""
        par = int(ops["parent"][i])
        if roles().op_role(nm) == "attn.core" and (par < 0 or roles().op_role(p.string(int(ops["name"][par])) or "") is None):
            per_step.setdefault(int(ops["step"][i]), Counter())[nm] += 1
    assert per_step and all(max(c.values()) == 2 for s, c in per_step.items() if s >= 0), per_step
    moe = Counter(int(ops["step"][i]) for i in range(p.n("ops"))
                  if p.string(int(ops["name"][i])) == "vllm::moe_forward_shared")
    assert all(v == 5 for v in moe.values()), moe  # 5 MoE layers per forward
    assert _order_layers(StructureIndex(p)) == {}


def test_sampler_kernels_are_the_sampler_region():
    """vLLM 0.26's v1 model runner samples with its own Triton kernels (`_gumbel_sample_kernel`, ...;
    vllm/v1/worker/gpu/sample/) outside any nn.Module, once per engine step. Their rule's family is `sampling`, so
    they are the model-level `sampler` region (label source `family`); every launch in the raw JSON is counted."""
    path = data_file("vllm_own", "qwen2moe_eager_b8_first3.pt.trace.json.xz")
    raw = json.load(open_data(path))["traceEvents"]
    n_gumbel = sum(1 for e in raw if e.get("cat") == "kernel" and e.get("name") == "_gumbel_sample_kernel")
    assert n_gumbel == 3  # one per engine step in the window (the excerpt's 3: prefill, mixed, decode)
    f = events_of(import_paths([path])).frame()
    g = f[f.name.astype(str) == "_gumbel_sample_kernel"]
    assert len(g) == n_gumbel and set(g.region) == {"sampler"} and set(g.label_source) == {"family"}
    # nothing but sampling-family kernels is placed by its family
    assert set(f[f.label_source == "family"].family) == {"sampling"}


def test_engine_region_is_eager_work_outside_every_module(tmp_path):
    """vLLM's model runner prepares each step's inputs outside the model (vllm/v1/worker/gpu_model_runner.py:
    block tables, slot mappings, the host-to-device input copies): on a with_stack trace those kernels launch with
    no nn.Module frame. They are the `engine` region; a replayed kernel never is, and a trace without module events
    gets no `engine` region at all (nothing would tell the model's kernels from the engine's)."""
    path = data_file(*TRACE)
    p = import_paths([path])
    ev = events_of(p)
    eng = ev.region == "engine"
    assert eng.any() and not (eng & (ev.graph >= 0)).any()
    K, M = p.tables["kernels"], p.tables["memcpy"]
    for i in np.flatnonzero(eng)[:200].tolist():
        t = K if ev.table[i] == 0 else M
        code = int(t["scope_path"][ev.row[i]])
        assert code < 0 or "nn.Module: " not in (p.string(code) or "")
    doc = json.load(open_data(path))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "python_function"]
    q = tmp_path / "nostack.pt.trace.json.gz"
    with gzip.open(q, "wt") as f:
        json.dump(doc, f)
    assert not (events_of(import_paths([q])).region == "engine").any()


def _statuses(p):
    st: dict[str, set] = {}
    res = verify(p)
    for r in res.results:
        st.setdefault(r.code, set()).add(r.status)
    return st, res.exit_code


def test_seed_checks_on_m3_graphs_batch_1():
    """MiniMax M3 at batch 1 in vLLM's default mode (vllm/models/minimax_m3/nvidia/model.py): the shared expert is
    its own MLP (FP001 fail), every sparse layer runs its indexer (FP002 fail), the routed experts are
    `fused_moe_kernel` (FP007 pass, FP009 no loop). Engine steps: one per `execute_context_*` annotation in the raw
    JSON (the committed excerpt keeps the first 3 of the run's 33: the prefill and 2 one-request decode steps;
    tests/data/vllm_own/README.md)."""
    path = data_file("vllm_own", "m3_graphs_b1.pt.trace.json.xz")
    raw = [e["name"] for e in json.load(open_data(path))["traceEvents"]
           if e.get("cat") == "user_annotation" and e.get("name", "").startswith("execute_context_")]
    p = import_paths([path])
    st, code = _statuses(p)
    assert st["FP001"] == {"fail"} and st["FP002"] == {"fail"} and st["FP007"] == {"pass"}
    assert "fail" not in st["FP009"] | st["FP004"] | st["FP003"] and code == 1
    from mmprof.analysis.timeline.engine_steps import engine_steps
    es = engine_steps(p)
    assert len(es) == len(raw) == 3 and raw.count("execute_context_0(0)_generation_1(1)") == 2
    assert es["phase"].tolist() == ["prefill", "decode", "decode"] and set(es["gen_reqs"][es["phase"] == "decode"]) == {1}


def test_record_profile_of_compiled_qwen2_moe():
    """`mmprof record` around the same engine (no vLLM profiler): the shared expert still runs eagerly inside
    `vllm::moe_forward_shared` (record's module ranges see SharedExperts: FP001 fail), no indexer (FP002 N/A);
    compiled layers open no module range, so the routed-expert checks have no layer-level evidence (documented in
    docs/vllm.md) and are never a pass. The committed Profile is the engine's two generate calls (from 94 s after
    the process's first event; tests/data/vllm_own/README.md): 31 graph launches, the eager forwards between them
    and every capture-time op and range their kernels refer to; the full Profile (in git history at 01f295c) gave
    the same verdicts."""
    from mmprof.profiles.io import load_profile
    p = load_profile(data_file("vllm_own", "rec_qwen2moe_graphs_b8.json.xz"))
    names = p.col("launches", "name", decode=True)
    assert sum(n == "cudaGraphLaunch" for n in names) == 31
    st, code = _statuses(p)
    assert st["FP001"] == {"fail"} and st["FP002"] == {"not_applicable"}
    assert "pass" not in st["FP007"] and code == 1
