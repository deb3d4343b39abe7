"""Cut the committed example traces down to excerpts of a few steps (examples/README.md, "Excerpts").

The full files are in git history: `git show 01f295c:examples/<path> > full.json.gz` gives back any of them, and
`python examples/trim.py` (run from the repository root, with mmprof importable) rebuilds every excerpt from those
originals, byte for byte (gzip level 9, no timestamp in the gzip header); `--check` compares instead of writing.

Two kinds of file (the table `EXCERPTS` says which steps each keeps, and why):

- **mmprof Profiles** (`trim_profile`): keep, on every rank, the steps of some windows of steps (steps are the
  `step` column the runtime's `mmprof.step.N` labels filled: prefill is step 0, decode steps 1..). A window's
  time span on a rank runs from its first step's first CPU op (for a window that starts at a decode step: from
  just after the previous step's last CPU op, so a graph capture between the steps stays) to the first CPU op of
  the next step. CPU ops are kept by their step (by their start inside a span when they have none) with every op
  that encloses a kept one; a launch call with its op; a kernel or copy with its launch, a graph replay's
  kernels with their graph launch; a CPU range when a kept op or launch of its thread starts inside it, a
  GPU-side range when a kept kernel of its rank does, with the ranges that enclose them; a collective with its
  kernel or op; a dispatch-log row by its step. Row references are renumbered, the string table keeps only the
  strings still used, `meta` is unchanged except `meta.excerpt` (what was kept) and, for graph runs,
  `meta.run.graphs.replayed_steps` (the kept ones).
- **raw Kineto traces** (`trim_kineto`, transformers' traces): keep the first N profiler steps of every process,
  cut at the CPU start of `ProfilerStep#(N+1)`; GPU events are kept with their runtime launch (by correlation
  id), flow events with them. mmprof's Kineto importer then makes one Profile of the cut traces
  (`kineto_profile`), with the file names and the creation time taken from the originals.

Nothing is invented: every kept row is the original row, unchanged but for its renumbered references.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from mmprof.profiles.io import encode_column, from_dict
from mmprof.profiles.schema import SCHEMA_VERSION, TABLES, column_kind, ref_target

ORIGINALS = "01f295c"   # the last commit with the full files
ROOT = Path(__file__).resolve().parents[1]

# path under examples/ -> ("profile", [(first step, last step), ...]) or ("kineto", profiler steps, raw sources).
# Eager runs keep decode step 2: step 1 starts while the GPU still works through the prefill's queue (the CPU ran
# ahead), so it is shorter than every later step (7 vs 71 ms on m3-rank-slice). The graph run keeps all its decode
# steps (1-8, replays are small) and drops the prefill only: the capture its replays come from lies between the
# prefill and step 1, and step 1 is slower than the others (8.1 vs 4.6 ms).
STEADY = [(2, 2)]
EXCERPTS: dict[str, tuple] = {
    "cpu-tp/tp2_fused.json.gz": ("profile", STEADY),
    "cpu-tp/tp2_separate.json.gz": ("profile", STEADY),
    "cpu-tp/tp4_fused.json.gz": ("profile", STEADY),
    "h200/graphs/fused_b1.json.gz": ("profile", STEADY),
    "h200/graphs/graphs_b1.json.gz": ("profile", [(1, 8)]),
    "h200/hf_m3/hf_m3_grouped_nostack.json.gz": ("kineto", 2, ["h200/hf_m3/hf_m3_grouped_nostack.json.gz"]),
    "h200/hf_m3/hf_m3_tp2.json.gz": ("kineto", 1, ["h200/hf_m3/hf_m3_tp2_rank0.json.gz",
                                                   "h200/hf_m3/hf_m3_tp2_rank1.json.gz"]),
    "h200/ladder/baseline.json.gz": ("profile", STEADY),
    "h200/ladder/grouped.json.gz": ("profile", STEADY),
    "h200/ladder/fused.json.gz": ("profile", STEADY),
    "h200/ladder/reuse2.json.gz": ("profile", STEADY),
    "h200/ladder/reuse4.json.gz": ("profile", STEADY),
    "h200/m3-rank-slice/fused.json.gz": ("profile", [(0, 0), (2, 2)]),
    "h200/m3-rank-slice/separate.json.gz": ("profile", [(0, 0), (2, 2)]),
    "h200/m3-rank-slice/record_tp1_b64.json.gz": ("profile", [(0, 0), (2, 2)]),
    "h200x2/tp2_fused_eager_b64.json.gz": ("profile", STEADY),
    "h200x2/tp2_separate_eager_b64.json.gz": ("profile", STEADY),
    "h200x2/tp2_record_b64.json.gz": ("profile", STEADY),
}


def _gzip(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0, filename="") as g:
        g.write(data)
    return buf.getvalue()


def _original(rel: str) -> bytes:
    return subprocess.run(["git", "-C", str(ROOT), "show", f"{ORIGINALS}:examples/{rel}"], check=True,
                          capture_output=True).stdout


# ---------------------------------------------------------------------------------------------- Profiles


def _via(ref: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """Rows whose reference points at a kept row (False where the reference is -1)."""
    out = np.zeros(len(ref), dtype=bool)
    m = ref >= 0
    out[m] = kept[ref[m]]
    return out


def _with_ancestors(keep: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """`keep` with every row that encloses a kept row (by the table's `parent` references) kept too."""
    keep = keep.copy()
    frontier = keep
    while True:
        up = parent[frontier]
        up = up[(up >= 0) & ~keep[np.maximum(up, 0)]]
        if not len(up):
            return keep
        keep[up] = True
        frontier = np.zeros_like(keep)
        frontier[up] = True


def trim_profile(doc: dict, windows: list[tuple[int, int]]) -> dict:
    """The Profile `doc` (parsed JSON) cut to the step ranges `windows` ([(first, last)]) on every rank."""
    p = from_dict(doc)  # migrates an older schema version (missing columns read as nulls)
    t, strings = p.tables, p.strings
    n = {name: p.n(name) for name in TABLES}
    ops, la, ks, sc = t["ops"], t["launches"], t["kernels"], t["scopes"]
    big = np.iinfo(np.int64).max
    bounds: dict[int, list[tuple[int, int]]] = {}  # rank -> [(lo, hi)] in ns, one per window
    for r in np.unique(ops["rank"]):
        on = ops["rank"] == r
        bounds[int(r)] = []
        for first, last in windows:
            later = on & (ops["step"] > last)
            hi = int(ops["start_ns"][later].min()) if later.any() else big
            earlier = on & (ops["step"] >= 0) & (ops["step"] < first)
            if earlier.any():  # right after the last op of the step before: what lies between (a graph capture) stays
                lo = int(ops["start_ns"][earlier].max()) + 1
            else:  # the first step of the file: from its first op (set-up before it is dropped)
                mine = on & (ops["step"] >= first) & (ops["step"] <= last)
                lo = int(ops["start_ns"][mine].min()) if mine.any() else big
            bounds[int(r)].append((lo, hi))

    def in_window(tab: dict) -> np.ndarray:
        """Rows that start inside a window of their rank."""
        out = np.zeros(len(tab["start_ns"]), dtype=bool)
        for r, bs in bounds.items():
            on = tab["rank"] == r
            for lo, hi in bs:
                out |= on & (tab["start_ns"] >= lo) & (tab["start_ns"] < hi)
        return out

    def step_kept(step: np.ndarray) -> np.ndarray:
        return np.any([(step >= a) & (step <= b) for a, b in windows], axis=0)

    def by_step(tab: dict) -> np.ndarray:
        return np.where(tab["step"] >= 0, step_kept(tab["step"]), in_window(tab))

    # CPU ops by their step (by their start when they have none), with every op that encloses a kept one
    keep = {"ops": _with_ancestors(by_step(ops), ops["parent"])}
    # a launch call with the op it ran in (by its start when it ran in none)
    keep["launches"] = np.where(la["op"] >= 0, _via(la["op"], keep["ops"]), in_window(la))
    for name in ("kernels", "memcpy"):
        tab = t[name]
        via_launch, via_graph = _via(tab["launch"], keep["launches"]), _via(tab["graph"], keep["launches"])
        no_launch = (tab["launch"] < 0) & (tab["graph"] < 0)
        keep[name] = np.where(tab["graph"] >= 0, via_graph, np.where(no_launch, by_step(tab), via_launch))
    # a CPU range when a kept op or launch of its thread starts inside it (so a step's own ranges go with it,
    # and the ranges that enclose a kept step stay); a GPU-side range when a kept kernel of its rank does
    keep["scopes"] = np.zeros(n["scopes"], dtype=bool)
    cpu_starts = {}
    for tab, k in ((ops, keep["ops"]), (la, keep["launches"])):
        for r, tid, st in zip(tab["rank"][k].tolist(), tab["tid"][k].tolist(), tab["start_ns"][k].tolist()):
            cpu_starts.setdefault((r, tid), []).append(st)
    for key in cpu_starts:
        cpu_starts[key] = np.sort(np.array(cpu_starts[key], dtype=np.int64))
    for i in range(n["scopes"]):
        s0 = int(sc["start_ns"][i])
        s1 = max(s0 + int(sc["dur_ns"][i]), s0 + 1)
        if sc["tid"][i] >= 0:
            st = cpu_starts.get((int(sc["rank"][i]), int(sc["tid"][i])))
        else:
            st = np.sort(ks["start_ns"][keep["kernels"] & (ks["rank"] == sc["rank"][i])])
        keep["scopes"][i] = st is not None and np.searchsorted(st, s0) < np.searchsorted(st, s1)
    keep["scopes"] = _with_ancestors(keep["scopes"], sc["parent"])
    co = t["collectives"]
    by_kernel, by_op = _via(co["kernel"], keep["kernels"]), _via(co["op"], keep["ops"])
    keep["collectives"] = np.where(co["kernel"] >= 0, by_kernel, np.where(co["op"] >= 0, by_op, by_step(co)))
    keep["dispatch"] = step_kept(t["dispatch"]["step"])
    keep["log"] = np.ones(n["log"], dtype=bool)  # the engine's log is of the whole run, not of a step: kept whole
    # a kept row never points at a dropped one: an op's parent, a kernel's op (captured or eager) all lie earlier
    for name, cols in TABLES.items():
        for c, ct, _ in cols:
            tgt = ref_target(ct)
            if tgt is not None:
                ref = t[name][c][keep[name]]
                lost = ~_via(ref, keep[tgt]) & (ref >= 0)
                if lost.any():
                    raise SystemExit(f"{name}.{c}: {int(lost.sum())} kept rows point at dropped {tgt} rows")

    newidx = {}
    for name, k in keep.items():
        m = np.full(n[name] + 1, -1, dtype=np.int64)  # index -1 (none) maps to the last slot: -1
        m[:-1][k] = np.arange(int(k.sum()))
        newidx[name] = m
    used: set[int] = set()
    out_tables = {}
    for name, cols in TABLES.items():
        k = keep[name]
        new = {}
        for c, ct, _ in cols:
            arr = t[name][c][k]
            tgt = ref_target(ct)
            if tgt is not None:
                arr = newidx[tgt][np.where(arr >= 0, arr, -1)]
            if column_kind(ct) == "str":
                used.update(int(x) for x in np.unique(arr) if x >= 0)
            new[c] = arr
        out_tables[name] = new
    # the string table: only the strings still used, in their old order
    order = sorted(used)
    smap = np.full(len(strings) + 1, -1, dtype=np.int64)
    smap[order] = np.arange(len(order))
    tables = {}
    for name, cols in TABLES.items():
        enc = {}
        for c, ct, _ in cols:
            arr = out_tables[name][c]
            if column_kind(ct) == "str":
                arr = smap[np.where(arr >= 0, arr, -1)]
            enc[c] = encode_column(arr.astype(np.float64 if column_kind(ct) == "float" else np.int64),
                                   column_kind(ct))
        tables[name] = {"n": int(keep[name].sum()), "columns": enc}
    meta = json.loads(json.dumps(doc["meta"]))
    graphs = (meta.get("run") or {}).get("graphs")
    if isinstance(graphs, dict) and isinstance(graphs.get("replayed_steps"), list):
        graphs["replayed_steps"] = [s for s in graphs["replayed_steps"] if any(a <= s <= b for a, b in windows)]
    meta["excerpt"] = {
        "of": f"git show {ORIGINALS}:<this path>", "by": "examples/trim.py",
        "kept": _kept_words(windows),
        "rows_full": {k: int(v) for k, v in n.items()}, "note": "meta.run holds the timings of the whole run"}
    return {"format": doc["format"], "schema_version": SCHEMA_VERSION, "meta": meta,
            "strings": [strings[i] for i in order], "tables": tables}


def _kept_words(windows: list[tuple[int, int]]) -> str:
    def one(a: int, b: int) -> str:
        names = ["prefill (step 0)" if a == 0 else None] + [None]
        dec = (max(a, 1), b)
        if b >= 1:
            names[1] = f"decode step {dec[0]}" if dec[0] == dec[1] else f"decode steps {dec[0]}-{dec[1]}"
        return " and ".join(x for x in names if x)
    return ", ".join(one(a, b) for a, b in windows) + " of every rank; the rows of every other step dropped"


# ------------------------------------------------------------------------------------- raw Kineto traces


_CPU_CATS = {"cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver", "overhead"}
_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def trim_kineto(doc: dict, steps: int) -> dict:
    """The first `steps` profiler steps (`ProfilerStep#N`) of a raw Kineto trace, on every process."""
    ev = doc["traceEvents"]
    marks: dict = {}
    for e in ev:
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#"):
            marks.setdefault(e.get("pid"), []).append((int(e["name"].split("#")[1]), float(e["ts"])))
    cut = {pid: (sorted(m)[steps][1] if len(m) > steps else float("inf")) for pid, m in marks.items()}
    kept_steps = {pid: {n for n, _ in sorted(m)[:steps]} for pid, m in marks.items()}
    all_kept = set().union(*kept_steps.values()) if kept_steps else set()
    inf = float("inf")
    corr: set = set()
    out = []
    for e in ev:
        cat = e.get("cat")
        if cat in _CPU_CATS and "ts" in e:
            if float(e["ts"]) >= cut.get(e.get("pid"), inf):
                continue
            if cat in ("cuda_runtime", "cuda_driver") and (e.get("args") or {}).get("correlation") is not None:
                corr.add(e["args"]["correlation"])
        out.append(e)
    gpu_end: dict = {}
    final = []
    for e in out:
        cat = e.get("cat")
        if cat in _GPU_CATS and (e.get("args") or {}).get("correlation", -1) not in corr:
            continue
        if cat == "ac2g" and e.get("id") not in corr:
            continue
        if cat in _GPU_CATS:
            gpu_end[e.get("pid")] = max(gpu_end.get(e.get("pid"), -inf), float(e["ts"]) + float(e.get("dur", 0)))
        final.append(e)
    # GPU-side ranges: a step's by its number, any other when it starts before the last kept GPU event ends
    ranges = []
    for e in final:
        if e.get("cat") == "gpu_user_annotation":
            name = str(e.get("name", ""))
            if name.startswith("ProfilerStep#"):
                if int(name.split("#")[1]) not in all_kept:
                    continue
            elif float(e["ts"]) >= gpu_end.get(e.get("pid"), -inf):
                continue
        ranges.append(e)
    doc = dict(doc)
    doc["traceEvents"] = ranges
    doc["mmprof_excerpt"] = {"of": f"git show {ORIGINALS}:<this path>", "by": "examples/trim.py",
                             "kept": f"the first {steps} profiler steps (ProfilerStep#N) of every process",
                             "events_full": len(ev)}
    return doc


# ------------------------------------------------------------------------------------------------ driver


def build(rel: str) -> bytes:
    kind, arg, *src = EXCERPTS[rel]
    if kind == "profile":
        doc = trim_profile(json.loads(gzip.decompress(_original(rel))), arg)
        return _gzip(json.dumps(doc, separators=(",", ":")).encode())
    return _gzip(kineto_profile(src[0], arg))


def kineto_profile(sources: list[str], steps: int) -> bytes:
    """The raw traces `sources` cut to their first `steps` profiler steps, imported as one Profile by mmprof's
    own Kineto importer (the same Profile `mmprof import` writes for the cut traces)."""
    from mmprof.importers import import_paths
    from mmprof.profiles.io import dumps

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for s in sources:
            raw = trim_kineto(json.loads(gzip.decompress(_original(s))), steps)
            paths.append(Path(tmp) / Path(s).name)
            paths[-1].write_bytes(_gzip(json.dumps(raw, separators=(",", ":")).encode()))
        p = import_paths(paths)
    # what names a temporary file or the time of this script's run is set from the originals instead
    named = {str(q): f"examples/{s}" for q, s in zip(paths, sources)}
    p.meta["source"]["files"] = [named.get(f, f) for f in p.meta["source"]["files"]]
    for r in p.meta.get("ranks", []):
        r["file"] = named.get(r.get("file"), r.get("file"))
    p.meta["created"] = _commit_date()
    p.meta["excerpt"] = {"of": [f"git show {ORIGINALS}:examples/{s}" for s in sources], "by": "examples/trim.py",
                         "kept": f"the first {steps} profiler steps (ProfilerStep#N) of every process, "
                                 "imported by mmprof's Kineto importer"}
    return dumps(p)


def _commit_date() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "show", "-s", "--format=%cI", ORIGINALS], check=True,
                          capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", help="paths under examples/ (default: every excerpt)")
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    a = ap.parse_args(argv)
    bad = 0
    for rel in a.paths or sorted(EXCERPTS):
        data = build(rel)
        dest = ROOT / "examples" / rel
        if a.check:
            same = dest.read_bytes() == data
            bad += not same
            print(f"{'same' if same else 'DIFFERS'} {rel}")
        else:
            dest.write_bytes(data)
            print(f"{rel}: {len(data):,} bytes")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
