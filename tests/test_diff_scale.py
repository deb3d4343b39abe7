"""The diff groups events once over integer codes (`mmprof.analysis.compare.diff._work`); its tables must be exactly those
of the per-event grouping it replaced (`tests/diff_reference.py`), on real profiles of several runtimes and
model families and on a multi-rank synthetic one. Durations are integer ns, so sums are exact in any order:
equality, not a tolerance."""

from __future__ import annotations

import pytest

from benchmarks.diff_speed import make_profile
from mmprof.analysis.compare.diff import diff_profiles
from mmprof.importers import import_paths
from tests.conftest import data_file
from tests.diff_reference import reference_grouping

PAIRS = [
    (("samples", "kineto", "sampled_rank-0.json.gz"), ("samples", "kineto", "sampled_rank-1.json.gz"), {}),
    (("diff_external", "eager.json.gz"), ("diff_external", "sdpa.json.gz"), {}),               # CPU ops, HF
    (("hf_moe", "m3_eager_stack.json.gz"), ("hf_moe", "m3_grouped_stack.json.gz"), {}),        # MoE loop -> grouped
    (("hf_moe", "mixtral_eager_stack.json.gz"), ("hf_moe", "qwen3moe_grouped_stack.json.gz"), {}),
    (("hf_moe", "dsv3_eager_nostack.json.gz"), ("hf_moe", "dsv32_grouped_nostack.json.gz"), {}),
    (("hf_moe", "m3_tp2_rank0.json.gz"), ("hf_moe", "m3_tp2_rank1.json.gz"), {}),
]


def _same(d, ref: dict) -> None:
    got = d.to_dict()
    for k, v in ref.items():
        assert got[k] == v, k


@pytest.mark.parametrize("before,after,kw", PAIRS, ids=lambda x: x[-1] if isinstance(x, tuple) else None)
def test_grouped_once_equals_per_event_grouping_on_real_profiles(before, after, kw):
    pb, pa = import_paths([data_file(*before)]), import_paths([data_file(*after)])
    d = diff_profiles(pb, pa, force=True, **kw)   # two model families in some pairs: refused unless forced
    assert d.matched and d.by_scope                  # something was compared
    _same(d, reference_grouping(pb, pa, **kw))


def test_grouped_once_equals_per_event_grouping_multi_rank():
    """8 ranks x 62 layers (benchmarks/diff_speed.py's generator, small): the routed-expert loop replaced by one
    grouped GEMM and the shared expert fused, so path changes exist; whole profile, one rank, and prefill."""
    pb, pa = make_profile(20_000, False), make_profile(20_000, True)
    for kw in ({}, {"rank": 3}, {"phase": "prefill"}):
        d = diff_profiles(pb, pa, **kw)
        ref = reference_grouping(pb, pa, **kw)
        assert ref["path_changes"], kw
        _same(d, ref)
