"""Start the N ranks of `mmprof run --tp N` on one host, or join the ranks torchrun already started.

`spawn_ranks` starts N processes (`python -m mmprof.capture.launch`), one free TCP port on 127.0.0.1, gloo on
CPU and NCCL (RCCL on ROCm) on GPUs. Each rank runs `runtime_run.run_rank`, captures its own trace into the
shared work directory and writes its outcome (timings, dispatch rows, trace path) there as JSON; the
parent reads them back. A rank that fails writes its one-line error first, so the parent can say which rank
failed and why instead of a wall of tracebacks.

`run_under_torchrun` is for `torchrun ... -m mmprof run`: every rank runs its share against the existing
process group, writes its outcome next to the output, and after a barrier rank 0 collects them all.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from mmprof.errors import BadInput, MmprofError

POLL_S = 0.2


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _outcome_path(work_dir: Path, rank: int) -> Path:
    return work_dir / f"outcome.rank{rank}.json"


def _error_path(work_dir: Path, rank: int) -> Path:
    return work_dir / f"error.rank{rank}.txt"


class FileProgress:
    """Rank 0's progress written to a small file the parent polls (children cannot draw the parent's bar)."""

    def __init__(self, path: Path):
        self.path = path

    def __call__(self, stage: str, done: int, total: int) -> None:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(f"{done}\t{total}\t{stage}")
        os.replace(tmp, self.path)


def read_progress(path: Path) -> tuple[int, int, str] | None:
    try:
        done, total, stage = path.read_text().split("\t", 2)
        return int(done), int(total), stage
    except (OSError, ValueError):
        return None


def _worker(i: int, opts, work_dir: str, port: int, world: int) -> None:
    """One rank, in its own process: join the group, run its share, write its outcome (or its error)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(i), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(i))
    wd = Path(work_dir)
    try:
        from mmprof.capture.runtime_run import run_rank, save_outcome
        from mmprof.runtime import init_distributed
        from mmprof.runtime.dist import destroy

        ctx = init_distributed(backend="nccl" if opts.device == "cuda" else "gloo",
                               device=f"cuda:{i}" if opts.device == "cuda" else "cpu")
        try:
            progress = FileProgress(wd / "progress.txt") if i == 0 else None
            out = run_rank(opts, wd, rank=ctx.rank, world=ctx.world_size, group=ctx.group, device=ctx.device,
                           progress=progress)
            save_outcome(out, _outcome_path(wd, ctx.rank))
        finally:
            destroy()
    except MmprofError as e:
        _error_path(wd, i).write_text(str(e))
        raise SystemExit(2)
    except BaseException as e:
        _error_path(wd, i).write_text(f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
        raise


def spawn_ranks(opts, work_dir: Path, progress=None, timeout_s: float | None = None):
    """Start `opts.tp` ranks on this host (one `python -m mmprof.capture.launch` process each) and return
    their RankOutcomes in rank order. A subprocess per rank (rather than multiprocessing's spawn) works from
    any caller: a script without a `__main__` guard, pytest, or the `mmprof` entry point."""
    from mmprof.capture.runtime_run import load_outcome

    world = opts.tp
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    opts_file = work_dir / "options.json"
    opts_file.write_text(json.dumps(opts.to_dict()))
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // world))))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    procs, logs = [], []
    for i in range(world):
        log = open(work_dir / f"rank{i}.log", "wb")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, "-m", "mmprof.capture.launch", str(opts_file), str(i),
                                       str(world), str(port), str(work_dir)], stdout=log, stderr=subprocess.STDOUT,
                                      env=env))
    t0 = time.monotonic()
    pfile = work_dir / "progress.txt"
    last = None
    try:
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
                break
            if progress is not None and (p := read_progress(pfile)) and p != last:
                last = p
                progress(f"{p[2]} ({world} ranks)", p[0], p[1])
            if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                raise BadInput(f"--tp {world}: the ranks did not finish within {timeout_s:.0f} s")
            time.sleep(POLL_S)
    finally:
        for p in procs:
            if p.poll() is None:
                if any(q.poll() not in (None, 0) for q in procs) or timeout_s is not None:
                    p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for log in logs:
            log.close()
    errors = {r: _error_path(work_dir, r).read_text().strip() for r in range(world) if _error_path(work_dir, r).exists()}
    if errors:
        r, msg = min(errors.items())
        raise BadInput(f"--tp {world}: rank {r} failed: {msg.splitlines()[0] if msg else 'no message'}")
    bad = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode != 0]
    if bad:
        r, code = bad[0]
        tail = (work_dir / f"rank{r}.log").read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise BadInput(f"--tp {world}: rank {r} exited with code {code} ({tail[0][:200]})")
    missing = [r for r in range(world) if not _outcome_path(work_dir, r).exists()]
    if missing:
        raise BadInput(f"--tp {world}: rank(s) {missing} finished without writing their results")
    return [load_outcome(_outcome_path(work_dir, r)) for r in range(world)]


