"""Make the Inductor provenance fixture: compile a tiny decoder (embedding, RMSNorm, rotary, attention, a router
with softmax + top-k, a SwiGLU MLP, final norm, lm_head) with torch.compile's Inductor C++ backend on CPU, with
Inductor's provenance tracking on, and profile one call with torch.profiler.

Writes, beside this script:
- provenance/inductor_provenance_tracking_node_mappings.json - Inductor's kernel <-> post-grad <-> pre-grad node
  mappings, copied unmodified from the debug dir torch wrote (torch/_inductor/debug.py:dump_inductor_provenance_info)
- provenance/kernel_stack_traces.json - the `inductor_provenance_tracking_kernel_stack_traces` artifact
  (torch._inductor.debug._inductor_kernel_stack_trace: kernel:handle -> model source lines), as torch logs it
  to tlparse (torch/_inductor/compile_fx.py); absolute paths cut to the file name
- cpu_compiled.pt.trace.json.gz - the torch.profiler trace of one compiled call (cpp_fused_* ops), trimmed

Usage: python tests/data/inductor/make_fixture.py   (CPU torch, gcc; about a minute)
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="mmprof_inductor_"))
    os.environ["TORCH_COMPILE_DEBUG"] = "1"          # trace.enabled: the debug dir with the provenance files
    os.environ["INDUCTOR_PROVENANCE"] = "1"          # config.trace.provenance_tracking_level = 1
    os.environ["TORCH_COMPILE_DEBUG_DIR"] = str(work)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work / "cache")  # a fresh compile, not a cache hit
    os.environ["TORCH_TRACE"] = str(work / "tlparse")  # the structured log tlparse reads (its artifacts)
    import torch  # noqa: PLC0415 (torch is imported where the model is built)
    from torch import nn  # noqa: PLC0415
    import torch.nn.functional as F  # noqa: PLC0415

    torch._inductor.config.cpp.enable_kernel_profile = True  # a record_function per cpp_fused_* kernel
    torch.manual_seed(0)
    H, NH, HD, E, V = 64, 4, 16, 4, 128

    class RMSNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(H))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv_proj = nn.Linear(H, 3 * H, bias=False)
            self.o_proj = nn.Linear(H, H, bias=False)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            q, k, v = self.qkv_proj(x).view(b, t, 3, NH, HD).unbind(2)
            q = q * cos + torch.cat([-q[..., HD // 2:], q[..., :HD // 2]], -1) * sin   # rotary
            k = k * cos + torch.cat([-k[..., HD // 2:], k[..., :HD // 2]], -1) * sin
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            return self.o_proj(o.transpose(1, 2).reshape(b, t, H))

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate_up_proj = nn.Linear(H, 4 * H, bias=False)
            self.down_proj = nn.Linear(2 * H, H, bias=False)

        def forward(self, x):
            g, u = self.gate_up_proj(x).chunk(2, -1)
            return self.down_proj(F.silu(g) * u)

    class SparseBlock(nn.Module):  # a router (softmax + top-2) scaling one shared expert, like a MoE block's
        def __init__(self) -> None:
            super().__init__()
            self.gate = nn.Linear(H, E, bias=False)
            self.shared_expert = MLP()

        def forward(self, h):
            w, _ = torch.topk(F.softmax(self.gate(h), -1), 2, -1)
            return self.shared_expert(h) * w.sum(-1, keepdim=True)

    class Layer(nn.Module):
        def __init__(self, moe: bool) -> None:
            super().__init__()
            self.input_layernorm = RMSNorm()
            self.self_attn = Attention()
            self.post_attention_layernorm = RMSNorm()
            self.mlp = SparseBlock() if moe else MLP()

        def forward(self, x, cos, sin):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
            return x + self.mlp(self.post_attention_layernorm(x))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed_tokens = nn.Embedding(V, H)
            self.layers = nn.ModuleList([Layer(False), Layer(True)])
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(H, V, bias=False)

        def forward(self, ids):
            t = ids.shape[1]
            inv = 1.0 / (10000 ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
            ang = torch.outer(torch.arange(t, dtype=torch.float32), inv)
            ang = torch.cat([ang, ang], -1)[None, :, None, :]
            cos, sin = ang.cos(), ang.sin()
            x = self.embed_tokens(ids)
            for layer in self.layers:
                x = layer(x, cos, sin)
            return self.lm_head(self.norm(x))

    model = Model().eval()
    ids = torch.randint(0, V, (1, 8))
    fn = torch.compile(model, backend="inductor")
    with torch.no_grad():
        fn(ids)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            fn(ids)
    trace = work / "trace.json"
    prof.export_chrome_trace(str(trace))

    found = sorted(work.rglob("inductor_provenance_tracking_node_mappings.json"))
    if not found:
        sys.exit("no inductor_provenance_tracking_node_mappings.json under " + str(work))
    out = HERE / "provenance"
    out.mkdir(exist_ok=True)
    shutil.copyfile(found[-1], out / found[-1].name)
    # the stack traces torch logs for tlparse (TORCH_TRACE): the artifact's payload, tab-indented after its line
    lines = next((work / "tlparse").glob("*.log")).read_text().splitlines()
    at = next(i for i, x in enumerate(lines) if '"inductor_provenance_tracking_kernel_stack_traces"' in x)
    stacks = json.loads(lines[at + 1][1:])
    stacks = {k: [re.sub(r'File "[^"]*/([^"/]+)"', r'File "\1"', t) for t in v] for k, v in stacks.items()}
    (out / "kernel_stack_traces.json").write_text(json.dumps(stacks, indent=1) + "\n")
    data = json.loads(trace.read_text())
    keep = [e for e in data["traceEvents"] if e.get("ph") != "X" or e.get("dur", 0) > 0]
    data["traceEvents"] = keep
    with gzip.open(HERE / "cpu_compiled.pt.trace.json.gz", "wt") as f:
        json.dump(data, f)
    print("debug dir", found[-1].parent)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
