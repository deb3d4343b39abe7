"""The one event frame of a profile: its device events, classified once, with region, category and roofline.

Every analysis that looks at "what ran" (timeline, launch, report, verify-fastpath, diff, classify) reads this
frame; nothing classifies twice, and there is one vocabulary (the TOML rules of `mmprof.analysis.attribution.classify`).

Device events are
- on a GPU profile: every kernel and every memcpy/memset row;
- on a CPU run (no kernels, no copies): the *outermost compute ops* - CPU ops whose rule gives a family other
  than `other`, with no such op above them. `aten::_grouped_mm` on CPU loops over `aten::mm` and
  `aten::linear` calls `aten::addmm`: counting outermost ops sees what the model asked for, and outermost ops
  never overlap on a thread, so their time adds up like kernels on a stream. Views and allocations (family
  `other`) and unknown frames are transparent; time between compute ops is host overhead. An outermost op takes
  path=fallback from any fallback op below it (the math SDPA under `aten::scaled_dot_product_attention`).

Per event: rank, stream (thread for CPU ops), start/end/dur (ns), name/scope/phase (string ids), step, the
launch call's start/end (-1 unknown), the CPU op carrying its shapes (`op`), family/variant/library/path/rule,
the timeline category (`cat`), layer/role/region/label source (`mmprof.analysis.attribution.structure`) and the roofline.
The order in which the columns are made is the list of passes in `mmprof.analysis.timeline.frame_passes`
(`GPU_PASSES`, `CPU_PASSES`). `events_of(profile)` builds it once per profile, rules set and regions, and keeps it
in the profile's explicit cache
(`Profile.derived`, a `mmprof.profiles.profile.DerivedCache`); the entry holds a stamp of the profile's contents,
so a mutated profile (or a copy) never gets a stale frame.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.attribution.classify import RuleSet, default_rules
from mmprof.analysis.attribution.roofline import Roofline
from mmprof.analysis.attribution.structure import Regions
from mmprof.analysis.timeline.frame_passes import CPU_PASSES, GPU_PASSES, FrameBuild, run_passes


@dataclass
class EventFrame:
    """Device events of one profile (see the module docstring). Arrays are aligned, one entry per event."""

    source: str                  # "kernels" or "cpu_ops"
    table: np.ndarray            # int8 TABLE_*: which Profile table the event is a row of
    row: np.ndarray              # its row there
    rank: np.ndarray
    stream: np.ndarray           # GPU stream; the thread id for CPU ops
    start: np.ndarray
    end: np.ndarray
    dur: np.ndarray
    name: np.ndarray             # string ids
    scope: np.ndarray            # string ids
    phase: np.ndarray            # string ids
    step: np.ndarray
    launch_start: np.ndarray     # the launch call, -1 unknown
    launch_end: np.ndarray
    op: np.ndarray               # CPU op row carrying the shapes, -1 none
    graph: np.ndarray            # the graph launch (launches row) that replayed it, -1 for one-by-one launches
    family: pd.Categorical
    variant: pd.Categorical      # the rule's variant, or the event's name when the rule gives none
    library: pd.Categorical
    path: pd.Categorical         # fast | fallback | neutral
    rule: pd.Categorical         # rule id; NaN = unclassified
    cat: np.ndarray              # int8 CAT_*
    layer: np.ndarray
    role: np.ndarray             # object: str or None
    region: np.ndarray           # object: str or None
    label_source: np.ndarray     # object: annotation | module | shape | None
    roof: Roofline
    profile: Any = field(repr=False, default=None)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    graph_align: Any = None   # mmprof.analysis.attribution.graph_align.AlignStats of the replays aligned with eager kernels
    inductor: Any = None      # mmprof.analysis.attribution.inductor.InductorStats: the Inductor kernels placed and not
    evidence: Any = None      # per event: rule | tokens | op | None (what decided the family); None on CPU runs
    evidence_stats: Any = None  # mmprof.analysis.attribution.evidence.EvidenceStats (GPU profiles)
    _frame: Any = field(default=None, repr=False)
    _memo: dict = field(default_factory=dict, repr=False)  # derived per-event arrays the analyses share (`memo`)

    def __len__(self) -> int:
        return len(self.rank)

    def memo(self, key: str, build):
        """A value derived from this frame's arrays (phase labels, codes), built once by `build()` and shared by
        the analyses that read it (timeline, ranks and diff each need the same phase labels). Callers must treat
        it as read-only."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    @property
    def classified(self) -> np.ndarray:
        return np.asarray(pd.notna(self.rule))

    def rows_of(self, table: int) -> np.ndarray:
        return self.row[self.table == table]

    def frame(self) -> pd.DataFrame:
        """A decoded DataFrame view (strings, not ids), for selection by globs and groupby; built once.

        Columns: name, rank, stream, start_ns, dur_ns, step, phase, layer, role, region, label_source, family,
        variant, library, path, rule, kind (kernel | memcpy | op)."""
        if self._frame is None:
            p = self.profile
            lut = np.array(p.strings + [None], dtype=object)

            def dec(a: np.ndarray) -> np.ndarray:
                return lut[np.where(a < 0, len(p.strings), a)] if len(a) else np.array([], dtype=object)

            rule_var = np.asarray(self.variant.astype(object))
            df = pd.DataFrame({
                "name": dec(self.name), "rank": self.rank, "stream": self.stream, "start_ns": self.start,
                "dur_ns": self.dur, "step": self.step, "phase": dec(self.phase), "layer": self.layer,
                "role": self.role, "region": self.region, "label_source": self.label_source,
                "family": np.asarray(self.family.astype(object)), "variant": rule_var,
                "library": np.asarray(self.library.astype(object)), "path": np.asarray(self.path.astype(object)),
                "rule": np.asarray(self.rule.astype(object)),
                "kind": np.array(["kernel", "memcpy", "op"], dtype=object)[self.table] if len(self) else [],
            })
            self._frame = df
        return self._frame


