"""Regions for graph-replayed kernels that no capture, eager twin or reference profile explains.

Serving engines capture their CUDA graphs at start-up, before the profile window (vLLM:
`vllm/v1/worker/gpu_model_runner.py:capture_model`). The replays' kernels then have no op and no scope. But the
same model ran eagerly in the window too: prefill steps and mixed steps too large for a captured size run
`model.forward` without a graph (vLLM's `CudagraphDispatcher` returns `CUDAGraphMode.NONE` for them), with
module events or scope labels, so their kernels have regions. The decode graph runs the same layers in the same
order, with other token counts: the same kernels, except where a library picks another kernel for another shape
(cuBLAS GEMM tiles, decode vs prefill attention).

`align_replays(profile, reg, family)` aligns each replay's kernel sequence with this rank's eager kernels that
have a region (in device start order), a semi-global sequence alignment (all of the replay, any stretch of the
eager run; an unpaired replay kernel costs 2, an eager kernel skipped inside the stretch 1):

- a kernel with the **same name** as the eager kernel it is paired with scores 8 (10 with the same grid):
  source `replay-name`; a name pair outweighs the family pairs it could displace, so a finer family taxonomy
  never trades name pairs away;
- a kernel of the **same family** (gemm, attention, ...) scores 1, and is kept only between two same-name pairs
  (the layer structure around it is confirmed): source `replay-family`;
- an unpaired kernel whose nearest paired kernels on its stream, before and after it, lie in one region R, with
  nothing but R between them in the eager run, was launched inside that region: source `replay-between`.

"Without guessing": when alignments of equal best score disagree on a kernel's region (a graph piece that could
be any of several identical layers), the kernel stays unattributed and is counted as ambiguous; a replay with
fewer than two same-name pairs is not aligned at all. Each replay is aligned alone first (a FULL graph is a
whole forward); what stays open is aligned again with the other replays and eager kernels inside the same
outermost annotation of the launching thread (vLLM's `execute_context_*` step range): vLLM's piecewise pieces,
with the attention run eagerly between them, are told apart by their position in the step. Regions come from `mmprof.analysis.attribution.structure` for the eager
kernels, so a better eager region flows into the replays. Shapes are never copied: the token counts differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mmprof.analysis.attribution.structure import Regions

SOURCES = ("replay-name", "replay-family", "replay-between")
_GAP = 2                     # an unpaired replay kernel
_SKIP = 1                    # an eager kernel skipped inside the stretch (prefill / mixed steps run extra kernels)
_NEG = -(1 << 20)
_MAX_CELLS = 40_000_000      # alignment matrix cells at most (one byte each): the eager pattern is cut to fit
_MAX_REF = 50_000            # eager kernels kept as the pattern (the first ones of the rank)
_MAX_QUERY = 4000            # a step range longer than this is not aligned as one (its replays are, alone)
_MAX_TIES = 16               # equal-score alignments compared per sequence
_NO_FAMILY = ("other", "unknown", "copy", "memcpy", "communication")


@dataclass
class AlignStats:
    """What the alignment did (kernels and their device time, per source and left unattributed)."""

    sequences: int = 0
    aligned: int = 0             # replays with a kernel placed by the alignment
    kernels: dict[str, int] = field(default_factory=lambda: {s: 0 for s in SOURCES})
    ns: dict[str, int] = field(default_factory=lambda: {s: 0 for s in SOURCES})
    unattributed: int = 0
    unattributed_ns: int = 0
    ambiguous: int = 0
    skipped: int = 0
    trimmed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"sequences": self.sequences, "aligned": self.aligned, "kernels": dict(self.kernels),
                "ns": dict(self.ns), "unattributed": self.unattributed, "unattributed_ns": self.unattributed_ns,
                "ambiguous": self.ambiguous, "skipped": self.skipped, "trimmed": self.trimmed}


class _Ref:
    """One rank's eager kernels that have a region, in device start order, as alignment tokens."""

    def __init__(self, rows: np.ndarray, name: np.ndarray, grid: np.ndarray, fam: np.ndarray, region: np.ndarray,
                 key: Any = None):
        self.rows, self.name, self.grid, self.fam = rows, name[rows], grid[rows], fam[rows]
        self.region = region[rows]
        self.key = key

    def head(self, m: int) -> "_Ref":
        out = _Ref.__new__(_Ref)
        out.rows, out.name, out.grid, out.fam, out.region, out.key = (self.rows[:m], self.name[:m], self.grid[:m],
                                                                      self.fam[:m], self.region[:m], self.key)
        return out

    def __len__(self) -> int:
        return len(self.rows)


