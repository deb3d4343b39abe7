"""How well the log rules read real log lines they were not written on: precision and recall of the facts they
take from the public corpus tests/data/logs/public_lines.toml, per split (tuning / held_out) and leaving one source
out (each source thread scored on its own). A fact is right when its subject, kind and value equal the label.

    python benchmarks/log_rules_heldout.py            # one JSON line per split, then the misses

Figures go to docs/logs.md ("Held-out figures"), with the machine and date.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mmprof.log_rules import load_log_rules  # noqa: E402
from mmprof.log_text import clean  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "logs" / "public_lines.toml"


def facts_of(rules, text: str) -> set[tuple[str, str, str]]:
    p = rules.parse(clean(text))
    return {(r.subject, r.kind, v) for r, v, _ in rules.facts_of(p.message, p.format, p.where)}


def score(rows) -> dict:
    tp = fp = fn = 0
    for got, want in rows:
        tp += len(got & want)
        fp += len(got - want)
        fn += len(want - got)
    return {"facts_expected": tp + fn, "facts_found": tp + fp, "right": tp, "wrong": fp, "missed": fn,
            "precision": round(tp / (tp + fp), 3) if tp + fp else None,
            "recall": round(tp / (tp + fn), 3) if tp + fn else None}


def main() -> int:
    rules = load_log_rules()
    lines = tomllib.loads(CORPUS.read_text())["line"]
    by_split: dict[str, list] = {}
    by_source: dict[str, list] = {}
    misses = []
    for ln in lines:
        got = facts_of(rules, ln["text"])
        want = {(e["subject"], e["kind"], e["value"]) for e in ln["expect"]}
        by_split.setdefault(ln["split"], []).append((got, want))
        by_source.setdefault(ln["source"], []).append((got, want))
        if got != want:
            misses.append({"split": ln["split"], "source": ln["source"], "missed": sorted(want - got),
                           "wrong": sorted(got - want)})
    for split, rows in sorted(by_split.items()):
        print(json.dumps({"bench": "log_rules", "split": split, "lines": len(rows), **score(rows)}))
    loso = [score(rows) for rows in by_source.values()]
    perfect = sum(1 for s in loso if s["wrong"] == 0 and s["missed"] == 0)
    print(json.dumps({"bench": "log_rules", "split": "leave_one_source_out", "sources": len(loso),
                      "sources_all_right": perfect}))
    for m in misses:
        print(json.dumps(m))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
