"""Synthetic variants of vLLM's real graph-mode trace (tests/data/samples/vllm/m3_graphs_b8.pt.trace.json.xz), built in
memory from the imported Profile, for the input shapes the held-back traces have and the sample has not.

The sample is vLLM 0.26's default mode: every decode step is one FULL graph replay (133 kernels; attention inside).
Each function returns a new Profile; the kernel rows keep their order, so a kernel's truth (`truth_layers`) still
applies. Run `python tests/graph_variants.py` to print what each variant holds and what the alignment makes of it.

- `piecewise`: vLLM's breakable cudagraph in PIECEWISE mode (vllm/compilation/breakable_cudagraph.py): the
  attention calls (`@eager_break_during_capture`: `MiniMaxM3SparseAttention._run_attention`, the dense layers'
  attention custom op) end the graph segment and run eagerly; each replay is cut there into one graph launch per
  piece, and the attention kernels become eager kernels with no op and no module events (at replay vLLM calls the
  recorded Python function directly: no module runs). `annotated=False` also hides the engine-step annotation
  (a trace without vLLM's `execute_context_*` ranges): each piece is then aligned alone.
- `piecewise_mixed`: `piecewise` with the eager attention running kernels of the same families under names no eager
  step ran (a mixed prefill + decode step's prefill tokens).
- `one_range_for_all`: one outermost range around all steps (the FULL replays of many steps in one range).
- `side_stream_off`: the shared expert on the main stream in the replays (`VLLM_DISABLE_SHARED_EXPERTS_STREAM=1`
  in the graph run only), while the eager prefill in the same trace ran it on the side stream.
- `renamed`: some replayed kernels get names no eager kernel has (a replay that only partly matches, or,
  with every kernel of a replay, a pattern seen nowhere eagerly).
- `other_grids`: every replayed kernel gets another grid (another batch size's launch shapes).
- `no_eager_regions`: the eager kernels lose their module labels and ops (nothing to align with).
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from functools import lru_cache
from pathlib import Path

import numpy as np
from tests.conftest import open_data  # noqa: E402

ROOT = Path(__file__).resolve().parent
SAMPLE = ROOT / "data" / "samples" / "vllm" / "m3_graphs_b8.pt.trace.json.xz"
# vLLM's eager breaks: the kernels of the attention calls (names seen in the sample; vllm/models/minimax_m3/nvidia/
# model.py MiniMaxM3SparseAttention._run_attention runs the indexer + sparse attend, the dense layers' Attention
# the FlashAttention fwd / combine kernels)
_BREAK = re.compile(r"FlashAttn|_gqa_sparse|_decode_index_score|_topk_index|_merge_topk_attn_out")
_NORM = re.compile(r"RMSNorm")


def _profile(tables, meta, strings):
    from mmprof.profiles.profile import Profile

    return Profile(json.loads(json.dumps(meta)), list(strings), {t: {c: a.copy() for c, a in cols.items()}
                                                                   for t, cols in tables.items()})


@lru_cache(maxsize=1)
def _base():
    from mmprof.importers import import_paths

    p = import_paths([SAMPLE])
    return p.tables, p.meta, tuple(p.strings)


def real():
    """The sample, imported (a fresh copy each call)."""
    t, m, s = _base()
    return _profile(t, m, s)


@lru_cache(maxsize=1)
def _raw_truth() -> tuple[tuple[tuple[str, int], ...], ...]:
    """From the raw JSON, independently of mmprof: per cudaGraphLaunch (in launch order), its kernels in start order
    as (name, layer): vLLM's MiniMaxM3DecoderLayer.forward runs input_layernorm and post_attention_layernorm (two
    RMSNorm kernels on the main stream) per layer and MiniMaxM3Model.forward one final norm; kernels before the
    first norm are the embedding (-1), after the last the final norm (-2). A side-stream kernel takes the layer
    of the main-stream kernel running when it starts (the shared expert forks and joins inside its MoE layer)."""
    ev = json.load(open_data(SAMPLE))["traceEvents"]
    launches = sorted((e for e in ev if e.get("name") == "cudaGraphLaunch"), key=lambda e: e["ts"])
    by_corr: dict[int, list[dict]] = {}
    for e in ev:
        if e.get("cat") == "kernel":
            by_corr.setdefault(e["args"]["correlation"], []).append(e)
    out = []
    for g in launches:
        ks = sorted(by_corr.get(g["args"]["correlation"], []), key=lambda k: k["ts"])
        main = Counter(k["args"]["stream"] for k in ks).most_common(1)[0][0]
        norms, layer_at, res = 0, [], []
        n_norm = sum(1 for k in ks if k["args"]["stream"] == main and _NORM.search(k["name"]))
        for k in ks:
            if k["args"]["stream"] == main:
                if _NORM.search(k["name"]):
                    norms += 1
                lay = -1 if norms == 0 else (-2 if norms == n_norm else (norms - 1) // 2)
                layer_at.append((k["ts"], lay))
            else:
                lay = max((t for t in layer_at if t[0] <= k["ts"]), default=(0, -1))[1]
            res.append((k["name"], lay))
        out.append(tuple(res))
    return tuple(out)


def truth_layers(p) -> np.ndarray:
    """Per kernel row of the sample (or a variant): the layer from the raw JSON (-1 embed, -2 final norm), or -9
    for kernels not replayed in the original sample."""
    K = p.tables["kernels"]
    out = np.full(p.n("kernels"), -9, np.int64)
    orig = real()
    OK, OL = orig.tables["kernels"], orig.tables["launches"]
    graphs = np.unique(OK["graph"][OK["graph"] >= 0])
    graphs = graphs[np.argsort(OL["start_ns"][graphs], kind="stable")]
    for g, want in zip(graphs.tolist(), _raw_truth()):
        rows = np.flatnonzero(OK["graph"] == g)
        rows = rows[np.lexsort((rows, OK["start_ns"][rows]))]
        assert len(rows) == len(want), "the importer and the raw JSON disagree on a replay's kernels"
        for r, (name, lay) in zip(rows.tolist(), want):
            assert orig.string(int(OK["name"][r])) == name
            out[r] = lay
    assert len(out) == len(K["name"])
    return out


def piecewise(annotated: bool = True):
    """Each replay cut at vLLM's eager breaks (see the module docstring)."""
    p = real()
    K, L, S = p.tables["kernels"], p.tables["launches"], p.tables["scopes"]
    names = np.array([bool(_BREAK.search(p.string(int(c)) or "")) for c in K["name"]])
    new_launch = {c: [] for c in L}
    n0 = p.n("launches")
    for g in np.unique(K["graph"][K["graph"] >= 0]).tolist():
        rows = np.flatnonzero(K["graph"] == g)
        rows = rows[np.lexsort((rows, K["start_ns"][rows]))]
        piece, k = -1, 0
        for r in rows.tolist():
            if names[r]:
                K["graph"][r] = K["launch"][r] = K["op"][r] = -1
                K["op_source"][r] = -1
                piece = -1
                continue
            if piece < 0:
                piece = n0 + len(new_launch["rank"])
                for c in L:
                    new_launch[c].append(L[c][g])
                new_launch["start_ns"][-1] = L["start_ns"][g] + k
                k += 1
            K["graph"][r] = K["launch"][r] = piece
    for c in L:
        L[c] = np.concatenate([L[c], np.array(new_launch[c], dtype=L[c].dtype)])
    if not annotated:
        step = np.array([(p.string(int(c)) or "").startswith("execute_context") for c in S["name"]])
        S["depth"][step] = 99
    return _profile(p.tables, p.meta, p.strings)


