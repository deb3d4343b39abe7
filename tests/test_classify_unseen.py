"""Kernel identity on names the rules were not written from (issue 30), as a test that fails when the figures of
benchmarks/classify_unseen.py regress. The corpora are labelled from the kernels' sources (README.md beside each);
the thresholds are the figures measured when this test was written (docs/benchmarks.md "Kernel identity on names
never seen"), so a change that loses ground fails here, and one that gains ground lowers them."""

from __future__ import annotations

import pytest

from benchmarks.classify_unseen import corpus, loso, measure, score, single_name_rules, trace_unknown
from mmprof.analysis.attribution.classify import FAMILIES, LIBRARY_PLATFORM, default_rules


@pytest.fixture(scope="module")
def figures():
    return measure(default_rules())


def test_the_unseen_corpus_is_real_labelled_and_split_by_source():
    rows = corpus("unseen")
    # a name may recur in two sources (CUB's sorts are in both FBGEMM wheels) or in two files of one wheel (the
    # same kernel built into two FBGEMM .so files): each row is one file's kernel, so a few names count twice
    assert len(rows) >= 900 and len({r.name for r in rows}) >= 0.99 * len(rows)
    assert {r.family for r in rows} <= set(FAMILIES) - {"unknown", "other"}
    keys = {r.key for r in rows}
    assert {"fbgemm", "fbgemm_genai", "bitsandbytes", "sglang", "miopen", "turbomind", "lmdeploy", "liger",
            "torchao"} <= keys
    held = {r.key for r in rows if r.split == "heldout"}
    assert held == {"turbomind", "lmdeploy", "liger", "torchao"}   # whole sources, never tuned on
    assert {r.platform for r in rows} == {"cuda", "rocm", "any"}


def test_figures_on_the_corpus_the_rules_were_written_from(figures):
    s = figures["seen"]
    assert s["unclassified"] == 0 and s["wrong_family"] <= 1


def test_figures_on_names_never_seen(figures):
    t, h = figures["unseen_tune"], figures["unseen_heldout"]
    assert t["unclassified_share"] <= 0.035 and t["wrong_family_share_of_classified"] <= 0.05
    assert h["unclassified_share"] <= 0.10 and h["wrong_family_share_of_classified"] <= 0.11
    for f in (t, h):
        assert f["wrong_library_share"] <= 0.01


def test_figures_on_the_h200_family_traces(figures):
    # tests/data/kernel_corpus_families: names of vLLM 0.26 traces of families the rules never saw; tune names were
    # looked at while writing rules, held-out names (only in the recording's held traces) never were
    t, h = figures["families_tune"], figures["families_heldout"]
    assert t["names"] >= 100 and h["names"] >= 15
    assert t["unclassified"] == 0 and t["wrong_family"] <= 1 and t["wrong_library"] == 0
    assert h["unclassified"] == 0 and h["wrong_family"] <= 3 and h["wrong_library"] == 0


def test_leave_one_source_out(figures):
    pooled = figures["loso_all"]
    assert pooled["unclassified_share"] <= 0.095 and pooled["wrong_family_share_of_classified"] <= 0.08
    assert set(figures["loso"]) >= {"vllm", "vllm-traces", "aiter", "fbgemm", "miopen", "bitsandbytes"}


def test_loso_removes_what_was_written_for_the_source():
    rs = default_rules()
    rows = [r for r in corpus("seen") if r.key == "flashinfer"]
    full, without = score(rows, rs), loso(rows, rs)["flashinfer"]
    assert without["wrong_family"] + without["unclassified"] >= full["wrong_family"] + full["unclassified"]
    assert len(rs.without_sources({"flashinfer"}).rules) < len(rs.rules)


def test_rules_that_decide_exactly_one_name_are_counted(figures):
    ids = single_name_rules(corpus("seen") + corpus("unseen") + corpus("families"), default_rules())
    assert ids == figures["single_name_rules"] and all(isinstance(i, str) for i in ids)
    assert len(ids) <= 21   # over the three corpora; engine.vllm.logit_bias is one (vLLM's generic `_bias_kernel`, exact)


def test_no_cuda_kernel_gets_a_rocm_library_or_the_reverse():
    rs = default_rules()
    bad = [(r.name[:60], r.platform, rs.classify(r.name).library) for r in corpus("unseen")
           if r.platform != "any" and LIBRARY_PLATFORM.get(rs.classify(r.name).library or "") not in (None, r.platform)]
    assert not bad, bad[:5]


def test_every_real_trace_has_at_most_one_percent_of_kernel_time_unknown():
    res = trace_unknown(default_rules())
    assert len(res) >= 40   # every trace in tests/data and examples that an importer reads and that has kernels
    worst = max(res, key=lambda t: t["unknown_share"])
    assert worst["unknown_share"] <= 0.01, worst
