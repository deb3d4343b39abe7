"""CUDA / HIP graph replays: mark the kernels a graph launch ran and find the ops that issued them.

A graph replay is one runtime call (`cudaGraphLaunch`, `cuGraphLaunch`, `hipGraphLaunch`) whose kernels and
copies share its correlation id, so an importer links them all to that one launch row. They have no launching
op of their own, hence no shapes and no scope. `attribute_replays(profile)` works on any imported Profile:

1. **mark**: `graph` = the launch row of the graph launch for every kernel and copy it ran (-1 otherwise).
2. **capture** (best evidence): ops recorded while the graph was captured. A capture is the launch calls on one
   thread between `*StreamBeginCapture` and `*StreamEndCapture`; each kernel launch, memcpy or memset call there
   created one graph node, in order, and names its op. A replay whose device events pair up with one capture
   (same count of kernels and of copies, captured before the replay) gets, event by event in start order, the op
   of the call that created its node. Replays that several captures with different ops would fit are left to
   the next rule (counted as ambiguous).
3. **eager**: the same kernel sequence run without a graph, in this profile or in a reference profile
   (`ref`): each replay's kernels, as (name, grid, main or side stream) tokens, are aligned with the eager kernels
   (launch order); a kernel matched inside a run of at least 2 kernels matched in a row takes the eager kernel's
   op (a lone match is a coincidence of names: vLLM's decode replays share a Fill or a cuBLAS tile with other
   parts of the prefill, docs/graphs.md). A reference profile's ops are copied in (start = the graph
   launch, duration 0, `op_source` ref) so shapes, scopes and the roofline follow.
4. otherwise the kernels keep no op (`op_source` null) and are classified by name only. Shapes are never guessed.

Copies in a replay are attributed by the capture rule only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

import numpy as np
import pandas as pd

from mmprof.profiles.profile import Profile

GRAPH_LAUNCH = re.compile(r"graph\w*launch", re.IGNORECASE)          # cudaGraphLaunch, cuGraphLaunch, hipGraphLaunch
BEGIN_CAPTURE = re.compile(r"streambegincapture", re.IGNORECASE)    # cudaStreamBeginCapture(ToGraph), hip...
END_CAPTURE = re.compile(r"streamendcapture", re.IGNORECASE)
_NODE_CALL = re.compile(r"launch|memcpy|memset", re.IGNORECASE)     # calls that add a node while capturing
_COPY_CALL = re.compile(r"memcpy|memset", re.IGNORECASE)
_NOT_NODE = re.compile(r"graph\w*launch|hostfunc|launchhost", re.IGNORECASE)
_MAX_CANDIDATES = 256
_MIN_RUN = 2   # a partial eager match counts only in runs of this many kernels matched in a row

SOURCES = ("launch", "capture", "eager", "ref")


@dataclass
class GraphReport:
    """What the pass found (also written to profile.meta["graphs"])."""

    replays: int = 0
    kernels: int = 0
    copies: int = 0
    captures: int = 0
    kernel_ns: int = 0
    attributed_ns: dict[str, int] = field(default_factory=lambda: {"capture": 0, "eager": 0, "ref": 0})
    ambiguous: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"replays": self.replays, "kernels": self.kernels, "copies": self.copies, "captures": self.captures,
                "kernel_ns": self.kernel_ns, "attributed_ns": dict(self.attributed_ns), "ambiguous": self.ambiguous}


def _name_mask(profile: Profile, codes: np.ndarray, *patterns, exclude: re.Pattern | None = None) -> np.ndarray:
    """Rows whose string (by id) matches every pattern and not `exclude`."""
    out = np.zeros(len(codes), dtype=bool)
    if not len(codes):
        return out
    uniq, inv = np.unique(codes, return_inverse=True)
    hit = np.zeros(len(uniq), dtype=bool)
    for j, c in enumerate(uniq.tolist()):
        s = profile.string(int(c)) if c >= 0 else None
        hit[j] = bool(s) and all(p.search(s) for p in patterns) and not (exclude is not None and exclude.search(s))
    return hit[inv.reshape(-1)]


def mark_replays(profile: Profile) -> np.ndarray:
    """Set kernels/memcpy `graph` and `op_source` (launch where an op is known); returns the graph-launch rows."""
    L = profile.tables["launches"]
    is_graph = _name_mask(profile, L["name"], GRAPH_LAUNCH)
    graph_rows = np.flatnonzero(is_graph)
    src_launch = _string_id(profile, "launch")
    for t in ("kernels", "memcpy"):
        T = profile.tables[t]
        la = T["launch"]
        ok = (la >= 0) & (la < len(is_graph))
        g = np.where(ok, la, 0)
        replay = ok & is_graph[g] if len(is_graph) else np.zeros(len(la), dtype=bool)
        T["graph"] = np.where(replay, la, -1).astype(np.int64)
        # the op enclosing a graph launch did not issue the replayed work: it is found below or left unknown
        T["op"] = np.where(replay, -1, T["op"]).astype(np.int64)
        T["op_source"] = np.where(T["op"] >= 0, src_launch, -1).astype(np.int32)
    return graph_rows


def unmarked_replays(profile: Profile) -> bool:
    """True when the profile holds graph launches that ran kernels but no kernel is marked as replayed (a
    profile written before marking existed, or by a writer that skipped it)."""
    L, K = profile.tables["launches"], profile.tables["kernels"]
    if not profile.n("kernels") or (K["graph"] >= 0).any():
        return False
    la = K["launch"]
    la = la[(la >= 0) & (la < profile.n("launches"))]
    graph_names = [c for c in pd.unique(L["name"]).tolist() if _name_mask(profile, np.array([c]), GRAPH_LAUNCH)[0]]
    if not graph_names or not len(la):   # the common case, decided on the distinct launch names alone
        return False
    return bool(np.isin(L["name"][la], graph_names).any())


def _string_id(profile: Profile, s: str) -> int:
    try:
        return profile.strings.index(s)
    except ValueError:
        profile.strings.append(s)
        return len(profile.strings) - 1


@dataclass
class _Capture:
    rank: int
    end_ns: int
    nodes: np.ndarray      # launch rows, in call order
    copy: np.ndarray       # bool per node: memcpy / memset call
    ops: np.ndarray        # launches.op per node
    sig: int = 0           # identifies the ops sequence (captures of one structure with other ops differ here)


def _captures(profile: Profile) -> list[_Capture]:
    L = profile.tables["launches"]
    if not profile.n("launches"):
        return []
    begin = _name_mask(profile, L["name"], BEGIN_CAPTURE)
    end = _name_mask(profile, L["name"], END_CAPTURE)
    if not begin.any():
        return []
    node = _name_mask(profile, L["name"], _NODE_CALL, exclude=_NOT_NODE)
    copy = _name_mask(profile, L["name"], _COPY_CALL)
    out = []
    for b in np.flatnonzero(begin).tolist():
        rank, tid, t0 = L["rank"][b], L["tid"][b], L["start_ns"][b]
        same = (L["rank"] == rank) & (L["tid"] == tid)
        ends = np.flatnonzero(end & same & (L["start_ns"] >= t0))
        if not len(ends):
            continue
        e = ends[np.argmin(L["start_ns"][ends])]
        t1 = L["start_ns"][e]
        rows = np.flatnonzero(node & same & (L["start_ns"] > t0) & (L["start_ns"] < t1))
        rows = rows[np.argsort(L["start_ns"][rows], kind="stable")]
        ops = L["op"][rows]
        out.append(_Capture(int(rank), int(t1), rows, copy[rows], ops, hash(ops.tobytes())))
    return out


def _replays(profile: Profile) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """graph launch row -> (events, is_copy): events as (table 0/1, row) pairs in start order."""
    K, M = profile.tables["kernels"], profile.tables["memcpy"]
    g = np.concatenate([K["graph"], M["graph"]])
    start = np.concatenate([K["start_ns"], M["start_ns"]])
    table = np.concatenate([np.zeros(profile.n("kernels"), np.int8), np.ones(profile.n("memcpy"), np.int8)])
    row = np.concatenate([np.arange(profile.n("kernels")), np.arange(profile.n("memcpy"))])
    sel = np.flatnonzero(g >= 0)
    order = sel[np.lexsort((row[sel], table[sel], start[sel], g[sel]))]
    out = {}
    if not len(order):
        return out
    gs = g[order]
    cuts = np.flatnonzero(np.diff(gs)) + 1
    for part in np.split(order, cuts):
        out[int(g[part[0]])] = (np.stack([table[part], row[part]], axis=1), table[part] == 1)
    return out


def _match_capture(caps: list[_Capture], rank: int, launch_ns: int, is_copy: np.ndarray):
    """The capture whose nodes pair up with a replay's events, ordered per kind; None or 'ambiguous'."""
    nk, nc = int((~is_copy).sum()), int(is_copy.sum())
    fits = [c for c in caps if c.rank == rank and c.end_ns <= launch_ns and len(c.nodes) == nk + nc
            and int(c.copy.sum()) == nc]
    if not fits:
        return None
    if len({c.sig for c in fits}) > 1:
        # the same node structure captured several times with different ops (e.g. one graph per batch size)
        return "ambiguous"
    return max(fits, key=lambda c: c.end_ns)


