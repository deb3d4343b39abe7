"""The order of a pre-norm decoder layer's parts, and the kernels placed by it.

Every decoder layer of the model families mmprof reads (vLLM's and transformers' `*DecoderLayer.forward`: Llama,
Qwen2/3(-MoE), Mixtral, DeepSeek V2/V3 (MLA), GLM-4.5, gpt-oss, MiniMax M3) runs its parts in one order on the
main stream:

    input norm (0), qkv projection (1), q/k norm + RoPE (2), indexer (3), attention (4), o_proj (5),
    post-attention norm (6), router (7), experts / shared expert / dense MLP (8)

`ORDER` holds that order (a norm is the input or the post-attention norm), `place` the layer a part sits in between
two placed kernels. `mmprof.analysis.attribution.inductor` uses it for Inductor kernels (their op names give the
part); `fill` here for every other kernel no annotation, module, engine op or graph-replay alignment placed, with
the parts its *family* can be (rules/roles.toml `[[family]]`: a GEMM is a projection, the router, an expert or
the dense MLP; an attention kernel is the attention; ...). Between two placed kernels on one stream of one step:

- the candidates are the (layer, part) pairs of the kernel's family that the order allows between them; it is
  placed when exactly one is left (label source `order`), never by a choice between two;
- a dense MLP only in a layer whose other kernels say it is dense, a MoE part only in a layer with MoE kernels;
- nothing is placed between two kernels of one region (another part can run inside it: M3 runs its shared expert
  between the router GEMM and the router's top-k when the side stream is off);
- facts of the decoder layer's code decide where the order alone cannot: the first norm after layer k's attention
  is its post-attention norm and the first norm after that, before layer k+1's attention, layer k+1's input norm
  (no norm runs in o_proj, an MLP or a MoE block; a compiled layer's Inductor norms, known by the op names in
  their kernel names, are norms here); the first GEMM after the input
  norm is the QKV projection (every attention starts with its input projection), the last GEMM before the
  post-attention norm is o_proj (GEMMs between the attention kernel and it run inside the attention: MLA's
  W_UV up-projection), and the first GEMM after the post-attention norm is the router when the router's top-k
  follows with nothing placed between.

Placed kernels are anchors for the next pass. A kernel it cannot place stays unattributed (never guessed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mmprof.labels import region_name, roles

# the order of a pre-norm decoder layer's parts; a norm is the input (0) or the post-attention (6) norm
ORDER: dict[str, tuple[int, ...]] = {
    "norm": (0, 6), "attn.qkv": (1,), "attn.norm_rope": (2,), "attn.indexer": (3,), "attn.core": (4,),
    "attn.o_proj": (5,), "moe.router": (7,), "moe": (8,), "moe.shared": (8,), "moe.routed": (8,), "mlp": (8,),
    "mlp.act": (8,)}
MODEL_ROLES = ("embed", "final_norm", "lm_head", "sampler", "rope", "engine")
SOURCE = "order"
_PASSES = 8
_MOE = ("moe.router", "moe.routed", "moe.shared", "moe")
_MOE_FAMILIES = ("moe", "grouped_gemm", "topk")
_REDUCE = ("splitKreduce", "reduce_1Block", "splitk_reduce", "SplitKReduce")  # a split-K GEMM's second kernel


def place(role: str, prev: tuple[int, int] | None, nxt: tuple[int, int] | None) -> int | None:
    """Layer of a layer-level role between anchors prev / next ((layer, ord)); -2: the final norm; None."""
    ords = ORDER.get(role)
    if ords is None:
        return None
    after = prev is not None and any(o >= prev[1] for o in ords)
    before = nxt is not None and any(o <= nxt[1] for o in ords)
    if prev is not None and nxt is not None:
        if prev[0] == nxt[0]:
            return prev[0] if after and before else None
        if nxt[0] != prev[0] + 1 or after == before:
            return None
        return prev[0] if after else nxt[0]
    if prev is not None:
        return prev[0] if after else (-2 if role == "norm" else None)
    if nxt is not None:
        return nxt[0] if before else None
    return None


def anchor_ord(roles_: list[str], as_prev: bool) -> int:
    """The ord an anchor with these roles stands for (a norm could be either norm: the permissive end, which
    gives more ties and so fewer placements, never a guess)."""
    ords = [o for r in roles_ for o in ORDER.get(r, ())]
    if not ords:
        return 8 if as_prev else 0
    return min(ords) if as_prev else max(ords)


@dataclass
class OrderStats:
    kernels: int = 0
    ns: int = 0
    by_role: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kernels": self.kernels, "ns": self.ns, "by_role": dict(self.by_role)}


def fill(profile: Any, reg: Any, family: np.ndarray, eligible: np.ndarray, stats: OrderStats | None = None,
         streams: np.ndarray | None = None, hints: np.ndarray | None = None) -> OrderStats:
    """Place kernels (rows of the kernels table where `eligible`) that `reg` leaves unplaced, by the layer-part
    order between placed kernels of one (rank, step, stream) in device start order (see the module docstring).
    `family` is each kernel's family; `streams`, when given, limits the placement to those (rank, stream) keys
    (the main streams: a side stream runs the shared expert only, not a layer's program); `hints`, when given,
    the part an engine op names for a kernel whose layer nothing gave (`_moe_C::topk_softmax` is the router's:
    rules/roles.toml [[op]]): then that part is its only candidate. Writes into `reg`."""
    st = stats or OrderStats()
    n = profile.n("kernels")
    fam_roles = roles().families
    if not n or not fam_roles:
        return st
    K = profile.tables["kernels"]
    fam = np.asarray(family, dtype=object)
    hint = np.full(n, None, dtype=object) if hints is None else np.asarray(hints, dtype=object)
    has_roles = pd.Series(fam).isin(list(fam_roles)).to_numpy() | pd.Series(hint).isin(list(ORDER)).to_numpy()
    may = eligible & np.asarray(reg.region == None)  # noqa: E711
    if streams is not None:
        ok = np.zeros(n, bool)
        for r, s in streams:
            ok |= (K["rank"] == r) & (K["stream"] == s)
        may &= ok
    cand = may & has_roles
    if not cand.any():
        return st
    step = K["step"].astype(np.int64)
    grp = np.where(step >= 0, step, np.where(K["graph"] >= 0, -2 - K["graph"], -1))
    # the (rank, step, stream) groups that hold a kernel to place, each in device order: one sort
    gkey = pd.factorize(pd.MultiIndex.from_arrays([K["rank"], grp, K["stream"]]))[0]
    live = np.isin(gkey, np.unique(gkey[cand]))
    rows = np.flatnonzero(live)
    rows = rows[np.lexsort((rows, K["start_ns"][rows], gkey[rows]))]
    cuts = np.flatnonzero(np.diff(gkey[rows])) + 1
    names = K["name"]
    for part in np.split(rows, cuts):
        _fill_group(profile, reg, part, fam, fam_roles, names, K["dur_ns"], st, hint, may)
    return st


def main_streams(profile: Any, rows_mask: np.ndarray) -> np.ndarray:
    """(rank, stream) of each rank's main stream: the one most of its kernels in `rows_mask` ran on."""
    K = profile.tables["kernels"]
    out = []
    for r in np.unique(K["rank"][rows_mask]).tolist():
        st = K["stream"][rows_mask & (K["rank"] == r)]
        u, c = np.unique(st, return_counts=True)
        out.append((r, int(u[np.argmax(c)])))
    return np.array(out, np.int64).reshape(-1, 2)


def _is_reduce(profile: Any, code: int) -> bool:
    s = profile.string(int(code)) or ""
    return any(r in s for r in _REDUCE)


def _fill_group(profile, reg, rows, fam, fam_roles, names, dur, st: OrderStats, hint: np.ndarray,
                may: np.ndarray) -> None:
    """One (rank, step, stream): passes over the runs of unplaced kernels between anchors."""
    for _ in range(_PASSES):
        region = reg.region[rows]
        placed = np.asarray(region != None)  # noqa: E711
        layer = reg.layer[rows]
        role = reg.role[rows]
        model = placed & (layer < 0)
        anchor = placed & (layer >= 0)
        kinds = _kinds(anchor, layer, role, fam[rows])  # the layers whose kernels say what their MLP is
        nord = _norm_ords(anchor, layer, role)
        new = 0
        pos = np.flatnonzero(placed)
        gap = np.flatnonzero(np.diff(pos) >= 2)  # runs of unplaced kernels between two placed ones
        pairs = list(zip(pos[gap].tolist(), pos[gap + 1].tolist()))
        tail = len(pos) and pos[-1] < len(rows) - 1 and not model[pos[-1]]
        if tail:  # after the last placed kernel, to the end of the step: the last layer's rest, the final norm
            pairs.append((int(pos[-1]), len(rows)))
        for a, b in pairs:
            if b == len(rows):
                for j, lay_j, r in _tail(rows, a, fam, hint, int(layer[a]),
                                         nord.get(a, anchor_ord(str(role[a]).split("+"), True))):
                    i = rows[j]
                    if not may[i]:
                        continue
                    reg.layer[i], reg.role[i], reg.region[i], reg.source[i] = lay_j, r, region_name(lay_j, r), SOURCE
                    st.kernels += 1
                    st.ns += int(dur[i])
                    st.by_role[r] = st.by_role.get(r, 0) + int(dur[i])
                    new += 1
                continue
            last = model[b] and role[b] == "final_norm" and not model[a]  # the final norm closes the last layer
            if model[a] or (model[b] and not last):
                continue
            if region[a] == region[b] and role[a] != "norm":
                continue  # another part can run inside one region: no order between its kernels (a layer's two
                #          norms share the region name `layers.k.norm`: between them runs its attention)
            pa = (int(layer[a]), nord.get(a, anchor_ord(str(role[a]).split("+"), True)))
            pb = (pa[0] + 1, 0) if last else (int(layer[b]), nord.get(b, anchor_ord(str(role[b]).split("+"), False)))
            if pb[0] not in (pa[0], pa[0] + 1):
                continue
            run = list(range(a + 1, b))
            got = _decide_run(profile, rows, run, pa, pb, fam, fam_roles, names, kinds, role[a], role[b], hint)
            if last:
                got = {j: v for j, v in got.items() if v[0] == pa[0]}
            for j, (lay, r) in got.items():
                i = rows[j]
                if not may[i]:
                    continue  # not this pass's to place (a replayed kernel, another stream's)
                reg.layer[i], reg.role[i], reg.region[i], reg.source[i] = lay, r, region_name(lay, r), SOURCE
                st.kernels += 1
                st.ns += int(dur[i])
                st.by_role[r] = st.by_role.get(r, 0) + int(dur[i])
                new += 1
        if not new:
            return


_ATTN = ("attn.qkv", "attn.norm_rope", "attn.indexer", "attn.core", "attn.o_proj")
_BETWEEN_QKV_ATTN = ("elementwise", "reduction", "rope", "norm")


def _tail(rows, a: int, fam, hint, lay: int, ord_a: int) -> list[tuple[int, int, str]]:
    """The decoder norms in the unplaced kernels after the step's last placed kernel `a` (of layer `lay`, part
    `ord_a`), where they hold no attention kernel (else another layer runs there): `*Model.forward` ends with the
    final norm after the last layer's MLP or MoE block, and no norm runs inside o_proj, an MLP or a MoE block; so
    after the layer's attention the first norm is its post-attention norm, and after that norm the last one is the
    final norm. [(index in `rows`, layer, role)]."""
    run = range(a + 1, len(rows))
    if ord_a < 4 or any(fam[rows[j]] in ("attention", "sparse_attention", "kv_cache") for j in run):
        return []
    norms = [j for j in run if fam[rows[j]] == "norm" or hint[rows[j]] == "norm"]
    out = []
    if ord_a < 6 and norms:
        out.append((norms.pop(0), lay, "norm"))
    if norms:
        out.append((norms[-1], -1, "final_norm"))
    return out


def _norm_ords(anchor: np.ndarray, layer: np.ndarray, role: np.ndarray) -> dict[int, int]:
    """Which norm each placed `norm` kernel is, where its layer's attention tells: the post-attention norm (6) when
    the nearest placed non-norm kernel before it is an attention part of its layer, the input norm (0) when the
    nearest one after it is."""
    pos = np.flatnonzero(anchor)
    if not len(pos):
        return {}
    r = role[pos].astype(str)
    lay = layer[pos]
    is_norm = r == "norm"
    att = np.isin(r, _ATTN)
    idx = np.arange(len(pos))
    prev = np.maximum.accumulate(np.where(~is_norm, idx, -1))   # the nearest non-norm anchor at or before
    nxt = np.where(~is_norm, idx, len(pos))
    nxt = np.minimum.accumulate(nxt[::-1])[::-1]                # the nearest non-norm anchor at or after
    out: dict[int, int] = {}
    for k in np.flatnonzero(is_norm).tolist():
        a, b = prev[k], nxt[k]
        before = a >= 0 and att[a] and lay[a] == lay[k]
        after = b < len(pos) and att[b] and lay[b] == lay[k]
        if before != after:
            out[int(pos[k])] = 6 if before else 0
    return out


def _kinds(anchor: np.ndarray, layer: np.ndarray, role: np.ndarray, fam: np.ndarray) -> dict[int, set[str]]:
    """Per layer: the parts its placed kernels are (and `router-gemm` where the router's GEMM is placed)."""
    pos = np.flatnonzero(anchor)
    out: dict[int, set[str]] = {}
    if not len(pos):
        return out
    r = role[pos].astype(str)
    lay = layer[pos].astype(np.int64)
    codes, uniq = pd.factorize(r)
    pairs = np.unique(np.stack([lay, codes], axis=1), axis=0)
    for la, c in pairs.tolist():
        out.setdefault(la, set()).update(str(uniq[c]).split("+"))
    rg = np.unique(lay[(r == "moe.router") & (fam[pos] == "gemm")])
    for la in rg.tolist():
        out.setdefault(la, set()).add("router-gemm")
    return out


def _gemm_groups(profile, rows, run, fam, names) -> list[list[int]]:
    """The GEMMs of a run, each with its split-K reduce kernel (cuBLAS: a GEMM and `splitKreduce_kernel`, a GEMV and
    `reduce_1Block_kernel`), in order."""
    out: list[list[int]] = []
    for j in run:
        if fam[rows[j]] != "gemm":
            continue
        if out and _is_reduce(profile, names[rows[j]]) and out[-1][-1] == j - 1:
            out[-1].append(j)
        else:
            out.append([j])
    return out


def _decide_run(profile, rows, run, pa, pb, fam, fam_roles, names, kinds, role_a, role_b, hint) -> dict[int, tuple]:
    """(layer, role) for the kernels of one run between anchors pa and pb that the order fixes."""
    got: dict[int, tuple[int, str]] = {}
    gemms = [g for g in _gemm_groups(profile, rows, run, fam, names) if hint[rows[g[0]]] is None]
    ra, rb = set(str(role_a).split("+")), set(str(role_b).split("+"))
    lay = pa[0]
    k = kinds.get(lay, set())
    if gemms and pb[0] == lay:
        # the three facts of the decoder layer's code (module docstring); `a` is a norm of `lay` followed, in the
        # same layer, by attention parts (its input norm) or by MoE parts (its post-attention norm)
        if "norm" in ra and 1 <= pb[1] <= 5 and "attn.qkv" not in rb and "attn.qkv" not in k:
            for j in gemms[0]:
                got[j] = (lay, "attn.qkv")
        elif ra & {"attn.core", "attn.indexer"} and "norm" in rb and "attn.o_proj" not in k:
            for j in gemms[-1]:
                got[j] = (lay, "attn.o_proj")
            for g in gemms[:-1]:
                for j in g:
                    got[j] = (lay, "attn.core")
        elif "norm" in ra and rb and rb <= set(_MOE) and "router-gemm" not in k:
            for j in gemms[0]:
                got[j] = (lay, "moe.router")
    # the decoder norms between two layers' attentions: nothing norm-like runs between an attention's output and
    # its layer's post-attention norm (o_proj is a GEMM), nor in an MLP or MoE block; so the first norm after layer
    # k's attention is its post-attention norm, and the first after that norm, before layer k+1's attention, is
    # layer k+1's input norm (the q/k norms and MLA's kv_a_layernorm come after that layer's first GEMM)
    nxt_attn = pb[0] == lay + 1 and 1 <= pb[1] <= 5
    first_norm = next((j for j in run if fam[rows[j]] == "norm" or hint[rows[j]] == "norm"), None)
    if first_norm is not None and first_norm not in got and nxt_attn:
        if ra & set(_ATTN) and "norm" not in ra:
            got[first_norm] = (lay, "norm")
        elif "norm" in ra and pa[1] == 6:
            got[first_norm] = (lay + 1, "norm")
    # a dense layer: between its post-attention norm and the next layer's input norm only its MLP runs (the
    # gate/up GEMM, the activation, the down GEMM); dense where no MoE kernel ran in the layer: no MoE part is
    # placed in it and the run holds no MoE-family kernel (a top-k, a grouped GEMM, vLLM's MoE kernels)
    if pa[1] == 6 and pb[0] == lay + 1 and pb[1] <= 5 and not (k & set(_MOE)) and "norm" in ra \
            and (rb & {"norm", "final_norm"} or first_norm is not None) and not any(fam[rows[j]] in _MOE_FAMILIES or hint[rows[j]] in _MOE for j in run):
        for j in run:
            if fam[rows[j]] == "norm" or hint[rows[j]] == "norm":
                break  # the next layer's input norm: its attention follows
            got.setdefault(j, (lay, "mlp"))
    # between a layer's QKV projection and its attention kernel the attention's forward runs only its input
    # projections, the split of their output and the rotary embedding (and the q/k norms; MLA: q_proj or
    # q_a_proj + q_a_layernorm + q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm; deepseek_v2.py
    # DeepseekV2MLAAttention / vllm/model_executor/layers/mla.py, the absorbed W_UK inside the attention op): the
    # GEMMs there are its QKV projection, the element-wise kernels (Inductor fuses the split into the RoPE:
    # `triton_poi_fused_3`; the norms: `triton_per_fused_2`) its norm_rope
    if pb[0] == lay and "attn.qkv" in ra and rb & {"attn.core", "attn.norm_rope"}:
        for g in gemms:
            for j in g:
                got.setdefault(j, (lay, "attn.qkv"))
        for j in run:
            if fam[rows[j]] in _BETWEEN_QKV_ATTN and hint[rows[j]] is None:
                got.setdefault(j, (lay, "attn.norm_rope"))
    if "norm" in ra and pa[1] == 0 and pb[0] == lay and 1 <= pb[1] <= 5:
        for j in run:  # after the input norm, before the attention: a norm inside the attention (q/k norm, MLA's
            if fam[rows[j]] == "norm":  # kv_a_layernorm), not a decoder norm
                got.setdefault(j, (lay, "attn.norm_rope"))
    for j in run:
        if j in got:
            continue
        opts = set()
        h = hint[rows[j]]
        for r in ((h,) if h in ORDER else fam_roles.get(fam[rows[j]], ())):
            at = place(r, pa, pb)
            if at is None or at < 0:
                continue
            ka = kinds.get(at, set())
            if r == "mlp" and (ka & set(_MOE) or "mlp" not in ka):
                continue  # a dense MLP only where the layer's other kernels say it is dense
            if r in _MOE and not (ka & set(_MOE)):
                continue  # a MoE part only in a layer with MoE kernels
            opts.add((at, r))
        if len(opts) == 1:
            got[j] = opts.pop()
    return got