# the kernels a mixed step's eager attention runs instead (its prefill tokens: another FlashAttention kernel, the
# indexer's and the sparse attention's prefill variants), named so that each keeps its family (rules/kernels_*.toml)
_MIXED = (("FlashAttnFwdSm90", "flash_fwd_splitkv_mixed_kernel"), ("FlashAttnFwdCombine", "flash_fwd_combine_mixed_kernel"),
          ("_decode_index_score_kernel", "_prefill_index_score_kernel_mixed"),
          ("_topk_index_partial_kernel", "_topk_index_prefill_kernel_mixed"),
          ("_topk_index_merge_kernel", "_topk_index_merge_kernel_mixed"),
          ("_gqa_sparse_decode_kernel", "_gqa_sparse_prefill_kernel_mixed"),
          ("_merge_topk_attn_out_kernel", "_merge_topk_attn_out_kernel_mixed"))


def piecewise_mixed():
    """`piecewise`, with the eager attention between the pieces running kernels no eager step of the trace ran
    (a mixed prefill + decode step: its prefill tokens take other kernels of the same families), so the alignment
    cannot pair them by name: the layer order between the pieces places them."""
    p = piecewise()
    K = p.tables["kernels"]
    for r in np.flatnonzero((K["graph"] < 0) & (truth_layers(p) != -9)).tolist():
        n = p.string(int(K["name"][r])) or ""
        new = next((b for a, b in _MIXED if a in n), None)
        if new is None:
            continue
        if new not in p.strings:
            p.strings.append(new)
        K["name"][r] = p.strings.index(new)
    return _profile(p.tables, p.meta, p.strings)


