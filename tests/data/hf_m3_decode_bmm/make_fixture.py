"""Derive `decode_bmm.json.xz` from the real H200 trace examples/h200/hf_m3/hf_m3_grouped_nostack.json.gz:
transformers' MiniMax M3 with experts_implementation="grouped_mm" as `generate()` runs it on a GPU, where
`_optimize_model_for_decode` (transformers generation/utils.py) switches grouped_mm to batched_mm for the decode
forwards: `batched_mm_experts_forward` (transformers integrations/moe.py) gathers each token's expert weights and
runs one `torch.bmm`. The H200 trace was made with manual forwards (grouped_mm in every step), so this script
rewrites it to what generate() runs:

* drops the flow (`ac2g`) and CUDA driver events and the op args mmprof does not read (strides, concrete inputs, ids);
* keeps ProfilerStep#1..#2 (the 256-token prefill and 1 decode forwards; `aten::embedding` ids [1, 256] / [1, 1]);
* in decode forwards (ids [1, 1]) every `aten::_grouped_mm` [[rows, K], [E, K, N], [E]] becomes
  `aten::bmm` [[rows, 1, K], [rows, K, N]] (rows = tokens x top-k: the gathered weights), and its kernel the
  cuBLAS strided-batched bf16 gemv kernel that the same trace runs for its attention bmm (cuBLAS picks a gemv
  for a batched product with one row).

    python tests/data/hf_m3_decode_bmm/make_fixture.py
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent.parent.parent / "examples" / "h200" / "hf_m3" / "hf_m3_grouped_nostack.json.gz"
KEEP_STEPS = 2


def main() -> None:
    doc = json.loads(gzip.decompress(SRC.read_bytes()))
    ev = doc["traceEvents"]
    steps = {e["name"]: e for e in ev if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")}
    gsteps = {e["name"]: e for e in ev if e.get("cat") == "gpu_user_annotation" and e.get("name", "").startswith("ProfilerStep#")}
    cut_cpu = steps[f"ProfilerStep#{KEEP_STEPS + 1}"]["ts"]
    cut_gpu = gsteps[f"ProfilerStep#{KEEP_STEPS + 1}"]["ts"]
    gemv = next(e["name"] for e in ev if e.get("cat") == "kernel" and "gemvx::kernel<int, int, __nv_bfloat16" in e["name"])
    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
    kept = [e for e in ev if "ts" not in e or e["ts"] < (cut_gpu if e.get("cat") in gpu_cats else cut_cpu)]
    # decode forwards: between an aten::embedding with ids [1, 1] and the next embedding
    cpu = sorted((e for e in kept if e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
    decode, renamed = False, set()
    for e in cpu:
        if e["name"] == "aten::embedding":
            decode = e["args"]["Input Dims"][1][-1] == 1
        if decode and e["name"] == "aten::_grouped_mm":
            (rows, k), (_, _, n) = e["args"]["Input Dims"][0], e["args"]["Input Dims"][1]
            e["name"] = "aten::bmm"
            e["args"]["Input Dims"] = [[rows, 1, k], [rows, k, n]]
            e["args"]["Input type"] = ["c10::BFloat16", "c10::BFloat16"]
            e["args"]["Input Strides"] = [[k, k, 1], [k * n, 1, k]]
            e["args"]["Concrete Inputs"] = ["", ""]
            renamed.add(e["args"]["External id"])
    n_k = 0
    for e in kept:
        if e.get("cat") == "kernel" and e.get("args", {}).get("External id") in renamed:
            e["name"] = gemv
            n_k += 1
    # size: the flow events (the importer links launches by correlation id) and the args mmprof does not read go
    kept = [e for e in kept if e.get("cat") not in ("ac2g", "cuda_driver")]
    for e in kept:
        for k in ("Ev Idx", "Record function id", "Concrete Inputs", "Input Strides", "registers per thread",
                  "shared memory", "blocks per SM", "warps per SM", "est. achieved occupancy %", "queued", "cbid"):
            e.get("args", {}).pop(k, None)
    t0 = min(e["ts"] for e in kept if "ts" in e)  # times from the first event (fewer digits to store)
    for e in kept:
        if "ts" in e:
            e["ts"] = round(e["ts"] - t0, 3)
    doc["baseTimeNanoseconds"] = doc.get("baseTimeNanoseconds", 0) + int(t0 * 1000)
    doc["traceEvents"] = kept
    out = HERE / "decode_bmm.json.xz"
    out.write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), 9, mtime=0))
    print(f"{out.name}: {len(kept)} events, {len(renamed)} grouped_mm -> bmm in decode, {n_k} kernels renamed, "
          f"{out.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
