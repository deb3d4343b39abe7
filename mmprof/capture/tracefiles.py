"""Chrome-trace files of one captured process: read one, combine a process's segments into one trace, and read a
trace that was cut short while being written as far as it goes.

A captured process writes each segment as plain JSON (Kineto's C++ writer, the fastest way out of a process
that is being stopped: an engine gives its workers a few seconds between SIGTERM and SIGKILL); `mmprof record`
compresses and combines them afterwards, in its own process. Standard library only: the `mmprof record` hook
loads this (through session.py) by path, in processes that may not have mmprof's dependencies installed.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path
from typing import Any

GZIP_MAGIC = b"\x1f\x8b"


def read_trace(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == GZIP_MAGIC:
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents", []), list):
        raise ValueError(f"{path.name}: not a Chrome trace")
    return doc


def _inflate_prefix(raw: bytes) -> tuple[bytes, bool]:
    """The bytes a gzip stream holds up to where it was cut (and whether it was complete)."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = []
    try:
        out.append(d.decompress(raw))
        complete = d.eof
    except zlib.error:  # corrupt past some point: keep what came before it
        complete = False
    return b"".join(out), complete


def salvage_trace(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Chrome trace file read as far as it goes: (document, what was kept and lost).

    For a file whose writer was killed mid-write (SIGKILL during export): the header keys before `traceEvents`
    (Kineto writes the device properties, `distributedInfo` and `baseTimeNanoseconds` there) and every event
    that is complete, in file order; the rest is lost, and the info says so (`complete`, `events`, `bytes_read`,
    `last_ts_us`). A complete file is read as a whole. Raises ValueError when not even the header is there."""
    raw = Path(path).read_bytes()
    gz = raw[:2] == GZIP_MAGIC
    text, stream_complete = _inflate_prefix(raw) if gz else (raw, True)
    try:
        doc = json.loads(text)
        if isinstance(doc, dict) and isinstance(doc.get("traceEvents", []), list):
            return doc, {"complete": True, "events": len(doc.get("traceEvents", [])), "bytes_read": len(text)}
    except (ValueError, RecursionError):
        pass
    s = text.decode("utf-8", "replace")
    key = s.find('"traceEvents"')
    if key < 0:
        raise ValueError(f"{Path(path).name}: cut short before its events began ({len(text)} bytes)")
    start = s.find("[", key)
    if start < 0:
        raise ValueError(f"{Path(path).name}: cut short before its events began ({len(text)} bytes)")
    header = s[:key].rstrip().rstrip(",")
    try:
        doc = json.loads(header + "}") if header.startswith("{") else {}
    except ValueError:
        doc = {}
    dec = json.JSONDecoder()
    events: list[Any] = []
    i, n = start + 1, len(s)
    while True:
        while i < n and s[i] in " \t\r\n,":
            i += 1
        if i >= n or s[i] == "]":
            break
        try:
            ev, i = dec.raw_decode(s, i)
        except ValueError:
            break
        events.append(ev)
    doc["traceEvents"] = events
    ts = [e["ts"] for e in events if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    info = {"complete": False, "events": len(events), "bytes_read": len(text), "gzip_complete": stream_complete if gz else None,
            "last_ts_us": max(ts) if ts else None}
    return doc, info


def write_gzip_json(doc: dict[str, Any], out: Path) -> Path:
    """`doc` as a gzipped JSON file at `out`, written under a hidden name and renamed into place."""
    data = gzip.compress(json.dumps(doc).encode(), compresslevel=6, mtime=0)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out


def combine_traces(paths: list[Path], out: Path, docs: list[dict[str, Any]] | None = None) -> Path:
    """Concatenate Chrome traces of one process (its segments, plain or gzipped) into one gzipped trace at `out`.

    Segments of one process share the Kineto clock; when their `baseTimeNanoseconds` differ, later segments'
    `ts` are shifted onto the first one's base. Top-level keys come from the first segment, except that
    `record_shapes` is kept when any segment had it, and `mmprof_segments` lists what each segment held.
    `docs`, when given, are the segments already read (a salvaged one among them), in the order of `paths`."""
    paths = list(paths)
    if docs is None and len(paths) == 1:
        src = paths[0]
        with open(src, "rb") as f:
            gz = f.read(2) == GZIP_MAGIC
        if gz or not out.name.endswith(".gz"):
            if src != out:
                os.replace(src, out)
            return out
        tmp = out.with_name(f".{out.name}.tmp")
        try:
            with open(src, "rb") as fi, gzip.GzipFile(tmp, "wb", compresslevel=6, mtime=0) as fo:
                while chunk := fi.read(1 << 20):
                    fo.write(chunk)
            os.replace(tmp, out)
        finally:
            if tmp.exists():
                tmp.unlink()
        return out
    docs = docs if docs is not None else [read_trace(p) for p in paths]
    first = docs[0]
    base0 = first.get("baseTimeNanoseconds")
    events: list[Any] = []
    segs = []
    for k, d in enumerate(docs):
        evs = d.get("traceEvents") or []
        base = d.get("baseTimeNanoseconds")
        shift_us = (base - base0) / 1000.0 if isinstance(base, (int, float)) and isinstance(base0, (int, float)) else 0.0
        if shift_us:
            for e in evs:
                if isinstance(e, dict) and isinstance(e.get("ts"), (int, float)):
                    e["ts"] = e["ts"] + shift_us
        events.extend(evs)
        segs.append({"segment": k, "events": len(evs), "record_shapes": bool(d.get("record_shapes"))})
    doc = {k: v for k, v in first.items() if k != "traceEvents"}
    if any(d.get("record_shapes") for d in docs):
        doc["record_shapes"] = 1
    for d in docs[1:]:
        if "distributedInfo" in d and "distributedInfo" not in doc:
            doc["distributedInfo"] = d["distributedInfo"]
    doc["mmprof_segments"] = segs
    doc["traceEvents"] = events
    return write_gzip_json(doc, out)
