"""Model structure: which layer and region each event of a profile belongs to, and how mmprof knows.

Sources, best evidence first (each region records its source, see `mmprof.labels.SOURCES`):

1. **annotation** - explicit labels around the event's launch: mmprof's scope labels, module paths in
   record_function / NVTX / roctx ranges, `mmprof record`'s module ranges; else the launching op's labels.
2. **module** - `nn.Module: Class_N` events of `with_stack` traces (imported into the scopes table with
   source `module`, and into scope paths like any range). Per rank they form a module tree; the decoder-layer
   instances in order of first appearance give the layer index, and the class names (through the kinds and
   contexts of rules/roles.toml) plus the nesting give the role: an MLP inside a MoE block beside routed
   experts is the shared expert; the last linear an attention module calls is its o_proj.
3. **shape** - op shapes matched against a model config (`mmprof.analysis.shapes.shape_match`), passed in by the
   caller as a per-op region table.

`regions(profile, table, rows)` returns arrays aligned with `rows`: layer, role, region, source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mmprof.labels import SEP, Region, module_event, parse_path, region_name, roles

NONE = -1
# a module with a child of one of these kinds is a MoE block whatever its class name (gpt-oss: `MLPBlock`)
_MOE_CHILD = ("experts", "router", "fused_moe", "shared_experts")
_NOT_MOE = ("causal_lm", "model", "decoder_layer")  # kinds that hold MoE blocks, never are one
_MODEL_ROLES = ("embed", "lm_head", "final_norm", "sampler", "rope")
_KEEP = ("moe.routed", "moe.shared", "attn.indexer", "lm_head", "embed", "sampler")
_OVERRIDES_KEEP = ("moe.routed", "moe.shared", "moe.router", "attn.indexer")   # roles a nested module still takes


@dataclass
class ModuleInfo:
    """One nn.Module instance seen in a rank's module events."""

    name: str                  # `nn.Module: Linear_12`
    cls: str
    kind: str | None
    parent: str | None         # the enclosing module's name
    children: set[str] = field(default_factory=set)
    first_ns: int = 0


@dataclass
class ModuleTree:
    """The module instances of one rank and what the tree says about them."""

    modules: dict[str, ModuleInfo]
    layer_of: dict[str, int]         # decoder-layer module name -> layer index
    moe_blocks: set[str]             # modules acting as MoE blocks (by name or by their children)
    o_proj: set[str]                 # linears called last in their attention module
    routed_mlps: set[str]            # MLPs inside a MoE block with no experts module (a per-expert loop)

    def kind(self, name: str) -> str | None:
        if name in self.moe_blocks:
            return "moe_block"
        info = self.modules.get(name)
        return info.kind if info else None


def module_trees(profile: Any) -> dict[int, ModuleTree]:
    """rank -> ModuleTree from the scopes table rows with source `module` (empty when there are none)."""
    S = profile.tables["scopes"]
    n = profile.n("scopes")
    if not n:
        return {}
    src = S["source"]
    mod_id = profile.strings.index("module") if "module" in profile.strings else None
    if mod_id is None:
        return {}
    rows = np.flatnonzero(src == mod_id)
    if not len(rows):
        return {}
    rules = roles()
    names = S["name"]
    parent = S["parent"]
    is_mod = np.zeros(n, dtype=bool)
    is_mod[rows] = True
    trees: dict[int, ModuleTree] = {}
    order = rows[np.argsort(S["start_ns"][rows], kind="stable")]
    # calls of each module: (rank, name) -> list of (start, end, row); children per call for o_proj
    by_rank: dict[int, dict[str, ModuleInfo]] = {}
    linear_calls: dict[tuple[int, int], list[tuple[int, str]]] = {}  # (rank, attention row) -> [(start, name)]
    for i in order.tolist():
        r = int(S["rank"][i])
        name = profile.string(int(names[i])) or ""
        me = module_event(name)
        if me is None:
            continue
        mods = by_rank.setdefault(r, {})
        p = int(parent[i])
        hops = 0
        while p >= 0 and not is_mod[p] and hops < 256:
            p, hops = int(parent[p]), hops + 1
        pname = profile.string(int(names[p])) if p >= 0 and is_mod[p] else None
        info = mods.get(name)
        if info is None:
            info = mods[name] = ModuleInfo(name, me[0], rules.kind(me[0]), pname, first_ns=int(S["start_ns"][i]))
        if pname is not None:
            info.parent = info.parent or pname
            pm = mods.get(pname)
            if pm is not None:
                pm.children.add(name)
            if info.kind == "linear" and pm is not None and pm.kind == "attention":
                linear_calls.setdefault((r, p), []).append((int(S["start_ns"][i]), name))
    for r, mods in by_rank.items():
        layers = sorted((m for m in mods.values() if m.kind == "decoder_layer"), key=lambda m: m.first_ns)
        layer_of = {m.name: k for k, m in enumerate(layers)}
        # (never the model itself: with compiled decoder layers - no module events inside them - vLLM's
        # SharedExperts is a direct child of `Qwen2MoeForCausalLM`, which is no MoE block)
        moe = {m.name for m in mods.values()
               if m.kind == "moe_block" or (m.kind not in ("fused_moe", "experts", "shared_experts", *_NOT_MOE)
                                            and any(mods[c].kind in _MOE_CHILD for c in m.children if c in mods))}
        o_proj = {max(calls)[1] for (rr, _), calls in linear_calls.items() if rr == r and len(calls) > 1}
        routed = set()
        for b in moe:
            kids = [mods[c] for c in mods[b].children if c in mods] if b in mods else []
            if not any(k.kind in ("experts", "fused_moe") for k in kids):
                routed |= {k.name for k in kids if k.kind == "mlp"}
        trees[r] = ModuleTree(mods, layer_of, moe, o_proj, routed)
    return trees


