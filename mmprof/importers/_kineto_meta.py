"""Run metadata of a Kineto trace: rank, devices (vendor, arch, peak key), world size, tool versions."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mmprof.importers._devices import describe_device

_ISA = re.compile(r"_ISA(\d{2,3}[0-9a-f]?)_")


def device_info(props: dict, kernel_names: list[str] | None = None) -> dict[str, Any]:
    """One deviceProperties entry -> {index, name, vendor, arch, peak_key, memory_bytes, sms}.

    Kineto says little on ROCm ("AMD Radeon Graphics", warp size 64): the vendor then comes from the warp size and
    the arch from gcnArchName or the `_ISA942_` tag in hipBLASLt kernel names; `describe_device` (shared by every
    importer) turns name + arch + CU count + memory into the peak key, or None when the product is not told."""
    name = props.get("name")
    name_s = name if isinstance(name, str) else ""
    warp = props.get("warpSize")
    gcn = props.get("gcnArchName")
    amd = isinstance(gcn, str) or warp == 64 or any(k in name_s for k in ("AMD", "Radeon", "Instinct")) or bool(
        re.search(r"\bMI\d{3}", name_s))
    nvidia = not amd and (warp == 32 or any(k in name_s for k in ("NVIDIA", "Tesla", "GeForce", "Quadro", "RTX")))
    vendor = "amd" if amd else "nvidia" if nvidia else None
    arch = None
    if amd:
        if isinstance(gcn, str):
            arch = gcn.split(":")[0]
        else:
            for k in kernel_names or ():
                m = _ISA.search(k) if isinstance(k, str) else None
                if m:
                    arch = "gfx" + m.group(1)
                    break
    elif nvidia and isinstance(props.get("computeMajor"), int) and isinstance(props.get("computeMinor"), int):
        arch = f"sm_{props['computeMajor']}{props['computeMinor']}"
    cus = props.get("numSms") if isinstance(props.get("numSms"), int) else None
    mem = props.get("totalGlobalMem") if isinstance(props.get("totalGlobalMem"), int) else None
    shared = describe_device(name_s or None, arch, vendor, cus=cus, memory_bytes=mem)
    idx = props.get("id")
    return {"index": idx if isinstance(idx, int) else -1, "name": name_s or None,
            "vendor": shared["vendor"] or vendor, "arch": shared["arch"] or arch, "peak_key": shared["peak_key"],
            "memory_bytes": mem, "sms": cus}


def build_meta(trace, path: Path, rank: int, dist: dict, imp, warnings: list[str]) -> dict[str, Any]:
    props = trace.deviceProperties if isinstance(trace.deviceProperties, list) else []
    names = list({n for n in imp.k_names[:5000] if isinstance(n, str)}) if hasattr(imp, "k_names") else []
    devices = [device_info(p, names) for p in props if isinstance(p, dict)]
    used = sorted({int(x) for x in imp.builder.cols["kernels"]["device"]} | {int(x) for x in imp.builder.cols["memcpy"]["device"]})
    if used and devices:
        listed = {d["index"] for d in devices}
        devices = [d for d in devices if d["index"] in used] or devices
        missing = [u for u in used if u not in listed]
        if missing:
            warnings.append(f"kernels ran on device(s) {missing} not listed in deviceProperties")
    elif used:
        devices = [{"index": u, "name": None, "vendor": None, "arch": None, "peak_key": None} for u in used]
    tool = "PyTorch profiler (Kineto)"
    if trace.cupti_version is not None:
        tool += f", CUPTI {trace.cupti_version}, CUDA runtime {trace.cuda_runtime_version}"
    if any(isinstance(n, str) and n.startswith("hip") for n in imp.builder.strings.strings[:2000]):
        tool += ", ROCm (HIP)"
    pids = sorted(p for p in imp.pids if isinstance(p, int))
    rank_entry: dict[str, Any] = {"rank": rank, "host": None, "pid": pids[0] if pids else None, "file": str(path),
                                  "devices": devices}
    if type(trace.baseTimeNanoseconds) is int and 0 <= trace.baseTimeNanoseconds < 2**63:
        rank_entry["base_time_ns"] = trace.baseTimeNanoseconds
    if type(dist.get("world_size")) is int:
        rank_entry["world_size"] = dist["world_size"]
    parallel: dict[str, Any] = {}
    if isinstance(dist.get("world_size"), int):
        parallel["world_size"] = dist["world_size"]
    meta: dict[str, Any] = {
        "source": {"format": "kineto", "files": [str(path)], "tool": tool,
                   "schema_version": trace.schemaVersion, "event_counts": imp.counts},
        "ranks": [rank_entry],
        "clock": {"unit": "ns", "note": "per-rank timeline: Kineto ts (µs) x 1000, not aligned across ranks"},
        "parallel": parallel,
        "warnings": warnings,
    }
    if dist:
        meta["distributed"] = {k: v for k, v in dist.items() if k in ("backend", "rank", "world_size", "pg_count",
                                                                        "pg_config", "nccl_version")}
    return meta
