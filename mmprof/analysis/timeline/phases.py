"""Phase labels and the per-frame codes the timeline, ranks and diff share (`EventFrame.memo`), and the time order
of interval-sweep points. Split from `mmprof.analysis.timeline.breakdown` (which re-exports `phase_labels` and `NO_PHASE`):
every helper here gives exactly what its per-event formulation gave (tests/test_vectorised_equivalence.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mmprof.analysis.timeline.columns import codes
from mmprof.analysis.timeline.events import EventFrame

NO_PHASE = "all"


def phase_labels(profile, phase_ids: np.ndarray) -> np.ndarray:
    """Phase names per event: the phase string, 'all' when the profile has no phases, 'other' for the rest."""
    if len(phase_ids) == 0 or (phase_ids < 0).all():
        return np.full(len(phase_ids), NO_PHASE, dtype=object)
    uniq, inv = codes(phase_ids)
    lab = np.array([profile.string(int(u)) if u >= 0 else "other" for u in uniq], dtype=object)
    return lab[inv]


def sorted_codes(a: np.ndarray, as_type=None) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(a, return_inverse=True)` by hashing (pd.factorize) and sorting the few distinct values only:
    the same answer without sorting a million events."""
    inv, u = pd.factorize(a)
    u = np.asarray(u) if as_type is None else np.asarray(u).astype(as_type)
    order = np.argsort(u, kind="stable")
    pos = np.empty(len(order), dtype=np.int64)
    pos[order] = np.arange(len(order))
    return u[order], pos[inv]


def phase_codes(profile, phase_ids: np.ndarray, fact=None) -> tuple[np.ndarray, np.ndarray] | None:
    """`sorted_codes(phase_labels(profile, phase_ids), str)` from the integer phase ids: the labels of the few
    distinct ids are looked up, merged where two ids name the same label, and sorted; no per-event label array.
    None where a label would be missing (a string id the table lacks): the caller takes the per-event path."""
    if len(phase_ids) == 0 or (phase_ids < 0).all():
        return None
    inv, uniq = fact if fact is not None else pd.factorize(phase_ids)
    lab = [profile.string(int(u)) if u >= 0 else "other" for u in np.asarray(uniq).tolist()]
    if any(not isinstance(x, str) for x in lab):
        return None
    lcode, lu = pd.factorize(np.array(lab, dtype=object))
    u = np.asarray(lu).astype(str)
    order = np.argsort(u, kind="stable")
    pos = np.empty(len(order), dtype=np.int64)
    pos[order] = np.arange(len(order))
    return u[order], pos[lcode][inv]


def phase_mask(profile, ev: EventFrame, phase: str) -> np.ndarray:
    """`event_phases(profile, ev) == phase`, decided once per distinct phase id rather than per event."""
    n = len(ev)
    if n == 0 or (ev.phase < 0).all():
        return np.full(n, phase == NO_PHASE, dtype=bool)
    inv, uniq = ev.memo("phase_ids", lambda: pd.factorize(ev.phase))
    match = np.array([(profile.string(int(u)) if u >= 0 else "other") == phase for u in np.asarray(uniq).tolist()],
                     dtype=bool)
    return match[inv]


def event_phases(profile, ev: EventFrame) -> np.ndarray:
    """`phase_labels(profile, ev.phase)`, built once per event frame (timeline, ranks and diff share it)."""
    return ev.memo("phase_labels", lambda: phase_labels(profile, ev.phase))


def event_phase_codes(profile, ev: EventFrame) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct phase labels, code per event) of the frame, built once per frame."""
    def build():
        fast = phase_codes(profile, ev.phase, ev.memo("phase_ids", lambda: pd.factorize(ev.phase)))
        return fast if fast is not None else sorted_codes(event_phases(profile, ev), str)
    return ev.memo("phase_codes", build)


def time_order(t: np.ndarray, d: np.ndarray) -> np.ndarray:
    """`np.lexsort((d > 0, t))`: by time, ends and bounds before starts at the same instant, ties in input order.
    One stable sort of one key (time * 2 + is-start) where the times' range allows; event starts and ends come in
    long sorted runs, which the stable sort merges rather than sorts."""
    if len(t):
        lo, hi = int(t.min()), int(t.max())
        if hi - lo < 1 << 61:
            return np.argsort((t - lo) * 2 + (d > 0), kind="stable")
    return np.lexsort((d > 0, t))