def _score_row(ref: _Ref, qn: int, qg: int, qf: int) -> np.ndarray:
    same = (ref.name == qn) & (qn >= 0)   # an unnamed kernel pairs with nothing by name
    s = np.where(same, 8 + 2 * (ref.grid == qg), _NEG)
    if qf >= 0:
        s = np.where(~same & (ref.fam == qf), 1, s)
    return s


def _dp(ref: _Ref, qn, qg, qf) -> tuple[np.ndarray, np.ndarray]:
    """Semi-global alignment (ref start and end free): the last row of scores, and per cell the move that reached
    it (0 pair, 1 query kernel unpaired, 2 ref kernel skipped; one byte a cell)."""
    n, m = len(qn), len(ref)
    move = np.empty((n + 1, m + 1), np.uint8)
    move[0] = 2
    lin = np.arange(m + 1, dtype=np.int64) * _SKIP
    prev = np.zeros(m + 1, np.int64)
    t = np.empty(m + 1, np.int64)
    for i in range(1, n + 1):
        s = _score_row(ref, int(qn[i - 1]), int(qg[i - 1]), int(qf[i - 1]))
        diag = prev[:-1] + s
        up = prev - _GAP
        t[0] = up[0]
        np.maximum(diag, up[1:], out=t[1:])
        h = np.maximum.accumulate(t + lin) - lin
        mv = np.full(m + 1, 2, np.uint8)
        mv[up == h] = 1
        pair = np.zeros(m + 1, dtype=bool)
        pair[1:] = (s > 0) & (diag == h[1:])
        mv[pair] = 0
        move[i] = mv
        prev = h
    return prev, move


def _traceback(move: np.ndarray, end: int) -> np.ndarray:
    """Ref position paired with each query position (-1 unpaired) on the alignment ending at `end`."""
    n = move.shape[0] - 1
    out = np.full(n, -1, np.int64)
    i, j = n, end
    while i > 0:
        mv = move[i, j]
        if mv == 0:
            out[i - 1] = j - 1
            i, j = i - 1, j - 1
        elif mv == 1:
            i -= 1
        else:
            j -= 1
    return out


