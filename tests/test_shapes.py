"""`mmprof shapes`: analytic per-rank shapes (meta-device builds), findings, and profile mode.

The M3 numbers asserted here are the derived per-rank table of m3-architecture.md section 2.1 (vLLM's TP rules)."""

from __future__ import annotations

import json

import pytest

from mmprof.analysis.checks.shapes_analytic import analytic_findings
from mmprof.analysis.checks.shapes_observed import calls_from_profile, canonical, compare_calls, cross_rank, role_of
from mmprof.capture.workflows.shapes import resolve_model, unsharded
from mmprof.runtime import analytic
from mmprof.shapes_model import Call
from mmprof.units import rank_label
from mmprof.cli import main
from mmprof.profiles import ProfileBuilder, save_profile
from mmprof.runtime import get_preset

from .conftest import data_file


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(["shapes", *argv])
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


@pytest.fixture(scope="module")
def m3_tp8():
    res = analytic(resolve_model("m3"), 8)
    res.findings = analytic_findings(res, unsharded(res))
    return res


def _gemm(kind, name):
    return next(g for g in kind.gemms if g.name == name)


# ------------------------------------------------------------------------------------------ analytic
def test_m3_tp8_reproduces_the_derived_table(m3_tp8):
    res = m3_tp8
    assert res.rank_groups() == [list(range(8))]  # every rank identical -> one column "ranks 0-7"
    r = res.ranks[5]
    dense, sparse = r.kind("full/dense"), r.kind("sparse/moe")
    assert dense.layers == [0, 1, 2] and sparse.layers == list(range(3, 60))
    a = sparse.attention
    assert (a.q_heads, a.kv_heads, a.kv_replicas, a.index_q_heads, a.index_k_heads) == (8, 1, 2, 1, 1)
    assert _gemm(sparse, "attn.qkv").n == 1536 and _gemm(sparse, "attn.qkv").k == 6144
    assert _gemm(dense, "attn.qkv").n == 1280  # full layers have no index columns
    assert _gemm(sparse, "attn.o_proj").k == 1024 and _gemm(sparse, "attn.o_proj").n == 6144
    assert _gemm(dense, "mlp.gate_up").n == 2 * 1536 and _gemm(dense, "mlp.down").k == 1536
    gu, dn = _gemm(sparse, "moe.routed.gate_up"), _gemm(sparse, "moe.routed.down")
    assert (gu.n, dn.k) == (2 * 384, 384) and gu.groups == 128 and gu.weight_groups == 129  # + fused shared slot
    assert sparse.weights["mlp.w13"] == [129, 768, 6144]
    assert r.model_weights["embed.weight"] == [25008, 6144] and r.model_gemms[0].n == 25008
    # KV: 1 head x (K+V) x 128 x bf16 x 60 layers; index: one 128-dim key x bf16 x 57 sparse layers
    assert r.kv_bytes_per_token == 2 * 1 * 128 * 2 * 60 == 30720
    assert r.index_bytes_per_token == 128 * 2 * 57
    assert _gemm(sparse, "moe.router").dtype == "fp32" and _gemm(sparse, "attn.qkv").dtype == "bf16"


def test_m3_tp4_from_the_hf_config_json():
    res = analytic(resolve_model(str(data_file("m3_config", "config.json"))), 4, phase="prefill", batch=2, seq=512)
    r = res.ranks[3]
    sparse, dense = r.kind("sparse/moe"), r.kind("full/dense")
    assert len(sparse.layers) == 57 and dense.layers == [0, 1, 2]  # moe_layer_freq / sparse_attention_freq
    a = sparse.attention
    assert (a.q_heads, a.kv_heads, a.kv_replicas, a.index_q_heads) == (16, 1, 1, 1)
    qkv = _gemm(sparse, "attn.qkv")
    assert (qkv.m, qkv.n, qkv.k) == (1024, 2560, 6144)  # prefill M = batch * seq
    assert _gemm(sparse, "attn.o_proj").k == 2048
    assert _gemm(dense, "mlp.gate_up").n == 2 * 3072 and _gemm(dense, "mlp.down").k == 3072
    assert _gemm(sparse, "moe.routed.down").k == 768
    assert r.model_weights["lm_head.weight"][0] == 50016
    assert r.model_gemms[0].m == 2  # LM head sees the last position only
    gu = _gemm(sparse, "moe.routed.gate_up")
    assert gu.estimate and gu.m == pytest.approx(1024 * 4 / 128) and gu.extra_rows == 1024


