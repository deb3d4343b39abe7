"""Load and save Profiles as `.json` or `.json.gz` (atomic writes, version checks)."""

from __future__ import annotations

import base64
import datetime as _dt
import os
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from mmprof._version import __version__
from mmprof.errors import BadInput, SchemaError
from mmprof.fileio import check_events, max_events, read_bytes
from mmprof.fileout import atomic_output
from mmprof.profiles.profile import NP_DTYPE, Profile, empty_column, cap_strings
from mmprof.profiles.schema import (
    FORMAT_NAME,
    MAX_RANK,
    MIGRATIONS,
    SCHEMA_VERSION,
    TABLES,
    column_kind,
)


def to_dict(profile: Profile) -> dict[str, Any]:
    head = to_dict_header(profile)
    tables = {}
    for t, cols in TABLES.items():
        tables[t] = {"n": profile.n(t), "columns": {c: encode_column(profile.tables[t][c], column_kind(ct))
                                                     for c, ct, _ in cols}}
    return {**head, "strings": profile.strings, "tables": tables}


_WIDEST = {"int": "<i8", "str": "<i4", "float": "<f8"}
_NARROW = ("<i1", "<i2", "<i4", "<i8")
_ALLOWED = {"int": set(_NARROW), "str": {"<i1", "<i2", "<i4"}, "float": {"<f8"}}


def encode_column(arr: np.ndarray, kind: str) -> dict[str, Any]:
    """A column on disk: `{"const": v}` when every row holds v, else the little-endian bytes of the
    narrowest integer type that holds its range (floats stay <f8), in base64. Loading is then a memory
    copy rather than parsing millions of numbers, and the file stays small."""
    n = len(arr)
    if n and kind != "float":
        lo, hi = int(arr.min()), int(arr.max())
        if lo == hi:
            return {"const": lo}
        wire = next(d for d in _NARROW if np.iinfo(np.dtype(d)).min <= lo and hi <= np.iinfo(np.dtype(d)).max)
    else:
        wire = _WIDEST[kind]
    data = np.ascontiguousarray(arr, dtype=wire).tobytes()
    return {"dtype": wire, "b64": base64.b64encode(data).decode("ascii")}


def decode_column(raw: Any, kind: str, n: int, where: str) -> np.ndarray:
    """Read a column written as base64 bytes or a constant (what mmprof writes) or as a plain JSON list."""
    if isinstance(raw, dict):
        if "const" in raw:
            v = raw["const"]
            if kind == "float":
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                    raise SchemaError(f"{where}: const must be a number or null, not {type(v).__name__}")
                return np.full(n, np.nan if v is None else float(v), dtype=np.float64)
            if type(v) is not int or not -(2**63) <= v < 2**63:
                raise SchemaError(f"{where}: const must be a 64-bit integer, not {str(v)[:40]!r}")
            return np.full(n, v, dtype=NP_DTYPE[kind])
        wire = raw.get("dtype")
        if wire not in _ALLOWED[kind]:
            raise SchemaError(f"{where}: dtype must be one of {sorted(_ALLOWED[kind])}, not {str(wire)[:20]!r}")
        if not isinstance(raw.get("b64"), str):
            raise SchemaError(f"{where}: b64 must be base64 text")
        try:
            buf = base64.b64decode(raw["b64"], validate=True)
            # astype copies into a fresh, writable array of the in-memory dtype
            return np.frombuffer(buf, dtype=wire).astype(NP_DTYPE[kind])
        except ValueError as e:
            raise SchemaError(f"{where}: malformed column data ({e})") from e
    if not isinstance(raw, list):
        raise SchemaError(f"{where}: a column must be a list, {{dtype, b64}} or {{const}}")
    try:
        if kind == "float":
            return np.array([np.nan if v is None else v for v in raw], dtype=np.float64)
        if not all(type(v) is int for v in raw):
            raise SchemaError(f"{where}: a column of integers holds other values")
        return np.asarray(raw, dtype=np.int64).reshape(-1).astype(NP_DTYPE[kind])
    except (TypeError, ValueError, OverflowError) as e:
        raise SchemaError(f"{where}: malformed column ({str(e)[:120]})") from e


def dumps(profile: Profile) -> bytes:
    # orjson writes NaN floats as null; from_dict reads null back as NaN.
    return b"".join(dumps_parts(profile))


