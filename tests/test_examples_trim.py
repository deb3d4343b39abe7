"""examples/trim.py, which cut the committed example traces to a few steps: an excerpt keeps whole steps, row for
row, with its references renumbered to the same rows; the committed files hold the steps its table names.

The truths come from the input tables themselves (rows of a step counted and compared by their content), not from
what trim.py reports.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from collections import Counter

import numpy as np
import pytest

from mmprof.profiles import load_profile
from mmprof.profiles.io import from_dict
from tests.conftest import ROOT

_spec = importlib.util.spec_from_file_location("examples_trim", ROOT / "examples" / "trim.py")
trim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trim)

SLICE = ROOT / "examples" / "h200" / "m3-rank-slice" / "fused.json.gz"   # the prefill and decode step 2


def _rows(p, table: str, mask: np.ndarray) -> Counter:
    """The rows of `table` under `mask` by content: start, duration and name text (and, for kernels, the
    correlation and the name of the op the kernel points at)."""
    t = p.tables[table]
    out = Counter()
    for i in np.flatnonzero(mask):
        key = (int(t["start_ns"][i]), int(t["dur_ns"][i]), p.string(int(t["name"][i])))
        if table == "kernels":
            o = int(t["op"][i])
            key += (int(t["correlation"][i]), p.string(int(p.tables["ops"]["name"][o])) if o >= 0 else None)
        out[key] += 1
    return out


@pytest.fixture(scope="module")
def cut():
    doc = json.loads(gzip.decompress(SLICE.read_bytes()))
    return from_dict(doc), from_dict(trim.trim_profile(doc, [(2, 2)]))


def test_a_cut_keeps_the_rows_of_its_steps_and_no_others(cut):
    full, part = cut
    for table in ("kernels", "ops", "memcpy"):
        s = full.tables[table]["step"]
        assert set(np.unique(s).tolist()) >= {0, 2}
        assert set(np.unique(part.tables[table]["step"]).tolist()) <= {2, -1}
        assert _rows(part, table, part.tables[table]["step"] == 2) == _rows(full, table, s == 2)
    # the dispatch log: the rows of step 2, counted in the input
    assert part.n("dispatch") == int((full.tables["dispatch"]["step"] == 2).sum()) > 0


def test_a_cut_renumbers_references_to_the_same_rows(cut):
    full, part = cut
    K, L = part.tables["kernels"], part.tables["launches"]
    launched = K["launch"] >= 0
    assert launched.all() and (L["correlation"][K["launch"]] == K["correlation"]).all()
    O = part.tables["ops"]
    par = O["parent"][O["parent"] >= 0]
    assert (par < part.n("ops")).all()
    # an op's parent starts no later than the op and ends no earlier (it encloses it), as in the input
    child = np.flatnonzero(O["parent"] >= 0)
    assert (O["start_ns"][par] <= O["start_ns"][child]).all()
    assert ((O["start_ns"] + O["dur_ns"])[par] >= (O["start_ns"] + O["dur_ns"])[child]).all()


def test_a_cut_drops_the_ranges_of_dropped_steps(cut):
    full, part = cut
    names = Counter(part.string(int(x)) for x in part.tables["scopes"]["name"])
    assert names["mmprof.step.2"] >= 1 and names["mmprof.decode"] >= 1
    assert "mmprof.step.0" not in names and "mmprof.prefill" not in names
    before = Counter(full.string(int(x)) for x in full.tables["scopes"]["name"])
    assert names["mmprof.step.2"] == before["mmprof.step.2"]  # the CPU and GPU-side ranges of the step


@pytest.mark.parametrize("rel", sorted(k for k, v in trim.EXCERPTS.items() if v[0] == "profile"))
def test_committed_excerpts_hold_the_steps_trim_names(rel):
    p = load_profile(ROOT / "examples" / rel)
    windows = trim.EXCERPTS[rel][1]
    want = {s for a, b in windows for s in range(a, b + 1)}
    K = p.tables["kernels"]
    steps = set(np.unique(K["step"] if p.n("kernels") else p.tables["ops"]["step"]).tolist()) - {-1}
    assert steps == want
    assert p.meta["excerpt"]["kept"] == trim._kept_words(windows)


@pytest.mark.parametrize("rel", sorted(k for k, v in trim.EXCERPTS.items() if v[0] == "kineto"))
def test_committed_kineto_excerpts_hold_their_first_profiler_steps(rel):
    """transformers' traces number their steps ProfilerStep#1.. (the importer's `step`); an excerpt of N steps
    holds steps 1..N on every rank, and one rank per raw trace it was cut from."""
    _, n, sources = trim.EXCERPTS[rel]
    p = load_profile(ROOT / "examples" / rel)
    assert len(p.ranks) == len(sources) and len(p.meta["excerpt"]["of"]) == len(sources)
    K = p.tables["kernels"]
    for r in p.ranks:
        assert set(np.unique(K["step"][K["rank"] == r]).tolist()) == set(range(1, n + 1))
