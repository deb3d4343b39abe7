"""Derive a small fixture from a real vLLM torch-profiler trace: the first N engine steps, nothing edited.

    python derive.py IN.pt.trace.json.gz OUT.pt.trace.json.gz N

Keeps every metadata event, every CPU-side event that starts before the (N+1)-th `execute_context_*`
user_annotation (vLLM's engine step, vllm/v1/worker/gpu_model_runner.py), and every GPU-side event or flow
whose correlation id belongs to a kept launch. Event contents and the header are copied as they are."""
import gzip
import json
import sys

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}


def main(src, dst, n):
    d = json.load(gzip.open(src))
    ev = d["traceEvents"]
    steps = sorted(e["ts"] for e in ev if e.get("cat") == "user_annotation" and e.get("name", "").startswith("execute_context_"))
    cut = steps[n] if len(steps) > n else float("inf")
    keep, corr = [], set()
    for e in ev:
        if e.get("ph") == "M" or "ts" not in e:
            keep.append(e)
        elif e.get("cat") not in GPU_CATS and e.get("cat") != "ac2g" and e["ts"] < cut:
            keep.append(e)
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                corr.add(c)
    for e in ev:
        if "ts" in e and (e.get("cat") in GPU_CATS or e.get("cat") == "ac2g"):
            c = (e.get("args") or {}).get("correlation", e.get("id"))
            if c in corr or (e.get("cat") == "gpu_user_annotation" and e["ts"] < cut):
                keep.append(e)
    d["traceEvents"] = keep
    with gzip.open(dst, "wt", compresslevel=9) as f:
        json.dump(d, f)
    print(f"{dst}: {len(keep)} of {len(ev)} events, {min(n, len(steps))} of {len(steps)} engine steps")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
