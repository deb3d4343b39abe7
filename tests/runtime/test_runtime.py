"""Runtime unit tests: config loading, switches equivalence, dispatch log, scopes, block reuse/overlap,
indexer selection rules, checkpoint names and bad input. All on the CPU `tiny` preset (float32)."""

from __future__ import annotations

import dataclasses

import pytest

from mmprof.errors import BadInput, NoEvidence
from mmprof.runtime import get_preset, load_config

from ..conftest import data_file

torch = pytest.importorskip("torch")

from mmprof.runtime import Switches, Workload, build_model, generate, load_weights  # noqa: E402
from mmprof.runtime.dispatch import COLUMNS  # noqa: E402
from mmprof.runtime.indexer import _set_overlap, select_blocks  # noqa: E402
from mmprof.runtime.transformer import RunState  # noqa: E402
from tests.runtime.tolerance import assert_same_tokens_unless_near_tie, longest_reduction, reorder_tolerance  # noqa: E402

WL = Workload(batch=2, prompt_len=256, decode_steps=4, seed=7)


@pytest.fixture(scope="module")
def tiny():
    return build_model(get_preset("tiny"), seed=0)


def _run(model, switches, wl=WL):
    model.set_switches(switches)
    model.dispatch.clear()
    return generate(model, wl, keep_logits=True)


def _maxdiff(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a.logits, b.logits))


def _tol(model, ref, wl=WL) -> float:
    """fp32 bound for two runs that sum in another order (tests/runtime/tolerance.py: derived from the dtype,
    the layer count and the longest reduction, not fitted to one CPU)."""
    keys = wl.prompt_len + wl.decode_steps
    return reorder_tolerance(torch.float32, ref.logits, model.args.n_layers, longest_reduction(model.args, keys))


# -- config -----------------------------------------------------------------------------------------------
def test_legacy_hf_config_maps_to_m3():
    a = load_config(data_file("runtime", "m3_legacy_config.json"))
    assert (a.hidden_size, a.n_layers, a.n_heads, a.n_kv_heads, a.head_dim) == (6144, 60, 64, 4, 128)
    assert a.mlp_types[:4] == ["dense", "dense", "dense", "moe"] and a.mlp_types.count("moe") == 57
    assert a.attn_types[:4] == ["full", "full", "full", "sparse"] and len(a.sparse_layers) == 57
    assert (a.index_n_heads, a.index_block_size, a.index_topk_blocks, a.index_local_blocks) == (4, 128, 16, 1)
    assert (a.rotary_dim, a.rope_theta, a.routed_scaling_factor, a.n_experts, a.top_k) == (64, 5e6, 2.0, 128, 4)
    m3 = get_preset("m3")
    assert dataclasses.replace(a, name="m3", max_seq_len=m3.max_seq_len) == m3


def test_presets_and_bad_input(tmp_path):
    t = get_preset("tiny")
    assert "dense" in t.mlp_types and "moe" in t.mlp_types and len(t.sparse_layers) == 4
    assert 256 // t.index_block_size > t.index_topk_blocks  # a 256-token prompt really drops blocks
    assert get_preset("m3-rank-slice", tp=4, layers=5).slice_tp == 4
    with pytest.raises(BadInput, match="unknown runtime preset"):
        get_preset("huge")
    with pytest.raises(BadInput, match="moe_impl"):
        Switches(moe_impl="fast")
    with pytest.raises(BadInput, match="block_reuse"):
        Switches(block_reuse=0)
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(BadInput, match="cannot read config JSON"):
        load_config(tmp_path)
    with pytest.raises(BadInput, match="neither a preset"):
        load_config(tmp_path / "missing")


# -- switches ---------------------------------------------------------------------------------------------
def test_loop_equals_grouped_and_separate_equals_fused(tiny):
    ref = _run(tiny, Switches.baseline())
    for sw in (Switches(block_reuse=1), Switches(moe_impl="loop", shared_expert="fused", block_reuse=1),
               Switches(moe_impl="grouped", shared_expert="separate", block_reuse=1)):
        out = _run(tiny, sw)
        assert _maxdiff(ref, out) <= _tol(tiny, ref)
        assert_same_tokens_unless_near_tie(ref, out, _tol(tiny, ref))
        impls = {(r.op, r.impl) for r in tiny.dispatch.records}
        assert ("moe.experts", "grouped_mm" if sw.moe_impl == "grouped" else "loop") in impls
        assert ("moe.shared", sw.shared_expert) in impls


