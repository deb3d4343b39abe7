"""Graph replays captured before the profile window (vLLM's default mode): regions from the eager kernels.

Real data: tests/data/samples/vllm/m3_graphs_b8.pt.trace.json.xz, vLLM 0.26.0's own torch-profiler trace of a tiny
MiniMax M3 (6 layers) in its default mode (FULL_AND_PIECEWISE, breakable cudagraph): the graphs were captured at
engine start, before the window; every decode step is one FULL replay of 133 kernels (attention inside: in FULL mode
`eager_break_during_capture` runs the op inside the capture, vllm/compilation/breakable_cudagraph.py); the prefill
and the mixed step ran eagerly, with module events. The committed file is an excerpt (tests/data/samples/derive.py):
the first 4 of the run's 34 engine steps, the prefill, the mixed step and 2 decode steps (2 replays; the full run
had 31, ../shared/samples/vllm and git history at 01f295c). Synthetic variants of it: tests/graph_variants.py.

The truth each test compares with comes from the raw JSON, not from mmprof: the replays' kernels by the
cudaGraphLaunch correlation, and the layer of each replayed kernel from vLLM's code (MiniMaxM3DecoderLayer.forward
in vllm/models/minimax_m3/nvidia/model.py: input_layernorm, attention, post_attention_layernorm, MoE/MLP; so two
RMSNorm kernels per layer on the main stream, then the model's final norm), see graph_variants._raw_truth.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from mmprof.analysis.timeline.events import events_of
from mmprof.analysis.attribution.graph_align import ALIGNED, SOURCES
from mmprof.analysis.views.graph_summary import graph_summary
from tests import graph_variants as V
from tests.conftest import open_data, SHARED_SAMPLES, data_file

_LAYER = re.compile(r"^layers\.(\d+)\.")


def _frame(p):
    ev = events_of(p)
    k = np.flatnonzero(ev.table == 0)
    return ev, k


def _layer_of(region) -> int | None:
    if region is None:
        return None
    if region == "embed":
        return -1
    if region == "final_norm":
        return -2
    m = _LAYER.match(region)
    return int(m.group(1)) if m else None


def _wrong_layers(p, ev, k) -> list[tuple[str, str, int]]:
    """Replayed (in the original sample) kernels given a region of another layer than the raw JSON's truth."""
    truth = V.truth_layers(p)
    out = []
    for i in k.tolist():
        r = ev.row[i]
        lay = _layer_of(ev.region[i])
        if truth[r] != -9 and ev.region[i] is not None and lay is not None and lay != truth[r]:
            out.append((p.string(int(ev.name[i])), ev.region[i], int(truth[r])))
    return out


def test_sample_is_an_excerpt_of_the_shared_file():
    # the copy in tests/data is derive.py's excerpt of vLLM's output (tests/data/samples/README.md): cutting it again
    # at the same step keeps every event (nothing outside the first 4 steps, every GPU event has its launch), and
    # where the full file is at hand (../shared/samples) the excerpt is exactly what derive.py makes of it
    import importlib.util

    spec = importlib.util.spec_from_file_location("derive", data_file("samples", "derive.py"))
    derive = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(derive)
    doc = json.load(open_data(V.SAMPLE))
    again, kept, total = derive.excerpt(doc, 4)
    assert (kept, total) == (4, 4) and again["traceEvents"] == doc["traceEvents"]
    full = SHARED_SAMPLES / "vllm" / "m3_graphs_b8.pt.trace.json.gz"
    if full.exists():
        ref, kept, total = derive.excerpt(json.load(open_data(full)), 4)
        assert (kept, total) == (4, 34) and ref == doc


