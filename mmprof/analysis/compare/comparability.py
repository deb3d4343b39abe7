"""What `mmprof diff` says about the two sides before comparing them: tokens/s measured without the profiler
(`mmprof run`'s meta.run) and whether the two ran on the same set-up (vendor, device, tool, model).
Split from `mmprof.analysis.compare.diff`, which re-exports both functions."""

from __future__ import annotations

from typing import Any


def plain_timing_change(before, after) -> dict[str, Any] | None:
    """Tokens/s measured without the profiler, when both profiles carry them (`mmprof run` stores them in
    meta.run): the profile's own step times are stretched by the profiler, these are not."""
    def tps(p):
        run = (getattr(p, "meta", None) or {}).get("run") or {}
        return (run.get("tokens_per_s") or {}).get("plain"), run.get("dilation_by_phase") or {}
    (pb, db), (pa, da) = tps(before), tps(after)
    if not isinstance(pb, dict) or not isinstance(pa, dict):
        return None
    out: dict[str, Any] = {"before": pb, "after": pa, "change": {}}
    parts = []
    for ph in ("decode", "prefill"):
        if pb.get(ph) and pa.get(ph):
            ch = pa[ph] / pb[ph] - 1.0
            out["change"][ph] = ch
            parts.append(f"{ph} {pb[ph]:,.1f} -> {pa[ph]:,.1f} tok/s ({ch:+.0%})")
    if not parts:
        return None
    text = "without the profiler (mmprof run's plain timing): " + ", ".join(parts)
    fb, fa = (db.get("full") or {}).get("decode"), (da.get("full") or {}).get("decode")
    if fb and fa:
        text += f"; profiler dilation of decode {fb:.2f}x -> {fa:.2f}x"
        out["decode_dilation"] = {"before": fb, "after": fa}
    out["text"] = text
    return out


def run_setup(profile) -> dict[str, set[str]]:
    """Vendor, device, tool and model of a profile, as far as its metadata says (empty sets: unknown)."""
    meta = profile.meta if isinstance(profile.meta, dict) else {}
    devs = [d for r in meta.get("ranks") or [] if isinstance(r, dict)
            for d in (r.get("devices") or []) if isinstance(d, dict)]
    src = meta.get("source") if isinstance(meta.get("source"), dict) else {}
    model = meta.get("model") if isinstance(meta.get("model"), dict) else {}
    tool = src.get("tool") or src.get("format")
    return {"vendor": {d["vendor"] for d in devs if isinstance(d.get("vendor"), str)},
            "device": {d["name"] for d in devs if isinstance(d.get("name"), str)},
            "tool": {str(tool).split(",")[0].strip()} if tool else set(),
            "model": {str(model.get("name"))} if model.get("name") else set()}


def setup_mismatch(before, after) -> str | None:
    """One warning when the two sides ran on different vendors or devices, were recorded by different tools or ran
    different models: a diff across them compares set-ups, not a change."""
    sb, sa = run_setup(before), run_setup(after)
    diffs = [f"{k} {'/'.join(sorted(sb[k]))} vs {'/'.join(sorted(sa[k]))}" for k in ("vendor", "device", "tool", "model")
             if sb[k] and sa[k] and sb[k] != sa[k]]
    if not diffs:
        return None
    return ("the two sides differ in " + "; ".join(diffs) + ": differences below mix the set-up with the change, "
            "so no verdict is about the change alone")
