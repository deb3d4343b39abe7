"""External-tool capture backends for `mmprof record --backend rocprofv3|nsys`.

- **rocprofv3** (ROCm): ``rocprofv3 --kernel-trace --hip-trace --marker-trace --output-format rocpd -d DIR
  -o rank%env{RANK}%.pid%pid% -- CMD``. The tool injects itself into every process of the command and writes
  one rocpd SQLite database per process; the reference runtime emits roctx ranges (its scope labels) when the
  `roctx` module imports, which `--marker-trace` records. The databases are then imported.
- **nsys** (NVIDIA): ``nsys profile -t cuda,nvtx,osrt --trace-fork-before-exec=true -o DIR/rank%q{RANK} -- CMD``,
  then ``nsys export --type sqlite`` for each report, then import. PyTorch's record_function ranges become NVTX
  ranges only when the program enables `torch.autograd.profiler.emit_nvtx`; the reference runtime emits NVTX
  ranges itself.

The command's output and exit code pass through unchanged, as with the torch backend. A missing tool is a
`CaptureUnavailable` with one line saying what to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from mmprof.capture.command import run_command
from mmprof.errors import BadInput, CaptureUnavailable
from mmprof.importers import import_paths
from mmprof.profiles.io import save_profile

INSTALL_HINT = {
    "rocprofv3": "it ships with ROCm (rocprofiler-sdk; rocpd output needs ROCm >= 7.0): add /opt/rocm/bin to PATH",
    "nsys": "install NVIDIA Nsight Systems (or the CUDA toolkit) and put its bin folder on PATH",
}


def find_tool(name: str, env: dict[str, str] | None = None) -> str:
    """The tool's path on PATH, or CaptureUnavailable naming what to install."""
    path = (env or os.environ).get("PATH")
    exe = shutil.which(name, path=path)
    if exe is None:
        raise CaptureUnavailable(f"--backend {name}: `{name}` is not on PATH; {INSTALL_HINT[name]}")
    return exe


def rocprofv3_command(exe: str, out_dir: Path, cmd: list[str]) -> list[str]:
    return [exe, "--kernel-trace", "--hip-trace", "--marker-trace", "--output-format", "rocpd",
            "-d", str(out_dir), "-o", "rank%env{RANK}%.pid%pid%", "--", *cmd]


def nsys_profile_command(exe: str, out_dir: Path, cmd: list[str]) -> list[str]:
    return [exe, "profile", "-t", "cuda,nvtx,osrt", "--trace-fork-before-exec=true", "--force-overwrite=true",
            "-o", str(out_dir / "rank%q{RANK}"), "--", *cmd]


def nsys_export_command(exe: str, report: Path) -> list[str]:
    return [exe, "export", "--type", "sqlite", "--force-overwrite", "true",
            "--output", str(report.with_suffix(".sqlite")), str(report)]


def record_with_tool(backend: str, cmd: list[str], out_path: Path, tdir: Path, opts, result):
    """Run `cmd` under the tool, import what it wrote, save the Profile. Returns (result, profile)."""
    if not cmd:
        raise BadInput("no command given: use `mmprof record [OPTIONS] -- CMD ARGS...`")
    if opts.steps is not None or opts.mode != "full":
        result.warnings.append(f"--steps/--skip/--light apply to the torch backend; {backend} captures the whole run")
    exe = find_tool(backend)
    tdir = Path(tdir).resolve()
    if tdir.exists() and (not tdir.is_dir() or any(tdir.iterdir())):
        # never delete what is there (a previous run, or a user's own files): this run gets a new folder beside it
        import tempfile

        new = Path(tempfile.mkdtemp(prefix=tdir.name + ".", dir=tdir.parent))
        result.warnings.append(f"{tdir} is not empty; this run's {backend} output went to {new}")
        tdir = new
        result.trace_dir = str(tdir)
    tdir.mkdir(parents=True, exist_ok=True)
    if backend == "rocprofv3":
        result.exit_code = run_command(rocprofv3_command(exe, tdir, cmd))
        files = sorted(p for p in tdir.rglob("*.db") if p.is_file())
        if not files:
            raise CaptureUnavailable(f"rocprofv3 wrote no rocpd database under {tdir} (exit code "
                                     f"{result.exit_code}); check its messages above")
    elif backend == "nsys":
        result.exit_code = run_command(nsys_profile_command(exe, tdir, cmd))
        reports = sorted(tdir.rglob("*.nsys-rep"))
        if not reports:
            leftovers = sorted(p.name for p in tdir.rglob("*.qdstrm"))
            hint = f" (only unconverted {', '.join(leftovers)}: the run was killed)" if leftovers else ""
            raise CaptureUnavailable(f"nsys wrote no report under {tdir}{hint}; check its messages above")
        files = []
        for rep in reports:
            proc = subprocess.run(nsys_export_command(exe, rep), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
            sqlite = rep.with_suffix(".sqlite")
            if proc.returncode != 0 or not sqlite.exists():
                result.warnings.append(f"nsys export failed for {rep.name}: {proc.stdout.strip()[-300:]}")
                continue
            files.append(sqlite)
        if not files:
            raise CaptureUnavailable(f"nsys export produced no SQLite file from {len(reports)} report(s)")
    else:  # pragma: no cover - record() validates the name
        raise BadInput(f"unknown backend {backend!r}")
    profile = import_paths([str(f) for f in files], one_run=True)  # our own capture: one run by construction
    src = profile.meta.get("source") or {}
    profile.meta["source"] = {"format": "record", "imported_format": src.get("format"),
                              "files": [str(f) for f in files], "tool": backend}
    profile.meta["command"] = list(cmd)
    profile.meta["capture"] = {"backend": backend, "mode": "full", "window": None, "trace_dir": str(tdir),
                               "tool_command": (rocprofv3_command(exe, tdir, cmd) if backend == "rocprofv3"
                                                else nsys_profile_command(exe, tdir, cmd))}
    ranks = profile.meta.get("ranks") or []
    for r in ranks:
        r.setdefault("partial", False)
    result.ranks = ranks
    world = max((len(ranks), *(r["rank"] + 1 for r in ranks if isinstance(r.get("rank"), int))), default=0)
    result.world_size = world or None
    if result.warnings:
        profile.meta["warnings"] = list(profile.meta.get("warnings", [])) + result.warnings
    save_profile(profile, out_path)
    return result, profile
