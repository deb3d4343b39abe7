"""A torch.compile (Inductor) trace of a model mmprof did not write, with Inductor's kernel provenance, on one GPU.

transformers' Qwen2-MoE (a 4-layer config: tests/data/vllm_own/qwen2moe_config.json, random weights, bf16) compiled
with `torch.compile(model)` (Inductor's defaults), forward passes of a [B, T] token batch under torch.profiler (CPU +
CUDA, shapes, with_stack), after a warm-up that compiles. Inductor's provenance tracking is on
(`torch._inductor.config.trace.provenance_tracking_level = 1`, or `trace.provenance_tracking` on older torch) and
its debug folder kept (`TORCH_COMPILE_DEBUG=1`, `debug_dir` under $OUT): the kernel -> node mapping files come back in
`provenance.tar.gz`, the trace as `qwen2moe_compiled.pt.trace.json.gz`. Used to test mmprof's attribution of
Inductor kernels on real data (issue 22).

    python benchmarks/h200/inductor_trace.py [--batch 4] [--tokens 64]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(ROOT / "tests/data/vllm_own/qwen2moe_config.json"))
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    a = p.parse_args(argv)
    out = Path(a.out)
    debug = out / "inductor_debug"
    os.environ["TORCH_COMPILE_DEBUG"] = "1"
    os.environ["TORCH_COMPILE_DEBUG_DIR"] = str(debug)
    import torch
    import torch._inductor.config as icfg
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoConfig, AutoModelForCausalLM

    if hasattr(icfg.trace, "provenance_tracking_level"):
        icfg.trace.provenance_tracking_level = 1
    elif hasattr(icfg.trace, "provenance_tracking"):
        icfg.trace.provenance_tracking = True
    cfg_dict = json.loads(Path(a.config).read_text())
    cfg = AutoConfig.for_model(**{k: v for k, v in cfg_dict.items() if k not in ("architectures",)})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).cuda().eval()
    compiled = torch.compile(model)
    x = torch.randint(0, cfg.vocab_size, (a.batch, a.tokens), device="cuda")
    with torch.no_grad():
        compiled(input_ids=x, use_cache=False)  # compiles (outside the profile)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                     with_stack=True) as prof:
            for _ in range(a.steps):
                compiled(input_ids=x, use_cache=False)
            torch.cuda.synchronize()
    raw = out / "trace.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as f, gzip.open(out / "qwen2moe_compiled.pt.trace.json.gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    raw.unlink()
    files = [q for q in debug.rglob("*") if q.is_file() and ("provenance" in q.name or q.name.endswith("output_code.py")
                                                          or q.name == "fx_graph_readable.py")]
    with tarfile.open(out / "provenance.tar.gz", "w:gz") as t:
        for q in files:
            t.add(q, arcname=str(q.relative_to(debug)))
    shutil.rmtree(debug, ignore_errors=True)
    kern = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    print(json.dumps({"torch": torch.__version__, "kernels": kern, "provenance_files": [q.name for q in files][:20],
                      "n_provenance_files": len(files)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