def one_range_for_all():
    """One outermost annotation around every step (as `mmprof.decode` in mmprof's runtime), the step ranges inside
    it: the FULL replays of many steps fall in one range."""
    p = real()
    S = p.tables["scopes"]
    step = np.array([(p.string(int(c)) or "").startswith("execute_context") for c in S["name"]])
    S["depth"][step] = 1
    rows = np.flatnonzero(step)
    t0, t1 = int(S["start_ns"][rows].min()), int((S["start_ns"][rows] + S["dur_ns"][rows]).max())
    p.strings.append("mmprof.decode")
    new = {c: np.concatenate([a, a[rows[:1]]]) for c, a in S.items()}
    new["start_ns"][-1], new["dur_ns"][-1], new["depth"][-1], new["parent"][-1] = t0, t1 - t0, 0, -1
    new["name"][-1] = len(p.strings) - 1
    p.tables["scopes"] = new
    return _profile(p.tables, p.meta, p.strings)


def side_stream_off():
    p = real()
    K = p.tables["kernels"]
    rep = K["graph"] >= 0
    main = Counter(K["stream"][rep].tolist()).most_common(1)[0][0]
    K["stream"][rep] = main
    return _profile(p.tables, p.meta, p.strings)


def renamed(every: int, replays: int | None = None):
    """Every `every`-th kernel of each replay (of the first `replays` replays, all when None) renamed."""
    p = real()
    K = p.tables["kernels"]
    graphs = np.unique(K["graph"][K["graph"] >= 0])[:replays]
    for g in graphs.tolist():
        rows = np.flatnonzero(K["graph"] == g)
        rows = rows[np.lexsort((rows, K["start_ns"][rows]))]
        for i, r in enumerate(rows.tolist()):
            if i % every == 0:
                p.strings.append(f"synthetic_kernel_seen_nowhere_{i}")
                K["name"][r] = len(p.strings) - 1
    return _profile(p.tables, p.meta, p.strings)


def other_grids():
    p = real()
    K = p.tables["kernels"]
    rep = K["graph"] >= 0
    for c in ("grid_x", "grid_y", "grid_z"):
        K[c][rep] = K[c][rep] + 1000
    return _profile(p.tables, p.meta, p.strings)


def no_eager_regions():
    p = real()
    K = p.tables["kernels"]
    eager = K["graph"] < 0
    K["scope_path"][eager] = K["scope"][eager] = -1
    K["op"][eager] = K["launch"][eager] = -1
    return _profile(p.tables, p.meta, p.strings)


VARIANTS = {"real": real, "piecewise": piecewise, "piecewise_unannotated": lambda: piecewise(False),
            "piecewise_mixed": piecewise_mixed,
            "one_range_for_all": one_range_for_all, "side_stream_off": side_stream_off, "renamed_every_3rd": lambda: renamed(3),
            "one_replay_seen_nowhere": lambda: renamed(1, 1), "other_grids": other_grids,
            "no_eager_regions": no_eager_regions}


def main() -> None:
    from mmprof.analysis.timeline.events import events_of
    from mmprof.analysis.views.graph_summary import graph_summary

    for name, make in VARIANTS.items():
        p = make()
        s = graph_summary(p, events_of(p))
        print(f"{name}: {s.replays} replays, {s.kernels} kernels, regions {s.region_share:.1%} of replay time, "
              f"{s.no_region} in none ({s.ambiguous} ambiguous); all kernels {s.all_region_share:.1%}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT.parent))
    main()
