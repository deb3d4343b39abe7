"""The event-frame cache of `mmprof.analysis.timeline.events.events_of`: a frame is built once per profile, rules set and
regions, and never returned for a profile whose contents changed since, nor for another profile object (a copy
that shares the first one's attributes). The truth is the frame a fresh build gives: a cached frame must equal it.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from mmprof.analysis.attribution.classify import default_rules
from mmprof.analysis.timeline.events import content_hash, events_of
from tests.profile_builder import Synth


def _profile():
    s = Synth()
    s.kernel("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn", 1000, 500, scope="layers.0.attn.qkv",
             phase="decode", step=1)
    s.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", 2000, 40,
             phase="decode", step=1)
    s.memcpy(3000, 100, phase="decode", step=1)
    return s.build()


def test_same_profile_same_frame():
    p = _profile()
    a = events_of(p)
    assert events_of(p) is a  # built once
    assert events_of(p, default_rules()) is a  # the default rules are the same rules set


def test_in_place_change_rebuilds():
    p = _profile()
    a = events_of(p)
    assert list(a.dur) == [500, 40, 100]
    p.tables["kernels"]["dur_ns"][0] = 700  # an in-place write, as graph-replay attribution does
    b = events_of(p)
    assert b is not a and list(b.dur) == [700, 40, 100]
    p.tables["kernels"]["step"] = np.array([2, 2])  # a column replaced
    assert list(events_of(p).step[:2]) == [2, 2]


def test_metadata_change_rebuilds():
    p = _profile()
    a = events_of(p)
    p.meta["ranks"][0]["devices"] = []  # no device: no peaks for the roofline
    assert events_of(p) is not a


def test_a_copy_never_gets_the_original_frame():
    p = _profile()
    a = events_of(p)
    q = copy.copy(p)  # shares p.__dict__'s values, the cache included
    q.tables = copy.deepcopy(p.tables)
    b = events_of(q)
    assert b is not a and b.profile is q
    assert events_of(p).profile is p


def test_the_frame_lives_in_the_profiles_derived_cache():
    """The cache is the Profile's own documented object (`Profile.derived`, profiles/profile.py:DerivedCache):
    events_of adds no other attribute to the profile, and the entry is found under the very rules object and
    regions it was built from, with the profile's current stamp, and under nothing else."""
    from mmprof.analysis.timeline import events as ev_mod

    p = _profile()
    attrs = set(vars(p))
    a = events_of(p)
    assert set(vars(p)) == attrs
    rules = default_rules()
    assert p.derived.get("event_frame", (rules, None), ev_mod._stamp(p)) is a
    assert p.derived.get("event_frame", (copy.copy(rules), None), ev_mod._stamp(p)) is None  # another object
    assert p.derived.get("event_frame", (rules, None), ("another stamp",)) is None
    assert p.derived.get("another name", (rules, None), ev_mod._stamp(p)) is None


def test_a_pickled_or_deep_copied_profile_starts_with_an_empty_cache():
    """Parallel import pickles Profiles between processes (importers/__init__.py, jobs > 1): the cache is not sent
    (nothing derived travels or is saved), and the copy builds its own frame, equal to the original's."""
    import pickle

    from mmprof.analysis.timeline import events as ev_mod

    p = _profile()
    a = events_of(p)
    for q in (pickle.loads(pickle.dumps(p)), copy.deepcopy(p)):
        assert q.derived.get("event_frame", (default_rules(), None), ev_mod._stamp(q)) is None
        assert q.derived is not p.derived
        b = events_of(q)
        assert b is not a and b.profile is q and list(b.dur) == list(a.dur)


def _kernels_only(n: int):
    s = Synth()
    for i in range(n):
        s.kernel("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn", 1000 + 600 * i, 500 + i % 7, phase="decode", step=1)
    return s.build()


def test_a_permutation_in_place_rebuilds():
    """A sort in place keeps every value (so a sum or XOR of the column would not change) but moves them: the
    stamp's hash weighs each word by its position (`mmprof.analysis.timeline.events.content_hash`)."""
    p = _kernels_only(40)
    a = events_of(p)
    p.tables["kernels"]["dur_ns"][::-1].sort()          # descending, in place
    b = events_of(p)
    assert b is not a and list(b.dur) == sorted(a.dur.tolist(), reverse=True)


def test_content_hash_sees_any_one_word_and_swaps_in_any_block():
    """Any one changed word changes its block's weighted sum (odd weight x non-zero difference is never 0 mod
    2^64), in the first block, a later one and the tail; a swap of two words changes it too; so do the last bytes
    of a column whose length is not a multiple of 8 bytes."""
    a = np.arange(3 * 65536 + 5, dtype=np.int64)
    h = content_hash(a)
    for i in (0, 65535, 65536 * 2 + 17, len(a) - 1):
        b = a.copy()
        b[i] += 1
        assert content_hash(b) != h, i
    b = a.copy()
    b[[70000, 130000]] = b[[130000, 70000]]
    assert content_hash(b) != h
    c = np.arange(11, dtype=np.int32)
    d = c.copy()
    d[-1] = 0
    assert content_hash(c) != content_hash(d)
    assert content_hash(a) == content_hash(a.copy())  # the same bytes, the same stamp


def test_frame_columns_are_read_only_views_when_no_memcpy():
    """Without memcpy rows the frame shares the kernel columns instead of copying them; it must never write into
    the profile through them (they are read-only), and a write to the profile still rebuilds the frame."""
    p = _kernels_only(5)
    a = events_of(p)
    assert not a.dur.flags.writeable and not a.start.flags.writeable
    with pytest.raises(ValueError):
        a.dur[0] = 1
    assert p.tables["kernels"]["dur_ns"][0] == 500
    p.tables["kernels"]["dur_ns"][0] = 900
    assert events_of(p) is not a and events_of(p).dur[0] == 900
