"""Importers: other tools' files -> Profile. The format is recognised from content, not from the name.

Each importer module exposes `load(files: list[Path], rank: int | None) -> Profile`.
`import_paths` expands directories, detects each file's format, imports each group and merges them.
"""

from __future__ import annotations

import importlib
import os
import sqlite3
from pathlib import Path

from mmprof.errors import BadInput, MmprofError, UnsupportedFormat
from mmprof.fileio import head_bytes, note_input, regular_file, sqlite_connect
from mmprof.importers._runs import different_runs, rank_facts
from mmprof.importers.graph_replays import attribute_replays, unmarked_replays
from mmprof.labels import MAX_RANK
from mmprof.log_rules import load_log_rules
from mmprof.log_text import clean
from mmprof.profiles.profile import Profile, merge_profiles

# format name -> module implementing load(files, rank)
IMPORTERS: dict[str, str] = {
    "kineto": "mmprof.importers.kineto",
    "rocpd": "mmprof.importers.rocpd",
    "rocprofv3-csv": "mmprof.importers.rocprofv3_csv",
    "rocprofv3-json": "mmprof.importers.rocprofv3_json",
    "nsys-sqlite": "mmprof.importers.nsys",
    "mmprof-profile": "mmprof.profiles.io",
}

SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_REPORT_SUFFIXES = (".nsys-rep", ".qdrep")  # Nsight Systems' own report format: `nsys export` it first


def sqlite_tables(path: Path) -> set[str]:
    try:
        con = sqlite_connect(path)
        try:
            rows = con.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')").fetchall()
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        raise BadInput(f"{path}: SQLite file cannot be read ({e})") from e
    return {r[0] for r in rows}


def detect(path: str | os.PathLike) -> str:
    """The format name of one file, or a BadInput/UnsupportedFormat naming what it is instead."""
    p = Path(path)
    if not p.exists():
        raise BadInput(f"{p}: no such file or directory")
    if regular_file(p).st_size == 0:  # a device, FIFO, socket or directory: refused there, never read
        raise BadInput(f"{p}: empty file")
    head = head_bytes(p, 65536)
    if p.suffix.lower() in NSYS_REPORT_SUFFIXES and not head.startswith(SQLITE_MAGIC):
        raise UnsupportedFormat(f"{p}: an Nsight Systems report, which mmprof does not read directly; export it "
                                f"first: nsys export --type sqlite {p} (then import the .sqlite)")
    if head.startswith(SQLITE_MAGIC):
        return _detect_sqlite(p)
    text = head.lstrip()
    if text[:1] in (b"{", b"["):
        return _detect_json(p, text)
    first_line = text.split(b"\n", 1)[0]
    csv_kind = non_trace_csv(first_line)
    if csv_kind:
        raise UnsupportedFormat(f"{p}: {csv_kind}")
    if b"," in first_line and (b"Kernel_Name" in first_line or b"Start_Timestamp" in first_line
                               or b"Function" in first_line or b"Direction" in first_line):
        return "rocprofv3-csv"
    if b"," in first_line and b"Node_Id" in first_line and (b"Agent_Type" in first_line or b"Product_Name" in first_line):
        raise UnsupportedFormat(f"{p}: a rocprofv3 agent_info.csv (device list, no timeline); it is read "
                                "together with the kernel_trace.csv beside it")
    if b"Name" in first_line and b"Calls" in first_line and b"TotalDurationNs" in first_line:
        raise UnsupportedFormat(f"{p}: a rocprof statistics summary (per-kernel totals, no timeline); "
                                "import the kernel trace instead")
    engine = log_engine(text)
    if engine:
        raise UnsupportedFormat(f"{p}: an engine log ({engine}), not a profiler trace; give it beside the trace "
                                f"with --log {p} (docs/logs.md)")
    raise BadInput(f"{p}: not a recognised profiler file (expected a PyTorch/Kineto trace, rocprofv3 "
                   "rocpd/CSV/JSON, or an Nsight Systems SQLite export)")