def dumps_parts(profile: Profile):
    """The bytes of `dumps(profile)` in parts (the header, the strings, one column at a time), so that a large
    Profile is written without its whole encoded document in memory: the same bytes as one orjson.dumps of
    `to_dict(profile)`."""
    doc = to_dict_header(profile)
    try:
        meta = orjson.dumps(doc["meta"], option=orjson.OPT_SERIALIZE_NUMPY)
    except TypeError:  # metadata copied from a file may hold what JSON cannot (integers beyond 64 bits)
        meta = orjson.dumps(_json_safe(doc["meta"]), option=orjson.OPT_SERIALIZE_NUMPY)
    yield (b'{"format":' + orjson.dumps(doc["format"]) + b',"schema_version":' + orjson.dumps(doc["schema_version"])
           + b',"meta":' + meta + b',"strings":')
    yield orjson.dumps(profile.strings)
    yield b',"tables":{'
    for ti, (t, cols) in enumerate(TABLES.items()):
        yield (b"," if ti else b"") + orjson.dumps(t) + b':{"n":' + orjson.dumps(profile.n(t)) + b',"columns":{'
        for ci, (c, ct, _) in enumerate(cols):
            yield ((b"," if ci else b"") + orjson.dumps(c) + b":"
                   + orjson.dumps(encode_column(profile.tables[t][c], column_kind(ct))))
        yield b"}}"
    yield b"}}"


