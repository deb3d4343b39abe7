"""The one way mmprof starts N ranks on one host, or joins the ranks torchrun already started.

`spawn_ranks(target, payload, world, work_dir, device)` starts `world` processes
(`python -m mmprof.capture.rank_launcher`), one free TCP port on 127.0.0.1, gloo on CPU and NCCL (RCCL on ROCm) on
GPUs, one GPU per rank. Each rank joins the process group and calls `target` (a "module:function" string) with the
JSON `payload` and a `RankContext`; the function returns a JSON-able dict, which the rank writes to the shared work
directory and the parent reads back, in rank order. A rank that fails writes its one-line error first, so the
parent can say which rank failed and why instead of a wall of tracebacks. A subprocess per rank (rather than
multiprocessing's spawn) works from any caller: a script without a `__main__` guard, pytest, or the `mmprof` entry
point.

`join_torchrun(target, payload, work_dir, device)` is for commands run under `torchrun ... -m mmprof ...`: this
process is one rank of the job; it runs its share, writes its outcome, and after a barrier rank 0 returns every
rank's outcome (the others return None).

Users: `mmprof run --tp N` (`mmprof.capture.workflows.run:rank_main`) and `mmprof shapes --live`
(`mmprof.capture.workflows.shapes_live:rank_main`).
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mmprof.errors import BadInput, MmprofError
from mmprof.runtime.dist import destroy, init_distributed

POLL_S = 0.2
Progress = Callable[[str, int, int], None]


@dataclass
class RankContext:
    """What a rank's function gets besides its payload."""

    rank: int
    world_size: int
    device: str            # "cpu" or this rank's "cuda:N"
    group: Any             # the torch.distributed group; None for a single rank
    work_dir: Path         # shared by all ranks
    progress: Progress | None = None  # rank 0 only


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _outcome_path(work_dir: Path, rank: int) -> Path:
    return work_dir / f"outcome.rank{rank}.json"


def _error_path(work_dir: Path, rank: int) -> Path:
    return work_dir / f"error.rank{rank}.txt"


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


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


def _resolve(target: str) -> Callable[[dict[str, Any], RankContext], dict[str, Any]]:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _backend(device: str) -> str:
    return "nccl" if device == "cuda" else "gloo"


def _worker(spec: dict[str, Any], i: int, world: int, port: int, work_dir: str) -> None:
    """One rank, in its own process: join the group, run the target, write its outcome (or its error)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(i), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(i))
    wd = Path(work_dir)
    device = spec["device"]
    try:
        ctx = init_distributed(backend=_backend(device), device=f"cuda:{i}" if device == "cuda" else "cpu")
        ok = False
        try:
            rc = RankContext(ctx.rank, ctx.world_size, ctx.device, ctx.group, wd,
                             FileProgress(wd / "progress.txt") if i == 0 else None)
            _write_json(_outcome_path(wd, ctx.rank), _resolve(spec["target"])(spec["payload"], rc))
            ok = True
        finally:
            destroy(barrier=ok)
    except MmprofError as e:
        _error_path(wd, i).write_text(str(e))
        raise SystemExit(2)
    except BaseException as e:
        _error_path(wd, i).write_text(f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
        raise


def spawn_ranks(target: str, payload: dict[str, Any], world: int, work_dir: str | os.PathLike, device: str = "cpu",
                progress: Progress | None = None, timeout_s: float | None = None,
                what: str | None = None) -> list[dict[str, Any]]:
    """Start `world` ranks running `target` and return their outcomes in rank order (see the module docstring).

    `what` names the job in errors (default `--tp N`)."""
    what = what or f"--tp {world}"
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    spec_file = work_dir / "rank_spec.json"
    spec_file.write_text(json.dumps({"target": target, "payload": payload, "device": device}))
    port = free_port()
    threads = os.environ.get("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // world)))
    env = dict(os.environ, OMP_NUM_THREADS=threads)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    procs, logs = [], []
    for i in range(world):
        log = open(work_dir / f"rank{i}.log", "wb")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, "-m", "mmprof.capture.rank_launcher", str(spec_file), str(i),
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
                raise BadInput(f"{what}: the ranks did not finish within {timeout_s:.0f} s")
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
        raise BadInput(f"{what}: rank {r} failed: {msg.splitlines()[0] if msg else 'no message'}")
    bad = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode != 0]
    if bad:
        r, code = bad[0]
        tail = (work_dir / f"rank{r}.log").read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise BadInput(f"{what}: rank {r} exited with code {code} ({tail[0][:200]})")
    missing = [r for r in range(world) if not _outcome_path(work_dir, r).exists()]
    if missing:
        raise BadInput(f"{what}: rank(s) {missing} finished without writing their results")
    return [json.loads(_outcome_path(work_dir, r).read_text()) for r in range(world)]


def join_torchrun(target: str, payload: dict[str, Any], work_dir: str | os.PathLike, device: str = "cpu",
                  progress: Progress | None = None) -> list[dict[str, Any]] | None:
    """This process is one rank of a torchrun job: run `target`; rank 0 returns every rank's outcome.

    The work directory must be shared by the ranks (one host): the caller derives it from the job (e.g. the
    output path or the rendezvous). Non-zero ranks return None."""
    import torch.distributed as dist  # torch only once a job really runs

    ctx = init_distributed(backend=_backend(device), device=None if device == "cuda" else "cpu")
    wd = Path(work_dir)
    wd.mkdir(parents=True, exist_ok=True)
    rc = RankContext(ctx.rank, ctx.world_size, ctx.device, ctx.group, wd, progress if ctx.rank == 0 else None)
    _write_json(_outcome_path(wd, ctx.rank), _resolve(target)(payload, rc))
    dist.barrier()
    if ctx.rank != 0:
        return None
    return [json.loads(_outcome_path(wd, r).read_text()) for r in range(ctx.world_size)]


def torchrun_world() -> int:
    """WORLD_SIZE of the torchrun job this process belongs to (1 when not under torchrun)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1") or 1))
    except ValueError:
        return 1


def main(argv: list[str]) -> None:
    """`python -m mmprof.capture.rank_launcher SPEC.json RANK WORLD PORT WORK_DIR` (started by spawn_ranks)."""
    spec_file, rank, world, port, work_dir = argv
    _worker(json.loads(Path(spec_file).read_text()), int(rank), int(world), int(port), work_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
