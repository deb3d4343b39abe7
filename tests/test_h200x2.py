"""The graph rung and the two-GPU runs recorded on H200s (examples/h200/graphs, examples/h200x2, examples/h200/hf_m3).

Every expectation is computed here from the files' own tables or raw events, not copied from a report.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mmprof.analysis.diff import diff_profiles
from mmprof.analysis.events import events_of
from mmprof.analysis.shape_match import match_profile
from mmprof.analysis.timeline import timeline
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
    assert len(eff_g) == 8 and len(eff_e) == 8
    vocab, hidden = 200064, 2048
    assert np.allclose(by_g, by_e) and by_g.min() >= vocab * hidden * 2  # at least the bf16 weight, every call
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
    eager = import_paths([EX / "h200x2" / "tp2_fused_eager_b64.json.gz"])
    graphs = import_paths([EX / "h200x2" / "tp2_fused_graphs_b64.json.gz"])
    for p in (eager, graphs):
        assert p.ranks == [0, 1] and p.meta["parallel"]["tp"] == 2
        assert all(d["vendor"] == "nvidia" for r in p.meta["ranks"] for d in r["devices"])
    # graphs: each rank replays 8 decode steps, every replayed kernel attributed
    K = graphs.tables["kernels"]
    for r in (0, 1):
        m = (K["rank"] == r) & (K["graph"] >= 0)
        assert len(np.unique(K["graph"][m])) == 8 and (K["op"][m] >= 0).all()
    # the all-reduce kernels are in the replays: NCCL kernels with a graph launch
    names = np.array([graphs.string(int(x)) for x in K["name"]])
    nccl = np.char.find(names.astype(str), "nccl") >= 0
    assert (nccl & (K["graph"] >= 0)).sum() >= 8 * 2
    share = {k: timeline(p).breakdown("decode").share("communication") for k, p in (("eager", eager), ("graphs", graphs))}
    assert share["eager"] > 0.3 and share["graphs"] < 0.1


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
    """transformers' own TP plan on two H200s: no mmprof labels, no module events; the config labels every GEMM."""
    p = import_paths([EX / "h200" / "hf_m3" / f"hf_m3_tp2_rank{r}.json.gz" for r in (0, 1)])
    assert p.ranks == [0, 1]
    spec = ModelSpec.load(EX / "h200" / "hf_m3" / "config.json")
    st = match_profile(p, spec)
    rep = st.report
    assert rep.tp == 2 and rep.gemms > 1000 and rep.matched == rep.gemms and not rep.unexplained
    assert rep.replicated  # SH008 evidence: GEMMs transformers leaves whole at TP 2
    assert rep.forwards == rep.forwards_layered == 18  # 9 forwards per rank