_HASH_BLOCK = 1 << 16
_HASH_WEIGHTS: list[np.ndarray] = []  # one odd pseudo-random uint64 weight per word of a block (fixed seed)


def _weights() -> np.ndarray:
    if not _HASH_WEIGHTS:
        w = np.random.default_rng(0x6D6D70726F66).integers(0, 1 << 63, _HASH_BLOCK, dtype=np.uint64)
        _HASH_WEIGHTS.append((w << np.uint64(1)) | np.uint64(1))
    return _HASH_WEIGHTS[0]


def content_hash(a: np.ndarray) -> tuple:
    """A position-sensitive hash of an array's bytes, at memory speed: the bytes read as 64-bit words, per block
    of 65,536 words the sum of word x odd weight (mod 2^64; one matrix-vector product), and a CRC-32 of the
    block sums and of the tail bytes. Changing any one word changes its block's sum (an odd weight times a
    non-zero difference is never 0 mod 2^64); several changes in one block (a permutation, a sort) cancel only
    by a 2^-64-scale coincidence. About 4x faster than a CRC-32 of the bytes."""
    buf = memoryview(np.ascontiguousarray(a)).cast("B")
    nw = len(buf) // 8
    words = np.frombuffer(buf, dtype="<u8", count=nw)
    nb = nw // _HASH_BLOCK
    with np.errstate(over="ignore"):
        sums = words[:nb * _HASH_BLOCK].reshape(nb, _HASH_BLOCK) @ _weights() if nb else np.zeros(0, np.uint64)
        rest = words[nb * _HASH_BLOCK:]
        last = rest @ _weights()[:len(rest)] if len(rest) else np.uint64(0)
    return nb, zlib.crc32(sums.tobytes() + np.uint64(last).tobytes() + bytes(buf[nw * 8:]))


def _stamp(profile: Any) -> tuple:
    """What the frame is built from, cheaply: every table column's length, dtype and content hash
    (`content_hash`: an in-place write such as graph-replay attribution changes it), the string count and the
    metadata (device peaks feed the roofline). About 8 ms per 70 MB of columns: far below the cost of building
    a frame."""
    cols = tuple((t, c, a.dtype.str, len(a), content_hash(a))
                 for t, table in sorted(profile.tables.items()) for c, a in sorted(table.items()))
    meta = zlib.crc32(json.dumps(profile.meta, sort_keys=True, default=str).encode())
    return cols, len(profile.strings), meta


_FRAME_COLS = ("table", "row", "rank", "stream", "start", "end", "dur", "name", "scope", "phase", "step",
               "launch_start", "launch_end", "op", "graph", "family", "variant", "library", "path", "rule", "cat",
               "layer", "role", "region", "roof")


def events_of(profile: Any, rules: RuleSet | None = None, shape_regions: Regions | None = None) -> EventFrame:
    """The event frame of a profile (kept in `profile.derived` per rules set and regions; see the module docstring).
    A cached frame is returned only for the very profile it was built from (not a copy sharing its attributes)
    and only while that profile's tables, strings and metadata are unchanged; otherwise it is rebuilt. A profile
    with no kernels, copies or CPU ops gives an empty frame: the caller says what that means."""
    rs = rules or default_rules()
    stamp = _stamp(profile)
    hit = profile.derived.get("event_frame", (rs, shape_regions), stamp)
    if hit is not None:
        return hit
    cpu = profile.n("kernels") == 0 and profile.n("memcpy") == 0 and profile.n("ops") > 0
    b = run_passes(CPU_PASSES if cpu else GPU_PASSES, FrameBuild(profile, rs, shape_regions))
    c = b.cols
    frame = EventFrame(source="cpu_ops" if cpu else "kernels", **{f: c[f] for f in _FRAME_COLS},
                       label_source=c["label_source"], profile=profile, notes=b.notes, warnings=b.warnings,
                       graph_align=c.get("graph_align"), inductor=c.get("inductor"), evidence=c.get("evidence"),
                       evidence_stats=c.get("evidence_stats"))
    profile.derived.put("event_frame", (rs, shape_regions), stamp, frame)
    return frame
