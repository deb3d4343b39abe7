"""The runtime's compile rung on the H200 (tests/data/h200_compile/compile_b1.json.xz, `mmprof run --graphs --compile`,
batch 1, 16 decode steps): Inductor's kernels are attributed to the regions they run in.

The truth comes from the runtime's code: every compiled call runs inside the scope of its region
(mmprof/runtime/compiled.py, attention.py / moe.py / model.py), so in the raw kernels table every Triton kernel of
the eager static step (inside `mmprof.graph.capture`, scopes on) has a region label on its scope path, and each of
the 16 replays runs the same kernels as that step, in the same order (one CUDA graph). The analyses must reach
that: the Triton kernels of the replays get a region, and at least 90% of the kernel time of the whole profile
(issue 22's bar) is in regions."""

from __future__ import annotations

import re

import pytest

from mmprof.analysis.timeline.events import events_of
from mmprof.profiles.io import load_profile
from tests.conftest import data_file

REGION = re.compile(r"(?:^|> )(?:layers\.\d+\.(?:attn\.\w+|norm|mlp|moe\.\w+)|final_norm|lm_head|embed)(?: >|$)")
INDUCTOR = re.compile(r"^triton_(?:poi|red|per|tem)_fused")


@pytest.fixture(scope="module")
def profile():
    return load_profile(data_file("h200_compile/compile_b1.json.xz"))


def test_inductor_kernels_of_the_eager_static_step_carry_their_region(profile):
    """Independent of the analyses: the raw table's scope paths."""
    k = profile.df("kernels")
    names = k["name"].astype(str)
    path = k["scope_path"].astype(str)
    eager = k[(k["graph"] < 0) & path.str.contains("mmprof.graph.capture", regex=False) & names.str.match(INDUCTOR)]
    scoped = eager[eager["scope_path"].astype(str).str.contains(REGION)]
    # the warm-up run of the static step (scopes off, like a replay) is the rest; the first run has every region
    assert len(scoped) >= 300, len(scoped)  # 479 kernels per step on `small`, most of them Inductor's
    per_step_replay = k[k["graph"] >= 0].groupby("graph").size()
    assert len(per_step_replay) == 16 and per_step_replay.nunique() == 1  # one graph, 16 replays, equal size
    # the replayed Triton kernels of one replay are the scoped eager run's, one for one
    one = k[k["graph"] == per_step_replay.index[0]]
    assert int(one["name"].astype(str).str.match(INDUCTOR).sum()) == len(scoped)


def test_replayed_inductor_kernels_get_regions_and_the_profile_passes_the_bar(profile):
    f = events_of(profile).frame()
    tr = f[f["name"].astype(str).str.match(INDUCTOR)]
    replay = tr[tr["phase"] == "decode"]
    assert len(replay) > 0 and replay["region"].notna().all()  # every replayed Inductor kernel has its region
    dur = f["dur_ns"].astype("int64")
    share = float(dur[f["region"].notna()].sum()) / float(dur.sum())
    assert share >= 0.90, share
    # regions of the fused kernels are the runtime's own names (no invented ones)
    assert set(replay["role"].dropna()) <= {"attn.norm_rope", "attn.indexer", "attn.core", "norm", "mlp",
                                            "moe.router", "moe.routed", "moe.shared", "final_norm", "lm_head"}