def _apply_capture(profile: Profile, events: np.ndarray, is_copy: np.ndarray, cap: _Capture, src: int) -> None:
    for kind in (False, True):
        ev = events[is_copy == kind]
        ops = cap.ops[cap.copy == kind]
        T = profile.tables["memcpy" if kind else "kernels"]
        rows = ev[:, 1]
        T["op"][rows] = ops
        T["op_source"][rows] = np.where(ops >= 0, src, -1)


class _Tokens:
    """(kernel name, grid, side stream) -> small int, shared by the profile and its reference. A kernel on a side
    stream (any stream but the one most of the run's kernels use: vLLM's shared-expert stream) is another token
    than the same kernel on the main stream: the shared expert's gate GEMM on the side stream and the router GEMM
    on the main one pick the same cuBLAS kernel and grid at some batch sizes, and are not twins."""

    def __init__(self) -> None:
        self.ids: dict[tuple, int] = {}

    def of(self, profile: Profile, rows: np.ndarray) -> np.ndarray:
        K = profile.tables["kernels"]
        names = [profile.string(int(c)) for c in K["name"][rows].tolist()]
        grids = zip(K["grid_x"][rows].tolist(), K["grid_y"][rows].tolist(), K["grid_z"][rows].tolist())
        st = K["stream"][rows]
        side = (st != _mode(st)).tolist() if len(rows) else []
        ids = self.ids
        return np.fromiter((ids.setdefault((n, *gr, sd), len(ids)) for n, gr, sd in zip(names, grids, side)),
                           dtype=np.int64, count=len(rows))