def log_engine(head: bytes) -> str | None:
    """The engine whose log format most of the first lines have (vLLM, SGLang, ...), or None."""
    lines = [ln for ln in head.decode("utf-8", "replace").splitlines()[:40] if ln.strip()]
    if not lines:
        return None
    rules = load_log_rules()
    seen = [rules.parse(clean(ln)).format for ln in lines]
    known = [f for f in seen if f is not None]
    if len(known) * 2 < len(lines):
        return None
    top = max(set(known), key=known.count)
    return next((f.engine for f in rules.formats if f.id == top), top)


def non_trace_csv(header: bytes | str) -> str | None:
    """What a rocprofv3 CSV that is not a timeline is (from its header line), or None. Its rows must never be
    read as kernels: a counter-collection CSV has one row per dispatch x counter."""
    h = header.decode("utf-8", "replace") if isinstance(header, bytes) else header
    if "," not in h:
        return None
    cols = {c.strip().strip('"').strip() for c in h.strip().split(",")}
    if {"Counter_Name", "Counter_Value"} <= cols:
        return ("a rocprofv3 counter-collection CSV (--pmc: one row per dispatch x counter, timed by the counting "
                "pass), not a timeline; import the kernel trace (rocprofv3 --kernel-trace) instead")
    if "Sample_Timestamp" in cols and "Instruction" in cols:
        return "a rocprofv3 PC-sampling CSV (instruction samples), not a timeline; import the kernel trace instead"
    if {"Kind", "Operation"} <= cols and ("Allocation_Size" in cols or "Alloc_Flags" in cols):
        return ("a rocprofv3 memory allocation / scratch memory trace (no kernels); import the kernel trace "
                "(kernel_trace.csv) of the same run instead")
    return None


def _detect_sqlite(p: Path) -> str:
    tables = sqlite_tables(p)
    # The older rocmProfileData (RPD) tool also writes rocpd_metadata/rocpd_string, but its timeline lives in
    # rocpd_api/rocpd_op; rocprofv3's rocpd has rocpd_region/rocpd_kernel_dispatch (often UUID-suffixed).
    if ({"rocpd_api", "rocpd_op"} & tables) and not any(t.startswith(("rocpd_region", "rocpd_kernel_dispatch"))
                                                       for t in tables):
        raise UnsupportedFormat(f"{p}: a database of the older rocmProfileData (RPD) tool, not rocprofv3's rocpd; "
                                "re-run with rocprofv3 (ROCm >= 7.0) or convert the trace to JSON with RPD's rpd2tracing")
    if "rocpd_metadata" in tables or any(t.startswith("rocpd_metadata_") for t in tables):
        return "rocpd"
    if "StringIds" in tables and any(t.startswith("CUPTI_ACTIVITY_KIND_") or t == "TARGET_INFO_GPU" for t in tables):
        return "nsys-sqlite"
    if "StringIds" in tables:
        return "nsys-sqlite"
    if {"KERN", "HIP"} & tables or {"OPS", "COPY"} & tables:
        raise UnsupportedFormat(f"{p}: a legacy rocprof (v1/v2) results.db; mmprof reads rocprofv3 output: "
                                "re-run with `rocprofv3 --kernel-trace --hip-trace` (rocpd is the default from ROCm 7.0)")
    if any(t.startswith("rocpd_") for t in tables) or "rocpd_api" in tables:
        raise UnsupportedFormat(f"{p}: a database of the older rocmProfileData (RPD) tool, not rocprofv3's rocpd; "
                                "re-run with rocprofv3 (ROCm >= 7.0) or convert the trace to JSON with RPD's rpd2tracing")
    raise BadInput(f"{p}: an SQLite database, but neither rocprofv3 rocpd nor an Nsight Systems export")


