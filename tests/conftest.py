from __future__ import annotations

import contextlib
import gzip
import io
import lzma
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
# the full real samples that tests/data/samples holds excerpts of (beside the checkouts on the project's machines;
# absent elsewhere: a test may compare with them only where they exist, and must check something without them)
SHARED_SAMPLES = ROOT.parent / "shared" / "samples"

# Fixtures committed xz-compressed (the real files, byte for byte: xz -9e of each): a SQLite database of a few
# hundred rows weighs 1-2 MB, mostly pages of long JSON blobs and free space, and xz takes 95% of it off; the kernel
# corpus is a 250 KB TSV of repetitive names. Each `X.xz` is unpacked beside itself to `X` (ignored by git,
# .gitignore) when missing or older than its .xz, so every test and script reads the same path as before. Written
# to a temporary name and renamed, so that parallel workers never see half a file. (Traces and Profiles are
# committed as .json.xz or .json.gz and read as they are: mmprof reads both.)
PACKED = ("samples/nsys/perlmutter-cloverleaf-cuda.sqlite", "samples/nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
          "samples/rocprofv3/rocpd/14_results.db", "samples/rocprofv3/rocpd/28_results.db",
          "kernel_corpus/corpus.tsv", "kernel_corpus_unseen/corpus.tsv")


def unpack_fixtures() -> None:
    for rel in PACKED:
        dst = DATA / rel
        src = dst.with_name(dst.name + ".xz")
        if not src.exists() or (dst.exists() and dst.stat().st_mtime >= src.stat().st_mtime):
            continue
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
        with lzma.open(src, "rb") as f, open(tmp, "wb") as g:
            shutil.copyfileobj(f, g)
        os.replace(tmp, dst)
    # rocprofv3_json/14_results.json is a conversion of the rocpd sample 14_results.db (README there), made by the
    # committed script from the unpacked database; same bytes on every run
    db, js = DATA / "samples/rocprofv3/rocpd/14_results.db", DATA / "rocprofv3_json" / "14_results.json"
    if not js.exists() or js.stat().st_mtime < db.stat().st_mtime:
        import importlib.util

        spec = importlib.util.spec_from_file_location("make_from_rocpd", js.parent / "make_from_rocpd.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        tmp = js.with_name(f".{js.name}.{os.getpid()}.tmp")
        with contextlib.redirect_stdout(io.StringIO()):  # its one-line summary
            mod.main(str(db), str(tmp))
        os.replace(tmp, js)


unpack_fixtures()


def _derive_nostack() -> None:
    """tests/data/hf_moe/nostack.py: the `*_nostack` traces are the `*_stack` ones without their python_function
    events (the only difference between the two recordings; README there), written beside them (ignored by git)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("hf_moe_nostack", DATA / "hf_moe" / "nostack.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.ensure()


_derive_nostack()


def open_data(path: str | os.PathLike, mode: str = "rb"):
    """A fixture opened for reading, decompressed by its content (gzip, xz or plain): the raw JSON of a trace for
    independent counts, whichever way it is committed."""
    from mmprof.fileio import _compressed

    with open(path, "rb") as f:
        kind = _compressed(f.read(6))
    return gzip.open(path, mode) if kind == "gzip" else lzma.open(path, mode) if kind == "xz" else open(path, mode)


def data_file(*parts: str) -> Path:
    """A fixture under tests/data/; fails loudly when missing (never skips)."""
    p = DATA.joinpath(*parts)
    if not p.exists():
        raise FileNotFoundError(f"test fixture missing: {p}")
    return p


def sql_rows(path: Path, sql: str) -> list[tuple]:
    """Run one query on an SQLite file read-only (tests check importers against the raw tables)."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def run_main(args: list[str], capsys) -> tuple[int, str, str]:
    """`mmprof ARGS` in-process: (exit code, stdout, stderr). For new tests; older files keep their own helper."""
    import pytest

    from mmprof.cli import main

    with pytest.raises(SystemExit) as e:
        main(args)
    cap = capsys.readouterr()
    return e.value.code, cap.out, cap.err


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    if has_gpu or os.environ.get("MMPROF_GPU_TESTS"):
        return
    skip = pytest.mark.skip(reason="needs a GPU (marked gpu); run on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