def test_real_replays_get_regions_from_the_eager_steps_and_match_the_raw_json():
    p = V.real()
    ev, k = _frame(p)
    s = graph_summary(p, ev)
    # independent count from the raw JSON: 2 cudaGraphLaunch calls (one per decode step kept; the full run's 31
    # decode steps had 31 with 4,123 kernels), their kernels by correlation, their time
    raw = json.load(open_data(V.SAMPLE))["traceEvents"]
    corr = {e["args"]["correlation"] for e in raw if e.get("name") == "cudaGraphLaunch"}
    kern = [e for e in raw if e.get("cat") == "kernel"]
    rep = [e for e in kern if e["args"]["correlation"] in corr]
    assert s.replays == len(corr) == 2 and s.kernels == len(rep) == 2 * 133
    rep_ns = sum(round(e["dur"] * 1000) for e in rep)
    assert abs(s.kernel_ns - rep_ns) <= len(rep)   # us with 3 decimals in the JSON: <= 1 ns per kernel
    all_ns = sum(round(e["dur"] * 1000) for e in kern)
    # before this work only the kernels that ran eagerly with the same name and grid had an op (8%); the goal is
    # >= 90% of all kernel time in regions, the rest (sampler, input preparation) is eager work with no region
    g = ev.graph[k] >= 0
    has = ev.region[k] != None  # noqa: E711
    dur = ev.dur[k]
    assert s.region_share == pytest.approx(dur[g & has].sum() / rep_ns, abs=1e-3)
    assert s.region_share >= 0.99 and s.all_region_share >= 0.90, (s.region_share, s.all_region_share)
    assert s.all_region_share == pytest.approx(dur[has].sum() / all_ns, abs=1e-3)
    # nothing stays out: FlashAttention's split-KV combine kernel (2 per replay, the two full-attention layers),
    # which never ran eagerly, takes the slot of the one eager kernel between the same two partners (the prefill's
    # Fill inside the attention op: `replay-slot`, attn.core, as vLLM's FlashAttention backend runs it inside
    # `unified_attention_with_output`); the replay's first copy pairs with the embedding's eager copy by name
    assert s.no_region == int((g & ~has).sum()) == 0
    combine = [i for i in k[g] if "FlashAttnFwdCombine" in p.string(int(ev.name[i]))]
    assert len(combine) == 2 * 2 and {ev.region[i] for i in combine} == {"layers.0.attn.core", "layers.1.attn.core"}
    assert {ev.label_source[i] for i in combine} == {"replay-slot"}
    assert _wrong_layers(p, ev, k) == []


def test_every_replayed_kernel_says_how_and_only_where_its_kind_ran_eagerly():
    p = V.real()
    ev, k = _frame(p)
    g = k[ev.graph[k] >= 0]
    e = k[ev.graph[k] < 0]
    src = ev.label_source
    fam = np.asarray(ev.family, dtype=object)
    # each region-bearing replayed kernel names its evidence; the alignment's four ways are all used here (the FULL
    # graphs hold the side stream's kernels aligned to the eager side stream in their own layer: no correction)
    assert all(src[i] in (*SOURCES, "module", "annotation") for i in g if ev.region[i] is not None)
    assert all(src[i] in (None, "ambiguous") for i in g if ev.region[i] is None)
    assert {src[i] for i in g} >= set(ALIGNED)
    eager_name = {(int(ev.name[i]), ev.region[i]) for i in e if ev.region[i] is not None}
    eager_fam = {(fam[i], ev.region[i]) for i in e if ev.region[i] is not None}
    eager_reg = {ev.region[i] for i in e if ev.region[i] is not None}
    for i in g:
        if src[i] == "replay-name":  # a kernel of that name ran eagerly in that region
            assert (int(ev.name[i]), ev.region[i]) in eager_name
        elif src[i] == "replay-family":  # another kernel of the family (a cuBLAS tile for other M) ran there
            assert (fam[i], ev.region[i]) in eager_fam
        elif src[i] in ("replay-between", "replay-slot"):
            assert ev.region[i] in eager_reg
    # the decode GEMMs (nvjet ...64x8..., never run eagerly) are paired by family with the prefill's GEMM
    nv = [i for i in g if p.string(int(ev.name[i])).startswith("nvjet_sm90_tst_64x8")]
    assert nv and all(src[i] in ("replay-family", "replay-between") for i in nv)


def test_piecewise_replays_are_aligned_with_the_eager_attention_between_them():
    # vLLM's breakable cudagraph in PIECEWISE mode: the attention runs eagerly between graph pieces (no module
    # events at replay). The pieces of one engine step (one execute_context range) are aligned together, so
    # identical layers are told apart by where they are in the step.
    p = V.piecewise()
    ev, k = _frame(p)
    s = graph_summary(p, ev)
    assert s.replays == 7 * 2   # 6 attention calls cut each of the 2 FULL replays into 7 pieces
    assert s.region_share >= 0.99 and s.no_region == 0 and s.ambiguous == 0
    assert _wrong_layers(p, ev, k) == []
    # the eager attention kernels between the pieces (no op, no module) get their layer from the alignment too
    brk = [i for i in k.tolist() if ev.graph[i] < 0 and V._BREAK.search(p.string(int(ev.name[i])))
           and V.truth_layers(p)[ev.row[i]] != -9]
    assert brk and sum(ev.region[i] is not None for i in brk) / len(brk) >= 0.9


