"""The graph rung and the two-GPU runs recorded on H200s (examples/h200/graphs, examples/h200x2, examples/h200/hf_m3).

Every expectation is computed here from the files' own tables or raw events, not copied from a report. The files
are excerpts (examples/trim.py, examples/README.md "Excerpts"): graphs_b1 holds decode steps 1-8 of its run (the
prefill dropped), fused_b1 and the two-GPU Profiles decode step 2, hf_m3_tp2 the first profiler step of each rank.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from mmprof.analysis.compare.diff import diff_profiles
from mmprof.analysis.timeline.events import events_of
from mmprof.analysis.shapes.shape_match import match_profile
from mmprof.analysis.timeline.breakdown import timeline
from mmprof.importers import import_paths
from mmprof.modelspec import ModelSpec

EX = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def graphs_b1():
    return import_paths([EX / "h200" / "graphs" / "graphs_b1.json.gz"])


def test_every_replayed_kernel_of_the_graph_rung_has_its_captured_op(graphs_b1):
    p = graphs_b1
    K, L = p.tables["kernels"], p.tables["launches"]
    g = K["graph"] >= 0
    replays = np.unique(K["graph"][g])
    assert {p.string(int(L["name"][r])) for r in replays} == {"cudaGraphLaunch"}
    steps = p.meta["run"]["graphs"]["replayed_steps"]
    assert len(replays) == len(steps) == 8
    # every replay ran the same kernels, in the same order, as the others
    seqs = {tuple(K["name"][np.flatnonzero(K["graph"] == r)[np.argsort(K["start_ns"][K["graph"] == r])]].tolist())
            for r in replays}
    assert len(seqs) == 1
    assert (K["op"][g] >= 0).all()
    assert {p.string(int(x)) for x in K["op_source"][g]} == {"capture"}
    # each replay in its own decode step
    dec = p.strings.index("decode")
    assert (K["phase"][g] == dec).all()
    assert sorted(np.unique(K["step"][g]).tolist()) == steps
    # and every graph launch call of the launches table replayed kernels (an independent count of the replays)
    assert set(np.flatnonzero(L["name"] == p.strings.index("cudaGraphLaunch")).tolist()) == set(replays.tolist())


def test_a_replayed_op_is_one_call_per_replay_in_the_roofline(graphs_b1):
    """The lm_head GEMV (one kernel per step): each replay moves the whole weight; the eager rung's GEMV moves the
    same bytes in about the same time, so the efficiencies agree (they did not when one captured op's bytes were
    split over all its replays)."""
    eager = import_paths([EX / "h200" / "graphs" / "fused_b1.json.gz"])

    def lm_head(p):
        ev = events_of(p)
        dec = p.strings.index("decode")
        m = (ev.region == "lm_head") & (ev.phase == dec) & np.isfinite(ev.roof.efficiency)
        return ev.roof.efficiency[m], ev.roof.bytes[m]

    eff_g, by_g = lm_head(graphs_b1)
    eff_e, by_e = lm_head(eager)
    # one lm_head call per decode step: the graph excerpt has 8 (steps 1-8), the eager one 1 (step 2)
    assert len(eff_g) == 8 and len(eff_e) == 1
    vocab, hidden = 200064, 2048
    assert np.allclose(by_g, by_e[0]) and by_g.min() >= vocab * hidden * 2  # at least the bf16 weight, every call
    assert abs(np.median(eff_g) - np.median(eff_e)) < 0.1 and 0.5 < np.median(eff_g) <= 1.0


def test_diff_from_the_fused_rung_says_where_the_bottleneck_went(graphs_b1):
    before = import_paths([EX / "h200" / "graphs" / "fused_b1.json.gz"])
    d = diff_profiles(before, graphs_b1, phase="decode")
    assert "moved from launch/queue overhead to memory bandwidth" in d.verdict
    tb = timeline(before).breakdown("decode")
    ta = timeline(graphs_b1).breakdown("decode")
    assert tb.share("idle_host") > 0.8 and ta.share("idle_host") < 0.2
    assert ta.share("memory_bound") > tb.share("memory_bound")


def test_two_gpu_profiles_hold_both_ranks_and_their_all_reduces():
    """The eager TP 2 run at batch 64 (decode step 2 of the run): each rank is launch-bound and waits for the other
    in the all-reduces. (The graph-mode TP 2 Profiles, where the share fell to 4-5%, were dropped from examples/ for
    size; docs/benchmarks.md keeps their figures.)"""
    eager = import_paths([EX / "h200x2" / "tp2_fused_eager_b64.json.gz"])
    assert eager.ranks == [0, 1] and eager.meta["parallel"]["tp"] == 2
    assert all(d["vendor"] == "nvidia" for r in eager.meta["ranks"] for d in r["devices"])
    K, C = eager.tables["kernels"], eager.tables["collectives"]
    names = np.array([eager.string(int(x)) for x in K["name"]]).astype(str)
    nccl = np.char.find(names, "nccl") >= 0
    # the collectives of one decode step on each rank, from the runtime's TP layout (mmprof/runtime/parallel.py
    # `apply`): an all-reduce after each layer's o_proj and after its MLP / MoE (2 per layer), one in the
    # vocab-parallel embedding, and one all-gather of the lm_head's logits; each ran as one NCCL kernel
    layers = eager.meta["model"]["n_layers"]
    for r in (0, 1):
        mine = C["rank"] == r
        kinds = Counter(eager.string(int(x)) for x in C["name"][mine])
        assert kinds == {"allreduce": 2 * layers + 1, "allgather": 1}
        assert (C["kernel"][mine] >= 0).all() and nccl[C["kernel"][mine]].all()
        assert mine.sum() == (nccl & (K["rank"] == r)).sum()  # and no other NCCL kernel
    assert timeline(eager).breakdown("decode").share("communication") > 0.3


def test_record_under_torchrun_captured_both_ranks():
    p = import_paths([EX / "h200x2" / "tp2_record_b64.json.gz"])
    assert p.ranks == [0, 1]
    K = p.tables["kernels"]
    for r in (0, 1):
        assert (K["rank"] == r).sum() > 1000
    assert p.n("collectives") > 0


def test_live_shapes_on_two_nccl_ranks_all_matched():
    d = json.loads((EX / "h200x2" / "shapes_live_tp2.json").read_text())
    c = d["comparison"]
    assert d["tp"] == 2 and c["source"] == "live" and c["calls"] == c["matched"] > 400 and not c["unmatched"]
    assert set(c["per_rank"]) == {"0", "1"}


def test_transformers_m3_tp2_on_nccl_is_labelled_by_shape():
    """transformers' own TP plan on two H200s: no mmprof labels, no module events; the config labels every GEMM.
    The Profile is the first profiler step (the prefill forward) of each rank's raw trace (examples/trim.py)."""
    p = import_paths([EX / "h200" / "hf_m3" / "hf_m3_tp2.json.gz"])
    assert p.ranks == [0, 1]
    spec = ModelSpec.load(EX / "h200" / "hf_m3" / "config.json")
    st = match_profile(p, spec)
    rep = st.report
    # the GEMMs: every nn.Linear call and every grouped expert GEMM of the trace, counted from the ops table
    O = p.tables["ops"]
    gemm_ops = np.isin(O["name"], [p.strings.index("aten::linear"), p.strings.index("aten::_grouped_mm")])
    assert int(gemm_ops.sum()) == 168  # 84 per rank and forward: the full trace's 1512 over its 18 forwards
    assert rep.tp == 2 and rep.gemms == int(gemm_ops.sum()) and rep.matched == rep.gemms and not rep.unexplained
    assert rep.replicated  # SH008 evidence: GEMMs transformers leaves whole at TP 2
    # one forward per rank, counted independently: each forward embeds its tokens once (aten::embedding)
    emb = O["name"] == p.strings.index("aten::embedding")
    assert [int((emb & (O["rank"] == r)).sum()) for r in (0, 1)] == [1, 1]
    assert rep.forwards == rep.forwards_layered == 2