def _align(ref: _Ref, qn, qg, qf) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ref position per query position or -1, exact-name flag, ambiguous flag): what every best alignment agrees
    on; a position they disagree on is ambiguous and unpaired."""
    n = len(qn)
    last, move = _dp(ref, qn, qg, qf)
    best = int(last.max())
    ends = np.flatnonzero(last == best)
    if len(ends) > _MAX_TIES:  # many equal eager runs: compare a spread of them, first and last included
        ends = ends[np.linspace(0, len(ends) - 1, _MAX_TIES).astype(np.int64)]
    paths = [_traceback(move, int(e)) for e in ends.tolist()]
    pos = paths[0].copy()
    amb = np.zeros(n, dtype=bool)
    for p in paths[1:]:
        both = (pos >= 0) & (p >= 0)
        differ = (pos >= 0) != (p >= 0)
        differ[both] = ref.region[pos[both]] != ref.region[p[both]]
        amb |= differ
    pos[amb] = -1
    exact = np.zeros(n, dtype=bool)
    ok = pos >= 0
    exact[ok] = ref.name[pos[ok]] == qn[ok]
    if exact.sum() < 2:
        return np.full(n, -1, np.int64), np.zeros(n, dtype=bool), amb
    # a family pair counts only between two same-name pairs, or right next to one in both sequences (the
    # sequence around it is confirmed)
    ex_idx = np.flatnonzero(exact)
    q = np.arange(n)
    fam = ok & ~exact
    inside = (q > ex_idx[0]) & (q < ex_idx[-1])
    nxt = np.zeros(n, dtype=bool)
    prv = np.zeros(n, dtype=bool)
    nxt[:-1] = exact[1:] & (pos[1:] == pos[:-1] + 1)
    prv[1:] = exact[:-1] & (pos[:-1] == pos[1:] - 1)
    pos[fam & ~(inside | nxt | prv)] = -1
    return pos, exact, amb


def _between(pos: np.ndarray, stream: np.ndarray, ref: _Ref) -> np.ndarray:
    """Ref region index (a ref position) for unpaired query kernels enclosed, on their stream, by paired kernels
    of one region with only that region between them in the eager run; -1 elsewhere."""
    n = len(pos)
    out = np.full(n, -1, np.int64)
    for s in np.unique(stream).tolist():
        idx = np.flatnonzero(stream == s)
        paired = idx[pos[idx] >= 0]
        if len(paired) < 2:
            continue
        for a, b in zip(paired[:-1].tolist(), paired[1:].tolist()):
            gap = idx[(idx > a) & (idx < b)]
            if not len(gap):
                continue
            ra, rb = pos[a], pos[b]
            reg = ref.region[ra]
            if reg is None or ref.region[rb] != reg or rb < ra:
                continue
            if all(r == reg for r in ref.region[ra:rb + 1].tolist()):
                out[gap[pos[gap] < 0]] = ra
    return out


def _groups(profile: Any, graphs: np.ndarray) -> list[list[int]]:
    """Graph launches aligned together: those inside one outermost annotation of their thread (vLLM's engine-step
    range), else each alone. Outermost ranges of one thread do not overlap, so a sorted search finds them."""
    L, S = profile.tables["launches"], profile.tables["scopes"]
    key: dict[tuple, list[int]] = {}
    outer = np.flatnonzero((S["depth"] == 0) & (S["tid"] >= 0) & (S["dur_ns"] > 0)) if profile.n("scopes") else \
        np.zeros(0, np.int64)
    by_thread: dict[tuple, np.ndarray] = {}
    for i in outer[np.lexsort((S["start_ns"][outer], S["tid"][outer], S["rank"][outer]))].tolist():
        by_thread.setdefault((int(S["rank"][i]), int(S["tid"][i])), []).append(i)
    by_thread = {k: np.array(v, np.int64) for k, v in by_thread.items()}
    for g in graphs.tolist():
        rows = by_thread.get((int(L["rank"][g]), int(L["tid"][g])))
        t = L["start_ns"][g]
        hit = -1
        if rows is not None:
            j = int(np.searchsorted(S["start_ns"][rows], t, side="right")) - 1
            if j >= 0 and S["start_ns"][rows[j]] + S["dur_ns"][rows[j]] > t:
                hit = int(rows[j])
        key.setdefault(("scope", hit) if hit >= 0 else ("alone", g), []).append(g)
    return list(key.values())


def align_replays(profile: Any, reg: Regions, family: np.ndarray) -> AlignStats:
    """Fill `reg` (the regions of every kernel row, as `structure.regions` gives them) for replayed kernels that
    have none, from the eager kernels of the same rank; `family` is each kernel's family. Returns the counts."""
    st = AlignStats()
    K = profile.tables["kernels"]
    n = profile.n("kernels")
    if not n:
        return st
    graph = K["graph"]
    has = reg.region != None  # noqa: E711
    # replayed kernels no capture, eager twin or reference explained (an op they have names their region, or
    # says there is none: the alignment never overrides it)
    need = (graph >= 0) & ~has & (K["op"] < 0)
    if not need.any():
        return st
    grid = np.unique(np.stack([K["grid_x"], K["grid_y"], K["grid_z"]], axis=1), axis=0, return_inverse=True)[1]
    grid = grid.reshape(-1).astype(np.int64)
    fam_u, fam_inv = np.unique(np.asarray(family, dtype=object).astype(str), return_inverse=True)
    fam = np.where(np.isin(fam_u, _NO_FAMILY)[fam_inv], -1, fam_inv).astype(np.int64)
    name = K["name"].astype(np.int64)
    start = K["start_ns"]
    cache: dict[tuple, tuple] = {}
    amb = np.zeros(n, dtype=bool)  # kernels some alignment could not place unambiguously
    for rank in np.unique(K["rank"][need]).tolist():
        on_rank = np.flatnonzero(K["rank"] == rank)
        by_start = on_rank[np.lexsort((on_rank, start[on_rank]))]
        eager = by_start[(graph[by_start] < 0) & has[by_start]][:_MAX_REF]
        # the main stream and the side streams (vLLM's shared-expert stream) are aligned apart: across streams
        # the device order of a replay is not its capture order
        main_e = _mode(K["stream"][eager])
        refs = (_Ref(eager[K["stream"][eager] == main_e], name, grid, fam, reg.region, (rank, "main")),
                _Ref(eager[K["stream"][eager] != main_e], name, grid, fam, reg.region, (rank, "side")))
        launches = np.unique(graph[on_rank][need[on_rank]])
        main_q = _mode(K["stream"][on_rank][need[on_rank]])
        # each replay's first and last position in the rank's start order
        gpos = graph[by_start]
        rep = np.flatnonzero(gpos >= 0)
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for i, g in zip(rep.tolist(), gpos[rep].tolist()):
            first.setdefault(g, i)
            last[g] = i
        groups = _groups(profile, launches)
        # each replay alone first (a FULL graph is a whole forward), then, for what is still open, the replays of
        # one step range together with the eager kernels between them (piecewise pieces told apart by position)
        windows = [(first[g], last[g], False) for grp in groups for g in grp]
        windows += [(min(first[g] for g in grp), max(last[g] for g in grp), True) for grp in groups if len(grp) > 1]
        for a, b, together in windows:
            if together and b - a >= _MAX_QUERY:
                st.skipped += 1
                continue
            q = by_start[a:b + 1]
            # alone: the replay's own kernels; together: also the eager kernels between the pieces that have no
            # region (vLLM's eager breaks run no module at replay)
            ok = (need[q] | ((graph[q] < 0) & (reg.region[q] == None))) if together else need[q]  # noqa: E711
            ok &= reg.region[q] == None  # noqa: E711
            if not ok.any():
                continue
            st.sequences += 1
            on_main = K["stream"][q] == main_q
            _attribute(q[on_main], ok[on_main], refs[0], name, grid, fam, K["stream"], reg, amb, st, cache)
            _attribute(q[~on_main], ok[~on_main], refs[1], name, grid, fam, K["stream"], reg, amb, st, cache)
    # the counts
    rows = np.flatnonzero(need)
    dur = K["dur_ns"]
    src = reg.source[rows]
    for s in SOURCES:
        m = rows[src == s]
        st.kernels[s] = len(m)
        st.ns[s] = int(dur[m].sum())
    left = rows[reg.region[rows] == None]  # noqa: E711
    st.unattributed, st.unattributed_ns = len(left), int(dur[left].sum())
    st.ambiguous = int(amb[left].sum())
    st.aligned = len(np.unique(graph[need & np.isin(reg.source.astype(str), SOURCES)]))
    return st


