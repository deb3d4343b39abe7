"""Issue 25, the Kineto importer under hostile input: event limits applied while a gzip is decompressed, chunked
decoding that keeps the events and their shared values identical to a one-shot parse, and per-event memory.

The truths: the event count of a trace is the number of `"ph"` keys (the Chrome trace format: every event has
one); msgspec decodes JSON exactly (same values whatever the chunking); the limits (mmprof.fileio, docs/limits.md)
name their override."""

from __future__ import annotations

import gzip
import json
import random

import msgspec
import pytest

from mmprof.errors import BadInput
from mmprof.importers import _chrome as ch
from mmprof.importers import kineto
from tests.fuzz_corpus import kineto_seed


def test_event_counter_counts_keys_cut_at_any_chunk_boundary():
    """Every split of the bytes into chunks, including splits inside a `"ph"` key, gives the count of the whole."""
    data = json.dumps(kineto_seed()).encode() + b'"ph""ph"p"ph'
    want = data.count(b'"ph"')
    rng = random.Random(7)
    for trial in range(300):
        cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, 40))) if trial else list(range(1, len(data)))
        c = kineto._EventCounter("x", None)
        for a, b in zip([0, *cuts], [*cuts, len(data)]):
            c(data[a:b], False)
        assert c.n == want


def test_too_many_events_stop_while_the_gzip_is_decompressed(tmp_path, monkeypatch):
    """A gzip whose events exceed MMPROF_MAX_EVENTS is refused after the first decompressed chunk (16 MiB), not
    after all of it: the limit applies before decompression finishes."""
    ev = b'{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":%d,"dur":1}'
    f = tmp_path / "many.json.gz"
    with gzip.open(f, "wb", compresslevel=1) as g:
        g.write(b'{"traceEvents":[')
        g.write(b",".join(ev % i for i in range(400_000)))
        g.write(b"]}")
    total = len(gzip.decompress(f.read_bytes()))
    assert total > 20 * 2**20
    seen = []
    orig = kineto._EventCounter.__call__

    def spy(self, chunk, gzipped):
        seen.append(len(chunk))
        return orig(self, chunk, gzipped)

    monkeypatch.setattr(kineto._EventCounter, "__call__", spy)
    monkeypatch.setenv("MMPROF_MAX_EVENTS", "100000")
    with pytest.raises(BadInput, match="exceed the limit of 100,000; raise it with MMPROF_MAX_EVENTS"):
        kineto.load_one(f)
    assert sum(seen) < total and len(seen) == 1


def _fields(e) -> tuple:
    """Every field of an event and of its args (the full Args' field list, so lean and full decodes compare)."""
    a = e.args
    args = None if a is None else tuple((bytes(v) or None) if isinstance(v, msgspec.Raw) else v
                                        for v in (getattr(a, f) for f in ch.Args.__struct_fields__))
    return tuple(getattr(e, f) for f in ch.Event.__struct_fields__ if f != "args") + (args,)


@pytest.mark.parametrize("collective", [False, True])
@pytest.mark.parametrize("chunk", [1, 2, 7, 300, 65_536])
def test_chunked_decode_equals_a_one_shot_parse(monkeypatch, chunk, collective):
    """Decoding in windows of any size (bytes: mmprof.importers._json_windows, a window of 1 byte ends at every
    element) gives the events a single msgspec parse into the full Event gives, field by field (a trace without a
    "Collective name" key uses the lean args, whose collective fields read None, as they are; one with it keeps
    them), and equal strings and grid triples become one shared object."""
    from mmprof.importers import _json_windows

    doc = kineto_seed()
    if collective:
        doc["traceEvents"].insert(4, {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
                                      "ts": 1005.0, "dur": 1.0, "args": {"Collective name": "allreduce",
                                                                        "dtype": "Float", "In msg nelems": 4,
                                                                        "Process Group Ranks": [0, 1]}})
    raw = json.dumps(doc).encode()
    monkeypatch.setattr(_json_windows, "WINDOW", chunk)
    got, bad = ch.decode(raw, "x")
    want = msgspec.json.decode(raw, type=ch.Trace)
    assert bad == 0 and got.distributedInfo == want.distributedInfo and got.deviceProperties == want.deviceProperties
    assert [_fields(e) for e in got.traceEvents] == [_fields(e) for e in want.traceEvents]
    lean = [isinstance(e.args, ch.LeanArgs) for e in got.traceEvents if e.args is not None]
    assert lean and all(lean) != collective and any(lean) != collective
    assert any(e.args is not None and e.args.coll_name == "allreduce" for e in got.traceEvents) == collective
    kernels = [e for e in got.traceEvents if e.cat == "kernel"]
    assert len({id(e.cat) for e in kernels}) == 1
    assert len({id(e.args.grid) for e in kernels}) == 1  # every kernel of the seed has grid [4, 1, 1]