def _module_region(tree: ModuleTree, chain: list[str]) -> Region | None:
    """Region of an event whose enclosing module instances are `chain` (outermost first)."""
    rules = roles()
    layer = -1
    role: str | None = None
    parent_kind: str | None = None
    for name in chain:
        kind = tree.kind(name)
        if name in tree.layer_of:
            layer = tree.layer_of[name]
        if kind is None:
            continue
        if name in tree.o_proj:
            r = "attn.o_proj"
        elif kind == "linear" and parent_kind == "attention":
            r = "attn.qkv"
        elif name in tree.routed_mlps:
            r = "moe.routed"
        else:
            r = rules.context_role(kind, parent_kind)
        # a module inside experts / the shared expert / the indexer keeps that role (their linears, norms); the
        # router vLLM's fused-MoE runner calls inside itself (rules/roles.toml) is the router
        if r is not None and not (role in _KEEP and r not in _OVERRIDES_KEEP):
            role = r
        parent_kind = kind
    if role is None:
        return None
    if layer < 0 and role in ("layer", "norm"):
        return None if role == "layer" else Region(-1, "final_norm", "final_norm", "module")
    return Region(layer, role, region_name(layer, role), "module")


@dataclass
class Regions:
    """Per event (aligned with the rows asked for): layer, role, region name and the source of the label."""

    layer: np.ndarray
    role: np.ndarray      # object: str or None
    region: np.ndarray    # object: str or None
    source: np.ndarray    # object: annotation | module | shape | None

    @classmethod
    def empty(cls, n: int) -> "Regions":
        return cls(np.full(n, -1, dtype=np.int64), np.full(n, None, dtype=object), np.full(n, None, dtype=object),
                   np.full(n, None, dtype=object))

    def fill(self, mask: np.ndarray, other: "Regions") -> None:
        """Take `other`'s labels where `mask` is set and this has none (evidence order: keep the better one)."""
        m = mask & (self.region == None) & (other.region != None)  # noqa: E711
        self.layer[m], self.role[m], self.region[m], self.source[m] = (other.layer[m], other.role[m],
                                                                        other.region[m], other.source[m])


