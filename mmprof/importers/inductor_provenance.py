"""Inductor's kernel provenance files -> data on the Profile (`meta["inductor_provenance"]`).

What torch writes (read in torch 2.13's source, the CPU venv; torch 2.11's output was not seen here):
- `inductor_provenance_tracking_node_mappings.json` in the debug dir (`TORCH_COMPILE_DEBUG=1` and
  `INDUCTOR_PROVENANCE=1`, i.e. `torch._inductor.config.trace.provenance_tracking_level = 1`;
  torch/_inductor/debug.py:dump_inductor_provenance_info): `cppCodeToPost` maps `kernel_name:handle` (one handle
  per kernel call Inductor generated, numbered in codegen order) to the post-grad FX node names it fused
  (`mul_12`, `rsqrt`, `embedding`); `postToPre` / `preToPost` map those to the pre-grad (Dynamo) nodes.
- the `inductor_provenance_tracking_kernel_stack_traces` artifact (torch/_inductor/compile_fx.py, logged to the
  structured trace that tlparse reads, `TORCH_TRACE=DIR`): `kernel_name:handle` -> the model source stack traces
  of the nodes it fused (`File "model.py", line 87, in forward` / the code / `^^^^` under the call).
- earlier torch's `inductor_triton_kernel_to_post_grad_nodes.json` (its tests of that time): `kernel_name` ->
  post-grad node names, no handles.

`load(paths)` accepts any of these files, a debug dir holding them, or a TORCH_TRACE log, and returns the data
the analysis uses (analysis/attribution/inductor.py): per kernel name, per handle, the fused op names (post-grad node names
without their `_N` suffix) and per stack trace the calls it made, outermost first (`layer`, `self.self_attn`,
`self.qkv_proj`). `attach(profile, data)` stores it on the Profile.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mmprof.errors import BadInput
from mmprof.fileio import read_bytes, regular_file

KEY = "inductor_provenance"
_MAPPINGS = ("inductor_provenance_tracking_node_mappings", "inductor_triton_kernel_to_post_grad_nodes")
_STACKS = "inductor_provenance_tracking_kernel_stack_traces"
_FRAME = re.compile(r'^\s*File "([^"]*)", line (\d+), in (\S+)\s*$')
_CALL = re.compile(r"\s*((?:self\.)?[A-Za-z_][\w.]*)(?:\[(\d+)\])?\s*\(")
_NODE_N = re.compile(r"_\d+$")
_MAX_NAMES = 200_000


def _kernel_key(key: str) -> tuple[str, int]:
    name, _, handle = key.rpartition(":")
    if name and handle.isdigit():
        return name, int(handle)
    return key, -1


def stack_calls(trace: str) -> list[str]:
    """The calls of one stack trace, outermost first: per frame the callee of the highlighted (`^^^`) expression,
    `self.x` for a module attribute (`self.layers[3]` keeps its index), a bare name for a local (`layer`), '' when
    the frame calls nothing by name. Frames in torch's own files (nn.Linear.forward) are skipped."""
    lines = trace.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _FRAME.match(lines[i])
        if not m:
            i += 1
            continue
        code = lines[i + 1] if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]) else ""
        carets = lines[i + 2] if code and i + 2 < len(lines) and set(lines[i + 2].strip()) <= {"^", "~"} \
            and lines[i + 2].strip() else ""
        i += 1 + bool(code) + bool(carets)
        if "/torch/" in m.group(1).replace("\\", "/"):
            continue
        hl = code
        if carets:
            a = len(carets) - len(carets.lstrip())
            hl = code[a:len(carets.rstrip())]
        c = _CALL.match(hl)
        out.append(f"{c.group(1)}[{c.group(2)}]" if c and c.group(2) else (c.group(1) if c else ""))
    return out


def _add_mappings(out: dict[tuple, dict], doc: dict, where: str, graph: str) -> None:
    table = doc.get("cppCodeToPost", doc) if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        raise BadInput(f"{where}: not an Inductor node-mapping file (no cppCodeToPost object)")
    for key, nodes in table.items():
        if key in ("version", "preToPost", "postToPre", "postToCppCode"):
            continue
        if not isinstance(key, str) or not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
            raise BadInput(f"{where}: kernel {str(key)[:60]!r} does not map to a list of node names")
        name, handle = _kernel_key(key)
        ops = sorted({_NODE_N.sub("", n) for n in nodes})
        out.setdefault((graph, name, handle), {})["ops"] = ops


def _add_stacks(out: dict[tuple, dict], doc: Any, where: str, graph: str) -> None:
    if not isinstance(doc, dict):
        raise BadInput(f"{where}: not an Inductor kernel stack-trace file (not a JSON object)")
    for key, traces in doc.items():
        if not isinstance(key, str) or not isinstance(traces, list) or not all(isinstance(t, str) for t in traces):
            raise BadInput(f"{where}: kernel {str(key)[:60]!r} does not map to a list of stack traces")
        name, handle = _kernel_key(key)
        calls = [stack_calls(t) for t in traces]
        out.setdefault((graph, name, handle), {})["calls"] = [c for c in calls if c]


