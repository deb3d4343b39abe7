"""Load and save Profiles as `.json` or `.json.gz` (atomic writes, version checks)."""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from mmprof.errors import BadInput, SchemaError
from mmprof.fileio import atomic_write, read_bytes
from mmprof.profiles.model import Profile, _NP_DTYPE, _empty_column
from mmprof.profiles.schema import FORMAT_NAME, MIGRATIONS, SCHEMA_VERSION, TABLES, column_kind


def to_dict(profile: Profile) -> dict[str, Any]:
    from mmprof import __version__

    meta = dict(profile.meta)
    meta.setdefault("mmprof_version", __version__)
    meta.setdefault("created", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    meta.setdefault("source", {"format": "unknown", "files": []})
    meta.setdefault("ranks", [{"rank": r} for r in profile.ranks])
    meta.setdefault("clock", {"unit": "ns", "note": "per-rank timeline; not wall clock"})
    tables = {}
    for t, cols in TABLES.items():
        tables[t] = {"n": profile.n(t), "columns": {c: profile.tables[t][c] for c, _, _ in cols}}
    return {
        "format": FORMAT_NAME,
        "schema_version": SCHEMA_VERSION,
        "meta": meta,
        "strings": profile.strings,
        "tables": tables,
    }


def dumps(profile: Profile) -> bytes:
    # orjson writes NaN floats as null; from_dict reads null back as NaN.
    return orjson.dumps(to_dict(profile), option=orjson.OPT_SERIALIZE_NUMPY)


def save_profile(profile: Profile, path: str | os.PathLike) -> Path:
    """Write the profile atomically; gzip when the name ends in `.gz`."""
    profile.meta.update({k: v for k, v in to_dict(profile)["meta"].items() if k not in profile.meta})
    return atomic_write(path, dumps(profile))


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
    tables: dict[str, dict[str, np.ndarray]] = {}
    raw_tables = doc.get("tables") or {}
    for t, cols in TABLES.items():
        raw = (raw_tables.get(t) or {})
        n = raw.get("n", 0)
        rc = raw.get("columns") or {}
        out = {}
        for c, ctype, _ in cols:
            kind = column_kind(ctype)
            if c in rc:
                vals = rc[c]
                if kind == "float":
                    arr = np.array([np.nan if v is None else v for v in vals], dtype=np.float64)
                else:
                    try:
                        arr = np.asarray(vals, dtype=_NP_DTYPE[kind])
                    except (TypeError, ValueError) as e:
                        raise SchemaError(f"{where}: table {t!r} column {c!r} is malformed ({e})") from e
            else:
                arr = _empty_column(kind, n)
            if len(arr) != n:
                raise SchemaError(f"{where}: table {t!r} column {c!r} has {len(arr)} rows, header says {n}")
            out[c] = arr
        tables[t] = out
    meta = doc.get("meta") or {}
    return Profile(meta, strings, tables)


def load_profile(path: str | os.PathLike) -> Profile:
    """Read a Profile written by `save_profile` (or `mmprof import`/`run`/`record`)."""
    data = read_bytes(path)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise BadInput(f"{path}: not valid JSON ({e})") from e
    if isinstance(doc, dict) and doc.get("format") != FORMAT_NAME and "traceEvents" in doc:
        raise BadInput(f"{path}: this is a profiler trace, not an mmprof profile; "
                       f"run `mmprof import {path} -o profile.json` first")
    return from_dict(doc, where=str(path))
