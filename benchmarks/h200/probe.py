"""Record a small real torch.profiler trace on the GPU and measure the card's two ceilings.

Run on the H200 (device tool): `python3 benchmarks/h200/probe.py` with $OUT set. Writes:
  $OUT/h200_probe.json.gz   a Kineto trace (record_shapes=True) of a MoE-layer-like workload with the
                            runtime's scope labels: GEMMs, grouped GEMM, SDPA, top-k, norms, copies,
                            a torch.compile (Triton) kernel
  $OUT/h200_ceilings.json   measured bf16 matmul TFLOP/s and device-to-device copy TB/s (medians)
"""

from __future__ import annotations

import json
import os
import statistics

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

OUT = os.environ.get("OUT", "out")
os.makedirs(OUT, exist_ok=True)
dev = "cuda"
torch.manual_seed(0)


def ceilings() -> dict:
    res = {}
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); a @ b; e.record(); torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    res["bf16_matmul_tflops"] = 2 * 8192**3 / statistics.median(times) / 1e12
    x = torch.randn(1 << 30, device=dev, dtype=torch.bfloat16)  # 2 GiB
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); y.copy_(x); e.record(); torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    res["copy_tbps_read_plus_write"] = 2 * x.numel() * 2 / statistics.median(times) / 1e12
    res["device"] = torch.cuda.get_device_name()
    res["torch"] = torch.__version__
    return res


def gemma_rmsnorm(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1 + w.float())).to(x.dtype)


@torch.compile
def swiglu_oai(gate_up):
    gate, up = gate_up.chunk(2, dim=-1)
    gate = gate.clamp(max=7.0)
    up = up.clamp(-7.0, 7.0)
    return gate * torch.sigmoid(1.702 * gate) * (up + 1)


def layer(x, W, step):
    B, H = x.shape
    with record_function("layers.3.norm"):
        h = gemma_rmsnorm(x, W["norm"])
    with record_function("layers.3.attn.qkv"):
        qkv = h @ W["qkv"]
    with record_function("layers.3.attn.core"):
        q = qkv[:, :1024].view(1, B, 8, 128).transpose(1, 2)
        k = W["kcache"]
        v = W["vcache"]
        o = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        o = o.transpose(1, 2).reshape(B, 1024)
    with record_function("layers.3.attn.o_proj"):
        x = x + o @ W["o"]
    with record_function("layers.3.moe.router"):
        logits = h.float() @ W["router"]
        scores = torch.sigmoid(logits)
        _, idx = torch.topk(scores + W["bias"], 4, dim=-1)
        w = scores.gather(-1, idx)
        w = w / w.sum(-1, keepdim=True) * 2.0
    with record_function("layers.3.moe.routed"):
        flat = idx.flatten()
        order = torch.argsort(flat)
        counts = torch.bincount(flat, minlength=16)
        offs = torch.cumsum(counts, 0).to(torch.int32)
        xs = h.repeat_interleave(4, dim=0)[order]
        if hasattr(torch, "_grouped_mm"):
            gu = torch._grouped_mm(xs, W["w13"].transpose(-2, -1), offs=offs)
            act = swiglu_oai(gu)
            out = torch._grouped_mm(act, W["w2"].transpose(-2, -1), offs=offs)
        else:
            out = xs
        y = torch.zeros_like(xs)
        y[order] = out
        y = (y.view(B, 4, H) * w.unsqueeze(-1).to(y.dtype)).sum(1)
    with record_function("layers.3.moe.shared"):
        s = swiglu_oai(h @ W["sgu"]) @ W["sd"]
    return x + y + s


def main() -> None:
    ceil = ceilings()
    print(json.dumps(ceil), flush=True)
    with open(os.path.join(OUT, "h200_ceilings.json"), "w") as f:
        json.dump(ceil, f, indent=2)
    H, E, I = 2048, 16, 768
    bf = dict(device=dev, dtype=torch.bfloat16)
    W = {
        "norm": torch.randn(H, **bf) * 0.1,
        "qkv": torch.randn(H, 1024 + 256, **bf) * 0.02,
        "o": torch.randn(1024, H, **bf) * 0.02,
        "router": torch.randn(H, E, device=dev) * 0.02,
        "bias": torch.randn(E, device=dev) * 0.01,
        "w13": torch.randn(E, 2 * I, H, **bf).transpose(-2, -1).contiguous().transpose(-2, -1) * 0.02,
        "w2": torch.randn(E, H, I, **bf) * 0.02,
        "sgu": torch.randn(H, 2 * I, **bf) * 0.02,
        "sd": torch.randn(I, H, **bf) * 0.02,
        "kcache": torch.randn(1, 1, 2048, 128, **bf),
        "vcache": torch.randn(1, 1, 2048, 128, **bf),
    }
    W["w13"] = torch.randn(E, 2 * I, H, **bf) * 0.02
    x = torch.randn(64, H, **bf)
    for _ in range(3):  # warm-up incl. torch.compile
        layer(x, W, 0)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for step in range(3):
            with record_function("mmprof.decode"), record_function(f"mmprof.step.{step + 1}"):
                x2 = layer(x, W, step)
            torch.cuda.synchronize()
    path = os.path.join(OUT, "h200_probe.json")
    prof.export_chrome_trace(path)
    import gzip
    import shutil

    with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as g:
        shutil.copyfileobj(f, g)
    os.remove(path)
    names = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
    print("kernel names:", len(names))
    for n in names:
        print("  ", n[:160])
    print("wrote", path + ".gz", os.path.getsize(path + ".gz"), "bytes")


if __name__ == "__main__":
    main()
