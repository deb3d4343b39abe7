"""The log rules on real vLLM 0.26 logs recorded on the H200 (benchmarks/h200/vllm_families.py), scored against a
truth that does not come from the log: summary.json (the engine args given and vLLM's resolved config, read from
the engine object after start-up), the model's config.json with vLLM's own fused-MoE config directory (is there a
tuned config for this E, N on an H200?), and the kernels in the trace (counted from the raw JSON here).

    python benchmarks/log_families.py FAMILIES_DIR --site VLLM_SITE [--configs DIR ...]

FAMILIES_DIR holds one folder per case with log.txt, summary.json and trace.pt.trace.json.gz. One JSON line per
case (items right / wrong / missed), then one per split (the tune and held sets of the recording's README: never
tune the rules on `held`). An item is one statement the truth makes (the compilation mode is X, the MoE runs a
default config for E=..,N=.., the attention kernels are FlashAttention's, ...); a fact of the rules that
contradicts it is wrong, no fact about it is missed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mmprof.analysis.logs.facts import log_facts  # noqa: E402
from mmprof.importers.logs import log_profile, read_log_file  # noqa: E402

HELD = ("dsv3_", "glm45_", "mixtral_", "qwen3moe_piecewise_b1", "qwen3moe_triton_attn_b8")
COMPILE_MODES = {"0": "NONE", "1": "STOCK_TORCH_COMPILE", "2": "DYNAMO_TRACE_ONCE", "3": "VLLM_COMPILE"}
# attention kernels by name (independent of the rules' [[backend]] entries: written from the kernels' own names)
ATTN_KERNELS = [("FLASH_ATTN", re.compile(r"flash_fwd|FlashAttnFwd|flash::")),
                ("TRITON_ATTN", re.compile(r"kernel_unified_attention")),
                ("FLASHMLA", re.compile(r"flash_mla|FlashMLA", re.I)),
                ("FLASHINFER", re.compile(r"flashinfer|BatchPrefillWithPagedKVCache|BatchDecode", re.I)),
                ("TRITON_MLA", re.compile(r"_fwd_grouped_kernel_stage1|_decode_grouped_att")),
                ("M3_SPARSE", re.compile(r"_gqa_sparse|sparse_attn|indexer", re.I))]


def split_of(case: str) -> str:
    return "held" if case.startswith(HELD) else "tune"


def kernel_names(trace: Path) -> dict[str, int]:
    with gzip.open(trace, "rt") as f:
        doc = json.load(f)
    out: dict[str, int] = {}
    for e in doc.get("traceEvents", []):
        if e.get("cat") == "kernel" and e.get("ph") == "X":
            out[e["name"]] = out.get(e["name"], 0) + 1
    return out


def model_config(case_dir: Path, model: str, dirs: list[Path]) -> dict | None:
    name = Path(model).name
    for d in dirs:
        p = d / name / "config.json"
        if p.is_file():
            return json.loads(p.read_text())
    return None


def moe_shape(cfg: dict, tp: int) -> tuple[int, int] | None:
    cfg = {**cfg, **(cfg.get("text_config") or {})}  # MiniMax M3 nests the language model's config
    e = cfg.get("num_experts") or cfg.get("n_routed_experts") or cfg.get("num_local_experts")
    n = cfg.get("moe_intermediate_size") or (cfg.get("intermediate_size") if cfg.get("num_local_experts") else None)
    return (int(e), int(n) // tp) if e and n else None


def truth(case_dir: Path, site: Path, cfg_dirs: list[Path]) -> dict[tuple[str, str], str | None]:
    """(kind, subject) -> the value the truth says (None: the truth says no such fact may appear)."""
    s = json.loads((case_dir / "summary.json").read_text())
    ea, res = s["engine_args"], s["resolved"]
    t: dict[tuple[str, str], str | None] = {
        ("setting", "engine"): s["vllm_version"],
        ("setting", "dtype"): ea["dtype"],
        ("setting", "parallel.tp"): str(ea.get("tensor_parallel_size", 1)),
        ("mode", "eager"): str(res["enforce_eager"]),
        ("mode", "compile"): COMPILE_MODES[str(res["compilation_mode"])],
        ("mode", "cudagraph"): res["cudagraph_mode"],
        ("mode", "cudagraph.sizes"): ", ".join(str(x) for x in res["cudagraph_capture_sizes"]),
    }
    if res["cudagraph_mode"] == "NONE":
        t[("capture", "cudagraph")] = None
    else:
        t[("capture", "cudagraph")] = "*"
    names = kernel_names(case_dir / "trace.pt.trace.json.gz")
    att = {b: sum(n for k, n in names.items() if rx.search(k)) for b, rx in ATTN_KERNELS}
    forced = (ea.get("attention_config") or {}).get("backend")
    ran = [b for b, n in att.items() if n]
    if forced:
        t[("backend", "attention")] = forced
    elif len(ran) == 1 and ran[0] != "M3_SPARSE":
        t[("backend", "attention")] = ran[0]
    cfg = model_config(case_dir, ea["model"], cfg_dirs)
    if cfg and cfg.get("kv_lora_rank") and not forced and ran == ["FLASH_ATTN"]:
        # MLA (DeepSeek's latent attention): vLLM's MLA backend on FlashAttention's kernels, its prefill on them too
        # (v1/attention/backends/mla/: FLASH_ATTN_MLA; prefill/selector.py)
        t[("backend", "attention")] = "FLASH_ATTN_MLA"
        t[("backend", "attention.prefill")] = "FLASH_ATTN"
    fused = sum(n for k, n in names.items() if k.startswith("fused_moe_kernel"))
    shape = moe_shape(cfg, int(ea.get("tensor_parallel_size", 1))) if cfg else None
    if fused and shape:
        e, n = shape
        f = site / "model_executor/layers/fused_moe/configs" / f"E={e},N={n},device_name=NVIDIA_H200.json"
        t[("default_config", "moe")] = None if f.exists() else f"E={e},N={n},device_name=NVIDIA_H200"
        t[("backend", "moe")] = "TRITON"
    elif not fused:
        t[("default_config", "moe")] = None
    return t


def facts_of(log: Path) -> dict[tuple[str, str], set[str]]:
    lines, src = read_log_file(log)
    out: dict[tuple[str, str], set[str]] = {}
    for g in log_facts(log_profile(lines, [src])).groups:
        out.setdefault((g.kind, g.subject), set()).add(g.value)
    return out


def score(case_dir: Path, site: Path, cfg_dirs: list[Path]) -> dict:
    t, got = truth(case_dir, site, cfg_dirs), facts_of(case_dir / "log.txt")
    right, wrong, missed = [], [], []
    for key, want in t.items():
        have = got.get(key, set())
        name = f"{key[0]} {key[1]}"
        if want is None:
            (wrong if have else right).append(f"{name}: none expected, got {sorted(have)}" if have else name)
        elif not have:
            missed.append(f"{name}: {want}")
        elif want == "*" or have == {want}:
            right.append(name)
        else:
            wrong.append(f"{name}: want {want}, got {sorted(have)}")
    return {"case": case_dir.name, "split": split_of(case_dir.name), "items": len(t), "right": len(right),
            "wrong": wrong, "missed": missed}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("families")
    ap.add_argument("--site", default=os.environ.get("MMPROF_VLLM_SITE"), required="MMPROF_VLLM_SITE" not in os.environ,
                    help="vLLM 0.26's package directory, for its fused_moe/configs (default: $MMPROF_VLLM_SITE)")
    ap.add_argument("--configs", nargs="*", default=[str(ROOT / "benchmarks/h200/vllm_configs")],
                    help="folders holding each case's model folder (config.json)")
    a = ap.parse_args()
    cases = sorted(p for p in Path(a.families).iterdir() if (p / "summary.json").is_file() and (p / "log.txt").is_file())
    rows = [score(c, Path(a.site), [Path(d) for d in a.configs]) for c in cases]
    for r in rows:
        print(json.dumps(r))
    for split in ("tune", "held"):
        rs = [r for r in rows if r["split"] == split]
        n = sum(r["items"] for r in rs)
        w = sum(len(r["wrong"]) for r in rs)
        m = sum(len(r["missed"]) for r in rs)
        print(json.dumps({"bench": "log_families", "split": split, "cases": len(rs), "items": n,
                          "right": sum(r["right"] for r in rs), "wrong": w, "missed": m}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
