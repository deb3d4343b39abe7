"""Unclassified and wrong-family shares of mmprof's kernel classification on the labelled corpus; one JSON line.

The corpus (tests/data/kernel_corpus/corpus.tsv, README there) holds real serving-engine kernel names labelled from
their source. Counts: unclassified (no rule matched), wrong family (a rule matched, its family differs from the
label), cross-platform library (a CUDA kernel labelled with a ROCm library or the reverse). `--rules DIR` measures
the rule files in DIR instead of the built-in ones (e.g. an older commit's mmprof/rules, to compare).

Usage: python benchmarks/classify_corpus.py [--rules DIR]
"""

from __future__ import annotations

import lzma
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mmprof.analysis.attribution.classify import BUILTIN_FILES, LIBRARY_PLATFORM, RuleSet, default_rules, read_rule_file  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "kernel_corpus" / "corpus.tsv"


def main(argv: list[str]) -> None:
    if argv[:1] == ["--rules"] and len(argv) == 2:
        d = Path(argv[1])
        rules = RuleSet([r for f in BUILTIN_FILES if (d / f).exists() for r in read_rule_file(d / f)])
        which = str(d)
    else:
        rules, which = default_rules(), "builtin"
    # committed xz-compressed (corpus.tsv.xz); the tests unpack it beside itself (tests/conftest.py), read either
    text = CORPUS.read_text(encoding="utf-8") if CORPUS.exists() else \
        lzma.decompress(CORPUS.with_name("corpus.tsv.xz").read_bytes()).decode("utf-8")
    rows = [ln.split("\t") for ln in text.splitlines() if ln and not ln.startswith("#")]
    unc = wrong = cross = 0
    by_family: Counter = Counter()
    for name, family, _, platform, _ in rows:
        kc = rules.classify(name)
        if kc.rule is None:
            unc += 1
            by_family[family] += 1
        elif kc.family != family:
            wrong += 1
            by_family[family] += 1
        lib_platform = LIBRARY_PLATFORM.get(kc.library or "")
        if platform != "any" and lib_platform is not None and lib_platform != platform:
            cross += 1
    n = len(rows)
    print(json.dumps({"bench": "classify_corpus", "rules": which, "names": n, "unclassified": unc,
                      "unclassified_share": round(unc / n, 4), "wrong_family": wrong,
                      "wrong_family_share": round(wrong / n, 4), "cross_platform_library": cross,
                      "misses_by_expected_family": dict(by_family.most_common())}))


if __name__ == "__main__":
    main(sys.argv[1:])
