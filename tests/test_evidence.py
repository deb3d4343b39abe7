"""Evidence from the trace ranked with the name's (mmprof/analysis/attribution/evidence.py, the frame's `evidence`
pass): the launching op decides where the name says nothing, the name decides where it speaks, and every name /
op pair that disagrees is counted and shown, never resolved silently."""

from __future__ import annotations

import json

import pytest

from mmprof.analysis.attribution.evidence import op_family, read_op_rules
from mmprof.analysis.timeline.events import events_of
from mmprof.analysis.views.coverage import coverage
from tests.profile_builder import Synth


def _profile():
    s = Synth()
    # a kernel whose name says nothing, launched by aten::mm: the op decides (gemm)
    s.kernel("zz_mystery_kernel_7", 10_000, 4_000, op=("aten::mm", [[8, 16], [16, 32]], ["float", "float"]))
    # a fill kernel launched by aten::mm (beta = 0): the name speaks (elementwise) and disagrees with the op
    s.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
             "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
             20_000, 1_000, op=("aten::mm", [[8, 16], [16, 32]], ["float", "float"]))
    # the name and the op agree
    s.kernel("nvjet_tst_64x8_64x16_2x1_v_bz_TNT", 30_000, 5_000, op=("aten::mm", [[8, 16], [16, 32]],
                                                                       ["float", "float"]))
    # a KV-cache op of vLLM and a kernel with a namespace word only: the op outranks the namespace word
    s.kernel("void turbomind::comm::zz_step<int>(int*)", 40_000, 2_000,
             op=("_C_cache_ops::reshape_and_cache_flash", None, None))
    # no op and no word: unknown
    s.kernel("qqq_123", 50_000, 3_000)
    s.memcpy(60_000, 1_000)
    return s.build()


def test_the_op_decides_where_the_name_says_nothing_and_the_name_where_it_speaks():
    f = events_of(_profile())
    fam = list(f.family.astype(object))[:5]
    ev = [None if _na(x) else x for x in f.evidence.astype(object)]
    assert fam == ["gemm", "elementwise", "gemm", "kv_cache", "unknown"]
    assert ev == ["op", "rule", "rule", "op", None, None]   # the memcpy row: its kind decided, no evidence value
    rules = [None if _na(x) else x for x in f.rule.astype(object)][:5]
    assert rules == ["op.gemm", "torch.fill", "cuda.nvjet.gemm", "op.kv_cache", None]


def _na(x) -> bool:
    return x is None or x != x


def test_disagreements_are_counted_with_their_time_and_shown():
    f = events_of(_profile())
    st = f.evidence_stats
    pairs = {(d["name_family"], d["op_family"], d["decided"]): d for d in st.disagreements}
    assert set(pairs) == {("elementwise", "gemm", "rule"), ("communication", "kv_cache", "op")}
    d = pairs[("elementwise", "gemm", "rule")]
    assert (d["op"], d["events"], d["time_ns"]) == ("aten::mm", 1, 1_000)
    assert st.by_evidence["op"] == {"events": 2, "time_ns": 6_000}
    assert st.by_evidence["none"] == {"events": 1, "time_ns": 3_000}
    assert any("disagree" in n for n in f.notes)
    cov = coverage(f)
    assert {r["evidence"]: r["time_ns"] for r in cov.by_evidence} == {"op": 6_000, "rule": 6_000, "none": 3_000,
                                                                     "memcpy": 1_000}
    assert cov.unclassified_ns == 3_000  # only the kernel nothing placed


def test_classify_cli_shows_the_evidence_and_the_disagreements(tmp_path, capsys):
    from mmprof.cli import main
    from mmprof.profiles.io import save_profile

    save_profile(_profile(), tmp_path / "p.json")
    with pytest.raises(SystemExit) as e:
        main(["classify", str(tmp_path / "p.json"), "--json"])
    assert e.value.code == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["disagreements"]) == 2 and {r["evidence"] for r in doc["by_evidence"]} >= {"op", "rule", "none"}
    with pytest.raises(SystemExit) as e:
        main(["classify", str(tmp_path / "p.json")])
    out = capsys.readouterr().out
    assert "name and launching op disagree" in out and "decided by" in out


@pytest.mark.parametrize("op, family", [
    ("aten::mm", "gemm"), ("aten::_grouped_mm", "grouped_gemm"), ("aten::_scaled_dot_product_flash_attention",
                                                                  "attention"),
    ("c10d::allreduce_", "communication"), ("nccl:all_reduce", "communication"), ("vllm::unified_attention", "attention"),
    ("_moe_C::moe_align_block_size", "moe"), ("_C_cache_ops::reshape_and_cache_flash", "kv_cache"),
    ("aten::max_pool2d_with_indices", "pooling"), ("aten::_cudnn_rnn", "rnn"), ("aten::_fused_adamw_", "optimizer"),
])
def test_decisive_ops(op, family):
    assert op_family(op)[0] == family


@pytest.mark.parametrize("op", ["vllm::moe_forward", "aten::linear", "aten::add", "aten::to", "ProfilerStep#3", None])
def test_ops_that_launch_several_families_decide_nothing(op):
    assert op_family(op) is None


def test_op_rules_are_data_with_descriptions():
    rules = read_op_rules()
    assert len(rules) >= 15 and all(r.description for r in rules)
    assert len({r.id for r in rules}) == len(rules)