def test_mixed_piecewise_step_attention_kernels_seen_nowhere_else():
    # a mixed step in PIECEWISE mode (M3 with 2048-token prompts, batch 4): its eager attention between the graph
    # pieces runs the prefill tokens' kernels, which no other step of the trace ran. Where the alignment cannot pair
    # them the layer order does (a piece ends with layer k's RoPE and the next starts with its o_proj: between
    # them the indexer and the attention of layer k): every one gets its layer, so the indexer runs in all 4
    # sparse layers of the step
    p = V.piecewise_mixed()
    ev, k = _frame(p)
    tr = V.truth_layers(p)
    brk = [i for i in k.tolist() if ev.graph[i] < 0 and tr[ev.row[i]] != -9]
    assert len(brk) == 2 * (2 * 2 + 4 * 5)   # 2 steps x (2 full-attention layers x 2 + 4 sparse layers x 5 kernels)
    assert all(ev.region[i] is not None and ev.layer[i] == tr[ev.row[i]] for i in brk)
    assert "order" in {ev.label_source[i] for i in brk}
    idx = ev.role == "attn.indexer"
    for s in set(ev.step[idx].tolist()):
        assert set(ev.layer[idx & (ev.step == s)].tolist()) == {2, 3, 4, 5}
    assert _wrong_layers(p, ev, k) == []


def test_full_replays_inside_one_long_range_are_aligned_one_by_one():
    # an outermost range around many steps (mmprof's runtime writes `mmprof.decode`): each FULL replay is a whole
    # forward and is aligned alone first; the range only serves what stays open
    p = V.one_range_for_all()
    ev, k = _frame(p)
    s = graph_summary(p, ev)
    assert s.region_share >= 0.99 and s.no_region == 0 and _wrong_layers(p, ev, k) == []   # as in the real


def test_pieces_that_fit_several_layers_stay_unattributed_and_are_counted():
    # without the step annotation each piece is aligned alone: a piece of layer 2's MoE + layer 3's qkv fits
    # layers 2, 3 and 4 equally well. Never a guess: they get no region and are counted as ambiguous.
    p = V.piecewise(annotated=False)
    ev, k = _frame(p)
    s = graph_summary(p, ev)
    assert s.ambiguous > 0.5 * s.kernels and s.ambiguous <= s.no_region   # 156 of the 2 replays' 218 kernels
    assert s.region_share < 0.5
    assert _wrong_layers(p, ev, k) == []


def test_partial_and_unknown_sequences():
    # every 3rd replayed kernel renamed: the rest still aligns (the renamed ones stay out or are enclosed by one
    # region); no layer is wrong
    p = V.renamed(3)
    ev, k = _frame(p)
    s = graph_summary(p, ev)
    assert 0.6 < s.region_share < 0.99 and _wrong_layers(p, ev, k) == []
    # one replay whose every kernel is a name seen nowhere eagerly: none of its kernels is aligned, and they are
    # counted (the other one is as before)
    p = V.renamed(1, replays=1)
    ev, k = _frame(p)
    s = graph_summary(p, ev)
    first = np.unique(ev.graph[k][ev.graph[k] >= 0])[0]
    mine = k[ev.graph[k] == first]
    assert not any(str(ev.label_source[i]).startswith("replay-") for i in mine)
    assert s.no_region >= 1 * 2 + 133 - 10    # 10 kept the ops the importer found before the renaming
    assert _wrong_layers(p, ev, k) == []


def test_other_grids_side_stream_off_and_no_eager_run():
    # another batch size's grids: names still pair (a grid match only adds to the score)
    p = V.other_grids()
    ev, k = _frame(p)
    assert graph_summary(p, ev).region_share >= 0.99 and _wrong_layers(p, ev, k) == []
    # the shared expert on the main stream in the replays only: fewer pairs, never a wrong layer
    p = V.side_stream_off()
    ev, k = _frame(p)
    s = graph_summary(p, ev)
    assert s.region_share >= 0.9 and _wrong_layers(p, ev, k) == []
    # no eager kernel with a region: nothing to align with, the replays stay unattributed and say so
    p = V.no_eager_regions()
    ev, k = _frame(p)
    s = graph_summary(p, ev)
    assert s.region_share < 0.1 and s.no_region > 0.75 * s.kernels and "in none" in s.line()
    assert not any(str(ev.label_source[i]).startswith("replay-") for i in k)


def test_record_sample_replays_all_get_regions():
    # `mmprof record` around plain vLLM (the engine-core process, tests/data/samples/vllm/record): the committed
    # Profile is its window from the captures to the end of the first generate call (README there; the full one,
    # git 01f295c, had 30 replays): 14 FULL replays of 128 kernels + 5 copies; 5 FULL captures of the same node
    # count (batch sizes) make the capture rule ambiguous (counted), the eager decode warm-up pairs 78% by name
    # and grid, the alignment the rest
    from mmprof.profiles.io import load_profile

    p = load_profile(data_file("samples", "vllm", "record", "rec_graphs_b8.json.xz"))
    from mmprof.importers.graph_replays import attribute_replays

    rep = attribute_replays(p)
    names = p.col("launches", "name", decode=True)
    assert sum(n == "cudaGraphLaunch" for n in names) == 14 and sum(n == "cudaStreamBeginCapture" for n in names) == 54
    assert rep.replays == 14 and rep.kernels == 14 * 128 and rep.ambiguous == 14
    ev, k = _frame(p)
    s = graph_summary(p, ev)
    assert s.region_share >= 0.99 and s.no_region == 0