def run_under_torchrun(opts, work_dir: Path, progress=None):
    """This process is one rank of a torchrun job: run its share; rank 0 returns every rank's outcome.

    The work directory must be shared by the ranks (one host): the caller passes one derived from the output
    path. Non-zero ranks return None.
    """
    import torch.distributed as dist

    from mmprof.capture.runtime_run import load_outcome, run_rank, save_outcome
    from mmprof.runtime import init_distributed

    ctx = init_distributed(backend="nccl" if opts.device == "cuda" else "gloo",
                           device=None if opts.device == "cuda" else "cpu")
    if opts.tp not in (1, ctx.world_size):
        raise BadInput(f"--tp {opts.tp} but torchrun started {ctx.world_size} ranks; drop --tp or make them match")
    if opts.tp == 1:
        opts.tp = ctx.world_size
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    out = run_rank(opts, work_dir, rank=ctx.rank, world=ctx.world_size, group=ctx.group, device=ctx.device,
                   progress=progress if ctx.rank == 0 else None)
    save_outcome(out, _outcome_path(work_dir, ctx.rank))
    dist.barrier()
    if ctx.rank != 0:
        return None
    return [load_outcome(_outcome_path(work_dir, r)) for r in range(ctx.world_size)]


# -- collectives of CPU (gloo) ranks -----------------------------------------------------------------
_C10D_NAME = re.compile(r"^c10d::_?(allreduce|allgather|reduce_scatter|broadcast|alltoall|all_to_all|reduce|gather"
                        r"|scatter|send|recv)(?:_base|_into_tensor_coalesced|_coalesced|_tensor)?_?$")


def _numel(dims: Any) -> int:
    """Elements of a tensor shape, or the sum over a list of shapes (a TensorList input)."""
    if isinstance(dims, list) and dims and all(isinstance(d, int) for d in dims):
        n = 1
        for d in dims:
            n *= d
        return n
    if isinstance(dims, list) and dims and all(isinstance(d, list) for d in dims):
        return sum(_numel(d) for d in dims)
    return 0


def add_c10d_collectives(profile, opts) -> int:
    """Collective rows from the `c10d::allreduce_`-style ops when the importer found none.

    Some torch builds write no `record_param_comms` events for gloo (CPU) collectives; the c10d op on the
    calling thread is then the only record of the all-reduce. Its first input (a TensorList) gives the
    message size; the dtype is the run's activation dtype (every collective of the runtime moves activations).
    Returns the number of rows added.
    """
    import numpy as np

    from mmprof.profiles.schema import TABLES

    ops = profile.tables["ops"]
    names = profile.strings
    hits = [i for i in range(profile.n("ops")) if ops["name"][i] >= 0 and _C10D_NAME.match(names[ops["name"][i]])]
    if not hits:
        return 0
    es = 2 if opts.dtype == "bfloat16" else 4
    world = max(1, len(profile.ranks))
    ids = {s: i for i, s in enumerate(names)}

    def sid(s: str | None) -> int:
        if s is None:
            return -1
        if s not in ids:
            ids[s] = len(names)
            names.append(s)
        return ids[s]

    rows = []
    for i in hits:
        kind = _C10D_NAME.match(names[ops["name"][i]]).group(1)
        name = {"alltoall": "all_to_all"}.get(kind, kind)
        dims_text = names[ops["input_dims"][i]] if ops["input_dims"][i] >= 0 else None
        try:
            dims = json.loads(dims_text) if dims_text else None
        except ValueError:
            dims = None
        b_in = b_out = -1
        if isinstance(dims, list) and dims:
            if name == "allreduce" or name == "broadcast":
                b_in = b_out = _numel(dims[0]) * es or -1
            elif name == "allgather" and len(dims) > 1:
                b_in = _numel(dims[1]) * es or -1
                b_out = _numel(dims[0]) * es or -1
        rows.append({"rank": int(ops["rank"][i]), "start_ns": int(ops["start_ns"][i]), "dur_ns": int(ops["dur_ns"][i]),
                     "name": sid(name), "bytes_in": b_in, "bytes_out": b_out, "dtype": sid(opts.dtype),
                     "group": sid("WORLD"), "group_size": world, "group_ranks": sid(json.dumps(list(range(world)))),
                     "kernel": -1, "op": i, "phase": int(ops["phase"][i]), "step": int(ops["step"][i])})
    table = profile.tables["collectives"]
    for col, _, _ in TABLES["collectives"]:
        table[col] = np.concatenate([table[col], np.asarray([r[col] for r in rows], dtype=table[col].dtype)])
    profile._categories = None
    return len(rows)



def main(argv: list[str]) -> None:
    """`python -m mmprof.capture.launch OPTIONS.json RANK WORLD PORT WORK_DIR` (started by spawn_ranks)."""
    from mmprof.capture.runtime_run import RunOptions

    opts_file, rank, world, port, work_dir = argv
    opts = RunOptions(**json.loads(Path(opts_file).read_text()))
    _worker(int(rank), opts, work_dir, int(port), int(world))


if __name__ == "__main__":
    main(sys.argv[1:])
