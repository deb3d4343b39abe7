"""Make the `*_nostack` traces from the `*_stack` ones: the same recording without `with_stack`.

    python tests/data/hf_moe/nostack.py          (tests/conftest.py runs `ensure()` when the tests start)

make_traces.py recorded every model twice, with and without `with_stack`. On the full traces (git 01f295c) the two
recordings hold the same events but for the `python_function` ones (the same cpu_ops and user annotations with the
same names, input dims and concrete inputs, in the same order; only timestamps and durations differ) and the
header key `with_stack`. So only the `_stack` trace is committed, and its `_nostack` twin is written beside it
(ignored by git): every event of the stack trace but the `python_function` events, copied as they are, and the
header without `with_stack`. The durations are the stack run's (Python tracing makes the CPU ops a little
longer); no test reads a nostack trace's absolute times. Written when missing or older than its source, to a
temporary name and renamed (parallel test workers never see half a file), gzip level 9 with mtime 0.
"""
from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAMES = ("m3_eager", "m3_grouped", "qwen3moe_grouped", "dsv3_eager", "dsv32_grouped")


def without_stack(doc: dict) -> dict:
    out = {k: v for k, v in doc.items() if k not in ("traceEvents", "with_stack")}
    out["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "python_function"]
    return out


def ensure(names=NAMES) -> list[Path]:
    made = []
    for name in names:
        src, dst = HERE / f"{name}_stack.json.gz", HERE / f"{name}_nostack.json.gz"
        if dst.exists() and dst.stat().st_mtime >= src.stat().st_mtime:
            continue
        with gzip.open(src, "rb") as f:
            doc = without_stack(json.load(f))
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as g:
            g.write(json.dumps(doc, separators=(",", ":")).encode())
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, dst)
        made.append(dst)
    return made


if __name__ == "__main__":
    for p in ensure():
        print(p)
