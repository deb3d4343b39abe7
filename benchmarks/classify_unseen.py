"""Kernel identity on names the rules were not written from: unclassified, wrong family, wrong library; one JSON line
per figure.

Corpora (labelled from the kernels' sources, README.md beside each): tests/data/kernel_corpus (620 names the rules
were written from: vLLM traces, vllm / sgl-kernel / flashinfer / aiter wheels) and tests/data/kernel_corpus_unseen
(844 names of nine other sources; its `heldout` split was never looked at while writing rules). Figures:

- per corpus and split: unclassified share (family `unknown`), wrong family among the classified, wrong library
  (a library given that differs from the label's, or one of the other platform), library unknown;
- leave-one-source-out (LOSO): for each source, the rules and vocabulary as they would be without the entries
  written for it (their `sources` tags), measured on that source's names;
- rules that decide exactly one corpus name (a rule fitted to one name says little about unseen ones);
- the time-weighted unknown share of kernel time on every real trace in tests/data and examples (`--traces`).

Usage: python benchmarks/classify_unseen.py [--traces] [--rules DIR] [--json]
"""

from __future__ import annotations

import json
import lzma
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mmprof.analysis.attribution.classify import (BUILTIN_FILES, LIBRARY_PLATFORM, UNKNOWN, RuleSet,  # noqa: E402
                                                  default_rules, read_rule_file)

CORPORA = {"seen": ROOT / "tests" / "data" / "kernel_corpus" / "corpus.tsv",
           "unseen": ROOT / "tests" / "data" / "kernel_corpus_unseen" / "corpus.tsv",
           "families": ROOT / "tests" / "data" / "kernel_corpus_families" / "corpus.tsv"}
# source column prefix -> source key (the `sources` tags of the rules use these keys)
SOURCE_KEYS = (("trace:samples/vllm", "vllm-traces"), ("trace:gpu2/families", "vllm-families"),
               ("wheel:vllm-", "vllm"), ("wheel:sgl-kernel", "sgl-kernel"),
               ("wheel:flashinfer", "flashinfer"), ("wheel:amd-aiter", "aiter"),
               ("wheel:fbgemm_gpu_genai", "fbgemm_genai"), ("wheel:fbgemm_gpu", "fbgemm"),
               ("wheel:bitsandbytes", "bitsandbytes"), ("wheel:sglang", "sglang"),
               ("wheel:lmdeploy-0.18.0:_turbomind", "turbomind"), ("wheel:lmdeploy", "lmdeploy"),
               ("wheel:liger", "liger"), ("wheel:torchao", "torchao"), ("repo:ROCm/MIOpen", "miopen"))
TRACE_SUFFIXES = (".json", ".json.gz", ".json.xz", ".db", ".sqlite", ".csv", ".mmprof", ".mmprof.gz")


@dataclass(frozen=True)
class Row:
    name: str
    family: str
    library: str
    platform: str
    source: str
    split: str          # seen (the first corpus) | tune | heldout

    @property
    def key(self) -> str:
        return next((k for p, k in SOURCE_KEYS if self.source.startswith(p)), self.source.split(":")[0])


def _text(path: Path) -> str:
    if path.exists():
        return path.read_text(encoding="utf-8")
    return lzma.decompress(path.with_name(path.name + ".xz").read_bytes()).decode("utf-8")


def corpus(which: str) -> list[Row]:
    rows = []
    for ln in _text(CORPORA[which]).splitlines():
        if not ln.strip() or ln.startswith("#"):
            continue
        f = ln.split("\t")
        if which == "seen":   # name, family, library, platform, source
            rows.append(Row(f[0], f[1], f[2], f[3], f[4], "seen"))
        else:                 # name, family, library, platform, path, source, split
            rows.append(Row(f[0], f[1], f[2], f[3], f[5], f[6]))
    return rows


def score(rows: list[Row], rules: RuleSet) -> dict:
    unc = wrong = wlib = libunk = 0
    misses: Counter = Counter()
    for r in rows:
        kc = rules.classify(r.name)
        if kc.family == UNKNOWN:
            unc += 1
            misses[f"{r.family}->unknown"] += 1
        elif kc.family != r.family:
            wrong += 1
            misses[f"{r.family}->{kc.family}"] += 1
        plat = LIBRARY_PLATFORM.get(kc.library or "")
        if kc.library is None:
            libunk += 1
        elif kc.library != r.library or (r.platform != "any" and plat is not None and plat != r.platform):
            wlib += 1
    n = len(rows)
    cls = n - unc
    return {"names": n, "unclassified": unc, "unclassified_share": round(unc / n, 4) if n else 0.0,
            "wrong_family": wrong, "wrong_family_share_of_classified": round(wrong / cls, 4) if cls else 0.0,
            "wrong_library": wlib, "wrong_library_share": round(wlib / n, 4) if n else 0.0,
            "library_unknown": libunk, "misses": dict(misses.most_common(8))}


