"""Device peak table for roofline classification: dense matrix TFLOP/s per dtype and HBM bandwidth.

Lookup order for a device of a Profile (`meta.ranks[].devices[]`):
1. `peaks`: peaks measured or declared by the run itself (`{"bf16_tflops": .., "fp32_tflops": .., "hbm_tbs": ..}`),
   e.g. a CPU run that timed a matmul and a copy. They are used as given and labelled "measured".
2. `peak_key`: a key of `PEAKS` set by the importer or capture.
3. the device name (and arch), normalised: "AMD Instinct MI355X", "NVIDIA H200", "gfx950" -> a key.

An unknown device gives `None` plus a warning, never a guess (nanochat's rule: a wrong peak is worse than none).
A CPU gets no entry here: CPU peaks depend on the core count, clocks and ISA of the machine, so a CPU-run profile
only gets a roofline when its metadata carries measured peaks (case 1).

Measured CPU peaks (`mmprof run` on a CPU, `mmprof.capture.workflows.run.measure_cpu_peaks`) are per dtype and for
the rank's thread count, taken one rank at a time (`alone`), with the copy bandwidth at several working-set sizes
(`mem_levels`: a working set that fits a cache is bounded by that cache's bandwidth, not DRAM's). Profiles written
before that carry one DRAM bandwidth and, with several ranks, peaks every rank measured while the others ran; the
read-time rule (`profile_peaks`) keeps their bounds but drops the efficiencies those figures cannot support:
memory-bound working sets smaller than the copy the bandwidth was measured with (they ran from cache), and, for a
multi-rank run, every compute efficiency (the peak was measured under contention). docs/report.md explains it.

All figures are dense (no structured sparsity), vendor spec sheets unless noted.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Peak:
    """Peaks of one device. TFLOP/s are dense matrix rates; `None` means not published / not supported."""

    key: str
    name: str
    bf16_tflops: float | None
    fp8_tflops: float | None
    fp32_tflops: float | None
    hbm_tbs: float | None
    source: str
    # measured CPU peaks only (see the module docstring):
    mem_levels: tuple[tuple[float, float], ...] = ()  # (bytes moved per copy, TB/s), smallest first
    min_mem_bytes: float = 0.0     # memory-bound events moving fewer bytes get a bound but no efficiency
    compute_eff: bool = True       # False: compute-bound events get a bound but no efficiency
    threads: int | None = None     # torch threads the peaks were measured with

    def mem_bytes_per_s(self, moved: np.ndarray) -> np.ndarray:
        """The bandwidth roof for events moving `moved` bytes: the fastest measured level whose copy moved at least
        as much (data that fits a cache streams at that cache's rate); DRAM (`hbm_tbs`) beyond the largest."""
        out = np.full(len(moved), np.nan if self.hbm_tbs is None else self.hbm_tbs * 1e12)
        if self.mem_levels:
            sizes = np.array([b for b, _ in self.mem_levels], dtype=np.float64)
            rates = np.array([t for _, t in self.mem_levels], dtype=np.float64) * 1e12
            best_from = np.maximum.accumulate(rates[::-1])[::-1]  # best rate among levels >= each size
            k = np.searchsorted(sizes, np.nan_to_num(moved, nan=np.inf), side="left")
            inside = k < len(sizes)
            out[inside] = best_from[k[inside]]
        return out

    def flops_per_s(self, dtype_class: str) -> float | None:
        """Peak FLOP/s for a dtype class ('bf16' covers fp16, 'fp8', 'fp32'); None when unknown."""
        v = {"bf16": self.bf16_tflops, "fp16": self.bf16_tflops, "fp8": self.fp8_tflops,
             "fp32": self.fp32_tflops}.get(dtype_class)
        return None if v is None else v * 1e12

    @property
    def bytes_per_s(self) -> float | None:
        return None if self.hbm_tbs is None else self.hbm_tbs * 1e12

    def ridge(self, dtype_class: str) -> float | None:
        """Arithmetic intensity (FLOP/byte) where the roofline turns from memory- to compute-bound."""
        f, b = self.flops_per_s(dtype_class), self.bytes_per_s
        return None if f is None or not b else f / b

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Sources:
#  AMD MI355X: amd.com MI355X spec ("2.5 PF" BF16 dense = 2400 MHz x 1024 matrix cores x 512 FMA x 2 = 2516.6 TF),
#    FP8 dense 256 CU x 8192 FLOP/clk x 2.4 GHz = 5033 TF (ISSCC 2026 coverage; AMD quotes 10.1 PF with sparsity),
#    FP32 vector 157.3 TF, 8.0 TB/s HBM3E (stas00/ml-engineering compute/accelerator tables; m3-architecture.md s4).
#  AMD MI300X: amd.com MI300X data sheet: BF16 1307.4, FP8 2614.9, FP32 (matrix/vector) 163.4 TF, 5.3 TB/s HBM3.
#  AMD MI325X: amd.com MI325X data sheet: same CDNA3 compute as MI300X (1307.4 / 2614.9 / 163.4), 6.0 TB/s HBM3E.
#  NVIDIA H100 SXM: nvidia.com H100 data sheet: BF16 989.4, FP8 1978.9 (dense = half the sparse figures),
#    FP32 66.9 TF (non-tensor; PyTorch keeps TF32 off for matmul by default), 3.35 TB/s HBM3.
#  NVIDIA H100 PCIe: same sheet: BF16 756, FP8 1513, FP32 51.2 TF, 2.0 TB/s HBM2e.
#  NVIDIA H200 SXM: nvidia.com H200 page: same compute as H100 SXM, 4.8 TB/s HBM3e (m3-architecture.md s4).
#  NVIDIA B200: nvidia.com DGX B200 data sheet, per GPU (8 GPUs): FP8 72 PF sparse -> 4.5 PF dense,
#    FP16/BF16 36 PF sparse -> 2.25 PF dense, 64 TB/s -> 8.0 TB/s HBM3e; FP32 not on that sheet -> None.
#  NVIDIA A100 SXM4: nvidia.com A100 data sheet: BF16 312, FP32 19.5 TF, no FP8; 1.555 TB/s (40 GB HBM2),
#    2.039 TB/s (80 GB HBM2e).
PEAKS: dict[str, Peak] = {p.key: p for p in [
    Peak("mi355x", "AMD Instinct MI355X", 2516.6, 5033.2, 157.3, 8.0, "amd.com MI355X spec; ml-engineering tables"),
    Peak("mi300x", "AMD Instinct MI300X", 1307.4, 2614.9, 163.4, 5.3, "amd.com MI300X data sheet"),
    Peak("mi325x", "AMD Instinct MI325X", 1307.4, 2614.9, 163.4, 6.0, "amd.com MI325X data sheet"),
    Peak("h100-sxm", "NVIDIA H100 SXM", 989.4, 1978.9, 66.9, 3.35, "nvidia.com H100 data sheet"),
    Peak("h100-pcie", "NVIDIA H100 PCIe", 756.0, 1513.0, 51.2, 2.0, "nvidia.com H100 data sheet"),
    Peak("h200", "NVIDIA H200 SXM", 989.4, 1978.9, 66.9, 4.8, "nvidia.com H200 page"),
    Peak("b200", "NVIDIA B200", 2250.0, 4500.0, None, 8.0, "nvidia.com DGX B200 data sheet (per GPU)"),
    Peak("a100-sxm4-40gb", "NVIDIA A100-SXM4-40GB", 312.0, None, 19.5, 1.555, "nvidia.com A100 data sheet"),
    Peak("a100-sxm4-80gb", "NVIDIA A100-SXM4-80GB", 312.0, None, 19.5, 2.039, "nvidia.com A100 data sheet"),
]}

# (regex over the lower-cased name, key). Order matters: more specific first.
_NAME_RULES: list[tuple[str, str]] = [
    (r"mi355x?\b", "mi355x"),
    (r"mi325x\b", "mi325x"),
    (r"mi300x\b", "mi300x"),
    (r"\bh100\b.*\bpcie\b", "h100-pcie"),
    (r"\bh100\b.*(sxm|hbm3)", "h100-sxm"),
    (r"\bh200\b", "h200"),
    (r"\bb200\b", "b200"),
    (r"\ba100\b.*\bsxm4?\b.*\b40\s?gb\b", "a100-sxm4-40gb"),
    (r"\ba100\b.*\bsxm4?\b.*\b80\s?gb\b", "a100-sxm4-80gb"),
]
# An arch is enough only where one product has it.
_ARCH_RULES: dict[str, str] = {"gfx950": "mi355x"}


def normalise(name: str | None, arch: str | None = None) -> str | None:
    """The PEAKS key for a device name / arch, or None when it is not known for certain."""
    if name:
        low = name.lower().replace("_", " ").replace("-", " ")
        for pattern, key in _NAME_RULES:
            if re.search(pattern, low):
                return key
    if arch and arch.lower() in _ARCH_RULES:
        return _ARCH_RULES[arch.lower()]
    return None


def _measured(d: dict[str, Any]) -> Peak | None:
    peaks = d.get("peaks")
    if not isinstance(peaks, dict):
        return None

    def num(k: str) -> float | None:
        v = peaks.get(k)
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else None

    if num("hbm_tbs") is None and num("mem_tbs") is None:
        return None
    levels = []
    for lv in peaks.get("mem_levels") or []:
        if (isinstance(lv, (list, tuple)) and len(lv) == 2 and all(isinstance(x, (int, float)) for x in lv)
                and lv[0] > 0 and lv[1] > 0):
            levels.append((float(lv[0]), float(lv[1])))
    threads = peaks.get("threads")
    return Peak(key="measured", name=str(d.get("name") or "device"), bf16_tflops=num("bf16_tflops"),
                fp8_tflops=num("fp8_tflops"), fp32_tflops=num("fp32_tflops"),
                hbm_tbs=num("hbm_tbs") or num("mem_tbs"),
                source=str(peaks.get("source") or "measured by the run (profile metadata)"),
                mem_levels=tuple(sorted(levels)), threads=threads if isinstance(threads, int) else None)


# What the copy of a measurement without `mem_levels` moved: `mmprof run` before per-level bandwidths copied
# 64 MiB of float32 (read + written). A working set under this size may have run from cache.
LEGACY_COPY_BYTES = 2 * 64 * 2**20


def _measured_rule(peak: Peak, device: dict[str, Any], ranks: int) -> tuple[Peak, str | None]:
    """The read-time rule for measured peaks written before per-level, one-rank-at-a-time measurement."""
    peaks = device.get("peaks") or {}
    if peak.key != "measured" or peaks.get("alone") or peak.mem_levels:
        return peak, None
    cpu = (device.get("vendor") or "").lower() == "cpu"
    if not cpu:
        return peak, None
    contended = ranks > 1
    note = ("CPU peaks from an older mmprof run, bounds kept: no efficiency for "
            + ("compute-bound ops (the ranks measured their peaks while the others ran), nor for " if contended
               else "")
            + f"memory-bound ops moving under {LEGACY_COPY_BYTES / 2**20:.0f} MiB (they ran from cache, which the "
              "measured DRAM bandwidth does not bound); `mmprof run` now measures per cache level, one rank at a "
              "time")
    return replace(peak, min_mem_bytes=float(LEGACY_COPY_BYTES), compute_eff=not contended), note


def lookup(device: dict[str, Any] | None) -> tuple[Peak | None, str | None]:
    """(peak, warning) for one `meta.ranks[].devices[]` entry. Exactly one of the two is None."""
    if not device:
        return None, "no device information in the profile: no roofline (add devices[].peak_key or peaks)"
    m = _measured(device)
    if m is not None:
        return m, None
    name, vendor = device.get("name"), (device.get("vendor") or "").lower()
    key = device.get("peak_key")
    if key:
        k = str(key).lower()
        if k in PEAKS:
            return PEAKS[k], None
        # importers name the product ("H100", "A100"); where variants differ in peaks the name decides
        variants = [p for p in PEAKS if p.split("-")[0] == k]
        by_name = normalise(name, device.get("arch"))
        if by_name in variants:
            return PEAKS[by_name], None
        if variants:
            return None, (f"device {name or key!r}: which {key} variant ({', '.join(variants)}) cannot be told from "
                          "the profile: no roofline (set devices[].peak_key to one of them)")
        return None, f"no peaks known for device {name or key!r} (peak_key {key!r}): no roofline (known: {', '.join(PEAKS)})"
    if vendor == "cpu" or (name and "cpu" in name.lower() and not normalise(name)):
        return None, (f"device {name or 'cpu'!r} is a CPU with no measured peaks in the profile: no roofline "
                      "(a CPU's peaks depend on the machine; record measured peaks to get one)")
    key = normalise(name, device.get("arch"))
    if key is None:
        return None, f"unknown device {name or device.get('arch') or '?'!r}: no roofline (add it to mmprof.hardware.PEAKS)"
    return PEAKS[key], None


def profile_peaks(profile: Any) -> tuple[dict[int, Peak | None], list[str], list[str]]:
    """Peak per rank of a Profile (the rank's first device), the warnings for ranks without one, and notes on
    measured peaks read under the read-time rule."""
    out: dict[int, Peak | None] = {}
    warnings: list[str] = []
    notes: list[str] = []
    ranks = profile.ranks
    for rank in ranks:
        dev = profile.device_info(rank)
        peak, warn = lookup(dev)
        if peak is not None:
            peak, note = _measured_rule(peak, dev, len(ranks))
            if note and note not in notes:
                notes.append(note)
        out[rank] = peak
        if warn and warn not in warnings:
            warnings.append(warn)
    return out, warnings, notes


# -- GPU-to-GPU links, for collective bus bandwidth ---------------------------------------------------------
@dataclass(frozen=True)
class LinkPeak:
    """Scale-up link bandwidth of one GPU to its peers, per direction (GB/s): what nccl-tests' bus bandwidth is
    compared with (nccl-tests PERFORMANCE.md: "the measurement is of a unidirectional bandwidth")."""

    key: str
    link: str
    gbs_per_direction: float
    source: str

    @property
    def bytes_per_s(self) -> float:
        return self.gbs_per_direction * 1e9

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Sources (vendors quote the bidirectional aggregate; per direction is half):
#  NVIDIA H100 SXM / H200 SXM: NVLink 4, 18 links x 50 GB/s = 900 GB/s bidirectional per GPU (nvidia.com H100
#    data sheet, H200 page) -> 450 GB/s per direction.
#  NVIDIA B200: NVLink 5, 1.8 TB/s bidirectional per GPU (nvidia.com DGX B200 data sheet) -> 900 GB/s.
#  NVIDIA A100 SXM4: NVLink 3, 12 links, 600 GB/s bidirectional (nvidia.com A100 data sheet) -> 300 GB/s.
#  AMD MI300X / MI325X: 7 Infinity Fabric (xGMI) links x 128 GB/s peak bidirectional each (amd.com MI300X and
#    MI325X data sheets: "Peak Infinity Fabric Link Bandwidth 128 GB/s"; 16 lanes x 32 Gb/s) = 896 GB/s -> 448 GB/s.
#  AMD MI355X: 7 xGMI links x 153.6 GB/s peak bidirectional each (amd.com MI355X spec) = 1075.2 GB/s -> 537.6 GB/s.
#  PCIe cards (H100 PCIe, ...) are left out: their peer bandwidth depends on optional bridges and the host.
LINKS: dict[str, LinkPeak] = {k.key: k for k in [
    LinkPeak("h200", "NVLink 4", 450.0, "nvidia.com H200 page: NVLink 900 GB/s bidirectional"),
    LinkPeak("h100-sxm", "NVLink 4", 450.0, "nvidia.com H100 data sheet: NVLink 900 GB/s bidirectional"),
    LinkPeak("b200", "NVLink 5", 900.0, "nvidia.com DGX B200 data sheet: NVLink 1.8 TB/s bidirectional per GPU"),
    LinkPeak("a100-sxm4-40gb", "NVLink 3", 300.0, "nvidia.com A100 data sheet: NVLink 600 GB/s bidirectional"),
    LinkPeak("a100-sxm4-80gb", "NVLink 3", 300.0, "nvidia.com A100 data sheet: NVLink 600 GB/s bidirectional"),
    LinkPeak("mi300x", "xGMI (Infinity Fabric)", 448.0, "amd.com MI300X data sheet: 7 links x 128 GB/s bidirectional"),
    LinkPeak("mi325x", "xGMI (Infinity Fabric)", 448.0, "amd.com MI325X data sheet: 7 links x 128 GB/s bidirectional"),
    LinkPeak("mi355x", "xGMI (Infinity Fabric)", 537.6, "amd.com MI355X spec: 7 links x 153.6 GB/s bidirectional"),
]}


def link_peak(device: dict[str, Any] | None) -> LinkPeak | None:
    """The scale-up link of one `meta.ranks[].devices[]` entry; None for CPUs, unknown or PCIe devices."""
    peak, _ = lookup(device)
    return LINKS.get(peak.key) if peak is not None else None


def profile_links(profile: Any) -> dict[int, LinkPeak | None]:
    """Link peak per rank of a Profile (the rank's first device)."""
    return {rank: link_peak(profile.device_info(rank)) for rank in profile.ranks}
