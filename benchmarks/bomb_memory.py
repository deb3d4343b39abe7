"""Peak memory of every importer on small compressed files that inflate to huge documents; one JSON line each.

Issue 33: "a small gzip that inflates to tens of millions of empty objects or bare integers reaches 3.8 GiB before
the 'too large' error: the event limits are checked after the decode for those shapes". Each case is a gzip of at
most a few MiB whose JSON is one shape repeated (`{}`, bare integers, empty arrays, 1-character strings, minimal
events, a header or an argument field holding one huge array, ...), in every JSON format mmprof reads (Kineto
trace, rocprofv3 JSON, mmprof Profile, Hugging Face config.json via `--model`). Each is run as a new user would
(`mmprof import F -o out.json.gz`, or `mmprof shapes --tp 2 --model F`) in a fresh subprocess under an address-space
limit (so a blow-up here cannot take the machine with it); the line gives the exit code, the one stderr line and the
peak RSS (ru_maxrss of the child).

The bound (docs/limits.md "Memory of a hostile file"): a file compressed to at most 4 MiB (so at most 256 MiB of
JSON and 1,000,000 events by the gzip limits) peaks under 1.5 GiB whatever its shape: each case prints
`"within": true` when its peak is under BOUND_MIB. A case refused for its memory limit (`MemoryError`, exit 2
naming memory) is a blow-up, `"within": false`.

Usage: python benchmarks/bomb_memory.py [--mib 256] [--only NAME] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOUND_MIB = 1536
AS_LIMIT = 6 << 30  # address space of each child: a blow-up stops here instead of at the machine's memory


def _repeat(head: bytes, item: bytes, tail: bytes, size: int) -> list[bytes]:
    """A document `head item,item,...,item tail` of about `size` bytes, as chunks (never one huge bytes object)."""
    n = max(1, size // (len(item) + 1))
    block = (item + b",") * 65536
    chunks = [head]
    left = n
    while left > 65536:
        chunks.append(block)
        left -= 65536
    chunks.append((item + b",") * (left - 1) + item)
    chunks.append(tail)
    return chunks


def cases(size: int) -> dict[str, tuple[str, list[bytes]]]:
    """name -> (how it is read: import | model, the document's chunks)."""
    k_head, k_tail = b'{"traceEvents":[', b"]}"
    ev = b'{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1}'
    out = {
        "kineto_empty_objects": ("import", _repeat(k_head, b"{}", k_tail, size)),
        "kineto_bare_ints": ("import", _repeat(k_head, b"1", k_tail, size)),
        "kineto_bare_array_ints": ("import", _repeat(b"[", b"7", b"]", size)),
        "kineto_empty_arrays": ("import", _repeat(k_head, b"[]", k_tail, size)),
        "kineto_short_strings": ("import", _repeat(k_head, b'"a"', k_tail, size)),
        "kineto_nested_one_array": ("import", _repeat(k_head + b"[", b"[]", b"]" + k_tail, size)),
        "kineto_minimal_events": ("import", _repeat(k_head, b'{"ph":"X"}', k_tail, size)),
        "kineto_events_without_ph": ("import", _repeat(k_head, b'{"ts":1}', k_tail, size)),
        "kineto_header_array": ("import", _repeat(b'{"deviceProperties":[', b"[]", b'],"traceEvents":[' + ev + b"]}",
                                                  size)),
        "kineto_grid_array": ("import", _repeat(k_head + b'{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1,'
                                                b'"args":{"grid":[', b"[]", b"]}}" + k_tail, size)),
        "kineto_name_array": ("import", _repeat(k_head + b'{"ph":"X","cat":"kernel","ts":1,"dur":1,"name":[', b"{}",
                                                b"]}" + k_tail, size)),
        "kineto_args_not_object": ("import", _repeat(k_head + b'{"ph":"X","cat":"kernel","ts":1,"dur":1,"args":[', b"[]",
                                                     b"]}" + k_tail, size)),
        "kineto_events_not_list": ("import", _repeat(b'{"traceEvents":7,"x":[', b"[]", b"]}", size)),
        "rocprofv3_json_arrays": ("import", _repeat(b'{"rocprofiler-sdk-tool":[{"metadata":{},"x":[', b"[]", b"]}]}",
                                                    size)),
        "profile_arrays": ("import", _repeat(b'{"format":"mmprof-profile","schema_version":3,"x":[', b"[]", b"]}",
                                             size)),
        "config_arrays": ("model", _repeat(b'{"model_type":"minimax_m3","x":[', b"[]", b"]}", size)),
    }
    return out


def _write(path: Path, chunks: list[bytes]) -> int:
    with gzip.open(path, "wb", compresslevel=9) as g:
        for c in chunks:
            g.write(c)
    return path.stat().st_size


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def run_case(path: Path, how: str, work: Path) -> dict:
    if how == "import":
        cmd = [sys.executable, "-m", "mmprof", "import", str(path), "-o", str(work / "out.json.gz")]
    else:
        cmd = [sys.executable, "-m", "mmprof", "shapes", "--tp", "2", "--model", str(path)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_limit_memory, cwd=work,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if peak_kib <= before:  # ru_maxrss of children is the largest so far: run each case in its own process
        peak_kib = before
    err = p.stderr.strip().splitlines()
    return {"rc": p.returncode, "stderr_lines": len(err), "stderr": (err[-1] if err else "")[:160],
            "peak_mib": round(peak_kib / 1024), "wall_s": round(wall, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=256, help="size of each inflated document in MiB [256]")
    ap.add_argument("--only", default=None, help="run only the cases whose name contains this")
    ap.add_argument("--keep", default=None, help="write the files here and keep them")
    ap.add_argument("--one", nargs=2, metavar=("HOW", "PATH"), help=argparse.SUPPRESS)  # internal: one case
    a = ap.parse_args()
    if a.one:
        with tempfile.TemporaryDirectory() as work:
            print(json.dumps(run_case(Path(a.one[1]), a.one[0], Path(work))))
        return
    size = a.mib << 20
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(a.keep) if a.keep else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for name, (how, chunks) in cases(size).items():
            if a.only and a.only not in name:
                continue
            f = folder.resolve() / f"{name}.json.gz"
            gz = _write(f, chunks)
            del chunks
            # each case in a process of its own, so that ru_maxrss of its children is this case's peak
            got = subprocess.run([sys.executable, __file__, "--one", how, str(f)], capture_output=True, text=True)
            res = json.loads(got.stdout) if got.returncode == 0 and got.stdout else {"error": got.stderr[-300:]}
            res.update(case=name, gzip_bytes=gz, inflated_mib=a.mib, bound_mib=BOUND_MIB,
                       within=bool(res.get("peak_mib", 1e9) < BOUND_MIB and "memory" not in res.get("stderr", "")),
                       machine=f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}")
            print(json.dumps(res), flush=True)
            if not a.keep:
                f.unlink()


if __name__ == "__main__":
    main()