def test_grouped_fallback_is_named_and_equal():
    args = get_preset("tiny", moe_intermediate=6, shared_intermediate=6)  # 24-byte rows: grouped_mm refuses
    m = build_model(args, seed=0)
    ref = _run(m, Switches(moe_impl="loop"))
    out = _run(m, Switches())
    assert _maxdiff(ref, out) <= _tol(m, ref)
    recs = [r for r in m.dispatch.records if r.op == "moe.experts"]
    assert recs and all(r.impl == "grouped_bmm" and r.requested == "grouped_mm" for r in recs)
    assert "16-byte aligned" in recs[0].reason


def test_block_reuse_dispatch_and_effect(tiny):
    k1 = _run(tiny, Switches(block_reuse=1))
    assert {r.impl for r in tiny.dispatch.records if r.op == "attn.indexer"} == {"computed"}
    k2 = _run(tiny, Switches(block_reuse=2))
    prefill = [(r.layer, r.impl) for r in tiny.dispatch.records if r.op == "attn.indexer" and r.step == 0]
    assert prefill == [(2, "computed"), (3, "reused"), (4, "computed"), (5, "reused")]
    _run(tiny, Switches(block_reuse=4))
    prefill = [(r.layer, r.impl) for r in tiny.dispatch.records if r.op == "attn.indexer" and r.step == 0]
    assert prefill == [(2, "computed"), (3, "reused"), (4, "reused"), (5, "reused")]
    assert _maxdiff(k1, k2) > 0  # reuse changes numerics (a different selection on reusing layers)


def test_reused_layer_sees_producer_selection(tiny):
    tiny.set_switches(Switches(block_reuse=2))
    st = RunState(tiny.switches, tiny.dispatch, tiny._sparse_ord, capture={})
    assert st.should_compute_selection(2) and not (st.set_selection(2, torch.zeros(1)) or st.should_compute_selection(3))
    assert st.should_compute_selection(4)


def test_dense_equals_sparse_when_everything_fits(tiny):
    short = Workload(batch=1, prompt_len=40, decode_steps=3, seed=2)  # 3 blocks <= top-4: all selected
    a = _run(tiny, Switches(attention="sparse"), short)
    b = _run(tiny, Switches(attention="dense"), short)
    assert _maxdiff(a, b) <= _tol(tiny, a, short)
    assert {r.impl for r in tiny.dispatch.records if r.op == "attn.core"} == {"dense"}


def test_chunked_prefill_matches(tiny):
    a = _run(tiny, Switches())
    b = _run(tiny, Switches(), dataclasses.replace(WL, prefill_chunk=100))
    assert _maxdiff(a, b) <= _tol(tiny, a)
    assert_same_tokens_unless_near_tie(a, b, _tol(tiny, a))


# -- indexer and overlap --------------------------------------------------------------------------------
def test_select_blocks_rules():
    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 1, 70, 8)
    sel = select_blocks(q, k, pos=65, block=16, topk=3, local=1)  # queries at 65..69, 5 blocks
    assert sel.shape == (1, 2, 5, 3)
    assert bool((sel == 4).any(-1).all())  # the local block (70 // 16 = 4) is always kept
    early = select_blocks(q[:, :, :1], k[:, :, :20], pos=19, block=16, topk=3, local=1)
    assert sorted(early[0, 0, 0].tolist()) == [0, 1]  # only 2 blocks exist: k shrinks to 2 (as transformers)
    future = select_blocks(q, k[:, :, :70], pos=0, block=16, topk=3, local=1)[0, 0, 0]  # query at 0
    assert sorted(future.tolist()) == [-1, -1, 0]  # blocks after the query are never selected