def test_ep8_whole_experts_and_separate_shared():
    res = analytic(resolve_model("m3"), 8, ep=8, batch=256)
    r = res.ranks[3]
    assert r.plan["expert_start"] == 48
    s = r.kind("sparse/moe")
    assert s.weights["mlp.w13"] == [16, 6144, 6144]  # 16 whole experts, no fused shared slot under EP
    assert _gemm(s, "moe.shared.down").k == 384
    assert res.rank_groups() == [list(range(8))]  # expert_start differs, shapes do not


def test_one_layer_per_kind_equals_a_full_build():
    """The cheap build (one layer per kind) gives the same bytes as building every layer."""
    import torch

    from mmprof.runtime import build_model

    args = get_preset("tiny")
    res = analytic(args, 2, dtype="fp32")
    full = build_model(args, tp=2, rank=1, device="meta", dtype=torch.float32)
    assert res.ranks[1].weight_bytes == sum(p.numel() * p.element_size() for p in full.parameters())
    assert res.ranks[1].kind("sparse/moe").weights["attn.qkv.weight"] == list(full.layers[3].attn.qkv.weight.shape)


def test_m3_findings(m3_tp8):
    codes = {f.code: f for f in m3_tp8.findings}
    sh1 = codes["SH001"]
    assert sh1.cost["replication_factor"] == 2 and sh1.cost["kv_bytes_per_token_all_ranks"] == 8 * 30720
    assert sh1.cost["kv_bytes_per_token_unique"] == 4 * 2 * 128 * 2 * 60 and sh1.layers == list(range(60))
    assert codes["SH002"].layers == list(range(3, 60)) and codes["SH002"].cost["replication_factor"] == 8
    thin = [f for f in m3_tp8.findings if f.code == "SH007" and f.cost["thin_dim"] == 384]
    assert thin and thin[0].severity == "warning" and "K=384 < 512" in thin[0].message
    assert thin[0].cost["tiles_along_thin_dim"] == 3 and thin[0].layers == list(range(3, 60))
    assert "SH003" not in codes  # 200,064 is a multiple of 64
    assert not m3_tp8.has_errors


def test_tp4_has_no_replication_and_no_thin_dims():
    res = analytic(resolve_model("m3"), 4)
    f = analytic_findings(res, unsharded(res))
    assert "SH001" not in {x.code for x in f}
    assert not [x for x in f if x.code == "SH007" and x.severity == "warning"]  # 768 >= 512


def test_vocab_padding_finding():
    res = analytic(get_preset("tiny", vocab_size=500), 2)
    sh3 = [x for x in analytic_findings(res, unsharded(res)) if x.code == "SH003"]
    assert sh3 and sh3[0].cost["padded_rows"] == 12  # 500 -> 512
    assert res.ranks[0].model_weights["embed.weight"][0] == 256


def test_uneven_split_sh004():
    res = analytic(get_preset("tiny"), 2)
    res.ranks[1].kinds[0].gemms[0].n += 32  # as if rank 1 held more q heads
    assert len(res.rank_groups()) == 2
    sh4 = [x for x in analytic_findings(res, unsharded(res)) if x.code == "SH004"]
    assert sh4 and "attn.qkv on ranks 1" in sh4[0].message and sh4[0].layers == [0, 1]


def test_rank_label():
    assert rank_label([0, 1, 2, 3]) == "ranks 0-3" and rank_label([5]) == "rank 5" and rank_label([0, 2]) == "ranks 0,2"