def _detect_json(p: Path, text: bytes) -> str:
    if b'"rocprofiler-sdk-tool"' in text:
        return "rocprofv3-json"
    if b'"format"' in text and b'"mmprof-profile"' in text:
        return "mmprof-profile"
    if b'"traceEvents"' in text:
        # Legacy rocprof v1/v2 writes a Chrome trace whose first event is {} and ts/dur are strings.
        after = text.split(b'"traceEvents"', 1)[1].lstrip(b": \t\r\n")
        if after.startswith(b"[") and after[1:].lstrip().startswith(b"{}"):
            raise UnsupportedFormat(f"{p}: a legacy rocprof (v1/v2) results.json; mmprof reads rocprofv3 "
                                    "output: re-run with rocprofv3 (rocpd is the default from ROCm 7.0)")
        return "kineto"
    if text.startswith(b"["):
        # A bare Chrome-trace event array (JSON Array Format) is also a Kineto-style trace.
        return "kineto"
    # The key may sit after a large header (deviceProperties etc.); the kineto importer validates fully.
    return "kineto"


def expand(paths: list[str | os.PathLike]) -> list[Path]:
    """Files from the given paths; a directory contributes every file in it that looks like a trace."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and _looks_like_trace(f))
            if not found:
                raise BadInput(f"{p}: directory holds no profiler traces (.json, .json.gz, .json.xz, .db, .sqlite, .csv)")
            out.extend(found)
        elif not os.path.lexists(p) or not p.exists():
            raise BadInput(f"{p}: no such file or directory")
        else:
            out.append(p)
    if not out:
        raise BadInput("no input files given")
    for f in out:
        note_input(f)  # outputs of this command may never overwrite it
    return out


def _looks_like_trace(f: Path) -> bool:
    name = f.name.lower()
    if name.startswith("."):
        return False
    return name.endswith((".json", ".json.gz", ".json.xz", ".db", ".sqlite", ".sqlite3", ".rpd", ".csv", ".pt.trace.json"))


def import_paths(paths: list[str | os.PathLike], rank: int | None = None, fmt: str | None = None,
                 check_ranks: bool = True, one_run: bool = False, graph_ref: Profile | None = None,
                 jobs: int | None = None, progress=None) -> Profile:
    """Import files and directories into one Profile (several files become one multi-rank profile).

    Traces get their CUDA / HIP graph replays marked and attributed (`mmprof.importers.graph_replays`); `graph_ref` is
    a profile of the same work run eagerly, used for replays nothing in the trace itself explains.

    check_ranks: warn when the run's world size names ranks the inputs do not hold (callers that import one
    rank at a time and report missing ranks themselves, like `mmprof record`, pass False).
    jobs / progress: worker processes for many Kineto rank files (default: `kineto.default_jobs`) and a
    `progress(stage, done, total)` callback per file.
    one_run: the user says the files are one run; without it, files that look like different runs (tools,
    devices, world sizes, clocks far apart: `_runs.different_runs`) are refused."""
    if rank is not None and not (type(rank) is int and 0 <= rank <= MAX_RANK):
        raise BadInput(f"--rank {rank} is not a rank (0..{MAX_RANK})")
    files = expand(paths)
    groups: dict[str, list[Path]] = {}
    for f in files:
        try:
            kind = fmt or detect(f)
        except UnsupportedFormat:
            if len(files) == 1 or not Path(paths[0]).is_dir():
                raise
            continue  # inside a directory, skip side files (e.g. a stats CSV) that are not timelines
        groups.setdefault(kind, []).append(f)
    if not groups:
        raise BadInput(f"{', '.join(map(str, paths))}: no importable traces found")
    profiles: list[Profile] = []
    kinds: list[str] = []
    for kind, group in groups.items():
        if kind not in IMPORTERS:
            raise BadInput(f"unknown format {kind!r}; formats are {', '.join(IMPORTERS)}")
        module = importlib.import_module(IMPORTERS[kind])
        if kind == "mmprof-profile":
            for f in group:
                prof = _guarded(lambda f=f: module.load_profile(f), [f], kind)
                # attributed again with a reference; attributed for the first time when written before graph
                # replays were marked (schema 1, or a writer that did not mark them)
                if graph_ref is not None or unmarked_replays(prof):
                    _guarded(lambda p=prof: attribute_replays(p, ref=graph_ref), [f], kind)
                profiles.append(prof)
                kinds.append(f"profile {f}")
        else:
            extra = {"jobs": jobs, "progress": progress} if kind == "kineto" else {}
            prof = _guarded(lambda: module.load(group, rank=rank, **extra), group, kind)
            _guarded(lambda: attribute_replays(prof, ref=graph_ref), group, kind)
            profiles.append(prof)
            kinds.append(kind)
    if len(files) > 1 and not one_run:
        facts = [f for p, k in zip(profiles, kinds) for f in rank_facts(p, k.split(" ")[0], k)]
        why = different_runs(facts)
        if why:
            names = ", ".join(str(f) for f in files[:3]) + (f" (+{len(files) - 3} more)" if len(files) > 3 else "")
            raise BadInput(f"{names}: these look like different runs: {why}; import them separately, or pass "
                           "--one-run if they really are one run")
    if len(profiles) > 1:
        _check_rank_collisions(profiles, kinds)
    prof = merge_profiles(profiles) if len(profiles) > 1 else profiles[0]
    if check_ranks:
        _warn_missing_ranks(prof)
    return prof


# What a damaged file makes an importer raise when a check is missing: still a one-line BadInput naming the file.
_DATA_ERRORS = (sqlite3.Error, ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
                ArithmeticError, UnicodeError, RecursionError, MemoryError)


def _guarded(load, files: list[Path], kind: str) -> Profile:
    names = ", ".join(str(f) for f in files[:3]) + (" ..." if len(files) > 3 else "")
    try:
        return load()
    except MmprofError as e:
        if any(str(f) in str(e) for f in files):
            raise
        raise type(e)(f"{names}: {e}") from e  # every error line names its file
    except _DATA_ERRORS as e:
        what = "too large for the memory available" if isinstance(e, MemoryError) else \
            "nested too deep" if isinstance(e, RecursionError) else f"{type(e).__name__}: {str(e)[:200]}"
        raise BadInput(f"{names}: cannot be read as {kind} ({what}); the file is damaged or not in the layout "
                       "this importer knows") from e


def _warn_missing_ranks(prof: Profile) -> None:
    """A multi-rank run imported without all its ranks says which are missing (never silently partial).

    The count is arithmetic and at most the first ranks are listed: a world size comes from the file and may be
    anything (2**41 in a 1 KB trace), so nothing here is sized by it."""
    ws = (prof.meta.get("parallel") or {}).get("world_size")
    if type(ws) is not int or ws <= 1:
        return
    present = sorted({r for r in prof.ranks if type(r) is int and 0 <= r < ws})
    n_missing = ws - len(present)
    if n_missing <= 0:
        return
    gaps: list[str] = []  # missing ranks as ranges, from the gaps between the ranks present (never per rank)
    prev = -1
    for r in present + [ws]:
        if r > prev + 1 and len(gaps) < 32:
            gaps.append(str(prev + 1) if r == prev + 2 else f"{prev + 1}-{r - 1}")
        prev = r
    listed = ", ".join(gaps) + (", ..." if len(gaps) == 32 else "")
    msg = (f"{n_missing} of {ws} ranks have no trace in these inputs (missing: {listed}); "
           "cross-rank results cover the ranks present only")
    warnings = prof.meta.setdefault("warnings", [])
    if msg not in warnings:
        warnings.append(msg)


def _check_rank_collisions(profiles: list[Profile], kinds: list[str]) -> None:
    """Files of different formats merged into one run must not claim the same rank."""
    owner: dict[int, str] = {}
    for prof, kind in zip(profiles, kinds):
        for r in prof.ranks:
            if r in owner:
                raise BadInput(f"rank {r} appears in both the {owner[r]} and the {kind} inputs; import them "
                               "separately, or give each file its own rank (--rank with one file)")
            owner[r] = kind
