"""Evidence of a kernel's family from the trace, ranked with the evidence of its name, disagreements counted.

A kernel in a trace is rarely alone: the CPU op that launched it (the kernels table's `op`: `aten::mm`,
`_C_cache_ops::reshape_and_cache_flash`, `c10d::allreduce_`) says what it was launched for. `rules/op_evidence.toml`
lists the decisive ops (every kernel they launch is of one family). Per kernel, the evidence that decided is one of

- `rule`: an explicit rule knows the name (rules/kernels_*.toml);
- `tokens`: the name's own words say it (its function name, or the operations its template arguments name);
- `op`: the launching op says it, where the name says nothing (`unknown`) or only through a namespace word;
- None: nothing says it (family `unknown`).

The name outranks the op where the name speaks for itself: an op launches helper kernels too (a fill, a cast, a
split-K reduction), and those say what they are. A kernel whose name and op give two different families keeps
its name's family and is counted as a **disagreement** (per name / op pair, with its time), shown by `mmprof
classify` and in its JSON; nothing is resolved silently. Inductor's generated kernels name the ops they fuse
(`triton_poi_fused_add_mul_0`) and are read by their rules; their provenance places them in regions
(mmprof.analysis.attribution.inductor), not in families.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from mmprof.analysis.attribution.classify import UNKNOWN, RuleSet
from mmprof.errors import BadInput
from mmprof.fileio import read_toml
from mmprof.regex_safety import BoundedRegex, compile_bounded

OP_EVIDENCE_FILE = Path(__file__).resolve().parents[2] / "rules" / "op_evidence.toml"
EVIDENCE_KINDS = ("rule", "tokens", "op")


@dataclass(frozen=True)
class OpRule:
    id: str
    regex: BoundedRegex
    family: str
    description: str


@dataclass
class EvidenceStats:
    """What decided the families of a frame's kernels, and where the name and the launching op disagree."""

    by_evidence: dict[str, dict[str, int]] = field(default_factory=dict)  # evidence -> {events, time_ns}
    disagreements: list[dict[str, Any]] = field(default_factory=list)     # name / op pairs that disagree
    op_decided: int = 0              # kernels whose family only their op gave

    @property
    def disagreeing_events(self) -> int:
        return sum(d["events"] for d in self.disagreements)

    def to_dict(self) -> dict[str, Any]:
        return {"by_evidence": self.by_evidence, "op_decided": self.op_decided,
                "disagreeing_events": self.disagreeing_events, "disagreements": self.disagreements}


def read_op_rules(path: Path = OP_EVIDENCE_FILE) -> list[OpRule]:
    doc = read_toml(path, "op evidence")
    out = []
    for i, e in enumerate(doc.get("op", [])):
        where = f"{path.name}: [[op]] {e.get('id') if isinstance(e, dict) else '#' + str(i + 1)}"
        if not isinstance(e, dict) or not isinstance(e.get("id"), str) or not isinstance(e.get("pattern"), str) \
                or not isinstance(e.get("family"), str):
            raise BadInput(f"{where}: needs string `id`, `pattern` and `family`")
        rx = compile_bounded(e["pattern"], where, "pattern")  # a bound on its work (mmprof.regex_safety)
        out.append(OpRule(e["id"], rx, e["family"], e.get("description", "")))
    return out


_OP_RULES: list[OpRule] | None = None


@lru_cache(maxsize=1 << 14)
def op_family(op_name: str | None) -> tuple[str, str] | None:
    """(family, op rule id) that a decisive launching op gives, or None."""
    global _OP_RULES
    if not op_name:
        return None
    if _OP_RULES is None:
        _OP_RULES = read_op_rules()
    for r in _OP_RULES:
        if r.regex.fullmatch(op_name):
            return r.family, r.id
    return None


def rank_kernels(profile: Any, rules: RuleSet, name_ids: np.ndarray, op_rows: np.ndarray, dur: np.ndarray,
                 family: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, EvidenceStats]:
    """Per kernel: (family, rule, evidence) after ranking the name's evidence against the launching op's, and the
    stats. `family` holds the name's family per kernel (object array); rows without an op (-1) keep it."""
    n = len(name_ids)
    fam = np.asarray(family, dtype=object).copy()
    rule_out = np.full(n, None, dtype=object)
    ev = np.full(n, None, dtype=object)
    stats = EvidenceStats()
    if not n:
        return fam, rule_out, ev, stats
    ops = profile.tables["ops"]
    n_ops = profile.n("ops")
    op_name_id = np.full(n, -1, dtype=np.int64)
    ok = (op_rows >= 0) & (op_rows < n_ops)
    op_name_id[ok] = ops["name"][op_rows[ok]]
    key = np.stack([name_ids.astype(np.int64), op_name_id], axis=1)
    uniq, inv = np.unique(key, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    dur = np.maximum(np.asarray(dur, dtype=np.int64), 0)
    ev_u, fam_u, rule_u = [], [], []
    disagree: dict[tuple, dict[str, Any]] = {}
    for k, (nid, oid) in enumerate(uniq.tolist()):
        name = profile.string(int(nid)) if nid >= 0 else None
        kc = rules.classify(name)
        opn = profile.string(int(oid)) if oid >= 0 else None
        of = op_family(opn)
        weak = kc.evidence == "tokens" and (kc.reason or "").startswith("namespace")
        if kc.family == UNKNOWN or kc.rule is None or weak:
            if of is not None:
                ev_u.append("op")
                fam_u.append(of[0])
                rule_u.append(of[1])
                if weak and of[0] != kc.family:
                    disagree[(name, opn)] = {"name": name, "op": opn, "name_family": kc.family,
                                             "op_family": of[0], "decided": "op", "k": k}
                continue
            ev_u.append(kc.evidence)
            fam_u.append(kc.family)
            rule_u.append(kc.rule)
            continue
        ev_u.append(kc.evidence)
        fam_u.append(kc.family)
        rule_u.append(kc.rule)
        if of is not None and of[0] != kc.family:
            disagree[(name, opn)] = {"name": name, "op": opn, "name_family": kc.family, "op_family": of[0],
                                     "decided": kc.evidence, "k": k}
    ev_arr = np.array(ev_u, dtype=object)
    fam_arr = np.array(fam_u, dtype=object)
    rule_arr = np.array(rule_u, dtype=object)
    ev = ev_arr[inv]
    fam = fam_arr[inv]
    rule_out = rule_arr[inv]
    counts = np.bincount(inv, minlength=len(uniq))
    times = np.bincount(inv, weights=dur, minlength=len(uniq)).astype(np.int64)
    for e in EVIDENCE_KINDS + (None,):
        sel = np.array([x == e for x in ev_u], dtype=bool)
        label = e or "none"
        stats.by_evidence[label] = {"events": int(counts[sel].sum()), "time_ns": int(times[sel].sum())}
    stats.op_decided = stats.by_evidence["op"]["events"]
    rows = []
    for d in disagree.values():
        k = d.pop("k")
        rows.append({**d, "events": int(counts[k]), "time_ns": int(times[k])})
    stats.disagreements = sorted(rows, key=lambda r: -r["time_ns"])
    return fam, rule_out, ev, stats
