"""Make two plain torch.profiler traces of a runtime nobody on mmprof wrote: Hugging Face transformers.

A tiny Llama (random weights from a config: no download) generates greedily on CPU under torch.profiler
(CPU activity, record_shapes=True, a schedule of STEPS active steps and one `prof.step()` per forward, so each
forward is a `ProfilerStep#N` range; step 0 is the 128-token prefill, steps 1.. decode one token), twice:

    eager.json.gz   attn_implementation="eager"  (attention as matmul + softmax + matmul)
    sdpa.json.gz    attn_implementation="sdpa"   (torch's scaled_dot_product_attention)

Only the attention path differs. The sdpa run is also the faster one on this CPU (both with 1 thread).
Run:  python tests/data/diff_external/make_traces.py   (torch 2.13 CPU, transformers 5.17; about 10 s)
"""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

HERE = Path(__file__).resolve().parent
STEPS = 6


def run(impl: str, out: Path) -> None:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512)
    model = LlamaForCausalLM(cfg).eval()
    model.config._attn_implementation = impl
    for m in model.modules():
        if hasattr(m, "config"):
            m.config._attn_implementation = impl
    ids = torch.randint(0, 256, (1, 128))
    with torch.inference_mode():
        model(ids)  # warm-up outside the trace
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                    schedule=torch.profiler.schedule(wait=0, warmup=1, active=STEPS + 1)) as prof:
            past = None
            x = ids
            prof.step()  # leave the warm-up step of the schedule
            for _ in range(STEPS):
                o = model(x, past_key_values=past, use_cache=True)
                past = o.past_key_values
                x = o.logits[:, -1:].argmax(-1)
                prof.step()
    with tempfile.TemporaryDirectory() as d:
        raw = Path(d) / "t.json"
        prof.export_chrome_trace(str(raw))
        out.write_bytes(gzip.compress(raw.read_bytes(), compresslevel=9, mtime=0))


if __name__ == "__main__":
    torch.set_num_threads(1)
    run("eager", HERE / "eager.json.gz")
    run("sdpa", HERE / "sdpa.json.gz")
    for f in ("eager.json.gz", "sdpa.json.gz"):
        print(f, (HERE / f).stat().st_size, "bytes")