# ------------------------------------------------------------------------------------------ CLI
def test_cli_tp8_json(capsys):
    rc, out, _ = run_cli(capsys, "--tp", "8", "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["rank_groups"] == [list(range(8))] and len(d["ranks"]) == 8
    sparse = d["ranks"][0]["kinds"][1]
    assert sparse["kind"] == "sparse/moe"
    assert {g["name"]: g["n"] for g in sparse["gemms"]}["attn.qkv"] == 1536
    assert {f["code"] for f in d["findings"]} >= {"SH001", "SH002", "SH007"}


def test_cli_table_collapses_ranks(capsys):
    rc, out, _ = run_cli(capsys, "--tp", "4")
    assert rc == 0 and "ranks 0-3" in out and "2560" in out and "50016" in out


def test_cli_refuses_tp_vllm_refuses(capsys):
    rc, _, err = run_cli(capsys, "--tp", "3")
    assert rc == 2 and "attention heads (64) must be divisible by tensor parallel size (3)" in err
    rc, _, err = run_cli(capsys, "--tp", "8", "--ep", "2")
    assert rc == 2 and "expert-parallel size 2" in err
    rc, _, err = run_cli(capsys, "--model", "no-such-preset", "--tp", "2")
    assert rc == 2 and "no-such-preset" in err
    rc, _, err = run_cli(capsys, "--tp", "2", "--live", "--profile", "x.json")
    assert rc == 2 and "pick one" in err


def test_cli_check_passes_without_errors(capsys):
    rc, _, _ = run_cli(capsys, "--tp", "8", "--check")
    assert rc == 0


# ------------------------------------------------------------------------------------------ profile mode
def _profile(tmp_path, name, shapes_by_rank, meta_model=None, tp=None):
    """Ops on 2 ranks for one decode step of tiny's layer 2 (qkv, o_proj, router, routed grouped GEMMs)."""
    meta = {"source": {"format": "record"}}
    if meta_model:
        meta["model"] = meta_model
        meta["parallel"] = {"tp": tp, "world_size": tp}
    b = ProfileBuilder(meta)
    for rank, ops in shapes_by_rank.items():
        for i, (scope, op, dims) in enumerate(ops):
            b.row("ops", rank=rank, tid=1, start_ns=i * 1000, dur_ns=500, name=op, input_dims=json.dumps(dims),
                  scope=scope, scope_path=f"mmprof.decode > mmprof.step.1 > {scope}", phase="decode", step=1)
    p = b.build()
    p.meta.setdefault("ranks", [{"rank": r} for r in shapes_by_rank])
    p.meta.setdefault("clock", {"unit": "ns"})
    p.meta.setdefault("mmprof_version", "test")
    path = tmp_path / name
    save_profile(p, path)
    return path


def _tiny_tp2_ops(tokens=2, qkv_n=240):
    # tiny at TP 2: 4 q heads, 1 KV head of 32, index q 1 + k 1 of 32 -> 128+32+32+32+32 = 256 on sparse layers
    return [("layers.2.attn.qkv", "aten::mm", [[tokens, 128], [128, qkv_n]]),
            ("layers.2.attn.o_proj", "aten::linear", [[1, tokens, 128], [128, 128]]),
            ("layers.2.moe.router", "aten::mm", [[tokens, 128], [128, 16]]),
            ("layers.2.moe.routed", "aten::_grouped_mm", [[tokens * 5, 128], [17, 128, 64], [17]]),
            ("layers.2.moe.routed", "aten::_grouped_mm", [[tokens * 5, 32], [17, 32, 128], [17]])]


def test_profile_balanced_ranks(tmp_path, capsys):
    p = _profile(tmp_path, "bal.json", {0: _tiny_tp2_ops(), 1: _tiny_tp2_ops()})
    rc, out, _ = run_cli(capsys, "--profile", str(p), "--json", "--check")
    d = json.loads(out)
    assert rc == 0 and d["findings"] == [] and d["comparison"]["calls"] == 10
    assert d["comparison"]["per_rank"]["0"]["moe.routed"] == 2


def test_profile_shape_imbalance_is_an_error(tmp_path, capsys):
    p = _profile(tmp_path, "imb.json", {0: _tiny_tp2_ops(), 1: _tiny_tp2_ops(qkv_n=272)})
    rc, out, _ = run_cli(capsys, "--profile", str(p), "--json", "--check")
    d = json.loads(out)
    sh5 = [f for f in d["findings"] if f["code"] == "SH005"]
    assert rc == 1 and sh5 and sh5[0]["severity"] == "error" and sh5[0]["layers"] == [2]
    assert "layers.2.attn.qkv" in sh5[0]["message"]


def test_profile_token_imbalance_is_a_warning():
    ops0 = [Call(0, "aten::mm", [[4, 128], [128, 240]], "layers.2.attn.qkv", "decode", 1)]
    ops1 = [Call(1, "aten::mm", [[6, 128], [128, 240]], "layers.2.attn.qkv", "decode", 1)]
    f = cross_rank(ops0 + ops1)
    assert len(f) == 1 and f[0].code == "SH005" and f[0].severity == "warning" and "token counts" in f[0].message


def test_profile_vs_config_from_meta(tmp_path, capsys):
    tiny = get_preset("tiny").to_dict()
    good = _profile(tmp_path, "good.json", {0: _tiny_tp2_ops(qkv_n=256), 1: _tiny_tp2_ops(qkv_n=256)}, tiny, 2)
    rc, out, _ = run_cli(capsys, "--profile", str(good), "--json", "--check")
    d = json.loads(out)
    assert rc == 0 and d["comparison"]["matched"] == 10 and d["comparison"]["unmatched"] == []
    assert not [f for f in d["findings"] if f["code"] in ("SH005", "SH006")]
    bad = _profile(tmp_path, "bad.json", {0: _tiny_tp2_ops(qkv_n=256), 1: _tiny_tp2_ops(qkv_n=256)},
                   get_preset("tiny", moe_intermediate=128, shared_intermediate=128).to_dict(), 2)
    rc, out, _ = run_cli(capsys, "--profile", str(bad), "--json", "--check")
    d = json.loads(out)
    sh6 = [f for f in d["findings"] if f["code"] == "SH006"]
    assert rc == 1 and sh6 and sh6[0]["layers"] == [2] and "moe.routed" in sh6[0]["message"]


def test_profile_without_shapes_is_no_evidence(capsys):
    rc, _, err = run_cli(capsys, "--profile", str(data_file("samples", "kineto", "nccl_data.json.xz")))
    assert rc == 2 and "no GEMM-like or attention ops with input shapes" in err


def test_real_trace_nested_ops_counted_once():
    """A real torch.profiler trace (our CPU toy block): linear > matmul > mm is one call, scoped."""
    from mmprof.importers import import_paths

    calls = calls_from_profile(import_paths([str(data_file("kineto_own", "cpu_tiny_block.json.gz"))]))
    assert calls and all(role_of(c.scope) for c in calls)
    assert not [c for c in calls if c.op == "aten::mm" and c.scope.endswith(("qkv", "o_proj"))]  # children of linear
    assert {c.phase for c in calls} == {"prefill", "decode"}


def test_real_h200_trace_roles_and_grouped_mm():
    from mmprof.importers import import_paths

    calls = calls_from_profile(import_paths([str(data_file("kineto_own", "h200_probe.json.gz"))]))
    gm = [c for c in calls if c.op == "aten::_grouped_mm"]
    assert gm and all(role_of(c.scope)[1] == "moe.routed" for c in gm)
    m, n, k, g = canonical(gm[0].op, gm[0].shapes)
    assert g == gm[0].shapes[1][0] and k == gm[0].shapes[1][1] and n == gm[0].shapes[1][2] and m == gm[0].shapes[0][0]


def test_role_of_vllm_paths_and_canonical():
    assert role_of("model.layers.7.self_attn.qkv_proj") == (7, "attn.qkv")
    assert role_of("model.layers.7.mlp.experts") == (7, "moe.routed")
    assert role_of("model.layers.7.mlp.gate") == (7, "moe.router")
    assert role_of("mmprof.decode > layers.12.moe.routed") == (12, "moe.routed")
    assert role_of("lm_head") == (-1, "lm_head") and role_of("embed") is None
    assert canonical("aten::addmm", [[64], [8, 32], [32, 64]]) == (8, 64, 32, 1)
    assert canonical("aten.bmm.default", [[3, 8, 32], [3, 32, 16]]) == (8, 16, 32, 3)
    assert canonical("aten::linear", [[2, 5, 32], [64, 32]]) == (10, 64, 32, 1)
    assert canonical("aten::matmul", [[1, 2, 5, 16], [1, 1, 16, 7]]) == (5, 7, 16, 2)
    assert canonical("aten::relu", [[3, 4]]) is None


def test_compare_unjudged_is_not_a_match():
    res = analytic(get_preset("tiny"), 2)
    c = compare_calls([Call(0, "aten::mm", [[4, 128]], "layers.2.attn.qkv", "decode", 1)], res, "profile")
    assert c.matched == 0 and c.unjudged == 1


def test_thin_only_counts_dims_sharding_made_thin():
    res = analytic(get_preset("tiny"), 2)
    thin = {(f.message.split(":")[0], tuple(f.layers)) for f in analytic_findings(res, unsharded(res)) if f.code == "SH007"
            and f.severity == "warning"}
    names = {n for n, _ in thin}
    assert "attn.o_proj" in names and "moe.routed.down" in names  # K 256 -> 128, 64 -> 32
    assert "attn.qkv" not in names  # K = hidden 128 is thin at TP 1 too: not a sharding effect


def test_cross_rank_unknown_vendor_op():
    """A fused-MoE custom op the tool cannot read as M x N x K: a leading-dim (token) difference is a warning,
    a trailing-dim difference an error."""
    a = Call(0, "vllm::outplace_fused_experts", [[8, 6144], [16, 768, 6144]], "model.layers.5.mlp.experts", "decode", 3)
    b = Call(1, "vllm::outplace_fused_experts", [[5, 6144], [16, 768, 6144]], "model.layers.5.mlp.experts", "decode", 3)
    c = Call(1, "vllm::outplace_fused_experts", [[8, 6144], [16, 1536, 6144]], "model.layers.5.mlp.experts", "decode", 3)
    (w,) = cross_rank([a, b])
    assert w.severity == "warning" and w.layers == [5]
    (e,) = cross_rank([a, c])
    assert e.severity == "error" and "shapes differ" in e.message


def test_profile_comparison_counts_add_up_and_use_the_shape_regions(capsys):
    """Issue 25: "1944 calls, 0 match, 0 differ, 0 unjudged, 1944 outside known scopes" beside "1512 of 1512
    GEMMs matched": the comparison ignored the regions the shape matching gave the calls. Every call now lands in
    exactly one count, and the calls without labels take the shape-matched regions."""
    import json as _json

    from mmprof.cli import main

    files = [str(data_file("hf_moe", f"m3_tp2_rank{r}.json.gz")) for r in (0, 1)]
    with pytest.raises(SystemExit):
        main(["shapes", "--profile", files[0], "--profile", files[1], "--model",
              str(data_file("hf_moe", "configs", "m3.json")), "--json"])
    c = _json.loads(capsys.readouterr().out)["comparison"]
    assert c["compared"] and c["calls"] == c["matched"] + c["differ"] + c["unjudged"] + c["unscoped"]
    assert c["unscoped"] < c["calls"] / 2 and c["matched"] > 0
    with pytest.raises(SystemExit):  # without a model: compared across ranks only, said so, no zero counts
        main(["shapes", "--profile", files[0], "--profile", files[1], "--json"])
    c = _json.loads(capsys.readouterr().out)["comparison"]
    assert c["compared"] is False and c["calls"] > 0


def test_profile_with_another_familys_config_and_tp_is_compared(capsys):
    # `shapes --profile TRACE --model CONFIG --tp 1` with a Qwen2-MoE config: both are given, so the message must not
    # say "no model config and TP size"; the traced calls are compared with vLLM's layout of that config (all 87
    # GEMM and attention calls of the excerpt's 3 forwards: qwen2_moe.py's projections, router, shared expert and
    # its gate, LM head, vllm::unified_attention_with_output)
    rc, out, err = run_cli(capsys, "--profile", str(data_file("vllm_own", "qwen2moe_eager_b8_first3.pt.trace.json.xz")),
                           "--model", str(data_file("vllm_own", "qwen2moe_config.json")), "--tp", "1")
    assert rc == 0, err
    flat = " ".join(out.split())
    assert "pass --model" not in flat and "no model config" not in flat
    assert "profile: 87 calls: 87 match the vllm-cuda layout's per-rank shapes, 0 differ" in flat
