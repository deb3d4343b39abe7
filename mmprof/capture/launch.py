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
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

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


def main(argv: list[str]) -> None:
    """`python -m mmprof.capture.launch OPTIONS.json RANK WORLD PORT WORK_DIR` (started by spawn_ranks)."""
    from mmprof.capture.runtime_run import RunOptions

    opts_file, rank, world, port, work_dir = argv
    opts = RunOptions(**json.loads(Path(opts_file).read_text()))
    _worker(int(rank), opts, work_dir, int(port), int(world))


if __name__ == "__main__":
    main(sys.argv[1:])