class StructureIndex:
    """Caches the region of each distinct (rank, scope path) of one profile."""

    def __init__(self, profile: Any) -> None:
        self.profile = profile
        self.trees = module_trees(profile)
        self._cache: dict[tuple[int, int], Region | None] = {}
        self._anchor: dict[int, tuple[int, str | None]] = {}
        self._op_role: dict[int, str | None] = {}
        self._order: dict[int, int] | None = None

    def of_path(self, rank: int, code: int) -> Region | None:
        key = (rank, code)
        if key in self._cache:
            return self._cache[key]
        s = self.profile.string(code) if code >= 0 else None
        r = None
        if s:
            r = parse_path(s)
            if r is None and rank in self.trees and "nn.Module: " in s:
                chain = [p for p in s.split(SEP) if module_event(p) is not None]
                r = _module_region(self.trees[rank], chain)
        self._cache[key] = r
        return r

    def anchor_of(self, op: int) -> tuple[int, str | None]:
        """The innermost op at or above CPU op `op` that the role rules name a region anchor ([[op]] in
        rules/roles.toml), and its role; (-1, None) when none."""
        hit = self._anchor.get(op)
        if hit is not None:
            return hit
        ops = self.profile.tables["ops"]
        rules = roles()
        chain, o, found = [], op, (-1, None)
        while o >= 0 and len(chain) < 256:
            if o in self._anchor:
                found = self._anchor[o]
                break
            chain.append(o)
            code = int(ops["name"][o])
            role = self._op_role.get(code, "")
            if role == "":
                role = self._op_role[code] = rules.op_role(self.profile.string(code) or "") if rules.ops else None
            if role is not None:
                found = (o, role)
                break
            o = int(ops["parent"][o]) if "parent" in ops else -1
        for c in chain:
            self._anchor[c] = found
        return found

    def order_layer(self, anchor: int) -> int:
        """The layer of anchor op row `anchor` by its place among the step's attention ops (-1 unknown).

        For traces where the decoder layers run compiled (vLLM's default torch.compile mode: no module events
        inside them) but the engine's custom ops are recorded: within one engine step on one thread, every layer
        calls each of its attention ops (`attn.core` / `attn.norm_rope` anchors) once, so the k-th occurrence
        of the first of them opens layer k, and an anchor op between occurrence k and k+1 ran in layer k. Only
        used when every such attention op name occurs equally often in the step and no anchor op occurs twice
        between two clock ops (a model whose layers call different attention ops, such as M3's full and sparse
        layers, is left alone); layers count from 0 on the
        rank, so a pipeline stage other than the first is off by its first layer (docs/vllm.md)."""
        if self._order is None:
            # only with the module tree (with_stack): without it nothing tells a shared expert's GEMMs inside
            # `vllm::moe_forward_shared` from the routed experts, and a layer would let FP001 pass on no evidence
            self._order = _order_layers(self) if self.trees else {}
        ops = self.profile.tables["ops"]
        o, hops = anchor, 0
        while o >= 0 and hops < 256:  # a nested anchor (topk inside moe_forward) takes its outermost anchor's
            if o in self._order:
                return self._order[o]
            o, hops = (int(ops["parent"][o]) if "parent" in ops else -1), hops + 1
        return -1

    def regions_for_codes(self, ranks: np.ndarray, codes: np.ndarray) -> Regions:
        n = len(codes)
        if not n:
            return Regions.empty(n)
        key = ranks.astype(np.int64) * (len(self.profile.strings) + 2) + (codes.astype(np.int64) + 1)
        inv, uniq = pd.factorize(key)                  # hashed: the distinct keys are few, the events many
        first = np.empty(len(uniq), dtype=np.int64)
        first[inv[::-1]] = np.arange(n - 1, -1, -1)    # each key's first row (the last write wins)
        lay = np.full(len(uniq), -1, dtype=np.int64)
        rol = np.full(len(uniq), None, dtype=object)
        reg = np.full(len(uniq), None, dtype=object)
        src = np.full(len(uniq), None, dtype=object)
        for j, i in enumerate(first.tolist()):
            r = self.of_path(int(ranks[i]), int(codes[i]))
            if r is not None:
                lay[j], rol[j], reg[j], src[j] = r.layer, r.role, r.name, r.source
        inv = inv.reshape(-1)
        return Regions(lay[inv], rol[inv], reg[inv], src[inv])