def _mode(a: np.ndarray) -> int:
    u, c = np.unique(a, return_counts=True)
    return int(u[np.argmax(c)])


class _Eager:
    """Eager kernels of one rank (or of a reference profile) in launch order, with the ops that issued them."""

    def __init__(self, profile: Profile, rows: np.ndarray, tokens: _Tokens) -> None:
        K, L = profile.tables["kernels"], profile.tables["launches"]
        la = K["launch"][rows]
        t = np.where(la >= 0, L["start_ns"][np.clip(la, 0, max(len(L["start_ns"]) - 1, 0))] if len(L["start_ns"])
                     else K["start_ns"][rows], K["start_ns"][rows])
        o = np.lexsort((K["start_ns"][rows], t))
        self.rows = rows[o]
        self.ops = K["op"][self.rows]
        self.tok = tokens.of(profile, self.rows)
        self.count = np.bincount(self.tok) if len(self.tok) else np.zeros(0, np.int64)

    def align(self, seq: np.ndarray) -> np.ndarray:
        """For each token of `seq`, the position in this run it matched, or -1."""
        n, m = len(seq), len(self.tok)
        out = np.full(n, -1, np.int64)
        if not n or not m:
            return out
        cnt = np.array([self.count[t] if t < len(self.count) else 0 for t in seq.tolist()])
        if not cnt.any():
            return out
        k = int(np.argmin(np.where(cnt > 0, cnt, np.iinfo(np.int64).max)))  # the rarest token as anchor
        starts = np.flatnonzero(self.tok == seq[k]) - k
        starts = starts[(starts >= -n // 2) & (starts < m)][:_MAX_CANDIDATES]
        best, best_s = -1, 0
        for s in starts.tolist():
            lo, hi = max(s, 0), min(s + n, m)
            score = int((self.tok[lo:hi] == seq[lo - s:hi - s]).sum())
            if score > best:
                best, best_s = score, s
        if best <= 0:
            return out
        if best == n:
            return np.arange(best_s, best_s + n)
        # partial: refine around the best window with a sequence alignment (insertions / deletions); only runs of
        # _MIN_RUN or more kernels matched in a row count: a lone match (a Fill kernel, a cuBLAS tile that another
        # part of the layer uses at another batch size) is a coincidence of names, not a twin
        pad = max(8, n // 10)
        lo, hi = max(best_s - pad, 0), min(best_s + n + pad, m)
        sm = SequenceMatcher(None, seq.tolist(), self.tok[lo:hi].tolist(), autojunk=False)
        for a, b, size in sm.get_matching_blocks():
            if size >= _MIN_RUN:
                out[a:a + size] = np.arange(lo + b, lo + b + size)
        return out


def attribute_replays(profile: Profile, ref: Profile | None = None) -> GraphReport:
    """Mark graph replays and attribute their kernels (capture, then eager in this profile, then `ref`)."""
    graph_rows = mark_replays(profile)
    rep = GraphReport()
    if not len(graph_rows):
        return rep
    replays = _replays(profile)
    caps = _captures(profile)
    L, K = profile.tables["launches"], profile.tables["kernels"]
    rep.replays = len(replays)
    rep.captures = len(caps)
    src = {s: _string_id(profile, s) for s in SOURCES}
    for g, (events, is_copy) in replays.items():
        cap = _match_capture(caps, int(L["rank"][g]), int(L["start_ns"][g]), is_copy)
        if cap == "ambiguous":
            rep.ambiguous += 1
        elif cap is not None:
            _apply_capture(profile, events, is_copy, cap, src["capture"])
    tokens = _Tokens()
    eager_runs: dict[int, _Eager] = {}
    ref_run = None
    if ref is not None:
        RK = ref.tables["kernels"]
        rg = RK["graph"]
        ref_run = _Eager(ref, np.flatnonzero((rg < 0) & (RK["op"] >= 0)), tokens)
    proxies = _Proxies(profile, ref) if ref is not None else None
    aligned: dict[tuple, np.ndarray] = {}  # replays of one graph share their kernel sequence: align it once
    for g, (events, is_copy) in replays.items():
        krows = events[~is_copy, 1]
        need = K["op"][krows] < 0
        if not need.any():
            continue
        rank = int(L["rank"][g])
        if rank not in eager_runs:
            eager_runs[rank] = _Eager(profile, np.flatnonzero((K["graph"] < 0) & (K["op"] >= 0) & (K["rank"] == rank)),
                                      tokens)
        seq = tokens.of(profile, krows)
        for run, name in ((eager_runs[rank], "eager"), (ref_run, "ref")):
            if run is None or not need.any():
                continue
            key = (name, rank, seq.tobytes())
            pos = aligned.get(key)
            if pos is None:
                pos = aligned[key] = run.align(seq)
            hit = need & (pos >= 0)
            if not hit.any():
                continue
            ops = run.ops[pos[hit]]
            if name == "ref":
                first = krows[hit][0]
                ops = np.array([proxies.row(int(o), g, int(K["phase"][first]), int(K["step"][first]))
                                for o in ops.tolist()], np.int64)
            K["op"][krows[hit]] = ops
            K["op_source"][krows[hit]] = src[name]
            need &= ~hit
    if proxies is not None:
        proxies.write()
    # the report
    kg = K["graph"] >= 0
    rep.kernels = int(kg.sum())
    rep.copies = int((profile.tables["memcpy"]["graph"] >= 0).sum())
    dur = K["dur_ns"]
    rep.kernel_ns = int(dur[kg].sum())
    for name in ("capture", "eager", "ref"):
        rep.attributed_ns[name] = int(dur[kg & (K["op_source"] == src[name])].sum())
    profile.meta["graphs"] = rep.to_dict()
    return rep


_OP_COPY = ("name", "input_dims", "input_types", "scope", "scope_path")


class _Proxies:
    """This profile's copies of a reference profile's ops, one per reference op, placed at the first graph launch
    that uses it (duration 0); appended to the ops table at once by `write`."""

    def __init__(self, profile: Profile, ref: Profile) -> None:
        self.profile, self.ref = profile, ref
        self.n0 = profile.n("ops")
        self.index: dict[int, int] = {}
        self.rows: list[dict[str, int]] = []

    def row(self, o: int, g: int, phase: int, step: int) -> int:
        """The ops row that will hold the copy of reference op `o`."""
        if o not in self.index:
            P, R, L = self.profile, self.ref.tables["ops"], self.profile.tables["launches"]
            vals = {c: (_string_id(P, self.ref.string(int(R[c][o]))) if R[c][o] >= 0 else -1) for c in _OP_COPY}
            vals.update(rank=int(L["rank"][g]), tid=int(L["tid"][g]), start_ns=int(L["start_ns"][g]), dur_ns=0,
                        phase=phase, step=step)
            self.index[o] = self.n0 + len(self.rows)
            self.rows.append(vals)
        return self.index[o]

    def write(self) -> None:
        O = self.profile.tables["ops"]
        if self.rows:
            for c, arr in O.items():
                O[c] = np.concatenate([arr, np.array([r.get(c, -1) for r in self.rows], dtype=arr.dtype)])
