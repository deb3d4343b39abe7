"""Chrome-trace files of one captured process: read one, combine a process's segments into one trace.

Standard library only: the `mmprof record` hook loads this (through session.py) by path, in processes that may not
have mmprof's dependencies installed.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any


def _read_trace(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents", []), list):
        raise ValueError(f"{path.name}: not a Chrome trace")
    return doc


def combine_traces(paths: list[Path], out: Path) -> Path:
    """Concatenate Chrome traces of one process (its segments) into one gzipped trace at `out`.

    Segments of one process share the Kineto clock; when their `baseTimeNanoseconds` differ, later segments'
    `ts` are shifted onto the first one's base. Top-level keys come from the first segment, except that
    `record_shapes` is kept when any segment had it, and `mmprof_segments` lists what each segment held.
    """
    paths = list(paths)
    if len(paths) == 1:
        if paths[0] != out:
            os.replace(paths[0], out)
        return out
    docs = [_read_trace(p) for p in paths]
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
    data = gzip.compress(json.dumps(doc).encode(), compresslevel=6, mtime=0)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out
