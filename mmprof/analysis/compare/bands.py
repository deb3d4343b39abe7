"""The noise band on a step-time change (docs/glossary.md "noise band").

From the steps of one run per side: the 95% percentile-bootstrap interval of the change of the median step
(resampling each side's steps with replacement, a fixed seed: the same answer on every machine). From repeated runs
given together (`mmprof diff A1 A2 A3 -- B1 B2`): the range of the change over every pair of runs, median step
against median step (the runs' own spread, which the steps of one run cannot show). A change whose band holds 0 is
"within noise": no direction is claimed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

MIN_STEPS = 3        # fewer steps on a side: no band from the steps' spread
RESAMPLES = 2000
MAX_STEPS = 512      # a side with more steps is thinned evenly (in step order) before resampling


@dataclass
class Band:
    lo: float                 # relative change, low end (-0.2: 20% less time)
    hi: float
    basis: str                # "steps" | "runs"
    n: tuple[int, int]        # steps (or runs) per side it rests on

    @property
    def within(self) -> bool:
        return self.lo <= 0.0 <= self.hi

    def text(self) -> str:
        what = "steps" if self.basis == "steps" else "runs"
        return f"{self.lo:+.1%} to {self.hi:+.1%} over {self.n[0]} / {self.n[1]} {what}"

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "within": self.within, "text": self.text()}


def _thin(x: np.ndarray) -> np.ndarray:
    return x if len(x) <= MAX_STEPS else x[np.linspace(0, len(x) - 1, MAX_STEPS).astype(np.int64)]


def steps_band(before, after, level: float = 0.95) -> Band | None:
    """Bootstrap band of median(after) / median(before) - 1 from the two sides' step times; None when a side has
    fewer than MIN_STEPS steps."""
    x, y = (_thin(np.asarray(v, dtype=np.float64)) for v in (before, after))
    if len(x) < MIN_STEPS or len(y) < MIN_STEPS or np.median(x) <= 0:
        return None
    rng = np.random.default_rng(0)
    mx = np.median(x[rng.integers(0, len(x), size=(RESAMPLES, len(x)))], axis=1)
    my = np.median(y[rng.integers(0, len(y), size=(RESAMPLES, len(y)))], axis=1)
    r = my / np.maximum(mx, 1e-300) - 1.0
    q = (1.0 - level) / 2.0
    return Band(float(np.quantile(r, q)), float(np.quantile(r, 1.0 - q)), "steps", (len(x), len(y)))


def runs_band(before_medians, after_medians) -> Band | None:
    """The change over every pair of repeated runs (each run's median step); None unless a side has >= 2 runs."""
    x = np.asarray([v for v in before_medians if v and v > 0], dtype=np.float64)
    y = np.asarray([v for v in after_medians if v and v > 0], dtype=np.float64)
    if not len(x) or not len(y) or max(len(x), len(y)) < 2:
        return None
    return Band(float(y.min() / x.max() - 1.0), float(y.max() / x.min() - 1.0), "runs", (len(x), len(y)))
