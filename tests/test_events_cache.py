"""The event-frame cache of `mmprof.analysis.events.events_of`: a frame is built once per profile, rules set and
regions, and never returned for a profile whose contents changed since, nor for another profile object (a copy
that shares the first one's attributes). The truth is the frame a fresh build gives: a cached frame must equal it.
"""

from __future__ import annotations

import copy

import numpy as np

from mmprof.analysis.classify import default_rules
from mmprof.analysis.events import events_of
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
    from mmprof.analysis import events as ev_mod

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

    from mmprof.analysis import events as ev_mod

    p = _profile()
    a = events_of(p)
    for q in (pickle.loads(pickle.dumps(p)), copy.deepcopy(p)):
        assert q.derived.get("event_frame", (default_rules(), None), ev_mod._stamp(q)) is None
        assert q.derived is not p.derived
        b = events_of(q)
        assert b is not a and b.profile is q and list(b.dur) == list(a.dur)
