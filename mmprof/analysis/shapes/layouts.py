"""Per-rank shapes of a model in an engine's own layout: the weights and GEMM problems (M x N x K) of every layer
on every rank after TP and EP, for the engines of `mmprof/rules/layouts.toml` (vLLM CUDA / ROCm, SGLang,
transformers, the reference runtime).

The layouts are data (what each engine's model code builds, with the file it comes from); this module is the
arithmetic, the same for every engine: `layout_shapes(spec, layout, tp, ep, ...)` returns a `ShapesResult` like
the runtime's meta-device build (`mmprof.runtime.analytic`), so the same renderer, findings (SH001-SH004, SH007)
and trace comparison (SH006) apply. Pure arithmetic on a `ModelSpec`; the runtime's own row is checked against
its meta-device build by a test, so the arithmetic and the runtime cannot drift apart.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from mmprof.errors import BadInput
from mmprof.fileio import read_toml
from mmprof.modelspec import ModelSpec
from mmprof.shapes_model import SHAPE_DTYPES, AttentionShape, Gemm, LayerKindShapes, RankShapes, ShapesResult, Workload
from mmprof.units import dtype_bytes

LAYOUTS_FILE = Path(__file__).resolve().parent.parent.parent / "rules" / "layouts.toml"
_KEYS = ("qkv", "index_proj", "mla_q_a", "mla_absorbed", "mlp", "tp_replicates", "experts", "experts_ep", "shared",
         "shared_under_ep", "block_reuse", "vocab_pad")


@dataclass(frozen=True)
class Layout:
    id: str
    engine: str
    platform: str
    description: str
    source: str
    values: dict[str, Any]
    switches: dict[str, dict[str, Any]]
    family: dict[str, dict[str, Any]]
    names: dict[str, str]

    def get(self, key: str, family: str) -> Any:
        return self.family.get(family, {}).get(key, self.values.get(key))

    def name(self, part: str, family: str) -> str:
        return self.names.get(f"{part}_{family}", self.names.get(part, part))

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "engine": self.engine, "platform": self.platform, "description": self.description,
                "source": self.source, **self.values, "switches": self.switches, "family": self.family}


@lru_cache(maxsize=1)
def load_layouts() -> dict[str, Layout]:
    """layout id -> Layout, in file order."""
    doc = read_toml(LAYOUTS_FILE, "engine layouts")
    names = doc.get("names", {})
    out = {}
    for raw in doc.get("layout", []):
        missing = [k for k in _KEYS if k not in raw]
        if missing:
            raise BadInput(f"{LAYOUTS_FILE}: layout {raw.get('id')} lacks {', '.join(missing)}")
        out[raw["id"]] = Layout(id=raw["id"], engine=raw["engine"], platform=raw["platform"],
                                description=raw.get("description", ""), source=raw.get("source", ""),
                                values={k: raw[k] for k in _KEYS}, switches=dict(raw.get("switches", {})),
                                family=dict(raw.get("family", {})), names=dict(names.get(raw["engine"], {})))
    return out


def resolve(name: str, platform: str | None = None) -> Layout:
    """A layout by id (`vllm-rocm`) or by engine (`vllm`: the layout of that engine on `platform`, else CUDA).
    An unknown name is bad input naming the nearest ids."""
    lay = load_layouts()
    key = name.strip().lower()
    if key in lay:
        return lay[key]
    by_engine = [x for x in lay.values() if x.engine == key]
    if by_engine:
        for plat in (platform, "cuda", "any"):
            hit = next((x for x in by_engine if x.platform == plat), None)
            if hit is not None:
                return hit
        return by_engine[0]
    near = difflib.get_close_matches(key, list(lay) + sorted({x.engine for x in lay.values()}), n=3, cutoff=0.4)
    raise BadInput(f"--engine {name[:40]!r} is not an engine layout ({'nearest: ' + ', '.join(near) if near else ''}"
                   f"{'; ' if near else ''}layouts: {', '.join(lay)})")


def parse_switches(layout: Layout, given: tuple[str, ...] | list[str]) -> dict[str, str]:
    """`KEY=VALUE` options of a layout's switches (defaults filled in); an unknown key or value is bad input."""
    out = {k: str(v["default"]) for k, v in layout.switches.items()}
    for item in given:
        key, sep, val = item.partition("=")
        key, val = key.strip(), val.strip()
        if not sep or key not in layout.switches:
            known = ", ".join(layout.switches) or "none"
            raise BadInput(f"--layout {item[:60]!r}: {layout.id} has no switch {key[:40]!r} (its switches: {known}; "
                           "write KEY=VALUE)")
        allowed = layout.switches[key]["values"]
        if allowed == "int":
            if not val.isdigit() or int(val) < 1:
                raise BadInput(f"--layout {key}={val[:20]}: an integer >= 1")
        elif val not in allowed:
            raise BadInput(f"--layout {key}={val[:20]}: one of {', '.join(allowed)}")
        out[key] = val
    return out


