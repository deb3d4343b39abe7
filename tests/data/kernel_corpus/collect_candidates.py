"""Candidate names for corpus.tsv (README.md): every kernel the shared vLLM traces launch, plus wheel symbols.

Usage: python collect_candidates.py SAMPLES_VLLM WORK
SAMPLES_VLLM is ../shared/samples/vllm (its *.json.gz and record/*.json.gz traces: names exactly as the profiler
printed them). WORK holds the outputs of extract_symbols.py / extract_triton.py (sym_vllm.tsv, sym_sgl.tsv, sym_fi.tsv,
sym_aiter.tsv, wrappers.txt, tri_vllm.tsv, tri_aiter.tsv). Writes WORK/candidates.json: [[name, source], ...]. The
FlashInfer cubins (31k trtllm-gen kernels) and AITER code objects are sampled with a fixed seed, 12 / 5 per kind.
"""
from __future__ import annotations

import collections
import glob
import gzip
import lzma
import json
import random
import re
import sys
from pathlib import Path


def main(samples: str, work: str) -> None:
    rows: list[tuple[str, str]] = []
    seen: set[str] = set()

    def add(n: str, src: str) -> None:
        if n not in seen:
            seen.add(n)
            rows.append((n, src))

    w = Path(work)
    for f in sorted(glob.glob(f"{samples}/*.json.[gx]z") + glob.glob(f"{samples}/record/*.json.[gx]z")):
        d = json.load((lzma.open if f.endswith(".xz") else gzip.open)(f, "rt"))
        for e in d.get("traceEvents", []) if isinstance(d, dict) else d:
            if isinstance(e, dict) and e.get("cat") == "kernel":
                add(e["name"], "trace:samples/vllm/" + f.split("/vllm/", 1)[1])
    for fn, wheel in (("sym_vllm.tsv", "vllm-0.26.0"),):
        for line in (w / fn).read_text().splitlines():
            n, p = line.split("\t")
            add(n, f"wheel:{wheel}:{p}")
    for line in (w / "wrappers.txt").read_text().splitlines():  # cutlass::device_kernel<...> instances, one per kernel type
        p, n = line.split(" \t ")
        if "sgl" not in p and "common_ops" not in p and "flash_ops" not in p:
            add(n.strip(), f"wheel:vllm-0.26.0:{p.strip()}")
    for line in (w / "sym_sgl.tsv").read_text().splitlines():
        n, p = line.split("\t")
        add(n, f"wheel:sgl-kernel-0.3.21:{p}")
    random.seed(20)
    fi = [line.split("\t") for line in (w / "sym_fi.tsv").read_text().splitlines()]
    fi = [x for x in fi if not x[0].startswith("$") and not x[0].endswith("GetSmemSize")]
    kinds = collections.defaultdict(list)
    for n, p in fi:
        kinds[re.match(r"[A-Za-z]+", n.replace("void ", "")).group(0)].append((n, p))
    for v in kinds.values():
        for n, p in random.sample(v, min(12, len(v))):
            add(n, f"wheel:flashinfer-cubin-0.6.13:{p}")
    ai = [line.split("\t") for line in (w / "sym_aiter.tsv").read_text().splitlines()]
    byk = collections.defaultdict(list)
    for n, p in ai:
        byk[p.split("/")[-2]].append((n, p))
    for v in byk.values():
        for n, p in random.sample(v, min(5, len(v))):
            add(n, f"wheel:amd-aiter-0.1.7.post2.dev18:{p}")
    for fn, wheel in (("tri_vllm.tsv", "vllm-0.26.0"), ("tri_aiter.tsv", "amd-aiter-0.1.7.post2.dev18")):
        for line in (w / fn).read_text().splitlines():
            n, p = line.split("\t")
            if re.search(r"kernel|_fwd|_bwd|gemm|attn|attention|quant|norm|rope|topk|sample", n, re.I):
                add(n, f"wheel:{wheel}:{p}")
    (w / "candidates.json").write_text(json.dumps(rows))
    print(len(rows), "candidates", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
