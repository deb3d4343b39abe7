"""Which engine (and platform) wrote a trace: the reference runtime, vLLM, SGLang, TensorRT-LLM or transformers,
on CUDA, ROCm or the CPU. `mmprof shapes --profile` compares a trace with that engine's layout
(`mmprof.analysis.shapes.layouts`), and the checks word their hints in its terms. The evidence is data
(`[detect]` and `[platform]` in rules/layouts.toml); the first that holds wins, and the guess says which it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from mmprof.analysis.shapes.layouts import LAYOUTS_FILE
from mmprof.fileio import read_toml
from mmprof.labels import engine_step


@dataclass(frozen=True)
class EngineGuess:
    engine: str     # runtime | vllm | sglang | trtllm | transformers | unknown
    platform: str   # cuda | rocm | cpu | unknown
    evidence: str   # what said so

    def to_dict(self) -> dict:
        return {"engine": self.engine, "platform": self.platform, "evidence": self.evidence}


@lru_cache(maxsize=1)
def _rules() -> tuple[dict, dict]:
    doc = read_toml(LAYOUTS_FILE, "engine layouts")
    return doc.get("detect", {}), doc.get("platform", {})


def _platform(profile) -> tuple[str, str]:
    for r in profile.meta.get("ranks") or []:
        for d in (r.get("devices") or []) if isinstance(r, dict) else []:
            vendor = str(d.get("vendor") or "").lower() if isinstance(d, dict) else ""
            if vendor in ("nvidia", "amd"):
                return ("cuda" if vendor == "nvidia" else "rocm"), f"device {d.get('name') or vendor}"
    if not profile.n("kernels"):
        return ("cpu", "no GPU kernels") if profile.n("ops") else ("unknown", "")
    names = {str(n) for n in profile.col("kernels", "name", decode=True)[:20000] if n}
    _, plat = _rules()
    for p in ("rocm", "cuda"):
        hit = next((k for k in plat.get(p, []) if any(k in n for n in names)), None)
        if hit:
            return p, f"kernel names ({hit})"
    return "unknown", ""


def engine_of(profile) -> EngineGuess:
    """The engine and platform of a profile, with the evidence (module docstring)."""
    plat, pev = _platform(profile)
    src = (profile.meta.get("source") or {}).get("format")
    if profile.n("dispatch") or profile.meta.get("run") or src == "mmprof-run":
        return EngineGuess("runtime", plat, "the runtime's dispatch log / run metadata" + (f"; {pev}" if pev else ""))
    scope_names = [str(n) for n in profile.col("scopes", "name", decode=True)] if profile.n("scopes") else []
    for n in scope_names[:200000]:
        es = engine_step(n)
        if es is not None:
            return EngineGuess(es.engine, plat, f"engine step annotations ({n[:40]})" + (f"; {pev}" if pev else ""))
    op_names = {str(n) for n in profile.col("ops", "name", decode=True)} if profile.n("ops") else set()
    labels = set(scope_names)
    detect, _ = _rules()
    for eng, rule in detect.items():
        sc = next((s for s in rule.get("scopes", []) if any(n.startswith(s) for n in labels)), None)
        if sc:
            return EngineGuess(eng, plat, f"scope labels {sc}*" + (f"; {pev}" if pev else ""))
        op = next((p for p in rule.get("ops", []) if any(n.startswith(p) for n in op_names)), None)
        if op:
            return EngineGuess(eng, plat, f"custom ops {op}*" + (f"; {pev}" if pev else ""))
        mod = next((m for m in rule.get("modules", []) if any(m in n for n in labels)), None)
        if mod:
            return EngineGuess(eng, plat, f"module classes ({mod})" + (f"; {pev}" if pev else ""))
    return EngineGuess("unknown", plat, pev)
