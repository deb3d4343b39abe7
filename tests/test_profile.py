from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from mmprof.errors import BadInput, SchemaError
from mmprof.profiles import Profile, ProfileBuilder, load_profile, merge_profiles, save_profile
from mmprof.profiles.schema import SCHEMA_VERSION, TABLES, json_schema
from tests.conftest import ROOT


def _small(rank: int = 0) -> Profile:
    b = ProfileBuilder({"source": {"format": "test", "files": []}, "ranks": [{"rank": rank, "devices": []}]})
    op = b.row("ops", rank=rank, tid=1, start_ns=0, dur_ns=100, name="aten::mm", input_dims="[[8, 64], [64, 32]]")
    ln = b.row("launches", rank=rank, tid=1, start_ns=10, dur_ns=5, name="cudaLaunchKernel", correlation=7, op=op)
    b.row("kernels", rank=rank, device=0, stream=7, start_ns=50, dur_ns=20, name="sm90_gemm", correlation=7,
          launch=ln, op=op, scope="layers.3.moe.routed", phase="decode", step=1)
    b.row("kernels", rank=rank, device=0, stream=7, start_ns=80, dur_ns=3, name="elementwise", phase=None)
    return b.build()


def test_builder_and_dataframe():
    p = _small()
    assert p.n("kernels") == 2 and p.n("ops") == 1
    df = p.df("kernels")
    assert list(df["name"]) == ["sm90_gemm", "elementwise"]
    assert df["phase"].isna().tolist() == [False, True]
    assert df["op"].tolist() == [0, -1]
    ops = p.df("ops")
    assert ops.loc[df["op"][0], "input_dims"] == "[[8, 64], [64, 32]]"


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_round_trip(tmp_path, suffix):
    p = _small()
    path = save_profile(p, tmp_path / f"p{suffix}")
    if suffix.endswith(".gz"):
        assert path.read_bytes()[:2] == b"\x1f\x8b"
    q = load_profile(path)
    for t in TABLES:
        for c in p.tables[t]:
            np.testing.assert_array_equal(p.tables[t][c], q.tables[t][c])
    assert q.strings == p.strings
    assert q.meta["mmprof_version"]