def test_overlap_measure(tiny):
    from mmprof.runtime import measure_selection_overlap

    a = torch.tensor([[0, 1, 2, -1]])
    assert _set_overlap(a, a, 4) == (1.0, 1.0)
    j, f = _set_overlap(a, torch.tensor([[0, 3, -1, -1]]), 4)
    assert abs(j - 0.25) < 1e-6 and abs(f - 1 / 3) < 1e-6
    tiny.set_switches(Switches(block_reuse=4))
    res = measure_selection_overlap(tiny, WL)
    assert tiny.switches.block_reuse == 4  # restored
    assert res.pairs == [(2, 3), (3, 4), (4, 5)] and res.n_blocks_total == 16 and res.n_selected == 4
    assert all(0.0 <= x <= 1.0 for x in res.jaccard + res.shared_fraction)
    assert res.mean_jaccard < 1.0  # random weights: layers disagree somewhere
    with pytest.raises(NoEvidence):
        from mmprof.runtime.indexer import selection_overlap

        selection_overlap({2: a}, 16, 64)


# -- dispatch log and scopes ------------------------------------------------------------------------------
def test_dispatch_rows_match_profile_schema(tiny):
    from mmprof.profiles.schema import TABLES

    _run(tiny, Switches())
    rows = tiny.dispatch.rows()
    assert [c[0] for c in TABLES["dispatch"]] == list(COLUMNS)
    assert rows and set(rows[0]) == set(COLUMNS)
    steps = {(r["step"], r["phase"]) for r in rows}
    assert (0, "prefill") in steps and (4, "decode") in steps
    core = [r for r in rows if r["op"] == "attn.core"]
    assert {r["impl"] for r in core if r["phase"] == "decode"} == {"sparse"}
    masked = [r for r in core if r["impl"] == "sparse_masked"]
    assert masked and all(r["reason"] and r["requested"] == "sparse" for r in masked)
    assert all(r["reason"] is None for r in rows if r["impl"] == r["requested"])


@pytest.mark.parametrize("shared", ["fused", "separate"])
def test_scopes_in_profiler_trace(tiny, shared):
    from torch.profiler import ProfilerActivity, profile

    tiny.set_switches(Switches(shared_expert=shared, block_reuse=2))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        generate(tiny, Workload(batch=1, prompt_len=64, decode_steps=2))
    names = {e.name for e in prof.events()}
    for n in ("mmprof.prefill", "mmprof.decode", "mmprof.step.0", "mmprof.step.2", "embed", "lm_head",
              "final_norm", "layers.0.mlp", "layers.0.attn.qkv", "layers.2.attn.indexer", "layers.3.attn.core",
              "layers.3.moe.router", "layers.3.moe.routed", "layers.5.attn.o_proj", "layers.1.norm",
              "layers.2.attn.norm_rope"):
        assert n in names, n
    assert "layers.3.attn.indexer" not in names  # reused under K=2: no indexer work
    assert ("layers.3.moe.shared" in names) == (shared == "separate")