def test_lean_args_lack_only_rare_fields():
    """LeanArgs holds every field of Args except the collective metadata (read only where "Collective name" is set,
    the key that selects the full args) and `kernel` (read by nothing); those read None on it."""
    lean, full = set(ch.LeanArgs.__struct_fields__), set(ch.Args.__struct_fields__)
    assert lean < full and full - lean == set(ch._RARE_FIELDS)
    assert all(getattr(ch.LeanArgs(), f) is None for f in full - lean)


def test_a_misfit_event_in_one_chunk_drops_only_that_event(monkeypatch):
    """A chunk holding an event of the wrong types is decoded event by event: the misfit is counted, its
    neighbours (and every other chunk) are kept."""
    doc = kineto_seed()
    n = len(doc["traceEvents"])
    doc["traceEvents"].insert(5, {"ph": "X", "cat": "kernel", "ts": {"not": "a number"}})
    doc["traceEvents"].insert(9, 17)
    from mmprof.importers import _json_windows

    monkeypatch.setattr(_json_windows, "WINDOW", 400)  # bytes: a window of a few events
    got, bad = ch.decode(json.dumps(doc).encode(), "x")
    assert bad == 2 and len(got.traceEvents) == n


def _corpus_names() -> list[str]:
    from tests.conftest import DATA

    rows = (DATA / "kernel_corpus" / "corpus.tsv").read_text().splitlines()
    return [r.split("\t")[0] for r in rows if r and not r.startswith("#")]


def test_real_names_classify_from_their_first_1024_characters():
    """The reason CLASSIFY_MAX_CHARS (2048) may cut: every name of the labelled corpus (tests/data/kernel_corpus,
    names from real traces and wheels, up to 8.6K characters) gets the same rule from its first 1,024 characters
    (and the first 1,024 of its function name) as from the whole name."""
    from mmprof.analysis.attribution.classify import default_rules
    from mmprof.names import function_name

    rules = default_rules().rules
    names = _corpus_names()
    assert len(names) > 600 and max(map(len, names)) > 4096

    def rule_of(name: str, cap: int | None) -> str | None:
        text, func = name[:cap], function_name(name)[:cap]
        return next((r.id for r in rules if r.apply(text, func) is not None), None)

    assert [rule_of(n, 1024) for n in names] == [rule_of(n, None) for n in names]


def test_rules_never_search_more_than_the_cap(monkeypatch):
    """A 1 MiB name that repeats a rule's prefix (`vllm::`, each occurrence a match start scanning to the end: the
    quadratic case) reaches every rule's regex cut to CLASSIFY_MAX_CHARS, and still classifies by its start."""
    from mmprof.analysis.attribution import classify as cl

    seen: list[int] = []

    class Spy:
        def __init__(self, rx):
            self.rx = rx

        def search(self, s):
            seen.append(len(s))
            return self.rx.search(s)

    rs = cl.RuleSet(cl.builtin_rules())
    for r in rs.rules:
        object.__setattr__(r, "regex", Spy(r.regex))
    rs.classify("vllm::" * 174_763)
    assert seen and max(seen) <= cl.CLASSIFY_MAX_CHARS
    assert rs.classify("void vllm::rms_norm_kernel<c10::BFloat16>(int)" + "x" * 2**20).family == "norm"


def test_overlapping_layer_ranges_are_a_union_built_once():
    """`layers = "0-65535"` repeated 100,000 times (800 KB of spec) is the 65,536 layers once (a union of sorted
    ranges, not one set insertion per layer per range); overlapping and out-of-order ranges give each layer once."""
    from mmprof.analysis.checks.spec import MAX_LAYER, _parse_layers

    assert _parse_layers(",".join(["0-65535"] * 100_000), "x") == frozenset(range(MAX_LAYER + 1))
    assert sorted(_parse_layers("8, 4-6,3-5,10-10,5", "x")) == [3, 4, 5, 6, 8, 10]
    with pytest.raises(BadInput, match="layers are 0..65535"):
        _parse_layers("0-65536", "x")
    with pytest.raises(BadInput, match="bad layer range"):
        _parse_layers("0-" + "9" * 30, "x")


def test_report_top_must_be_a_positive_count(capsys):
    """`report --top -5` was accepted and printed tables as if it were the default: now a usage error (exit 2)."""
    from mmprof.cli import main

    with pytest.raises(SystemExit) as e:
        main(["report", "x.json", "--top", "-5"])
    assert e.value.code == 2 and "--top" in capsys.readouterr().err
