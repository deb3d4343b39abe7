"""The event frame is built by one visible list of passes (issue 29; mmprof/analysis/timeline/frame_passes.py): each
pass declares the columns it reads, adds and refines; the order is checked statically and enforced while a frame is
built, so a pass that reads what no earlier pass made, or writes what it did not declare, fails here, not silently.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from mmprof.analysis.timeline import frame_passes as fp
from mmprof.analysis.timeline.events import EventFrame, events_of
from mmprof.importers import import_paths
from tests.conftest import data_file
from tests.profile_builder import Synth

QWEN_GRAPHS = ("vllm_own", "qwen2moe_graphs_b1.pt.trace.json.xz")   # graph replays, Inductor kernels, module tree
CPU_RUN = ("inductor", "cpu_compiled.pt.trace.json.gz")            # a CPU run: outermost compute ops


@pytest.mark.parametrize("passes", [fp.GPU_PASSES, fp.CPU_PASSES], ids=["kernel-profile", "cpu-run"])
def test_each_pass_reads_only_what_an_earlier_pass_added(passes):
    assert fp.check_order(passes) == []
    names = [p.name for p in passes]
    assert len(names) == len(set(names))


def test_the_order_check_sees_a_read_before_its_add_and_an_undeclared_refinement():
    noop = lambda b: None  # noqa: E731
    bad = (fp.Pass("a", noop, adds=("x",)), fp.Pass("b", noop, reads=("y",), adds=("x",)),
           fp.Pass("c", noop, refines=("z",)))
    assert fp.check_order(bad) == ["b: reads 'y' before any pass adds it", "b: adds 'x' again (declare it in refines)",
                                   "c: reads 'z' before any pass adds it"]


def _build(passes):
    return fp.run_passes(passes, fp.FrameBuild(profile=None, rules=None, shape_regions=None))


def test_a_pass_that_reads_or_writes_what_it_did_not_declare_fails_while_building():
    def writes_x(b):
        b.write("x", 1)

    def reads_x_undeclared(b):
        b.read("x")

    def writes_y_undeclared(b):
        b.write("y", 2)

    ok = fp.Pass("make", writes_x, adds=("x",))
    with pytest.raises(fp.PassOrderError, match="pass peek reads 'x', which it does not declare"):
        _build((ok, fp.Pass("peek", reads_x_undeclared)))
    with pytest.raises(fp.PassOrderError, match="pass sneak writes 'y', which it does not declare"):
        _build((ok, fp.Pass("sneak", writes_y_undeclared, reads=("x",))))
    with pytest.raises(fp.PassOrderError, match=r"pass early needs \['x'\]"):
        _build((fp.Pass("early", reads_x_undeclared, reads=("x",)), ok))
    with pytest.raises(fp.PassOrderError, match=r"pass lazy declares \['z'\] but did not add them"):
        _build((fp.Pass("lazy", lambda b: None, adds=("z",)),))
    assert _build((ok, fp.Pass("use", reads_x_undeclared, reads=("x",)))).cols == {"x": 1}


def _frame_fields() -> set[str]:
    skip = {"source", "profile", "notes", "warnings", "_frame", "_memo"}
    return {f.name for f in dataclasses.fields(EventFrame)} - skip


@pytest.mark.parametrize("passes", [fp.GPU_PASSES, fp.CPU_PASSES], ids=["kernel-profile", "cpu-run"])
def test_every_frame_column_is_added_by_exactly_one_pass(passes):
    added = [c for p in passes for c in p.adds]
    fields = _frame_fields()
    # graph_align is a GPU-only statistic; a CPU frame leaves it None
    expect = fields - ({"graph_align"} if passes is fp.CPU_PASSES else set())
    assert expect <= set(added)
    assert all(added.count(c) == 1 for c in expect)


def test_the_docstring_table_lists_the_gpu_passes_in_their_order():
    doc = fp.__doc__
    rows = re.findall(r"^\| ([a-z_]+) \|", doc, re.M)
    assert rows[1:] == [p.name for p in fp.GPU_PASSES]  # rows[0] is the header's "pass"


def test_both_lists_build_real_frames_with_every_column_aligned():
    """A vLLM graph-mode trace (replays aligned, Inductor kernels placed, module tree) and a CPU run of Inductor
    code build through the checked lists; every per-event column has one entry per event."""
    gpu = events_of(import_paths([data_file(*QWEN_GRAPHS)]))
    cpu = events_of(import_paths([data_file(*CPU_RUN)]))
    assert gpu.source == "kernels" and cpu.source == "cpu_ops"
    assert gpu.graph_align is not None and gpu.graph_align.to_dict()  # the replay pass ran
    assert cpu.inductor is not None and gpu.inductor is not None
    for frame in (gpu, cpu):
        n = len(frame)
        assert n >= 20
        for name in ("table", "row", "rank", "start", "dur", "family", "cat", "layer", "region", "label_source"):
            assert len(getattr(frame, name)) == n, name
        assert len(frame.roof.bound) == n
        assert np.array_equal(frame.end, frame.start + frame.dur)
    # kernels first, then copies; memcpy rows are data movement by construction
    k = gpu.table == 0
    assert not k[np.argmin(k):].any() if (~k).any() else True
    assert set(np.asarray(gpu.family[~k]).tolist()) <= {"memcpy"}


def test_a_region_written_by_a_later_pass_lands_in_the_frame():
    """The refining passes write through views of the frame's region columns: a sampling kernel nothing else
    placed ends in the model-level `sampler` region (the `sampler` pass, after `regions`)."""
    s = Synth()
    s.kernel("topk_topp_sampling_from_probs_kernel", 0, 1000)
    s.kernel("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_nn", 2000, 3000)
    ev = events_of(s.build())
    fam = np.asarray(ev.family.astype(object))
    samp = fam == "sampling"
    assert samp.sum() == 1
    assert list(ev.region[samp]) == ["sampler"] and list(ev.label_source[samp]) == ["family"]
    assert ev.region[~samp][0] is None


def test_the_architecture_doc_points_to_the_list():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    assert "frame_passes.py" in doc and "GPU_PASSES" in doc
