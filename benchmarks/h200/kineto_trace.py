"""Record a small real GPU Kineto trace on the H200 for the importer tests (no NCCL, one GPU).

A transformer-like block (bf16: QKV GEMM, SDPA, o_proj, RMSNorm, a routed-expert loop with index_select)
runs 1 prefill step and 3 decode steps under torch.profiler(record_shapes=True), with record_function
scopes named like the reference runtime (mmprof.prefill/decode > mmprof.step.N > layers.{i}.*). Writes
$OUT/h200_block.json.gz (< 2 MB) and prints a summary table of what it recorded.

Run on the H200:  python benchmarks/h200/kineto_trace.py
Then copy $OUT/h200_block.json.gz to tests/data/kineto_own/ (the generic-invariant test picks it up).
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

D, H, HD, E, TOPK, LAYERS = 1024, 8, 128, 8, 2, 2


def main() -> None:
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    assert torch.cuda.is_available(), "needs a GPU"
    dev = torch.device("cuda")
    torch.manual_seed(0)
    dt = torch.bfloat16
    W = lambda *s: (torch.randn(*s, device=dev, dtype=dt) * 0.02)  # noqa: E731
    layers = [dict(qkv=W(3 * H * HD, D), o=W(D, H * HD), norm=torch.ones(D, device=dev, dtype=dt), router=W(E, D),
                   up=W(E, 2 * D, D), down=W(E, D, 2 * D)) for _ in range(LAYERS)]

    def block(x, i):
        L = layers[i]
        with record_function(f"layers.{i}.norm"):
            h = F.rms_norm(x, (D,), L["norm"])
        with record_function(f"layers.{i}.attn.qkv"):
            q, k, v = F.linear(h, L["qkv"]).view(x.shape[0], x.shape[1], 3, H, HD).unbind(2)
        with record_function(f"layers.{i}.attn.core"):
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=x.shape[1] > 1)
        with record_function(f"layers.{i}.attn.o_proj"):
            x = x + F.linear(a.transpose(1, 2).reshape(x.shape[0], x.shape[1], H * HD), L["o"])
        with record_function(f"layers.{i}.moe.router"):
            t = x.reshape(-1, D)
            w, idx = torch.sigmoid(F.linear(t, L["router"])).topk(TOPK, dim=-1)
        with record_function(f"layers.{i}.moe.routed"):
            y = torch.zeros_like(t)
            for e in range(E):
                rows = (idx == e).any(-1).nonzero().squeeze(-1)
                if rows.numel():
                    xe = t.index_select(0, rows)
                    y.index_add_(0, rows, F.linear(F.silu(F.linear(xe, L["up"][e])), L["down"][e]))
        return x + y.view_as(x)

    def step(x):
        for i in range(LAYERS):
            x = block(x, i)
        return x

    with torch.no_grad():
        step(torch.randn(1, 16, D, device=dev, dtype=dt))  # warm-up (cuBLAS handles, autotune)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            with record_function("mmprof.prefill"), record_function("mmprof.step.0"):
                x = step(torch.randn(1, 64, D, device=dev, dtype=dt))
            for s in range(1, 4):
                with record_function("mmprof.decode"), record_function(f"mmprof.step.{s}"):
                    x = step(x[:, -1:, :])
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "t.json")
        prof.export_chrome_trace(raw)
        dst = out / "h200_block.json.gz"
        with open(raw, "rb") as f, gzip.open(dst, "wb", compresslevel=9) as g:
            shutil.copyfileobj(f, g)
    doc = json.loads(gzip.decompress(dst.read_bytes()))
    cats = collections.Counter(e.get("cat") for e in doc["traceEvents"] if e.get("ph") == "X")
    print(f"wrote {dst} ({dst.stat().st_size:,} bytes) torch {torch.__version__} {torch.cuda.get_device_name()}")
    print(f"{'category':<22}{'events':>8}")
    for c, n in cats.most_common():
        print(f"{str(c):<22}{n:>8}")
    # the importer's view, when mmprof is importable from the repo root
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from mmprof.importers import kineto

        t0 = time.perf_counter()
        p = kineto.load([dst])
        k = p.tables["kernels"]
        print(f"mmprof import: {p} in {time.perf_counter() - t0:.2f}s; kernels with op "
              f"{int((k['op'] >= 0).sum())}/{p.n('kernels')}, with scope {int((k['scope'] >= 0).sum())}; "
              f"device {p.meta['ranks'][0]['devices']}")
    except Exception as e:  # the trace is the deliverable; the import check is a bonus
        print(f"mmprof import failed: {type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
