"""Files of different runs imported together: tell them apart, refuse them unless the user says they are one run.

Ranks of one run come from one tool, run on one kind of device, agree on the world size and lie close in time on
a shared clock. Each import unit (a format's file group, or a saved Profile) contributes per-rank facts; when they
disagree, `import_paths` refuses the inputs with one line naming the difference, unless `one_run=True`
(`mmprof import --one-run`).

Clocks: Kineto timestamps are Unix-epoch µs (comparable across hosts); rocprofv3 (rocpd, CSV, JSON) uses the
host's boot clock (comparable on one host only; an unknown host counts as the same host); Nsight Systems exports
are relative to each session's start and are not compared.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from mmprof.profiles.profile import Profile

SAME_RUN_NS = 3600 * 10**9   # ranks of one run lie within an hour of each other on a shared clock
_EPOCH = {"kineto", "record", "mmprof-run"}
_BOOT = {"rocpd", "rocprofv3-csv", "rocprofv3-json"}


def rank_facts(prof: Profile, kind: str, label: str) -> list[dict[str, Any]]:
    """One dict per rank of an import unit: tool, host, devices, world size, time span, base time, command."""
    meta = prof.meta if isinstance(prof.meta, dict) else {}
    src = meta.get("source") if isinstance(meta.get("source"), dict) else {}
    fmt = src.get("format") if kind == "mmprof-profile" else kind
    ws = (meta.get("parallel") or {}).get("world_size") if isinstance(meta.get("parallel"), dict) else None
    spans = _spans(prof)
    out = []
    for r in prof.ranks:
        rm = prof.rank_meta(r)
        devs = [d for d in (rm.get("devices") or []) if isinstance(d, dict)]
        out.append({"label": rm.get("file") or label, "rank": r, "format": str(fmt), "host": rm.get("host"),
                    "vendors": {d.get("vendor") for d in devs if isinstance(d.get("vendor"), str)},
                    "devices": {d.get("name") for d in devs if isinstance(d.get("name"), str)},
                    "world_size": rm.get("world_size", ws), "span": spans.get(r),
                    "base": rm.get("base_time_ns") if type(rm.get("base_time_ns")) is int else None,
                    "command": _program(rm.get("command") or (meta.get("command") if kind == "mmprof-profile" else None))})
    return out


def _program(cmd: Any) -> str | None:
    """A command line without its numbers (ranks of one run differ only in --local-rank=N and the like)."""
    if isinstance(cmd, list):
        cmd = " ".join(map(str, cmd))
    return re.sub(r"\d+", "", cmd).strip() if isinstance(cmd, str) and cmd.strip() else None


def _spans(prof: Profile) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for t in ("kernels", "launches", "ops", "memcpy"):
        cols = prof.tables[t]
        if not len(cols["rank"]):
            continue
        end = cols["start_ns"] + np.maximum(cols["dur_ns"], 0)
        for r in np.unique(cols["rank"]).tolist():
            m = cols["rank"] == r
            lo, hi = int(cols["start_ns"][m].min()), int(end[m].max())
            a, b = out.get(r, (lo, hi))
            out[r] = (min(a, lo), max(b, hi))
    return out


def different_runs(facts: list[dict[str, Any]]) -> str | None:
    """Why these ranks cannot be one run (one short clause), or None when nothing says so."""
    if len({f["label"] for f in facts}) < 2:
        return None
    fmts = sorted({f["format"] for f in facts})
    if len(fmts) > 1:
        return f"they come from different tools ({', '.join(fmts)})"
    vendors = set().union(*(f["vendors"] for f in facts))
    if len(vendors) > 1:
        return f"they ran on GPUs of different vendors ({', '.join(sorted(vendors))})"
    devices = set().union(*(f["devices"] for f in facts))
    if len(devices) > 1:
        return f"they ran on different devices ({', '.join(sorted(devices)[:3])})"
    sizes = {f["world_size"] for f in facts if type(f["world_size"]) is int}
    if len(sizes) > 1:
        return f"they disagree on the world size ({', '.join(map(str, sorted(sizes)))})"
    cmds = {f["command"] for f in facts if f["command"]}
    if len(cmds) > 1:
        return "they ran different programs (" + "; ".join(sorted(c[:40] for c in cmds)[:2]) + ")"
    bases = [f["base"] for f in facts if f["base"] is not None]
    if bases and max(bases) - min(bases) > SAME_RUN_NS:
        return f"their clock bases lie {_hours(max(bases) - min(bases))} apart"
    fmt = fmts[0]
    if fmt in _EPOCH | _BOOT:
        groups: dict[Any, list[tuple[int, int]]] = {}
        for f in facts:
            if f["span"] is not None:
                groups.setdefault(f["host"] if fmt in _BOOT else None, []).append(f["span"])
        for spans in groups.values():
            gap = _largest_gap(spans)
            if gap > SAME_RUN_NS:
                return f"their timestamps lie {_hours(gap)} apart (different runs or boots)"
    return None


def _largest_gap(spans: list[tuple[int, int]]) -> int:
    spans = sorted(spans)
    gap, end = 0, spans[0][1]
    for a, b in spans[1:]:
        gap = max(gap, a - end)
        end = max(end, b)
    return gap


def _hours(ns: int) -> str:
    h = ns / 3.6e12
    return f"{h:,.1f} hours" if h < 48 else f"{h / 24:,.0f} days"