def test_atomic_write_leaves_no_temp_and_a_normal_mode(tmp_path):
    import os

    path = save_profile(_small(), tmp_path / "p.json")
    assert [f.name for f in tmp_path.iterdir()] == ["p.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600


def test_newer_schema_refused(tmp_path):
    path = save_profile(_small(), tmp_path / "p.json")
    doc = json.loads(path.read_text())
    doc["schema_version"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(doc))
    with pytest.raises(SchemaError, match="newer"):
        load_profile(path)


def test_unknown_schema_refused(tmp_path):
    path = save_profile(_small(), tmp_path / "p.json")
    doc = json.loads(path.read_text())
    doc["schema_version"] = 0
    path.write_text(json.dumps(doc))
    with pytest.raises(SchemaError, match="unknown profile schema version 0"):
        load_profile(path)


def test_not_a_profile(tmp_path):
    (tmp_path / "t.json").write_text('{"traceEvents": []}')
    with pytest.raises(BadInput, match="mmprof import"):
        load_profile(tmp_path / "t.json")
    (tmp_path / "x.json").write_text("[1, 2")
    with pytest.raises(BadInput, match="not valid JSON"):
        load_profile(tmp_path / "x.json")


def test_truncated_gzip(tmp_path):
    data = gzip.compress(b'{"format": "mmprof-profile"}' * 100)
    (tmp_path / "p.json.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(BadInput, match="truncated or corrupt gzip"):
        load_profile(tmp_path / "p.json.gz")


def test_merge_offsets_refs_and_strings():
    a, b = _small(0), _small(1)
    m = merge_profiles([a, b])
    assert m.n("kernels") == 4
    assert m.tables["kernels"]["op"].tolist() == [0, -1, 1, -1]
    assert m.tables["kernels"]["launch"].tolist() == [0, -1, 1, -1]
    assert [r["rank"] for r in m.meta["ranks"]] == [0, 1]
    assert m.df("kernels")["name"].tolist() == ["sm90_gemm", "elementwise"] * 2


def test_json_schema_in_sync_and_validates(tmp_path):
    import jsonschema

    checked_in = json.loads((ROOT / "mmprof" / "profiles" / "profile.schema.json").read_text())
    assert checked_in == json_schema(), "run `python -m mmprof.profiles.gen_schema` to regenerate"
    path = save_profile(_small(), tmp_path / "p.json")
    jsonschema.validate(json.loads(path.read_text()), checked_in)


def test_columns_on_disk_are_base64_and_plain_lists_are_accepted(tmp_path):
    path = save_profile(_small(), tmp_path / "p.json")
    doc = json.loads(path.read_text())
    cols = doc["tables"]["kernels"]["columns"]
    assert cols["start_ns"]["dtype"] == "<i1" and isinstance(cols["start_ns"]["b64"], str)  # 50, 80 fit a byte
    assert cols["rank"] == {"const": 0}  # every row holds 0
    # a hand-written profile with plain JSON lists reads the same
    for t in doc["tables"].values():
        t["columns"] = {}
    doc["tables"]["kernels"] = {"n": 2, "columns": {"start_ns": [5, 7], "name": [0, -1], "dur_ns": [1, 2]}}
    doc["strings"] = ["k"]
    path.write_text(json.dumps(doc))
    q = load_profile(path)
    assert q.tables["kernels"]["start_ns"].tolist() == [5, 7]
    assert q.df("kernels")["name"].tolist()[0] == "k"
    assert q.tables["kernels"]["rank"].tolist() == [-1, -1]  # missing columns are null
    q.tables["kernels"]["start_ns"][0] = 1  # arrays are writable


def test_malformed_column_is_a_schema_error(tmp_path):
    path = save_profile(_small(), tmp_path / "p.json")
    doc = json.loads(path.read_text())
    doc["tables"]["kernels"]["columns"]["start_ns"] = {"dtype": "<i8", "b64": "%%%"}
    path.write_text(json.dumps(doc))
    with pytest.raises(SchemaError, match="start_ns"):
        load_profile(path)


def test_wide_values_survive_narrow_encoding(tmp_path):
    b = ProfileBuilder({})
    for v in (-1, 2**40, 7):
        b.row("kernels", rank=0, start_ns=v, dur_ns=v % 300)
    path = save_profile(b.build(), tmp_path / "p.json.gz")
    q = load_profile(path)
    assert q.tables["kernels"]["start_ns"].tolist() == [-1, 2**40, 7]
    assert q.tables["kernels"]["start_ns"].dtype == np.int64


def test_profiles_and_traces_round_trip_through_xz(tmp_path, capsys):
    """`.json.xz` (the xz container, lzma FORMAT_XZ): a Profile saved under that name is xz (by its magic), loads
    back with the same tables; a trace committed as xz reads like its gzip; a cut xz is one line, exit 2."""
    import gzip
    import lzma

    from mmprof.cli import main
    from mmprof.importers import import_paths
    from mmprof.profiles import load_profile, save_profile
    from tests.conftest import data_file

    src = data_file("samples", "kineto", "nccl_data.json.xz")
    p = import_paths([src])
    out = save_profile(p, tmp_path / "p.json.xz")
    assert out.read_bytes()[:6] == b"\xfd7zXZ\x00"
    q = load_profile(out)
    assert q.n("kernels") == p.n("kernels") == 1800 and q.n("collectives") == p.n("collectives")
    xz = src  # committed as xz (tests/data/samples/kineto); the same trace as gzip imports the same
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(lzma.decompress(src.read_bytes())))
    assert import_paths([gz]).n("kernels") == 1800
    cut = tmp_path / "cut.json.xz"
    cut.write_bytes(xz.read_bytes()[:2000])
    with pytest.raises(SystemExit) as e:
        main(["summary", str(cut)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "corrupt xz" in err