def test_alignment_never_picks_one_of_several_identical_layers():
    # a pattern of 4 identical layers (the same kernels, each layer its own region) and a query of one layer's
    # kernels: every layer fits equally well, so no kernel is placed (all ambiguous); a query that starts with the
    # kernel only layer 0 has (the embedding) is placed, in layer 0 and layer 1 only
    from mmprof.analysis.attribution.graph_align import _align, _Ref

    layer = [10, 11, 12, 13]  # norm, gemm, attention, gemm: token ids
    names = np.array([99] + layer * 4, np.int64)
    region = np.array(["embed"] + [f"layers.{i // 4}.x" for i in range(16)], dtype=object)
    ref = _Ref(np.arange(17), names, np.zeros(17, np.int64), np.full(17, -1, np.int64), region)
    q = np.array(layer, np.int64)
    pos, exact, amb = _align(ref, q, np.zeros(4, np.int64), np.full(4, -1, np.int64))
    assert (pos < 0).all() and amb.all()
    q = np.array([99] + layer * 2, np.int64)
    pos, exact, amb = _align(ref, q, np.zeros(9, np.int64), np.full(9, -1, np.int64))
    assert list(region[pos]) == ["embed"] + ["layers.0.x"] * 4 + ["layers.1.x"] * 4 and exact.all()
    # unnamed kernels (-1) never pair by name
    q = np.full(4, -1, np.int64)
    ref2 = _Ref(np.arange(4), np.full(4, -1, np.int64), np.zeros(4, np.int64), np.full(4, -1, np.int64),
                np.array(["layers.0.x"] * 4, dtype=object))
    assert (_align(ref2, q, np.zeros(4, np.int64), np.full(4, -1, np.int64))[0] < 0).all()


def test_a_twin_with_no_region_is_still_the_twin():
    # compiled vLLM code runs no module: in a record of it only the shared expert (inside its opaque MoE op) has
    # module ranges, and its GEMM can use the same cuBLAS kernel as the layer's o_proj. The replay's o_proj must pair
    # with the eager o_proj (which has no region: the replay kernel gets none from it), not with the next placed
    # kernel of its name (the shared expert's GEMM): the pattern is every eager kernel, placed or not
    from mmprof.importers.graph_replays import attribute_replays
    from tests.profile_builder import Synth

    s = Synth()
    seq = [x for i in range(2) for x in (
        ("norm_k", f"layers.{i}.norm"), ("gemm_qkv", None), ("flash_fwd", None), ("gemm_a", None),
        ("norm_k", f"layers.{i}.norm"), ("gemm_a", f"layers.{i}.moe.shared"),
        ("fused_moe_kernel", f"layers.{i}.moe.routed"))]
    t = 0
    for name, scope in seq:  # the eager forward
        s.kernel(name, t + 1000, 500, scope=scope, launch_at=t)
        t += 2000
    g = s.b.row("launches", rank=0, tid=1, start_ns=t, dur_ns=100, name="cudaGraphLaunch", correlation=999, op=-1)
    for j, (name, _) in enumerate(seq):  # its replay
        s.b.row("kernels", rank=0, device=0, stream=7, start_ns=t + 1000 + 600 * j, dur_ns=500, name=name,
                correlation=999, launch=g, op=-1)
    p = s.build()
    attribute_replays(p)
    ev = events_of(p)
    rep = [i for i in range(len(ev)) if ev.graph[i] >= 0]
    rep = sorted(rep, key=lambda i: ev.start[i])
    got = [ev.region[i] for i in rep]
    eager = sorted((i for i in range(len(ev)) if ev.graph[i] < 0), key=lambda i: ev.start[i])
    # each replayed kernel takes its own eager twin's place (the eager projections and attention are placed by the
    # layer's part order: mmprof.analysis.attribution.layer_order); the replay's o_proj is the eager o_proj, never
    # the shared expert's GEMM of the same name
    assert got == [ev.region[i] for i in eager]
    assert [got[3], got[10]] == ["layers.0.attn.o_proj", "layers.1.attn.o_proj"]
    assert [got[5], got[12]] == ["layers.0.moe.shared", "layers.1.moe.shared"]
