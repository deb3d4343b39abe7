"""One description of a model and one source of expected GEMM shapes (docs/architecture.md, "One description of a
model").

- `mmprof.modelspec.ModelSpec` is the description every analysis reads (any MoE family, from a Hugging Face
  config). The reference runtime's `ModelArgs` (runtime/config.py) is its build arguments for MiniMax M3: the
  ModelSpec's M3 fields plus what only a build needs (the KV capacity, the rank slice). The truth checked here:
  `from_spec(to_spec(args))` gives back every model field of every preset, so no model dimension lives in
  ModelArgs alone (a field added to ModelArgs but not carried by ModelSpec comes back as its default and fails on
  the presets that differ from the defaults: tiny, small).
- The expected per-rank GEMMs of a trace come from `analysis/shapes/problems.rank_problems` (arithmetic on a ModelSpec,
  in the layouts of several runtimes); the reference runtime's own shapes come from what it builds on the meta
  device (`runtime/shapes.analytic`). The truth checked here: every GEMM (N, K, weight groups) the runtime builds,
  on every rank, for every preset, TP and EP, is in rank_problems' table under its role.
"""

from __future__ import annotations

import dataclasses

import pytest

from mmprof.analysis.shapes.problems import rank_problems
from mmprof.runtime import PRESETS, analytic, get_preset, to_spec
from mmprof.runtime.config import from_spec

# ModelArgs fields that are build arguments, not properties of the model (runtime/config.py: "not a model
# property", and the `m3-rank-slice` preset's rank slice): a ModelSpec does not carry them.
BUILD_ONLY = {"max_seq_len", "slice_tp", "slice_rank"}


@pytest.mark.parametrize("preset", list(PRESETS))
def test_model_args_are_the_spec_plus_build_arguments(preset):
    args = get_preset(preset)
    back = from_spec(to_spec(args), args.name)
    want = {k: v for k, v in dataclasses.asdict(args).items() if k not in BUILD_ONLY}
    got = {k: v for k, v in dataclasses.asdict(back).items() if k not in BUILD_ONLY}
    assert got == want
    assert BUILD_ONLY <= set(dataclasses.asdict(args))  # the exceptions are real fields (a rename fails here)


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("tp, ep", [(1, 1), (2, 1), (2, 2), (4, 1)])
def test_rank_problems_hold_every_gemm_the_runtime_builds(preset, tp, ep):
    args = get_preset(preset)
    built = analytic(args, tp, ep)
    table = {lp.layer: lp for lp in rank_problems(to_spec(args), tp, ep)}
    checked = 0
    for rank in built.ranks:
        for kind in rank.kinds:
            probs = table[kind.layers[0]].problems
            for g in kind.gemms:
                fits = [p for p in probs if p.role == g.scope and p.n == g.n and p.k == g.k
                        and (p.groups == g.weight_groups if g.groups > 1 else p.groups == 1)]
                assert fits, (preset, tp, ep, kind.kind, g.name, g.n, g.k, g.weight_groups)
                checked += 1
    assert checked >= tp * 4  # at least qkv, o_proj, an MLP or expert GEMM and the LM head per rank