def _is_stacks(doc: Any) -> bool:
    vals = list(doc.values())[:20] if isinstance(doc, dict) else []
    return bool(vals) and all(isinstance(v, list) for v in vals) and any(
        isinstance(t, str) and 'File "' in t for v in vals for t in v)


def _read_json(p: Path) -> Any:
    try:
        return json.loads(read_bytes(p, json_document=True).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise BadInput(f"{p}: not valid JSON ({str(e)[:80]})") from None
    except RecursionError:
        raise BadInput(f"{p}: not valid JSON (nested too deep)") from None


_COMPILE = re.compile(r'"frame_id": (\d+), "frame_compile_id": (\d+)(?:, "attempt": (\d+))?')


def _read_log(p: Path, out: dict[tuple, dict]) -> int:
    """A TORCH_TRACE structured log: each artifact line is followed by its tab-indented payload line; the
    artifact's frame / compile id names the compiled graph (Inductor numbers kernel handles per graph)."""
    text = read_bytes(p, json_document=True).decode("utf-8", "replace")
    found = 0
    prev = None  # lines are taken one at a time: a log of millions of empty lines is never a list of them
    for i, nxt in enumerate(_lines(text), -1):
        line, prev = prev, nxt
        if line is None:
            continue
        kind = next((k for k in (*_MAPPINGS, _STACKS) if f'"name": "{k}"' in line), None)
        if kind is None or not nxt.startswith("\t"):
            continue
        try:
            doc = json.loads(nxt[1:])
        except ValueError:
            raise BadInput(f"{p}:{i + 2}: the {kind} artifact is not valid JSON") from None
        m = _COMPILE.search(line)
        graph = f"{p.name}:{'/'.join(g or '0' for g in m.groups())}" if m else f"{p.name}:{i}"
        (_add_stacks if kind == _STACKS else _add_mappings)(out, doc, f"{p}:{i + 2}", graph)
        found += 1
    return found


def _lines(text: str):
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        yield text[start:end].rstrip("\r")
        start = end + 1


def _wanted(f: Path) -> bool:
    # the debug dir's files, tlparse's numbered copies (`..._node_mappings_15.json`), TORCH_TRACE logs
    return f.suffix == ".log" or (f.suffix == ".json" and (f.stem.startswith(_MAPPINGS) or "stack_trace" in f.stem))


def _read_one(p: Path, out: dict[tuple, dict], in_dir: bool = False) -> None:
    if p.is_dir():
        files = [f for f in sorted(p.rglob("*")) if f.is_file() and _wanted(f)]
        n = len(out)
        for f in files:
            _read_one(f, out, in_dir=True)
        if len(out) == n:
            raise BadInput(f"{p}: no Inductor provenance files in this directory "
                           "(inductor_provenance_tracking_node_mappings.json, a TORCH_TRACE log)")
        return
    if not p.exists():
        raise BadInput(f"{p}: no such provenance file")
    regular_file(p)  # a FIFO or a device: refused before it is read, naming what it is
    if p.suffix == ".log":
        if not _read_log(p, out) and not in_dir:
            raise BadInput(f"{p}: no Inductor provenance artifacts in this log (compile with INDUCTOR_PROVENANCE=1)")
        return
    doc = _read_json(p)
    graph = str(p.parent)  # one compiled graph's files sit in one folder (debug dir, tlparse's per-compile dir)
    if _is_stacks(doc):
        _add_stacks(out, doc, str(p), graph)
    else:
        _add_mappings(out, doc, str(p), graph)


def load(paths: list[str | Path]) -> dict[str, Any]:
    """Provenance data from Inductor's files (see the module docstring); one-line BadInput on a bad file.
    `kernels`: kernel name -> one entry per (compiled graph, handle), in handle order within a graph."""
    out: dict[tuple, dict] = {}
    for p in paths:
        _read_one(Path(p), out)
    if not out:
        raise BadInput(f"{', '.join(map(str, paths))}: holds no Inductor kernel provenance")
    if len(out) > _MAX_NAMES:
        raise BadInput(f"{len(out)} kernel calls in the provenance files: more than {_MAX_NAMES}")
    kernels: dict[str, list[dict]] = {}
    for (graph, name, handle), v in sorted(out.items()):
        kernels.setdefault(name, []).append(dict(graph=graph, handle=handle, **v))
    return {"version": 1, "files": [str(p) for p in paths], "kernels": kernels}


def attach(profile: Any, data: dict[str, Any]) -> None:
    """Store provenance data on a Profile (merged with any it holds: the later file wins per kernel name)."""
    old = profile.meta.get(KEY) or {}
    kernels = dict(old.get("kernels", {}))
    kernels.update(data.get("kernels", {}))
    profile.meta[KEY] = {"version": 1, "files": list(old.get("files", [])) + list(data.get("files", [])),
                         "kernels": kernels}
