"""The streaming Kineto import (importers/_kineto_stream.py, _kineto_columns.py) gives the Profile the Struct path
gives (MMPROF_KINETO_REFERENCE=1: the whole document decoded, one Struct per event): every table, every column,
the string table and the metadata, on every real Kineto trace of tests/data, examples/ and the shared samples
(those beside the checkout on the project's machines and in CI).

The pieces are made tiny here (PIECE_BYTES) so that every trace is cut many times, also inside strings and nested
objects (a wrong cut must be found by the decoder and joined, never silently change an event)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from mmprof.errors import BadInput
from mmprof.importers import _kineto_stream, detect, kineto
from mmprof.profiles.io import to_dict
from tests.conftest import DATA, ROOT, SHARED_SAMPLES


def _kineto_files() -> list[Path]:
    out = []
    for root in (DATA, SHARED_SAMPLES, ROOT / "examples"):
        for p in sorted(root.rglob("*")):
            if p.is_file() and (".json" in p.name or ".pt.trace" in p.name):
                try:
                    if detect(p) == "kineto":
                        out.append(p)
                except Exception:  # other formats, profiles, configs
                    continue
    return out


FILES = _kineto_files()


def _doc(p) -> dict:
    d = to_dict(p)
    d["meta"].pop("created", None)
    return d


def _both(path, monkeypatch, **kw):
    monkeypatch.setenv("MMPROF_KINETO_REFERENCE", "1")
    try:
        ref = _doc(kineto.load_one(path, **kw))
    except BadInput as e:
        ref = f"BadInput: {e}"
    monkeypatch.delenv("MMPROF_KINETO_REFERENCE")
    try:
        new = _doc(kineto.load_one(path, **kw))
    except BadInput as e:
        new = f"BadInput: {e}"
    return ref, new


def test_the_corpus_is_real():
    assert len(FILES) >= 40  # tests/data alone holds ~50 Kineto traces (vLLM, HF, H200 runs, public samples)
    assert any("vllm" in str(p) for p in FILES) and any("samples/kineto" in str(p) for p in FILES)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(p.parents[2])))
def test_identical_to_the_struct_path(path, monkeypatch):
    monkeypatch.setattr(_kineto_stream, "PIECE_BYTES", 20_000)
    ref, new = _both(path, monkeypatch)
    if isinstance(ref, str) or isinstance(new, str):
        assert ref == new
        return
    assert new["strings"] == ref["strings"]
    for t in ref["tables"]:
        assert new["tables"][t] == ref["tables"][t], t
    assert new["meta"] == ref["meta"]


def _write(path: Path, events: list, head: dict | None = None, tail: dict | None = None, indent: bool = False) -> Path:
    parts = [json.dumps(e, indent=2 if indent else None) for e in events]
    h = "".join(f'"{k}": {json.dumps(v)}, ' for k, v in (head or {}).items())
    t = "".join(f', "{k}": {json.dumps(v)}' for k, v in (tail or {}).items())
    path.write_bytes(gzip.compress(("{" + h + '"traceEvents": [' + ",\n  ".join(parts) + "]" + t + "}").encode()))
    return path


def _trace(n: int, tricky: bool) -> list:
    evs = []
    for i in range(n):
        name = f"aten::mm}}, {{ weird {i}" if tricky and i % 7 == 0 else "aten::mm"
        evs.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": i * 10.0, "dur": 5,
                    "args": {"External id": i + 1, "Input Dims": [[8, 16]], "nested": [{"a": 1}, {"b": "}, {"}]}})
        evs.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                    "ts": i * 10.0 + 1, "dur": 1, "args": {"External id": i + 1, "correlation": i + 1}})
        evs.append({"ph": "X", "cat": "kernel", "name": f"k{i % 5}", "pid": 0, "tid": 7, "ts": i * 10.0 + 3,
                    "dur": 2, "args": {"correlation": i + 1, "device": 0, "stream": 7, "grid": [1, 1, 1],
                                       "block": [128, 1, 1]}})
        evs.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": i, "pid": 1, "tid": 1, "ts": i * 10.0 + 1})
    return evs


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_cuts_inside_strings_and_nested_objects(tmp_path, monkeypatch, jobs):
    """Names and args holding `}, {`: cuts there make invalid pieces, which are joined and decoded again; the
    Profile is the reference's (names kept byte for byte), in this process and in two worker processes."""
    monkeypatch.setattr(_kineto_stream, "PIECE_BYTES", 700)
    monkeypatch.setenv("MMPROF_DECODE_JOBS", jobs)
    f = _write(tmp_path / "t.json.gz", _trace(300, tricky=True), head={"schemaVersion": 1, "distributedInfo":
                                                                     {"rank": 3, "world_size": 4}},
               tail={"traceName": "x]y", "displayTimeUnit": "ms"}, indent=True)
    ref, new = _both(f, monkeypatch)
    assert new == ref
    names = {new["strings"][i] for i in range(len(new["strings"]))}
    assert "aten::mm}, { weird 7" in names
    assert new["tables"]["kernels"]["n"] == 300 and new["meta"]["ranks"][0]["rank"] == 3


@pytest.mark.parametrize("shape", ["bare_array", "events_first", "empty", "truncated", "not_a_list"])
def test_document_shapes(tmp_path, monkeypatch, shape):
    """A bare event array, traceEvents before the header, an empty array, a truncated file and a traceEvents that
    is no list: the same Profile or the same one-line error as the reference path."""
    monkeypatch.setattr(_kineto_stream, "PIECE_BYTES", 500)
    evs = _trace(40, tricky=False)
    f = tmp_path / "t.json.gz"
    if shape == "bare_array":
        f.write_bytes(gzip.compress(json.dumps(evs).encode()))
    elif shape == "events_first":
        f.write_bytes(gzip.compress(json.dumps({"traceEvents": evs, "deviceProperties": [{"id": 0}]}).encode()))
    elif shape == "empty":
        f.write_bytes(gzip.compress(b'{"traceEvents": [], "schemaVersion": 1}'))
    elif shape == "truncated":
        f.write_bytes(gzip.compress(json.dumps({"traceEvents": evs}).encode()[:-200]))
    else:
        f.write_bytes(gzip.compress(b'{"schemaVersion": 1, "traceEvents": {"a": 1}}'))
    ref, new = _both(f, monkeypatch, rank=0)
    assert new == ref
    if shape in ("empty", "truncated", "not_a_list"):
        assert isinstance(new, str) and new.startswith("BadInput")