# -- weights ----------------------------------------------------------------------------------------------
def _released_names(src_dir, dst):
    """Rewrite a transformers-saved tiny checkpoint into the released checkpoint's naming."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    out = {}
    with safe_open(str(src_dir / "model.safetensors"), "pt") as h:
        for n in h.keys():
            t = h.get_tensor(n)
            if n == "lm_head.weight":
                out["language_model.lm_head.weight"] = t
                continue
            base = "language_model.model." + n[len("model."):]
            if ".layers." in base and int(base.split(".layers.")[1].split(".")[0]) >= 2:  # MoE layers
                base = base.replace(".mlp.", ".block_sparse_moe.")
            base = base.replace(".self_attn.indexer.", ".self_attn.index_")
            if base.endswith("experts.gate_up_proj"):
                for e in range(t.shape[0]):
                    w1, w3 = t[e].chunk(2, 0)
                    out[base.replace("gate_up_proj", f"{e}.w1.weight")] = w1.contiguous()
                    out[base.replace("gate_up_proj", f"{e}.w3.weight")] = w3.contiguous()
            elif base.endswith("experts.down_proj"):
                for e in range(t.shape[0]):
                    out[base.replace("down_proj", f"{e}.w2.weight")] = t[e].contiguous()
            elif base.endswith("gate.e_score_correction_bias"):
                out[base.replace("gate.e_score_correction_bias", "e_score_correction_bias")] = t
            elif base.endswith("gate_up_proj.weight"):
                g, u = t.chunk(2, 0)
                out[base.replace("gate_up_proj", "gate_proj")] = g.contiguous()
                out[base.replace("gate_up_proj", "up_proj")] = u.contiguous()
            else:
                out[base] = t
    out["vision_tower.vision_model.pre_layrnorm.weight"] = torch.zeros(4)  # ignored
    save_file(out, str(dst / "model-00001-of-00001.safetensors"))
    return set(out)


def test_released_checkpoint_names_load_identically(tmp_path):
    pytest.importorskip("transformers")
    from .hf_oracle import write_hf_checkpoint

    args = get_preset("tiny")
    hf_dir, rel_dir = tmp_path / "hf", tmp_path / "released"
    rel_dir.mkdir()
    write_hf_checkpoint(args, hf_dir, seed=2)
    names = _released_names(hf_dir, rel_dir)
    assert "language_model.model.layers.3.block_sparse_moe.experts.5.w3.weight" in names
    assert "language_model.model.layers.3.self_attn.index_k_norm.weight" in names
    a, b = build_model(args, seed=None), build_model(args, seed=None)
    load_weights(a, hf_dir)
    load_weights(b, rel_dir)
    for (na, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(pa, pb), na


def test_bad_checkpoints(tmp_path):
    from safetensors.torch import save_file

    m = build_model(get_preset("tiny"), seed=None)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file")
    with pytest.raises(BadInput, match="not a readable safetensors"):
        load_weights(m, junk)
    only = tmp_path / "partial.safetensors"
    save_file({"model.embed_tokens.weight": torch.zeros(512, 128)}, str(only))
    with pytest.raises(BadInput, match="missing tensor"):
        load_weights(m, only)
    wrong = tmp_path / "wrong.safetensors"
    save_file({"model.embed_tokens.weight": torch.zeros(500, 128)}, str(wrong))
    with pytest.raises(BadInput, match="500 rows"):
        load_weights(m, wrong)
    with pytest.raises(BadInput, match="no .safetensors"):
        load_weights(m, tmp_path / "nothing")


def test_generate_result_and_slice_build():
    m = build_model(get_preset("tiny"), tp=2, rank=1, seed=0)  # one rank's slice, no collectives
    assert m.plan.n_heads == 4 and m.layers[3].mlp.w13.shape == (17, 64, 128)
    res = generate(m, Workload(batch=1, prompt_len=32, decode_steps=3))
    assert res.tokens.shape == (1, 4) and res.prefill_ms > 0 and len(res.decode_ms) == 3
    assert res.decode_tok_s > 0 and res.to_dict()["decode_steps"] == 3
    with pytest.raises(BadInput, match="exceeds max_seq_len"):
        generate(m, Workload(batch=1, prompt_len=600, decode_steps=1))


def test_scopes_can_be_disabled(tiny):
    from torch.profiler import ProfilerActivity, profile

    from mmprof.runtime.scopes import set_scopes_enabled

    prev = set_scopes_enabled(False)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            generate(tiny, Workload(batch=1, prompt_len=32, decode_steps=1))
    finally:
        set_scopes_enabled(prev)
    assert not any(e.name.startswith("layers.") for e in prof.events())


def test_sparse_gather_equals_masked():
    from mmprof.runtime.attention import attend_sparse_gather, attend_sparse_masked

    torch.manual_seed(0)
    q, k = torch.randn(2, 8, 3, 16), torch.randn(2, 2, 100, 16)
    v = torch.randn_like(k)
    sel = select_blocks(torch.randn(2, 2, 3, 8), torch.randn(2, 1, 100, 8), pos=97, block=16, topk=3, local=1)
    a = attend_sparse_gather(q, k, v, 97, 0.25, sel, 16)
    b = attend_sparse_masked(q, k, v, 97, 0.25, sel, 16)
    assert float((a - b).abs().max()) < 1e-5
    assert sel.shape[-1] == 3 and int((sel >= 0).sum(-1).min()) == 3  # 7 blocks exist, 3 kept per query
