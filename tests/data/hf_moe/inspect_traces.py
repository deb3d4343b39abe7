"""Print the evidence the README quotes for each trace here (standard library only).

Per trace: the ProfilerStep ranges; per step the counts of the ops that decide the verdicts (aten::_grouped_mm,
aten::linear, aten::mm outside _grouped_mm, aten::topk, collectives). For with_stack traces also: the
`nn.Module: Class_N` events nested by their `Python parent id` into a module tree, one decoder layer of it
printed, and per nn.Module instance of the first forward the number of aten::linear / aten::topk /
aten::_grouped_mm / aten::bmm ops inside it (time containment on the main thread); per step, the ops inside each
*Experts_N and *Indexer_N instance.

Run:  python tests/data/hf_moe/inspect_traces.py [FILE.json.gz ...]
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLL = re.compile(r"gloo:|c10d::|_c10d_functional::|record_param_comms")
WATCH = ("aten::_grouped_mm", "aten::linear", "aten::topk", "aten::bmm")


def load(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def within(e: dict, outer: dict) -> bool:
    return outer["ts"] <= e["ts"] and e["ts"] + e.get("dur", 0) <= outer["ts"] + outer["dur"] + 1e-3


def step_counts(ev: list[dict]) -> None:
    steps = sorted((e for e in ev if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    grouped = [e for e in ev if e["name"] == "aten::_grouped_mm"]
    for s in steps:
        inside = [e for e in ev if e.get("cat") == "cpu_op" and within(e, s)]
        c = Counter(e["name"] for e in inside)
        mm_out = sum(1 for e in inside if e["name"] == "aten::mm" and not any(within(e, g) for g in grouped))
        coll = Counter(e["name"] for e in inside if COLL.match(e["name"]))
        tok = next((e["args"]["Input Dims"][1] for e in inside if e["name"] == "aten::embedding"), None)
        print(f"  {s['name']:15s} ids {tok}  " + "  ".join(f"{k.split('::')[1]}={c[k]}" for k in WATCH)
              + f"  mm(outside grouped)={mm_out}" + (f"  {dict(coll)}" if coll else ""))
        if s is steps[0]:
            w = Counter(tuple(map(tuple, e["args"]["Input Dims"][:2])) for e in inside if e["name"] == "aten::linear")
            print("    linear (input, weight) dims in this step:", "  ".join(f"{a}x{b}:{n}" for (a, b), n in w.items()))


def per_step_modules(ev: list[dict]) -> None:
    """Per step: aten::linear + aten::_grouped_mm inside each *Experts_N instance, aten::topk inside *Indexer_N."""
    mods = [e for e in ev if e.get("cat") == "python_function" and re.search(r"(Experts|Indexer)_\d+$", e["name"])]
    if not mods:
        return
    ops = [e for e in ev if e["name"] in ("aten::linear", "aten::_grouped_mm", "aten::topk")]
    for s in sorted((e for e in ev if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"]):
        cells = []
        for m in sorted((m for m in mods if within(m, s)), key=lambda e: e["ts"]):
            want = ("aten::topk",) if "Indexer" in m["name"] else ("aten::linear", "aten::_grouped_mm")
            cells.append(f"{m['name'][11:]}={sum(1 for o in ops if o['name'] in want and within(o, m))}")
        print(f"  {s['name']:15s} linear+grouped_mm per Experts / topk per Indexer: " + " ".join(cells))


def module_tree(ev: list[dict]) -> None:
    py = {e["args"]["Python id"]: e for e in ev if e.get("cat") == "python_function"}
    mods = [e for e in py.values() if e["name"].startswith("nn.Module: ")]
    if not mods:
        return
    first = min((e for e in ev if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    mods = [m for m in mods if within(m, first)]

    def mod_parent(e):
        p = e["args"].get("Python parent id")
        while p is not None and p in py:
            if py[p]["name"].startswith("nn.Module: "):
                return p
            p = py[p]["args"].get("Python parent id")
        return None

    kids: dict = {}
    for m in mods:
        kids.setdefault(mod_parent(m), []).append(m)
    for v in kids.values():
        v.sort(key=lambda e: e["ts"])
    ops = [e for e in ev if e.get("cat") == "cpu_op" and within(e, first)]
    print(f"  nn.Module names ({len({m['name'] for m in mods})} per forward):",
          " ".join(sorted({re.sub(r'_\d+$', '_N', m['name'][11:]) for m in mods})))

    def show(m, depth):
        own = Counter(o["name"] for o in ops if within(o, m) and o["name"] in WATCH)
        extra = " ".join(f"{k.split('::')[1]}={v}" for k, v in sorted(own.items()))
        print("    " + "  " * depth + m["name"][11:] + (f"   [{extra}]" if extra else ""))
        for k in kids.get(m["args"]["Python id"], []):
            show(k, depth + 1)

    layers = [m for m in mods if re.search(r"DecoderLayer_\d+$", m["name"])]
    moe = [lay for lay in layers if any(re.search(r"Experts_\d+$", d["name"]) for d in walk(lay, kids))]
    pick = moe[0] if moe else (layers[0] if layers else None)
    if pick is not None:
        print("  first forward, first MoE decoder layer:")
        show(pick, 0)


def walk(m, kids):
    for k in kids.get(m["args"]["Python id"], []):
        yield k
        yield from walk(k, kids)


def main(paths: list[Path]) -> None:
    for p in paths:
        d = load(p)
        ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
        print(f"{p.name}  ({p.stat().st_size} bytes gz, {len(ev)} X events, with_stack={d.get('with_stack')}"
              f", distributedInfo={d.get('distributedInfo', {}).get('rank', '-')})")
        step_counts(ev)
        per_step_modules(ev)
        module_tree(ev)
        print()


if __name__ == "__main__":
    main([Path(a) for a in sys.argv[1:]] or sorted(HERE.glob("*.json.gz")))
