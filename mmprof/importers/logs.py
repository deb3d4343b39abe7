"""An engine's log -> the Profile's `log` table (docs/logs.md).

A log comes from `mmprof record` (the wrapped command's stdout and stderr, captured as `log_text.Line`s) or from a
file (`--log FILE` on import, verify-fastpath and report: read as a stream, gzip / xz by content, size-bounded
like record's). Each kept line becomes one row: its process and pid (from the engine's own prefix), the rank of
that pid when the profile knows it, the stream, its number, the time it was received (record) and the format
header the log rules recognise (level, the engine's time stamp, the source location, the message).

Nothing here judges what a line says: the facts are derived from these rows by `mmprof.analysis.logs`.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from mmprof.errors import BadInput
from mmprof.fileio import stream_chunks
from mmprof.log_rules import LogRules, load_log_rules
from mmprof.log_text import LIMIT_BYTES, BoundedStream, Line
from mmprof.profiles.profile import Profile, ProfileBuilder, merge_profiles


def read_log_file(path: str | os.PathLike, limit: int = LIMIT_BYTES, rules: LogRules | None = None
                  ) -> tuple[list[Line], dict[str, Any]]:
    """The kept lines of a log file and its source entry (lines / bytes read, kept, dropped), streamed."""
    rules = rules or load_log_rules()
    keep = BoundedStream("file", limit, rules.anchors, rules.wanted)
    for chunk in stream_chunks(path):
        keep.feed(chunk)
    if not keep.bytes:
        raise BadInput(f"{path}: empty file (no log lines)")
    lines = keep.lines()
    src = {"stream": "file", "file": str(path), "lines": keep.total_lines, "bytes": keep.bytes, "kept": len(lines),
           "dropped": keep.dropped(len(lines))}
    return lines, src


def log_profile(lines: Iterable[Line], sources: list[dict[str, Any]], pid_rank: dict[int, int] | None = None,
                rules: LogRules | None = None, limit: int = LIMIT_BYTES) -> Profile:
    """A Profile holding only the `log` table of these lines (merged into a run's profile by `with_log`)."""
    rules = rules or load_log_rules()
    pid_rank = pid_rank or {}
    b = ProfileBuilder({"log": {"sources": sources, "limit_bytes": limit}})
    for ln in lines:
        p = rules.parse(ln.text)
        rank = pid_rank.get(p.pid, -1) if p.pid >= 0 else -1  # no pid: the launcher or the front end
        b.row("log", rank=rank, pid=p.pid, process=p.process, stream=ln.stream, line=ln.number, time_ns=ln.time_ns,
              stamp=p.stamp, level=p.level, format=p.format, where=p.where, text=p.message)
    return b.build()


def pid_ranks(profile: Profile) -> dict[int, int]:
    """pid -> rank of the profile's captured processes (meta ranks[].pid)."""
    out: dict[int, int] = {}
    for r in profile.meta.get("ranks") or []:
        if isinstance(r, dict) and type(r.get("pid")) is int and type(r.get("rank")) is int:
            out[r["pid"]] = r["rank"]
    return out


def with_log(profile: Profile, log: Profile, replace: bool = True) -> Profile:
    """`profile` with the log table of `log`; with `replace`, a log the profile already holds is dropped first
    (a warning says so)."""
    base = profile
    meta = dict(profile.meta)
    if profile.n("log") and replace:
        base = _without_log(profile)
        meta["warnings"] = list(meta.get("warnings", [])) + [
            f"the profile's own log ({profile.n('log'):,} lines) was replaced by the one given with --log"]
    srcs = (list((meta.get("log") or {}).get("sources", [])) if not replace else []) + log.meta["log"]["sources"]
    meta["log"] = {"sources": srcs, "limit_bytes": log.meta["log"]["limit_bytes"]}
    return merge_profiles([base, log], meta=meta)


def _without_log(profile: Profile) -> Profile:
    tables = {t: dict(cols) for t, cols in profile.tables.items()}
    tables["log"] = {c: a[:0] for c, a in profile.tables["log"].items()}
    return Profile(dict(profile.meta), list(profile.strings), tables)


def attach_log_file(profile: Profile, path: str | os.PathLike | None) -> Profile:
    """`--log FILE`: the profile with FILE's lines as its log (ranks by the pids the profile knows)."""
    if path is None:
        return profile
    lines, src = read_log_file(path)
    return with_log(profile, log_profile(lines, [src], pid_ranks(profile)))
