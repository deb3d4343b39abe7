"""What `mmprof run` reports about the Profile it wrote: the workload, the tokens/s plain and profiled, the
profiler's dilation, the row counts (a view of the Profile's `run` / `capture` metadata)."""

from __future__ import annotations

from mmprof.analysis.timeline.noise import measurement_warnings


class RunSummary:
    """What `mmprof run` reports: where the Profile went, the tokens/s plain and profiled, the dilation."""

    def __init__(self, output: str, run: dict, capture: dict, parallel: dict, counts: dict, warnings: list[str]):
        self.output, self.run, self.capture, self.parallel = output, run, capture, parallel
        self.counts, self.warnings = counts, warnings

    @classmethod
    def of(cls, profile, output: str) -> "RunSummary":
        m = profile.meta
        counts = {t: profile.n(t) for t in ("kernels", "ops", "collectives", "scopes", "dispatch")}
        return cls(output, m["run"], m["capture"], m["parallel"], counts,
                   list(m.get("warnings", [])) + measurement_warnings(m["run"]))

    def to_dict(self) -> dict:
        r = self.run
        return {"output": self.output, "preset": r["preset"], "config": r["config"], "switches": r["switches"],
                "workload": r["workload"], "device": r["device"], "dtype": r["dtype"], "parallel": self.parallel,
                "capture": self.capture["mode"], "tokens_per_s": r["tokens_per_s"], "dilation": r["dilation"],
                "dilation_by_phase": r["dilation_by_phase"], "rows": self.counts, "warnings": self.warnings}
