"""Tag every explicit kernel rule (rules/kernels_*.toml, cpu_ops.toml) with the corpus sources whose names it
decides: the `sources` that leave-one-source-out (benchmarks/classify_unseen.py) removes for each source.

A rule is taken as written for every source whose labelled names it decides (tests/data/kernel_corpus, and the
`tune` split of tests/data/kernel_corpus_unseen; never the held-out split, for which no rule was written) and for
`traces` when it decides a kernel of a real trace under tests/data or examples. That over-tags a general rule that
happens to match a source (LOSO then measures without it too): the figures are conservative. The vocabulary of the
grammar (rules/kernel_tokens.toml, kernel_libraries.toml) is tagged by hand: an entry added while looking at a
source's names carries that source, the rest was written from the families' definitions.

Usage: python benchmarks/tag_rule_sources.py [--check]   (--check: exit 1 when a tag would change)
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.classify_unseen import corpus, trace_files  # noqa: E402
from mmprof.analysis.attribution.classify import BUILTIN_FILES, RULES_DIR, default_rules  # noqa: E402


def trace_names() -> set[str]:
    from mmprof.importers import import_paths

    names: set[str] = set()
    for p in trace_files():
        try:
            prof = import_paths([p])
        except Exception:  # not a trace an importer reads
            continue
        if prof.n("kernels"):
            names.update(n for n in prof.col("kernels", "name", decode=True) if n)
    return names


def tags() -> dict[str, list[str]]:
    rs = default_rules()
    out: dict[str, set[str]] = defaultdict(set)
    for r in corpus("seen") + [r for r in corpus("unseen") if r.split == "tune"]:
        kc = rs.classify(r.name)
        if kc.evidence == "rule":
            out[kc.rule].add(r.key)
    for n in trace_names():
        kc = rs.classify(n)
        if kc.evidence == "rule":
            out[kc.rule].add("traces")
    return {k: sorted(v) for k, v in out.items()}


def rewrite(text: str, t: dict[str, list[str]]) -> str:
    parts = re.split(r"(?m)^(?=\[\[rule\]\])", text)
    out = []
    for p in parts:
        m = re.search(r'(?m)^id = "([^"]+)"', p)
        if not (m and p.startswith("[[rule]]")):
            out.append(p)
            continue
        p = re.sub(r"(?m)^sources = \[[^\]]*\]\n", "", p)
        line = "sources = [" + ", ".join(f'"{s}"' for s in t.get(m.group(1), [])) + "]\n"
        lines = p.splitlines(keepends=True)
        k = max(i for i, ln in enumerate(lines) if re.match(r"^(?:id|pattern|family|variant|library|path|description|"
                                                           r"example|ignore_case|on) = ", ln))
        lines.insert(k + 1, line)
        out.append("".join(lines))
    return "".join(out)


def main(argv: list[str]) -> None:
    t = tags()
    changed = []
    for f in BUILTIN_FILES:
        p = RULES_DIR / f
        old = p.read_text(encoding="utf-8")
        new = rewrite(old, t)
        if new != old:
            changed.append(f)
            if "--check" not in argv:
                p.write_text(new, encoding="utf-8")
    print(("would change: " if "--check" in argv else "changed: ") + (", ".join(changed) or "nothing"))
    if changed and "--check" in argv:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