def _div(a: int, b: int, what: str) -> int:
    if b <= 0 or a % b:
        raise BadInput(f"{what} ({a}) does not split evenly over {b} ranks")
    return a // b


@dataclass
class _Layer:
    gemms: list[Gemm] = field(default_factory=list)
    weights: dict[str, list[int]] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, scope: str, m: float, n: int, k: int, weight: str, dtype: str, groups: int = 1,
            estimate: bool = False, extra_rows: int = 0, store: bool = True, weight_groups: int | None = None) -> None:
        """One GEMM problem; `groups` local experts (or heads of a bmm), `weight_groups` the stacked weight's slots
        (the local experts plus fused shared slots)."""
        wg = weight_groups or groups
        self.gemms.append(Gemm(name, scope, m, n, k, groups=groups, dtype=dtype, weight=weight, estimate=estimate,
                               extra_rows=extra_rows, weight_groups=wg))
        if store and weight not in self.weights:
            self.weights[weight] = [wg, n, k] if wg > 1 else [n, k]
            self.dtypes[weight] = dtype


@dataclass
class _Plan:
    """What one rank holds, from TP / EP and the layout's switches."""

    tp: int
    ep: int
    rank: int
    nh: int
    nkv: int
    kv_replicas: int
    n_local: int          # local routed experts
    expert_start: int
    inter_local: int      # routed intermediate per rank
    shared: str           # fused | separate | replicated | none
    shared_slots: int
    block_reuse: int
    vocab_padded: int
    qkv_n: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _plan(s: ModelSpec, lay: Layout, sw: dict[str, str], tp: int, ep: int, rank: int) -> _Plan:
    nh = _div(s.n_heads, tp, "attention heads")
    if s.n_kv_heads >= tp:
        nkv, rep = _div(s.n_kv_heads, tp, "KV heads"), 1
    else:
        rep = _div(tp, s.n_kv_heads, "TP size over KV heads")
        nkv = 1
    n_local, start, inter = s.n_experts, 0, s.moe_intermediate
    if s.n_experts:
        if ep > 1:
            base, rem = divmod(s.n_experts, ep)
            n_local = base + (1 if rank < rem else 0)
            start = rank * base + min(rank, rem)
        else:
            inter = _div(s.moe_intermediate, tp, "expert intermediate size")
    shared = lay.get("shared", s.family)
    if "shared_expert" in sw:
        shared = sw["shared_expert"]
    if sw.get("fused_shared") == "on" or sw.get("shared_fusion") == "on":
        shared = "fused"
    elif sw.get("fused_shared") == "off" or sw.get("shared_fusion") == "off":
        shared = "separate"
    if shared == "fused" and ep > 1:
        shared = lay.get("shared_under_ep", s.family)
    if shared == "fused" and _shared_inter(s, lay) != s.moe_intermediate:
        shared = "separate"  # a slot has the routed experts' shape: a shared expert of another size cannot ride in it
    if not (s.n_experts and s.n_shared_experts):
        shared = "none"
    reuse = 1
    if lay.get("block_reuse", s.family) == "index_topk_freq":
        reuse = int(sw.get("index_topk_freq", sw.get("block_reuse", "1")))
    pad = int(lay.get("vocab_pad", s.family) or 0)
    padded = -(-s.vocab_size // pad) * pad if pad else s.vocab_size
    return _Plan(tp, ep, rank, nh, nkv, rep, n_local, start, inter, shared,
                 s.n_shared_experts if shared == "fused" else 0, reuse, padded)


def _shared_inter(s: ModelSpec, lay: Layout) -> int:
    """The shared MLP's intermediate size (all shared experts together) in this engine."""
    per = s.moe_intermediate if lay.get("shared_intermediate", s.family) == "routed" else s.shared_intermediate
    return per * max(1, s.n_shared_experts)


def _attention(s: ModelSpec, lay: Layout, pl: _Plan, sparse: bool, t: int, dt: str, L: _Layer) -> AttentionShape:
    H, fam, tp = s.hidden_size, s.family, pl.tp
    attn = lay.name("attn", fam)
    if s.attention == "mla":
        qk = s.qk_nope_head_dim + s.qk_rope_head_dim
        if s.q_lora_rank:
            if lay.get("mla_q_a", fam) == "fused":
                L.add("attn.qkv.fused_qkv_a", "attn.qkv", t, s.q_lora_rank + s.kv_lora_rank + s.qk_rope_head_dim, H,
                      f"{attn}.fused_qkv_a_proj.weight", dt)
            else:
                L.add("attn.qkv.q_a", "attn.qkv", t, s.q_lora_rank, H, f"{attn}.q_a_proj.weight", dt)
                L.add("attn.qkv.kv_a", "attn.qkv", t, s.kv_lora_rank + s.qk_rope_head_dim, H,
                      f"{attn}.kv_a_proj_with_mqa.weight", dt)
            L.add("attn.qkv.q_b", "attn.qkv", t, pl.nh * qk, s.q_lora_rank, f"{attn}.q_b_proj.weight", dt)
        else:
            L.add("attn.qkv.q", "attn.qkv", t, pl.nh * qk, H, f"{attn}.q_proj.weight", dt)
            L.add("attn.qkv.kv_a", "attn.qkv", t, s.kv_lora_rank + s.qk_rope_head_dim, H,
                  f"{attn}.kv_a_proj_with_mqa.weight", dt)
        L.add("attn.qkv.kv_b", "attn.qkv", t, pl.nh * (s.qk_nope_head_dim + s.v_head_dim), s.kv_lora_rank,
              f"{attn}.kv_b_proj.weight", dt)
        if lay.get("mla_absorbed", fam):  # decode: q_nope @ W_UK^T and o @ W_UV, one bmm over the local heads each
            L.add("attn.core.w_uk", "attn.core", 1, s.kv_lora_rank, s.qk_nope_head_dim, f"{attn}.kv_b_proj.weight",
                  dt, groups=pl.nh, store=False)
            L.add("attn.core.w_uv", "attn.core", 1, s.v_head_dim, s.kv_lora_rank, f"{attn}.kv_b_proj.weight", dt,
                  groups=pl.nh, store=False)
        if sparse and s.indexer == "dsa":  # replicated: vLLM ReplicatedLinear / disable_tp, transformers whole
            L.add("attn.indexer.wq_b", "attn.indexer", t, s.index_n_heads * s.index_head_dim, s.q_lora_rank or H,
                  f"{attn}.indexer.wq_b.weight", dt)
            if lay.get("qkv", fam) == "fused":  # vLLM deepseek_v2.py: wk and weights_proj in one GEMM
                L.add("attn.indexer.wk_weights", "attn.indexer", t, s.index_head_dim + s.index_n_heads, H,
                      f"{attn}.indexer.wk_weights_proj.weight", dt)
            else:
                L.add("attn.indexer.wk", "attn.indexer", t, s.index_head_dim, H, f"{attn}.indexer.wk.weight", dt)
                L.add("attn.indexer.weights_proj", "attn.indexer", t, s.index_n_heads, H,
                      f"{attn}.indexer.weights_proj.weight", dt)
        L.add("attn.o_proj", "attn.o_proj", t, H, pl.nh * s.v_head_dim, f"{attn}.o_proj.weight", dt)
        pl.qkv_n = pl.nh * qk
        return AttentionShape(q_heads=pl.nh, kv_heads=1, kv_replicas=1, head_dim=qk, v_head_dim=s.v_head_dim,
                              sparse=sparse and s.indexer == "dsa", index_q_heads=s.index_n_heads if sparse else 0,
                              index_k_heads=1 if sparse and s.indexer == "dsa" else 0,
                              index_head_dim=s.index_head_dim if sparse else 0)
    hd = s.head_dim
    q, kv = pl.nh * hd, pl.nkv * hd
    pl.qkv_n = q + 2 * kv
    m3 = sparse and s.indexer == "m3"
    iq_heads = 0
    if m3:
        # index_q has the KV heads' head count and shards like them (replicated when TP > KV heads); one index-k
        # head on every rank (vLLM MinimaxM3QKVParallelLinearWithIndexer; SGLang num_idx_heads; the runtime)
        iq_heads = max(1, s.index_n_heads // tp) if s.index_n_heads >= tp else 1
        if "indexer" in lay.get("tp_replicates", fam):
            iq_heads = s.index_n_heads
    if lay.get("qkv", fam) == "fused":
        n = q + 2 * kv + ((iq_heads + 1) * s.index_head_dim if m3 and lay.get("index_proj", fam) == "in_qkv" else 0)
        L.add("attn.qkv", "attn.qkv", t, n, s.hidden_size, f"{attn}.qkv_proj.weight", dt)
    else:
        L.add("attn.qkv.q", "attn.qkv", t, q, s.hidden_size, f"{attn}.q_proj.weight", dt)
        L.add("attn.qkv.k", "attn.qkv", t, kv, s.hidden_size, f"{attn}.k_proj.weight", dt)
        L.add("attn.qkv.v", "attn.qkv", t, kv, s.hidden_size, f"{attn}.v_proj.weight", dt)
    if m3 and (lay.get("index_proj", fam) == "separate" or lay.get("qkv", fam) != "fused"):
        L.add("attn.indexer.index_q", "attn.indexer", t, iq_heads * s.index_head_dim, s.hidden_size,
              f"{attn}.index_q_proj.weight", dt)
        L.add("attn.indexer.index_k", "attn.indexer", t, s.index_head_dim, s.hidden_size,
              f"{attn}.index_k_proj.weight", dt)
    L.add("attn.o_proj", "attn.o_proj", t, s.hidden_size, q, f"{attn}.o_proj.weight", dt)
    return AttentionShape(q_heads=pl.nh, kv_heads=pl.nkv, kv_replicas=pl.kv_replicas, head_dim=hd, sparse=m3,
                          index_q_heads=iq_heads, index_k_heads=1 if m3 else 0,
                          index_head_dim=s.index_head_dim if m3 else 0)


def _mlp(prefix: str, name: str, scope: str, inter: int, H: int, t: float, lay: Layout, fam: str, dt: str,
         L: _Layer) -> None:
    if lay.get("mlp", fam) == "merged":
        L.add(f"{name}.gate_up", scope, t, 2 * inter, H, f"{prefix}.gate_up_proj.weight", dt)
    else:
        L.add(f"{name}.gate", scope, t, inter, H, f"{prefix}.gate_proj.weight", dt)
        L.add(f"{name}.up", scope, t, inter, H, f"{prefix}.up_proj.weight", dt)
    L.add(f"{name}.down", scope, t, H, inter, f"{prefix}.down_proj.weight", dt)


def _moe(s: ModelSpec, lay: Layout, sw: dict[str, str], pl: _Plan, t: int, dt: str, L: _Layer) -> None:
    H, fam = s.hidden_size, s.family
    moe = lay.name("moe", fam)
    router_dt = "fp32" if fam == "minimax_m3" and lay.engine in ("vllm", "runtime") else dt  # GateLinear fp32
    L.add("moe.router", "moe.router", t, s.n_experts, H, f"{moe}.{lay.name('router', fam)}.weight", router_dt)
    slots = pl.n_local + pl.shared_slots
    per_expert = t * s.top_k / s.n_experts  # uniform routing: an estimate
    extra = t * pl.shared_slots
    ex = f"{moe}.{lay.name('experts', fam)}"
    loop = lay.get("experts", fam) == "loop" or sw.get("experts") == "eager"
    if loop:
        for nm, n, k in (("gate_up", 2 * pl.inter_local, H), ("down", H, pl.inter_local)):
            L.add(f"moe.routed.{nm}", "moe.routed", per_expert, n, k, f"{ex}.{nm}_proj", dt, groups=1, estimate=True,
                  store=False)
            L.weights[f"{ex}.{nm}_proj"] = [slots, n, k]
            L.dtypes[f"{ex}.{nm}_proj"] = dt
    else:
        L.add("moe.routed.gate_up", "moe.routed", per_expert, 2 * pl.inter_local, H, f"{ex}.w13_weight", dt,
              groups=pl.n_local, estimate=True, extra_rows=extra, weight_groups=slots)
        L.add("moe.routed.down", "moe.routed", per_expert, H, pl.inter_local, f"{ex}.w2_weight", dt,
              groups=pl.n_local, estimate=True, extra_rows=extra, weight_groups=slots)
    if pl.shared in ("separate", "replicated"):
        inter = _shared_inter(s, lay)
        whole = pl.shared == "replicated" or "shared" in lay.get("tp_replicates", fam)
        sh = f"{moe}.{lay.name('shared', fam)}"
        _mlp(sh, "moe.shared", "moe.shared", inter if whole else _div(inter, pl.tp, "shared expert intermediate"),
             H, t, lay, fam, dt, L)
        if s.shared_expert_gate:  # Qwen2-MoE: [1, hidden], replicated
            L.add("moe.shared.expert_gate", "moe.shared", t, 1, H, f"{moe}.shared_expert_gate.weight", dt)


def _kind_shapes(s: ModelSpec, lay: Layout, sw: dict[str, str], pl: _Plan, attn: str, mlp: str, layers: list[int],
                 wl: Workload, dtype: str) -> LayerKindShapes:
    t = wl.tokens
    L = _Layer()
    sparse = attn == "sparse"
    ash = _attention(s, lay, pl, sparse, t, dtype, L)
    if mlp == "moe":
        _moe(s, lay, sw, pl, t, dtype, L)
    else:
        whole = "mlp" in lay.get("tp_replicates", s.family)
        inter = s.dense_intermediate if whole else _div(s.dense_intermediate, pl.tp, "dense intermediate size")
        _mlp(lay.name("mlp", s.family), "mlp", "mlp", inter, s.hidden_size, t, lay, s.family, dtype, L)
    ash.context = wl.seq
    ash.attended = min(wl.seq, s.index_topk * s.index_block_size) if ash.sparse and s.indexer == "m3" else wl.seq
    eb = dtype_bytes(dtype) or 2
    wbytes = sum(_numel(v) * (dtype_bytes(L.dtypes[k]) or eb) for k, v in L.weights.items())
    if s.attention == "mla":
        kv_bytes = (s.kv_lora_rank + s.qk_rope_head_dim) * eb
    else:
        kv_bytes = 2 * pl.nkv * s.head_dim * eb
    idx = s.index_head_dim * eb if ash.sparse else 0
    return LayerKindShapes(kind=f"{attn}/{mlp}", layers=layers, weights=L.weights, weight_dtypes=L.dtypes,
                           gemms=L.gemms, attention=ash, weight_bytes=wbytes, kv_bytes_per_token=kv_bytes,
                           index_bytes_per_token=idx)


def _numel(shape: list[int]) -> int:
    n = 1
    for x in shape:
        n *= int(x)
    return n


def layout_shapes(spec: ModelSpec, layout: Layout, tp: int = 1, ep: int = 1, batch: int = 1, seq: int = 1024,
                  phase: str = "decode", dtype: str = "bf16", switches: dict[str, str] | None = None) -> ShapesResult:
    """Per-rank shapes of `spec` at TP `tp` (EP `ep`) in `layout`, for all ranks."""
    if phase not in ("prefill", "decode"):
        raise BadInput(f"phase must be prefill or decode, not {phase!r}")
    if dtype not in SHAPE_DTYPES:
        raise BadInput(f"dtype must be one of {', '.join(SHAPE_DTYPES)}, not {dtype!r}")
    if tp < 1 or ep < 1 or (ep > 1 and ep != tp):
        raise BadInput(f"--tp {tp} --ep {ep}: tp >= 1, and ep either 1 or equal to tp")
    if spec.n_experts and tp > spec.n_experts and ep == 1:
        raise BadInput(f"TP {tp} is greater than the number of experts {spec.n_experts} (vLLM and SGLang refuse it)")
    sw = dict(switches) if switches is not None else parse_switches(layout, ())
    wl = Workload(batch, seq, phase)
    kinds: dict[str, list[int]] = {}
    for i, (a, m) in enumerate(zip(spec.attn_types, spec.mlp_types)):
        kinds.setdefault(f"{a}/{m}", []).append(i)
    ranks = []
    eb = dtype_bytes(dtype) or 2
    for r in range(tp):
        pl = _plan(spec, layout, sw, tp, ep, r)
        ks = [_kind_shapes(spec, layout, sw, pl, *k.split("/"), layers=v, wl=wl, dtype=dtype) for k, v in kinds.items()]
        vocab = pl.vocab_padded // tp if pl.vocab_padded % tp == 0 else -(-pl.vocab_padded // tp)
        head = "lm_head.weight"
        model_w = {"embed_tokens.weight": [vocab, spec.hidden_size], head: [vocab, spec.hidden_size],
                   "norm.weight": [spec.hidden_size]}
        total = sum(k.weight_bytes * len(k.layers) for k in ks) + sum(_numel(v) * eb for v in model_w.values())
        ranks.append(RankShapes(rank=r, plan=pl.to_dict(), kinds=ks, model_weights=model_w,
                                model_gemms=[Gemm("lm_head", "lm_head", batch, vocab, spec.hidden_size, dtype=dtype,
                                                  weight=head)],
                                weight_bytes=total,
                                kv_bytes_per_token=sum(k.kv_bytes_per_token * len(k.layers) for k in ks),
                                index_bytes_per_token=sum(k.index_bytes_per_token * len(k.layers) for k in ks)))
    cfg = spec.to_dict()
    res = ShapesResult(model=spec.model_type or spec.family, tp=tp, ep=ep, dtype=dtype, workload=wl, ranks=ranks,
                       config=cfg, layout=layout.id)
    on = ", ".join(f"{k}={v}" for k, v in sw.items())
    res.notes.append(f"{layout.id} layout ({layout.description}){f'; switches {on}' if on else ''}; "
                     f"from {layout.source}")
    reuse = _plan(spec, layout, sw, tp, ep, 0).block_reuse
    sparse = spec.sparse_layers
    if reuse > 1 and sparse:
        computed = [lay for i, lay in enumerate(sparse) if i % reuse == 0]
        res.notes.append(f"block selection computed in sparse layers {', '.join(map(str, computed))} (1 in {reuse}), "
                         f"reused in the other {len(sparse) - len(computed)}")
    if any(g.estimate for k in ranks[0].kinds for g in k.gemms):
        res.notes.append("routed-expert M per expert assumes uniform routing (tokens*top_k/n_experts): an estimate")
    return res