def _mode(a: np.ndarray) -> int:
    if not len(a):
        return -1
    u, c = np.unique(a, return_counts=True)
    return int(u[np.argmax(c)])


def _attribute(rows, eligible, ref: _Ref, name, grid, fam, stream, reg: Regions, amb_rows: np.ndarray, st: AlignStats,
               cache: dict) -> None:
    if not len(rows) or not len(ref):
        return
    if len(rows) > _MAX_CELLS // 64:
        st.skipped += 1
        return
    if len(rows) * len(ref) > _MAX_CELLS:  # a long eager run: its first part is the pattern (bounded memory)
        ref = ref.head(_MAX_CELLS // len(rows))
        st.trimmed += 1
    qn, qg, qf, qs = name[rows], grid[rows], fam[rows], stream[rows]
    key = (ref.key, len(ref), qn.tobytes(), qg.tobytes(), qs.tobytes())
    hit = cache.get(key)
    if hit is None:  # replays of one graph share their sequence: aligned once
        pos, exact, amb = _align(ref, qn, qg, qf)
        around = _between(pos, qs, ref)
        how = np.where(pos >= 0, np.where(exact, "replay-name", "replay-family"), "replay-between").astype(object)
        hit = cache[key] = (np.where(pos >= 0, pos, around), how, amb, bool((pos >= 0).any()))
    p, how, amb, _ = hit
    free = eligible & (reg.region[rows] == None)  # noqa: E711
    amb_rows[rows[amb & free]] = True
    take = free & (p >= 0)
    if not take.any():
        return
    r, e = rows[take], ref.rows[p[take]]
    reg.layer[r], reg.role[r], reg.region[r] = reg.layer[e], reg.role[e], reg.region[e]
    reg.source[r] = how[take]
