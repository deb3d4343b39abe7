"""Measured numbers with their noise (issue 25): a profiler dilation below 1 (the profiled run was faster than the
plain one: the plain timing is noisy or too short to trust) and a speed-up inside the run-to-run spread of the
plain timings are flagged, from what `mmprof run` stored in `meta.run` (every plain repeat is kept)."""

from __future__ import annotations

import statistics
from typing import Any

PHASES = ("prefill", "decode")


def spread(values: Any) -> float | None:
    """Run-to-run spread of repeated timings: (max - min) / median; None with fewer than two runs."""
    xs = [float(x) for x in (values or []) if isinstance(x, (int, float)) and x > 0]
    if len(xs) < 2:
        return None
    med = statistics.median(xs)
    return (max(xs) - min(xs)) / med if med > 0 else None


def plain_spread(run: dict[str, Any], phase: str) -> float | None:
    plain = ((run or {}).get("timings") or {}).get("plain") or {}
    return spread(plain.get(f"{phase}_ms_all"))


def measurement_warnings(run: dict[str, Any]) -> list[str]:
    """Warnings about one run's timing: dilation < 1 per capture mode and phase; a single plain repeat."""
    out = []
    for mode, by_phase in sorted(((run or {}).get("dilation_by_phase") or {}).items()):
        for ph in (*PHASES, "total"):
            d = (by_phase or {}).get(ph)
            if isinstance(d, (int, float)) and d < 1.0:
                sp = plain_spread(run, ph) if ph in PHASES else None
                noise = f"; the plain runs spread {sp:.0%}" if sp is not None else ""
                out.append(f"profiler dilation {d:.2f}x < 1 ({mode} capture, {ph}): the profiled run was faster "
                           f"than the plain one, so the plain timing is noise-dominated{noise}; rerun with more "
                           "--repeats or a longer workload before trusting tokens/s")
    plain = ((run or {}).get("timings") or {}).get("plain") or {}
    if plain and int(plain.get("repeats") or 0) < 2:
        out.append("one plain run: tokens/s have no run-to-run spread to judge a speed-up by (use --repeats 3)")
    return out


def speedup_noise(before: dict[str, Any], after: dict[str, Any], phase: str) -> tuple[float | None, bool | None]:
    """(noise band, inside it) for the plain speed-up after/before of one phase: the band is the sum of the two
    runs' spreads (max - min over median of their plain repeats); None when either has one run."""
    sb, sa = plain_spread(before, phase), plain_spread(after, phase)
    tb = ((before or {}).get("tokens_per_s") or {}).get("plain", {}).get(phase)
    ta = ((after or {}).get("tokens_per_s") or {}).get("plain", {}).get(phase)
    if sb is None or sa is None or not tb or not ta:
        return None, None
    band = sb + sa
    return band, abs(ta / tb - 1.0) <= band
