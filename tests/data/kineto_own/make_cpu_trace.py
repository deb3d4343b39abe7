"""Record tests/data/kineto_own/cpu_tiny_block.json.gz: a tiny transformer-like block on CPU under
torch.profiler(record_shapes=True), with record_function scopes named like the reference runtime's.

Run from the repo root:  python tests/data/kineto_own/make_cpu_trace.py
Known facts the tests check: 2 steps (mmprof.step.0 under mmprof.prefill with x [1, 8, 64];
mmprof.step.1 under mmprof.decode with x [1, 1, 64]); 2 layers, each with layers.{i}.attn.qkv
(aten::linear [T, 64] x [192, 64]), layers.{i}.attn.o_proj (aten::linear [T, 64] x [64, 64]) and
layers.{i}.mlp (aten::linear [T, 64] x [256, 64], then [T, 256] x [64, 256]); no GPU events.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

OUT = Path(__file__).resolve().parent / "cpu_tiny_block.json.gz"
D, LAYERS = 64, 2


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    qkv = [torch.nn.Linear(D, 3 * D) for _ in range(LAYERS)]
    o = [torch.nn.Linear(D, D) for _ in range(LAYERS)]
    up = [torch.nn.Linear(D, 4 * D) for _ in range(LAYERS)]
    down = [torch.nn.Linear(4 * D, D) for _ in range(LAYERS)]

    def forward(x):
        for i in range(LAYERS):
            with record_function(f"layers.{i}.attn.qkv"):
                q, k, v = qkv[i](x).split(D, dim=-1)
            with record_function(f"layers.{i}.attn.core"):
                a = torch.softmax(q @ k.transpose(-1, -2) / D ** 0.5, dim=-1) @ v
            with record_function(f"layers.{i}.attn.o_proj"):
                x = x + o[i](a)
            with record_function(f"layers.{i}.mlp"):
                x = x + down[i](torch.relu(up[i](x)))
        return x

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function("mmprof.prefill"), record_function("mmprof.step.0"):
            forward(torch.randn(1, 8, D))
        with record_function("mmprof.decode"), record_function("mmprof.step.1"):
            forward(torch.randn(1, 1, D))
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as f, gzip.open(OUT, "wb", compresslevel=9) as g:
            shutil.copyfileobj(f, g)
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes) with torch {torch.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