def loso(rows: list[Row], rules: RuleSet) -> dict[str, dict]:
    by: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by[r.key].append(r)
    return {k: score(v, rules.without_sources({k})) for k, v in sorted(by.items())}


def single_name_rules(rows: list[Row], rules: RuleSet) -> list[str]:
    hits: Counter = Counter(rules.classify(r.name).rule for r in rows)
    return sorted(k for k, c in hits.items() if k is not None and c == 1)


def trace_files() -> list[Path]:
    out = []
    for base in (ROOT / "tests" / "data", ROOT / "examples"):
        for p in sorted(base.rglob("*")):
            if p.is_file() and p.name.endswith(TRACE_SUFFIXES) and "kernel_corpus" not in str(p) \
                    and "importer_golden" not in str(p) and not p.name.endswith(("summary.json", "config.json")):
                out.append(p)
    return out


def trace_unknown(rules: RuleSet) -> list[dict]:
    """Time-weighted unknown share of the kernel time of every real trace here that an importer reads."""
    from mmprof.analysis.timeline.events import events_of
    from mmprof.analysis.views.coverage import coverage
    from mmprof.importers import import_paths

    out = []
    for p in trace_files():
        try:
            prof = import_paths([p])
        except Exception:  # not a trace (a config, a spec, a profile of another kind): skipped
            continue
        if prof.n("kernels") == 0:
            continue
        cov = coverage(events_of(prof, rules))
        out.append({"trace": str(p.relative_to(ROOT)), "kernels": cov.events,
                    "unknown_share": round(cov.unclassified_share, 4),
                    "top_unknown": [u["name"][:80] for u in cov.unclassified[:3]]})
    return out


def measure(rules: RuleSet | None = None, traces: bool = False) -> dict:
    rules = rules or default_rules()
    seen, unseen, fam = corpus("seen"), corpus("unseen"), corpus("families")
    fam_tune = [r for r in fam if r.split == "tune"]
    res = {"seen": score(seen, rules),
           "families_tune": score(fam_tune, rules),
           "families_heldout": score([r for r in fam if r.split == "heldout"], rules),
           "unseen_tune": score([r for r in unseen if r.split == "tune"], rules),
           "unseen_heldout": score([r for r in unseen if r.split == "heldout"], rules),
           "unseen": score(unseen, rules),
           "loso": loso(seen + [r for r in unseen if r.split == "tune"] + fam_tune, rules),
           "heldout_by_source": {k: score(v, rules) for k, v in sorted(
               {r.key: [x for x in unseen if x.key == r.key] for r in unseen if r.split == "heldout"}.items())},
           "single_name_rules": single_name_rules(seen + unseen + fam, rules)}
    res["loso_all"] = score([], rules) if False else _pool(res["loso"])
    if traces:
        res["traces"] = trace_unknown(rules)
    return res


def _pool(per: dict[str, dict]) -> dict:
    n = sum(v["names"] for v in per.values())
    unc = sum(v["unclassified"] for v in per.values())
    wrong = sum(v["wrong_family"] for v in per.values())
    wlib = sum(v["wrong_library"] for v in per.values())
    return {"names": n, "unclassified_share": round(unc / n, 4), "wrong_family_share_of_classified":
            round(wrong / (n - unc), 4) if n > unc else 0.0, "wrong_library_share": round(wlib / n, 4)}


def main(argv: list[str]) -> None:
    rules = None
    if "--rules" in argv:
        d = Path(argv[argv.index("--rules") + 1])
        rules = RuleSet([r for f in BUILTIN_FILES if (d / f).exists() for r in read_rule_file(d / f)])
    res = measure(rules, traces="--traces" in argv)
    if "--json" in argv:
        print(json.dumps(res, indent=1))
        return
    for k in ("seen", "unseen_tune", "unseen_heldout", "unseen", "families_tune", "families_heldout", "loso_all"):
        d = {x: y for x, y in res[k].items() if x != "misses"}
        print(json.dumps({"bench": "classify_unseen", "set": k, **d}))
    for k, v in res["loso"].items():
        print(json.dumps({"bench": "classify_unseen", "set": f"loso:{k}",
                          **{x: y for x, y in v.items() if x != "misses"}}))
    for k, v in res["heldout_by_source"].items():
        print(json.dumps({"bench": "classify_unseen", "set": f"heldout:{k}",
                          **{x: y for x, y in v.items() if x != "misses"}}))
    print(json.dumps({"bench": "classify_unseen", "single_name_rules": len(res["single_name_rules"]),
                      "ids": res["single_name_rules"]}))
    for t in res.get("traces", []):
        print(json.dumps({"bench": "classify_unseen", **t}))


if __name__ == "__main__":
    main(sys.argv[1:])