def to_dict_header(profile: Profile) -> dict[str, Any]:
    """`to_dict` without the tables (format, version, metadata with its defaults)."""
    meta = dict(profile.meta)
    meta.setdefault("mmprof_version", __version__)
    meta.setdefault("created", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    meta.setdefault("source", {"format": "unknown", "files": []})
    meta.setdefault("ranks", [{"rank": r} for r in profile.ranks])
    meta.setdefault("clock", {"unit": "ns", "note": "per-rank timeline; not wall clock"})
    return {"format": FORMAT_NAME, "schema_version": SCHEMA_VERSION, "meta": meta}


def _json_safe(v: Any, depth: int = 0) -> Any:
    """Metadata as orjson can write it: integers beyond 64 bits become their text, other odd values their repr."""
    if depth > 64:
        return None
    if isinstance(v, dict):
        return {str(k): _json_safe(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x, depth + 1) for x in v]
    if isinstance(v, bool) or v is None or isinstance(v, (str, float)):
        return v
    if isinstance(v, int):
        return v if -(2**63) <= v < 2**64 else str(v)
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    return repr(v)


def save_profile(profile: Profile, path: str | os.PathLike) -> Path:
    """Write the profile atomically; gzip when the name ends in `.gz`, xz (preset 6) when it ends in `.xz`."""
    profile.meta.update({k: v for k, v in to_dict_header(profile)["meta"].items() if k not in profile.meta})
    if str(path).endswith(".xz"):
        import lzma

        with atomic_output(path, compress=False) as f, lzma.LZMAFile(f, "wb", format=lzma.FORMAT_XZ) as x:
            for part in dumps_parts(profile):
                x.write(part)
    else:
        with atomic_output(path) as f:
            for part in dumps_parts(profile):
                f.write(part)
    if str(path) == "-":
        return Path("-")
    p = Path(path)
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def from_dict(doc: Any, where: str = "profile") -> Profile:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
        raise BadInput(f"{where}: not an mmprof profile (no \"format\": \"{FORMAT_NAME}\"); "
                       "to read a trace from another tool use `mmprof import`")
    version = doc.get("schema_version")
    if not isinstance(version, int):
        raise SchemaError(f"{where}: profile has no integer schema_version")
    if version > SCHEMA_VERSION:
        raise SchemaError(f"{where}: profile schema version {version} is newer than this mmprof reads "
                          f"({SCHEMA_VERSION}); upgrade mmprof")
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise SchemaError(f"{where}: unknown profile schema version {version}")
        doc = MIGRATIONS[version](doc)
        version += 1
    strings = doc.get("strings")
    if not isinstance(strings, list):
        raise SchemaError(f"{where}: missing string table")
    if not all(type(x) is str for x in strings):
        raise SchemaError(f"{where}: the string table holds values that are not strings")
    tables: dict[str, dict[str, np.ndarray]] = {}
    raw_tables = doc.get("tables")
    if not isinstance(raw_tables, dict):  # missing, a list (even an empty one), a string...: not a saved Profile
        got = "missing" if raw_tables is None else f"a JSON {type(raw_tables).__name__}"
        raise SchemaError(f"{where}: \"tables\" must be an object of tables, not {got}")
    cap = max_events()
    for t, cols in TABLES.items():
        raw = (raw_tables.get(t) or {})
        if not isinstance(raw, dict):
            raise SchemaError(f"{where}: table {t!r} must be an object with n and columns")
        n = raw.get("n", 0)
        if type(n) is not int or n < 0:
            raise SchemaError(f"{where}: table {t!r}: n must be a row count (an integer >= 0), not {str(n)[:40]!r}")
        if cap is not None and n > cap:
            check_events(n, f"{where}: table {t!r}", "rows")
        rc = raw.get("columns") or {}
        if not isinstance(rc, dict):
            raise SchemaError(f"{where}: table {t!r}: columns must be an object")
        out = {}
        for c, ctype, _ in cols:
            kind = column_kind(ctype)
            if c in rc:
                arr = decode_column(rc[c], kind, n, f"{where}: table {t!r} column {c!r}")
            else:
                arr = empty_column(kind, n)
            if len(arr) != n:
                raise SchemaError(f"{where}: table {t!r} column {c!r} has {len(arr)} rows, header says {n}")
            out[c] = arr
        tables[t] = out
    if not any(len(next(iter(cols.values()))) for cols in tables.values() if cols):
        # mmprof writes at least one row (a capture's events, or `run --capture none`'s dispatch log)
        raise BadInput(f"{where}: a profile whose every table is empty (no kernels, ops, scopes, launches or "
                       "dispatch log): nothing to analyse; re-run the capture or the import that wrote it")
    meta = doc.get("meta") or {}
    check_meta(meta, where)
    cap_strings(strings)  # a saved Profile holds no name longer than an import would (MAX_NAME_CHARS)
    return Profile(meta, strings, tables)


_META_OBJECTS = ("source", "parallel", "clock", "model", "run", "capture", "distributed", "log")


def check_meta(meta: Any, where: str) -> None:
    """The run metadata's known keys have the shapes of schema.META_SCHEMA (analyses rely on them); unknown
    keys are free. A tampered file is a SchemaError naming the key, never a crash later."""
    def bad(key: str, want: str) -> SchemaError:
        return SchemaError(f"{where}: meta {key} must be {want}")

    if not isinstance(meta, dict):
        raise bad("", "an object")
    for k in _META_OBJECTS:
        if meta.get(k) is not None and not isinstance(meta[k], dict):
            raise bad(k, "an object")
    src = meta.get("source") or {}
    if not isinstance(src.get("format", ""), (str, type(None))) or not _strs(src.get("files", [])):
        raise bad("source", "{format: string, files: [string]}")
    for k, v in (meta.get("parallel") or {}).items():
        if v is not None and (type(v) is not int or not 0 < v <= MAX_RANK + 1):
            raise bad(f"parallel.{k}", f"an integer in 1..{MAX_RANK + 1}")
    if not _strs(meta.get("warnings", [])) or not _strs(meta.get("notes", [])):
        raise bad("warnings", "a list of strings")
    if meta.get("command") is not None and not isinstance(meta["command"], str) and not _strs(meta["command"]):
        raise bad("command", "a string or a list of strings")
    ranks = meta.get("ranks", [])
    if not isinstance(ranks, list) or not all(isinstance(r, dict) for r in ranks):
        raise bad("ranks", "a list of objects")
    for r in ranks:
        if type(r.get("rank")) is not int or not 0 <= r["rank"] <= MAX_RANK:
            raise bad("ranks[].rank", f"an integer in 0..{MAX_RANK}")
        for k in ("host", "file"):
            if r.get(k) is not None and not isinstance(r[k], str):
                raise bad(f"ranks[].{k}", "a string or null")
        devs = r.get("devices", [])
        if not isinstance(devs, list) or not all(isinstance(d, dict) for d in devs):
            raise bad("ranks[].devices", "a list of objects")
        for d in devs:
            for k in ("name", "vendor", "arch", "peak_key"):
                if d.get(k) is not None and not isinstance(d[k], str):
                    raise bad(f"ranks[].devices[].{k}", "a string or null")
            for k in ("index", "memory_bytes", "sms"):
                if d.get(k) is not None and type(d[k]) is not int:
                    raise bad(f"ranks[].devices[].{k}", "an integer or null")
            if d.get("peaks") is not None and not isinstance(d["peaks"], dict):
                raise bad("ranks[].devices[].peaks", "an object")  # its values are read defensively (hardware)


def _strs(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def load_profile(path: str | os.PathLike) -> Profile:
    """Read a Profile written by `save_profile` (or `mmprof import`/`run`/`record`)."""
    data = read_bytes(path, json_document=True)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise BadInput(f"{path}: not valid JSON ({e})") from e
    if isinstance(doc, dict) and doc.get("format") != FORMAT_NAME and "traceEvents" in doc:
        raise BadInput(f"{path}: this is a profiler trace, not an mmprof profile; "
                       f"run `mmprof import {path} -o profile.json` first")
    return from_dict(doc, where=str(path))
