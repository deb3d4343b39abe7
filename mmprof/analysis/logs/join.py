"""Each fact of the log tied to the kernels it concerns, and judged against them (`join_facts`).

The kernels a fact concerns are chosen from its rule (rules/logs.toml): the events of its kernel `families` whose
name matches its `name` regex, in its `regions` (layers.*.moe.routed) where the profile knows regions there, else
in the whole profile (said: `judged_by`), on the ranks of the processes that said it (every rank when the line
names no captured process). For each: the count, the time, the share of all kernel time and the time per phase.

A backend fact (the log says the engine chose X) is compared with those kernels through the `[[backend]]` entry
for X: `agrees` when kernels of X ran there (`share` of the time), `disagrees` when none did while others ran (a
finding: the log says X, the kernels are Y), `no_kernels` when nothing it concerns ran in the trace, `unjudged`
when no entry says which kernels are X.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mmprof.analysis.logs.facts import FactGroup, LogFacts, log_facts
from mmprof.log_rules import LogRules, load_log_rules
from mmprof.names import display_name
from mmprof.regex_safety import compile_bounded
from mmprof.units import fmt_ns

AGREE_SHARE = 0.5  # below this share of the concerned time, the backend's kernels ran only partly: said


@dataclass
class FactKernels:
    """One fact with the kernels it concerns and, for a backend, whether they agree with it."""

    group: FactGroup
    judged_by: str                     # regions | kernel families | kernel names | nothing (no selector)
    where: str                         # the selection in words: "layers.*.moe.routed, family grouped_gemm"
    events: int = 0
    time_ns: int = 0
    share: float = 0.0                 # of all kernel time in the profile
    phases: dict[str, int] = field(default_factory=dict)
    top: list[str] = field(default_factory=list)
    verdict: str | None = None         # backend facts: agrees | partly | disagrees | no_kernels | unjudged
    backend_share: float | None = None  # of the concerned time, the share in the named backend's kernels
    instead: list[str] = field(default_factory=list)  # disagrees / partly: what ran instead (library: kernels)

    @property
    def finding(self) -> bool:
        return self.verdict == "disagrees"

    def kernels_text(self) -> str:
        """`fused_moe_kernel x120, 3.21 ms (14% of kernel time; prefill 0.41 ms, decode 2.80 ms)`."""
        if not self.events:
            return "no kernels it concerns in this profile"
        top = _short(self.top[0]) if self.top else ""
        more = f" (+{len(self.top) - 1} more names)" if len(self.top) > 1 else ""
        ph = ", ".join(f"{p} {fmt_ns(v)}" for p, v in self.phases.items())
        return (f"{top}{more}; {self.events:,} kernels, {fmt_ns(self.time_ns)} ({self.share:.0%} of kernel time"
                f"{'; ' + ph if ph else ''})")

    def verdict_text(self) -> str:
        g = self.group
        if self.verdict == "agrees":
            return f"kernels agree: {g.value}'s kernels are {self.backend_share:.0%} of that time"
        if self.verdict == "partly":
            return (f"partly: {g.value}'s kernels are {self.backend_share:.0%} of that time; also ran "
                    f"{'; '.join(self.instead)}")
        if self.verdict == "disagrees":
            return f"the log says {g.value}, but the kernels that ran are {'; '.join(self.instead)}"
        if self.verdict == "no_kernels":
            return "nothing it concerns ran in the trace: not compared"
        if self.verdict == "unjudged":
            return f"no rule says which kernels are {g.value}: not compared"
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {**self.group.to_dict(), "judged_by": self.judged_by, "concerns": self.where, "events": self.events,
                "time_ns": self.time_ns, "share": self.share, "phases": dict(self.phases), "top_kernels": self.top,
                "verdict": self.verdict, "backend_share": self.backend_share, "instead": self.instead,
                "verdict_text": self.verdict_text(), "kernels_text": self.kernels_text()}


def _glob_mask(values: Any, globs: tuple[str, ...]) -> np.ndarray:
    """Rows whose value matches a glob (None never does), evaluated once per distinct value."""
    vals = pd.Series(values, dtype=object)
    codes, uniq = pd.factorize(vals, use_na_sentinel=True)
    lut = np.array([any(fnmatch.fnmatchcase(str(u), g) for g in globs) for u in uniq] + [False], dtype=bool)
    return lut[np.where(codes < 0, len(uniq), codes)]


def _name_mask(values: Any, rx: Any) -> np.ndarray:
    vals = pd.Series(values, dtype=object)
    codes, uniq = pd.factorize(vals, use_na_sentinel=True)
    lut = np.array([bool(rx.search(str(u))) for u in uniq] + [False], dtype=bool)
    return lut[np.where(codes < 0, len(uniq), codes)]


def _top(df: pd.DataFrame, n: int = 4) -> list[str]:
    if not len(df):
        return []
    g = df.groupby("name", sort=False)["dur_ns"].agg(["count", "sum"]).sort_values("sum", ascending=False).head(n)
    return [f"{str(k)[:90]} x{int(r['count'])}" for k, r in g.iterrows()]


def _short(entry: str) -> str:
    """`<kernel name> xN` with the name as its display name (mmprof.names), for messages."""
    name, _, count = entry.rpartition(" x")
    return f"{display_name(name, 48)} x{count}" if name else entry


def _by_library(df: pd.DataFrame, n: int = 3) -> list[str]:
    d = df.assign(lib=df["library"].fillna(df["family"].astype(object)))
    g = d.groupby("lib", sort=False, dropna=False)["dur_ns"].sum().sort_values(ascending=False).head(n)
    out = []
    for lib, t in g.items():
        names = _top(d[d["lib"] == lib], 1)
        out.append(f"{lib} ({_short(names[0]) if names else '-'}, {fmt_ns(int(t))})")
    return out


def select(group: FactGroup, events: pd.DataFrame) -> tuple[pd.DataFrame, str, str]:
    """(the events the fact concerns, how they were chosen, the selection in words)."""
    r = group.rule
    if not (r.regions or r.families or r.name):
        return events.iloc[:0], "nothing", "no kernels named by its rule"
    m = np.ones(len(events), dtype=bool)
    words = []
    if r.families:
        m &= _glob_mask(events["family"], r.families)
        words.append(f"family {'|'.join(r.families)}")
    if r.name:
        m &= _name_mask(events["name"], compile_bounded(r.name, f"log rule {r.id}", "name"))
        words.append(f"name ~ /{r.name}/")
    ranks = group.ranks
    if ranks and len(events):
        m &= events["rank"].isin(ranks).to_numpy(dtype=bool)
        words.append(f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}")
    judged = "kernel families" if r.families else "kernel names"
    if r.regions:
        in_regions = _glob_mask(events["region"], r.regions)
        if (in_regions & m).any():
            # in its regions, or in none (a graph replay nothing placed): never a kernel placed elsewhere
            nowhere = m & events["region"].isna().to_numpy(dtype=bool)
            m &= in_regions | nowhere
            judged = "regions"
            words.insert(0, "|".join(r.regions) + (f" (+{int(nowhere.sum())} of no region)" if nowhere.any() else ""))
        else:
            words.append(f"anywhere (no events in {'|'.join(r.regions)})")
    return events[m], judged, ", ".join(words)


def judge(group: FactGroup, ev: pd.DataFrame, rules: LogRules) -> tuple[str | None, float | None, list[str]]:
    """A backend fact against the kernels it concerns: (verdict, share of the backend's kernels, what else ran)."""
    if group.kind != "backend":
        return None, None, []
    if not len(ev):
        return "no_kernels", None, []
    b = rules.backend_kernels(group.subject, group.value)
    if b is None:
        return "unjudged", None, []
    m = np.zeros(len(ev), dtype=bool)
    if b.library:
        m |= _glob_mask(ev["library"], b.library)
    if b.name is not None:
        m |= _name_mask(ev["name"], b.name)
    total = float(ev["dur_ns"].sum())
    share = float(ev.loc[m, "dur_ns"].sum()) / total if total > 0 else (1.0 if m.any() else 0.0)
    if not m.any():
        return "disagrees", 0.0, _by_library(ev)
    if share < AGREE_SHARE:
        return "partly", share, _by_library(ev[~m])
    return "agrees", share, []


def join_facts(facts: LogFacts, events: pd.DataFrame, rules: LogRules | None = None) -> list[FactKernels]:
    """Every fact group with the kernels it concerns (events: the event frame's DataFrame, kernels only)."""
    rules = rules or load_log_rules()
    kernels = events[events["kind"] == "kernel"] if "kind" in events and len(events) else events
    total = float(kernels["dur_ns"].sum()) if len(kernels) else 0.0
    out = []
    for g in facts.groups:
        ev, judged, where = select(g, kernels)
        phases: dict[str, int] = {}
        if len(ev):
            for p, t in ev.groupby(ev["phase"].fillna("no phase"), sort=False)["dur_ns"].sum().items():
                phases[str(p)] = int(t)
        verdict, share, instead = judge(g, ev, rules)
        out.append(FactKernels(group=g, judged_by=judged, where=where, events=int(len(ev)),
                               time_ns=int(ev["dur_ns"].sum()) if len(ev) else 0,
                               share=(float(ev["dur_ns"].sum()) / total) if total > 0 and len(ev) else 0.0,
                               phases=phases if len(phases) > 1 or "no phase" not in phases else {},
                               top=_top(ev), verdict=verdict, backend_share=share, instead=instead))
    return out


@dataclass
class LogReport:
    """The log's facts and each one's kernels: what `verify-fastpath` and `report` show and judge."""

    facts: LogFacts
    kernels: list[FactKernels]

    @property
    def present(self) -> bool:
        return self.facts.present

    @property
    def findings(self) -> list[FactKernels]:
        """Backend facts the kernels contradict (the log says X, the kernels are Y)."""
        return [k for k in self.kernels if k.finding]

    @property
    def fallbacks(self) -> list[FactKernels]:
        return [k for k in self.kernels if k.group.fallback]

    def to_dict(self) -> dict[str, Any]:
        d = self.facts.to_dict()
        d["facts"] = [k.to_dict() for k in self.kernels]
        d["findings"] = len(self.findings)
        d["fallbacks"] = len(self.fallbacks)
        return d


def log_report(profile: Any, events: pd.DataFrame, rules: LogRules | None = None) -> LogReport:
    """The facts of the profile's log joined with its kernels (events: the event frame's DataFrame)."""
    rules = rules or load_log_rules()
    facts = log_facts(profile, rules)
    return LogReport(facts, join_facts(facts, events, rules) if facts.groups else [])
