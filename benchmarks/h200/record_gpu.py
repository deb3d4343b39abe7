"""`mmprof record` on a GPU: what the CPU tests cannot check. One run, < 8 minutes, writes under $OUT.

Checks (each PASS/FAIL with the numbers behind it):
  1 gpu-start   default start on a GPU build begins at the first GPU use: kernels + launches captured,
                every step has kernels, the CPU randn before `.cuda()` is not in the trace (4 randn, not 5)
  2 import-start  --start import includes it (5 randn)
  3 light       --light: mode light, kernels in every step, shapes only in step 0
  4 fork-cuda   multiprocessing *fork* workers that use CUDA while the parent never does (vLLM's default
                start method): both workers captured with kernels (written at their os._exit), the parent
                not poisoned (exit codes 0)
  8 os-exit     torchrun + mmprof.runtime.torchrun (tiny, cuda), which ends with os._exit: rank 0 complete with
                kernels, its trace written at os._exit
  5 runtime     the reference runtime (tiny preset) on cuda, one rank: kernels, layer scopes, dispatch
  6 overhead    a launch-bound loop (small kernels): step time without capture, with full, with light
  7 nsys        --backend nsys when nsys is on PATH (else reported n/a)

Run from the repository root:  python benchmarks/h200/record_gpu.py
Files under $OUT: summary.json (all numbers), record_gpu.txt (the table), and two small Profiles.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("OUT", "/tmp/record_gpu_out"))
WORK = Path("/tmp/mmprof_record_gpu")
DATA = ROOT / "tests" / "data" / "record"
sys.path.insert(0, str(ROOT))

results: list[dict] = []


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def record(name: str, args: list[str], cmd: list[str], timeout: float = 240):
    out = WORK / f"{name}.json.gz"
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "mmprof", "record", "-o", str(out), *args, "--", *cmd],
                          capture_output=True, text=True, timeout=timeout, env=env(), cwd=WORK)
    wall = time.time() - t0
    prof = None
    if out.exists():
        from mmprof.profiles.io import load_profile

        prof = load_profile(out)
    return proc, prof, wall, out


def add(name: str, ok: bool, **info) -> None:
    results.append({"check": name, "ok": bool(ok), **info})
    print(f"[{'PASS' if ok else 'FAIL'}] {name}: {info}", flush=True)


def _tail(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("USDT")]
    return "\n".join(lines[-8:]) if proc.returncode else ""


def step_ms(stdout: str) -> float | None:
    for line in stdout.splitlines():
        if "step_ms=" in line:
            return float(line.rsplit("step_ms=", 1)[1])
    return None


def guarded(name: str, fn) -> None:
    try:
        fn()
    except Exception as e:  # one broken check must not hide the others
        add(name, False, error=f"{type(e).__name__}: {e}"[:400])


def c1():
    proc, p, wall, out = record("gpu_start", [], [sys.executable, str(DATA / "cuda_script.py"), "4"])
    k = p.df("kernels")
    ops = p.df("ops")
    steps = sorted(int(s) for s in set(k.step) if s >= 0)
    randn = int((ops.name.astype(str) == "aten::randn").sum())
    add("gpu-start", proc.returncode == 0 and p.n("kernels") > 0 and p.n("launches") > 0 and steps == [0, 1, 2, 3]
        and randn == 4, rc=proc.returncode, kernels=p.n("kernels"), launches=p.n("launches"), kernel_steps=steps,
        randn=randn, devices=p.meta["ranks"][0].get("devices"), wall_s=round(wall, 1),
        stderr_tail=_tail(proc))
    shutil.copy(out, OUT / "gpu_start.json.gz")


def c2():
    proc, p, wall, _ = record("import_start", ["--start", "import"], [sys.executable, str(DATA / "cuda_script.py"), "4"])
    randn = int((p.df("ops").name.astype(str) == "aten::randn").sum())
    add("import-start", proc.returncode == 0 and randn == 5 and p.n("kernels") > 0, rc=proc.returncode, randn=randn,
        kernels=p.n("kernels"), stderr_tail=_tail(proc))


def _shaped_steps(ops) -> list[int]:
    """Steps whose aten::mm/matmul ops carry input shapes. `input_dims` is null where no shapes were recorded;
    test it with notna(): under pandas 3 `.astype(str)` keeps a missing value as NaN (not the string "nan"),
    which an earlier version of this check counted as "has shapes" in every step."""
    mm = ops[ops.name.astype(str).isin(["aten::mm", "aten::matmul"])]
    has = mm.input_dims.notna() & (mm.input_dims.astype("string").fillna("") != "")
    return sorted({int(s) for s in mm.step[has] if s >= 0})


def c3():
    proc, p, wall, _ = record("light", ["--light"], [sys.executable, str(DATA / "cuda_script.py"), "4"])
    k, ops = p.df("kernels"), p.df("ops")
    shaped = _shaped_steps(ops)
    ksteps = sorted(int(s) for s in set(k.step) if s >= 0)
    metas = sorted((WORK / "light.traces").glob("*.meta.json"))
    segs = [s["record_shapes"] for s in json.loads(metas[0].read_text())["segments"]] if metas else None
    add("light", proc.returncode == 0 and p.meta["capture"]["mode"] == "light" and ksteps == [0, 1, 2, 3]
        and shaped == [0] and segs == [True, False], rc=proc.returncode, kernel_steps=ksteps,
        steps_with_shapes=shaped, segment_shapes=segs, stderr_tail=_tail(proc))


def c4():
    proc, p, wall, _ = record("fork_cuda", [], [sys.executable, str(DATA / "mp_workers.py"), "fork", "--cuda"])
    ranks = p.meta["ranks"] if p else []
    k = p.df("kernels") if p else None
    with_kernels = sorted(int(r) for r in set(k["rank"])) if k is not None else []
    add("fork-cuda", proc.returncode == 0 and "exitcodes [0, 0]" in proc.stdout and len(with_kernels) == 2,
        rc=proc.returncode, stdout=proc.stdout.strip()[-200:], ranks=[(r["rank"], r["status"]) for r in ranks],
        ranks_with_kernels=with_kernels, stderr_tail=proc.stderr.strip()[-300:] if proc.returncode else "")


def c8():
    # torchrun + an entry point that ends with os._exit (mmprof.runtime.torchrun): the trace is written at os._exit
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "-m", "mmprof.runtime.torchrun",
           "--preset", "tiny", "--device", "cuda", "--prompt-len", "64", "--decode-steps", "4"]
    proc, p, wall, _ = record("os_exit", [], cmd)
    ranks = [(r["rank"], r["status"]) for r in p.meta["ranks"]] if p else []
    notes = [n for r in (p.meta["ranks"] if p else []) for n in r.get("notes", [])]
    add("os-exit", proc.returncode == 0 and p is not None and p.n("kernels") > 0 and ranks == [(0, "complete")]
        and any("os._exit(0)" in n for n in notes), rc=proc.returncode, ranks=ranks,
        kernels=p.n("kernels") if p else 0, stderr_tail=proc.stderr.strip()[-300:] if proc.returncode else "")


def c5():
    code = ("from mmprof.runtime import Switches, Workload, build_model, generate, get_preset\n"
            "m = build_model(get_preset('tiny'), Switches(), device='cuda')\n"
            "r = generate(m, Workload(batch=1, prompt_len=64, decode_steps=4))\nprint('runtime ok')\n")
    proc, p, wall, out = record("runtime", [], [sys.executable, "-c", code])
    names = set(p.df("scopes").name.astype(str)) if p else set()
    add("runtime", proc.returncode == 0 and p.n("kernels") > 0 and "layers.0.attn.qkv" in names,
        rc=proc.returncode, kernels=p.n("kernels") if p else 0, scopes=len(names),
        stderr_tail=proc.stderr.strip()[-300:] if proc.returncode else "")
    shutil.copy(out, OUT / "runtime.json.gz")


def c6():
    cmd = [sys.executable, str(DATA / "cuda_script.py"), "200", "--ops", "20"]
    base = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=240)
    full, _, _, _ = record("ovh_full", [], cmd)
    light, _, _, _ = record("ovh_light", ["--light"], cmd)
    b, f, lt = step_ms(base.stdout), step_ms(full.stdout), step_ms(light.stdout)
    add("overhead", None not in (b, f, lt), step_ms_none=b, step_ms_full=f, step_ms_light=lt,
        full_x=round(f / b, 2) if b and f else None, light_x=round(lt / b, 2) if b and lt else None)


def c7():
    if not shutil.which("nsys"):
        results.append({"check": "nsys", "ok": None, "note": "nsys not on PATH: not checked"})
        print("[n/a ] nsys: not on PATH", flush=True)
        return
    proc, p, wall, _ = record("nsys", ["--backend", "nsys"], [sys.executable, str(DATA / "cuda_script.py"), "4"])
    add("nsys", proc.returncode == 0 and p is not None and p.n("kernels") > 0, rc=proc.returncode,
        kernels=p.n("kernels") if p else 0, stderr_tail=proc.stderr.strip()[-300:])


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    if WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True)
    import torch

    print(f"torch {torch.__version__}, cuda {torch.version.cuda}, device "
          f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}", flush=True)
    for name, fn in [("gpu-start", c1), ("import-start", c2), ("light", c3), ("fork-cuda", c4), ("os-exit", c8),
                     ("runtime", c5), ("overhead", c6), ("nsys", c7)]:
        guarded(name, fn)
    (OUT / "summary.json").write_text(json.dumps({"torch": torch.__version__, "results": results}, indent=1,
                                                 default=str))
    lines = ["check          result  details"]
    for r in results:
        status = {True: "PASS", False: "FAIL", None: "n/a"}[r["ok"]]
        details = {k: v for k, v in r.items() if k not in ("check", "ok", "stderr_tail", "devices")}
        lines.append(f"{r['check']:<14} {status:<7} {json.dumps(details, default=str)[:160]}")
    table = "\n".join(lines)
    (OUT / "record_gpu.txt").write_text(table + "\n")
    print("\n" + table)


if __name__ == "__main__":
    main()