def _path_codes(t: dict[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    codes = t["scope_path"][rows].astype(np.int64) if "scope_path" in t else np.full(len(rows), -1, np.int64)
    if "scope" in t:
        codes = np.where(codes >= 0, codes, t["scope"][rows])
    return codes


def regions(profile: Any, table: str, rows: np.ndarray | None = None, index: StructureIndex | None = None,
            shape_regions: Regions | None = None) -> Regions:
    """Layer, role, region and source of rows of `table` (kernels, memcpy or ops), best evidence first.

    `shape_regions`, when given, holds per-*op* regions from shape matching (aligned with the ops table); an
    event with no annotation or module label takes its op's."""
    t = profile.tables[table]
    rows = np.arange(profile.n(table)) if rows is None else np.asarray(rows, dtype=np.int64)
    idx = index or StructureIndex(profile)
    ranks = t["rank"][rows]
    out = idx.regions_for_codes(ranks, _path_codes(t, rows))
    # the launching op's labels for events whose own labels name no region
    op_ref = _op_of(profile, table, rows)
    # (and for events whose own label has no layer - a copy that records only its innermost scope - when the op's
    # labels give one)
    missing = ((out.region == None) | (out.layer < 0)) & (op_ref >= 0)  # noqa: E711
    if missing.any() and profile.n("ops"):
        ops = profile.tables["ops"]
        sub = idx.regions_for_codes(ops["rank"][op_ref[missing]], _path_codes(ops, op_ref[missing]))
        part = Regions.empty(len(rows))
        for a in ("layer", "role", "region", "source"):
            getattr(part, a)[missing] = getattr(sub, a)
        better = missing & (part.region != None) & ((out.region == None) | (part.layer >= 0))  # noqa: E711
        for a in ("layer", "role", "region", "source"):
            getattr(out, a)[better] = getattr(part, a)[better]
    _apply_op_anchors(profile, idx, t, rows, op_ref, out)
    if shape_regions is not None:
        has = op_ref >= 0
        part = Regions.empty(len(rows))
        j = op_ref[has]
        for a in ("layer", "role", "region", "source"):
            getattr(part, a)[has] = getattr(shape_regions, a)[j]
        out.fill(has, part)
    return out


def _op_of(profile: Any, table: str, rows: np.ndarray) -> np.ndarray:
    """The CPU op behind each row: the row itself for ops, else its `op` (or its launch's op)."""
    if table == "ops":
        return rows.copy()
    t = profile.tables[table]
    op = t["op"][rows].astype(np.int64) if "op" in t else np.full(len(rows), -1, np.int64)
    if "launch" in t and profile.n("launches"):
        lops = profile.tables["launches"]["op"]
        la = t["launch"][rows]
        via = np.where(la >= 0, lops[np.clip(la, 0, len(lops) - 1)], -1)
        op = np.where(op >= 0, op, via)
    return op


def _apply_op_anchors(profile: Any, idx: StructureIndex, t: dict[str, np.ndarray], rows: np.ndarray,
                      op_ref: np.ndarray, out: Regions) -> None:
    """Engine custom ops as region anchors (rules/roles.toml [[op]]): the kernels an anchor op launches take its
    role, in the layer the module tree gives, unless a module is nested inside the op (innermost wins: vLLM's
    SharedExperts inside `vllm::moe_forward_shared` stays moe.shared). Explicit annotations always win. With no
    layer from the module tree, a layer-level anchor names nothing (the kernel stays unattributed)."""
    if not profile.n("ops") or not roles().ops or not len(rows):
        return
    ops = profile.tables["ops"]
    src_ok = np.asarray((out.source == None) | (out.source == "module"), dtype=bool)  # noqa: E711
    cand = np.flatnonzero((op_ref >= 0) & src_ok)
    if not len(cand):
        return
    inv, uniq = pd.factorize(op_ref[cand])
    found = [idx.anchor_of(int(o)) for o in np.asarray(uniq).tolist()]  # one chain walk per distinct op
    role_u = np.array([f[1] for f in found], dtype=object)
    if (role_u == None).all():  # noqa: E711  (no anchor op above any event: nothing to do)
        return
    er = role_u[inv]            # the events whose anchor names a role other than their own
    live = np.flatnonzero((er != None) & (er != out.role[cand]))  # noqa: E711
    codes = _path_codes(t, rows)
    # the nesting test reads the op's own path: a graph-replayed kernel given an eager twin's op carries the
    # replay's launch context, not the modules the op ran inside
    ocodes = np.full(len(rows), -1, np.int64)
    has_op = op_ref >= 0
    if has_op.any():
        ocodes[has_op] = _path_codes(ops, op_ref[has_op])
    ranks = t["rank"][rows]
    memo: dict[tuple, int | None] = {}  # (anchor, the event's path, its layer, has a region) -> layer or None
    for j, u in zip(cand[live].tolist(), inv[live].tolist()):
        anchor, role = found[u]
        key = (anchor, int(codes[j]), int(out.layer[j]), out.region[j] is None, int(ranks[j]), int(ocodes[j]))
        if key not in memo:
            memo[key] = _anchor_layer(profile, idx, ops, anchor, role, key)
        layer = memo[key]
        if layer is None:
            if out.region[j] is not None and out.layer[j] < 0 and out.role[j] not in _MODEL_ROLES:
                # a module nested in the op names the role (SharedExperts in moe_forward_shared) but no layer
                # (compiled decoder layers): the layer is the op's place among the step's attention ops
                ol = idx.order_layer(anchor)
                if ol >= 0:
                    out.layer[j], out.region[j] = ol, region_name(ol, out.role[j])
            continue
        out.layer[j], out.role[j], out.region[j] = layer, role, region_name(layer, role)
        out.source[j] = out.source[j] or "op"


def _anchor_layer(profile: Any, idx: StructureIndex, ops: dict[str, np.ndarray], anchor: int, role: str,
                  key: tuple) -> int | None:
    """The layer an anchor op gives an event (key: anchor, event path code, event layer, event has no region,
    rank, the event's op's path code); None when the anchor does not apply."""
    _, code, layer, no_region, rank, ocode = key
    a_code = int(_path_codes(ops, np.array([anchor]))[0])
    a_path = profile.string(a_code) if a_code >= 0 else ""
    # the event's own path, and its op's (a graph-replayed kernel given an eager twin's op carries the replay's
    # launch context, not the modules that op ran inside)
    k_paths = [profile.string(c) or "" for c in (code, ocode) if c >= 0]
    if not no_region and a_path and any(k.startswith(a_path + SEP) for k in k_paths):
        return None  # a module nested inside the op: the module is innermost
    if no_region:
        base = idx.of_path(rank, a_code) if a_code >= 0 else None
        layer = base.layer if base is not None else -1
    if layer < 0 and role not in _MODEL_ROLES:
        layer = idx.order_layer(anchor)  # compiled layers: the op's place among the step's attention ops
    if layer < 0 and role not in _MODEL_ROLES:
        # no layer from any module: a layer-less `moe.routed` would let FP001 pass on a trace whose shared
        # expert GEMMs run inside `vllm::moe_forward_shared` with nothing to tell them apart: leave it unknown
        return None
    return layer


_CLOCK_ROLES = ("attn.core", "attn.norm_rope")


def _order_layers(idx: StructureIndex) -> dict[int, int]:
    """anchor op row -> layer by its place among the attention ops of its (rank, thread, step) (see
    StructureIndex.order_layer); only outermost anchors (an anchor inside another names nothing here)."""
    p = idx.profile
    n = p.n("ops")
    if not n or not roles().ops or "step" not in p.tables["ops"]:
        return {}
    ops = p.tables["ops"]
    rules = roles()
    role_of_code: dict[int, str | None] = {}
    rows, rols = [], []
    names = ops["name"]
    for i in range(n):
        c = int(names[i])
        if c not in role_of_code:
            role_of_code[c] = rules.op_role(p.string(c) or "")
        r = role_of_code[c]
        if r is None:
            continue
        par = int(ops["parent"][i]) if "parent" in ops else -1
        if par >= 0 and idx.anchor_of(par)[1] is not None:
            continue  # nested in another anchor
        rows.append(i)
        rols.append(r)
    if not rows:
        return {}
    rows_a = np.array(rows, dtype=np.int64)
    key = np.stack([ops["rank"][rows_a].astype(np.int64), ops["tid"][rows_a].astype(np.int64),
                    ops["step"][rows_a].astype(np.int64)], axis=1)
    out: dict[int, int] = {}
    groups: dict[tuple, list[int]] = {}
    for j, k in enumerate(map(tuple, key.tolist())):
        if k[2] >= 0:
            groups.setdefault(k, []).append(j)
    start = ops["start_ns"]
    for js in groups.values():
        js.sort(key=lambda j: (int(start[rows[j]]), rows[j]))
        clock = [j for j in js if rols[j] in _CLOCK_ROLES]
        if not clock:
            continue
        counts: dict[int, int] = {}
        for j in clock:
            counts[int(names[rows[j]])] = counts.get(int(names[rows[j]]), 0) + 1
        if len(set(counts.values())) != 1:
            continue  # layers that call different attention ops: no clock
        first = int(names[rows[clock[0]]])
        bounds = np.array([int(start[rows[j]]) for j in clock if int(names[rows[j]]) == first], dtype=np.int64)
        got: dict[int, int] = {}
        seen: set[tuple[int, int]] = set()
        for j in js:
            t = int(start[rows[j]])
            if t >= bounds[0]:
                k = int(np.searchsorted(bounds, t, side="right")) - 1
                key = (k, int(names[rows[j]]))
                if key in seen:  # an op twice in one "layer": some layers call no clock op (M3's sparse layers)
                    got = {}
                    break
                seen.add(key)
                got[rows[j]] = k
        out.update(got)
    return out
