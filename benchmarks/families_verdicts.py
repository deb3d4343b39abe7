"""Held-out verdicts and kernel identity on the H200 family traces (vLLM 0.26 on families the rules never saw).

For each case folder of DIR (benchmarks/h200/vllm_families.py's output: CASE/trace.pt.trace.json.gz): the share of
kernel time and of distinct kernel names with family `unknown` and with no library, and `verify-fastpath`'s verdict
per check (the built-in spec) against the truth in benchmarks/families_truth.toml (from vLLM's source and the
model configs; each entry says where). A check is `right`, `wrong` (another verdict than the truth) or `abstained`
(no evidence where the truth is knowable from the trace); a trace is right only if all its checks are. The
`tune` / `held` split is the recording's hold-out rule (its README): rules were written from tune traces only.

Usage: python benchmarks/families_verdicts.py DIR [--rules RULES_DIR]   (one JSON line per trace, then per split)
"""

from __future__ import annotations

import fnmatch
import json
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mmprof.analysis.attribution.classify import BUILTIN_FILES, RuleSet, default_rules, read_rule_file  # noqa: E402
from mmprof.analysis.checks.verify import verify  # noqa: E402
from mmprof.analysis.timeline.events import events_of  # noqa: E402
from mmprof.analysis.shapes.engines import engine_of  # noqa: E402
from mmprof.cli._common import load_any  # noqa: E402

TRUTH = ROOT / "benchmarks" / "families_truth.toml"


def truth_of(case: str, doc: dict) -> tuple[str, dict[str, str]]:
    for t in doc["case"]:
        if fnmatch.fnmatch(case, t["match"]):
            split = "held" if any(fnmatch.fnmatch(case, h) for h in doc["held"]) else "tune"
            return split, dict(t["checks"])
    raise SystemExit(f"{case}: no truth in {TRUTH}")


def one(path: Path, rules: RuleSet) -> dict:
    prof = load_any(str(path))
    fr = events_of(prof, rules)
    df = fr.frame()
    k = df[df["kind"] == "kernel"]
    total = int(k["dur_ns"].sum())
    unk = k[k["family"] == "unknown"]
    nolib = k[k["library"].isna()]
    res = verify(prof, rules=rules, engine=engine_of(prof))
    return {"kernel_ns": total, "names": int(k["name"].nunique()),
            "unknown_time_share": round(int(unk["dur_ns"].sum()) / total, 4) if total else 0.0,
            "unknown_names": int(unk["name"].nunique()),
            "no_library_time_share": round(int(nolib["dur_ns"].sum()) / total, 4) if total else 0.0,
            "verdicts": {r.code: r.status for r in res.results}}


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    base = Path(argv[0])
    rules = default_rules()
    if "--rules" in argv:
        d = Path(argv[argv.index("--rules") + 1])
        rules = RuleSet([r for f in BUILTIN_FILES if (d / f).exists() for r in read_rule_file(d / f)])
    doc = tomllib.loads(TRUTH.read_text(encoding="utf-8"))
    per: dict[str, list[dict]] = {"tune": [], "held": []}
    for case_dir in sorted(p for p in base.iterdir() if (p / "trace.pt.trace.json.gz").exists()):
        split, truth = truth_of(case_dir.name, doc)
        m = one(case_dir / "trace.pt.trace.json.gz", rules)
        got = m.pop("verdicts")
        wrong = {c: f"{got.get(c)} (truth {t})" for c, t in truth.items() if got.get(c) not in (t, "no_evidence")}
        abst = sorted(c for c, t in truth.items() if got.get(c) == "no_evidence" and t != "no_evidence")
        row = {"bench": "families_verdicts", "case": case_dir.name, "split": split, **m,
               "checks": len(truth), "wrong": wrong, "abstained": abst,
               "trace_right": not wrong and not abst}
        per[split].append(row)
        print(json.dumps(row))
    for split, rows in per.items():
        if not rows:
            continue
        ns = sum(r["kernel_ns"] for r in rows)
        print(json.dumps({"bench": "families_verdicts", "split": split, "traces": len(rows),
                          "traces_right": sum(r["trace_right"] for r in rows),
                          "traces_wrong": sum(bool(r["wrong"]) for r in rows),
                          "traces_abstained_only": sum(not r["wrong"] and bool(r["abstained"]) for r in rows),
                          "checks": sum(r["checks"] for r in rows),
                          "checks_wrong": sum(len(r["wrong"]) for r in rows),
                          "checks_abstained": sum(len(r["abstained"]) for r in rows),
                          "unknown_time_share": _weighted(rows, "unknown_time_share", ns),
                          "no_library_time_share": _weighted(rows, "no_library_time_share", ns)}))


def _weighted(rows: list[dict], key: str, ns: int) -> float:
    return round(sum(r[key] * r["kernel_ns"] for r in rows) / ns, 4)


if __name__ == "__main__":
    main(sys.argv[1:])
