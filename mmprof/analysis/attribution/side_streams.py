"""Side-stream kernels of graph replays placed by the main stream they fork from and join.

vLLM runs the shared expert on a side stream (vllm/model_executor/layers/fused_moe/runner/shared_experts.py:
`maybe_sync_shared_experts_stream` makes the side stream wait for the main one inside the MoE layer, after the
post-attention norm; `_run_in_aux_stream` runs the shared expert there and makes the main stream wait for it before
the layer's output is combined; for steps of at most `VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD` tokens, 256 by
default, so decode replays use it and long prefills do not). A CUDA graph keeps those dependencies. So a
side-stream kernel starts after the fork kernel of its layer ended and ends before that layer's join: the main-stream
kernel that started last before it is a kernel of the same layer's MoE block. That gives the layer of every
side-stream kernel from the main stream's placed kernels, whatever the alignment of the side stream said (its
identical layers tie, and its pattern may be empty: a long prefill ran the shared expert on the main stream).

The part: the aligned one when the alignment paired the kernel; else the one role the rank's eager side-stream
kernels have, or, with no eager side stream, the shared expert where the rank's eager kernels show one
(`moe.shared`): the only work vLLM's shared-experts stream runs. Label source `replay-stream`. A kernel whose main
stream context is not placed, or not a MoE part, stays as it was (counted, never guessed).
"""

from __future__ import annotations

import numpy as np

from mmprof.labels import region_name

SOURCE = "replay-stream"
# the parts of a MoE layer the fork / join lie in (the post-attention norm forks, the MoE block's kernels run
# beside the side stream)
_FORK_ROLES = ("norm", "moe.router", "moe.routed", "moe.shared", "moe")


def _mode(a: np.ndarray) -> int:
    if not len(a):
        return -1
    u, c = np.unique(a, return_counts=True)
    return int(u[np.argmax(c)])


def side_roles(profile, reg, rank: int) -> tuple[str | None, bool]:
    """(the one role of the rank's eager side-stream kernels with a region or None, whether any eager kernel of
    the rank is in `moe.shared`)."""
    K = profile.tables["kernels"]
    on = np.flatnonzero((K["rank"] == rank) & (K["graph"] < 0))
    has = on[np.asarray(reg.region[on] != None)]  # noqa: E711
    if not len(has):
        return None, False
    main = _mode(K["stream"][on])
    side = has[K["stream"][has] != main]
    roles_side = {str(r) for r in reg.role[side].tolist()}
    shared = bool((reg.role[has] == "moe.shared").any())
    return (roles_side.pop() if len(roles_side) == 1 else None), shared


def place_side(profile, reg, contexts: list[np.ndarray], aligned_sources: tuple[str, ...]) -> tuple[int, int, int]:
    """For each context (kernel rows of one replay, or of one step's replays and eager pieces), place its
    side-stream replayed kernels by the main stream (module docstring). Returns (kernels placed or moved, their
    ns, kernels whose aligned layer the main stream corrected)."""
    K = profile.tables["kernels"]
    placed = moved = 0
    ns = 0
    cache: dict[int, tuple[str | None, bool]] = {}
    for rows in contexts:
        rows = rows[np.lexsort((rows, K["start_ns"][rows]))]
        st = K["stream"][rows]
        main = _mode(st[K["graph"][rows] >= 0]) if (K["graph"][rows] >= 0).any() else _mode(st)
        on_main = st == main
        side = rows[~on_main & (K["graph"][rows] >= 0)]
        if not len(side):
            continue
        m = rows[on_main]
        m_start = K["start_ns"][m]
        m_lay = reg.layer[m]
        m_role = reg.role[m]
        ok_idx = np.flatnonzero(np.asarray(reg.region[m] != None) & (m_lay >= 0))  # noqa: E711
        rank = int(K["rank"][rows[0]])
        if rank not in cache:
            cache[rank] = side_roles(profile, reg, rank)
        one_role, shared = cache[rank]
        for i in side.tolist():
            lay, role = _context(int(K["start_ns"][i]), m_start, ok_idx, m_lay, m_role)
            if lay is None:
                continue
            src = reg.source[i]
            if reg.region[i] is not None and src in aligned_sources:
                if reg.layer[i] == lay or reg.layer[i] < 0:
                    continue
                r = str(reg.role[i])
                moved += 1
            elif reg.region[i] is None:
                r = one_role or ("moe.shared" if shared else None)
                if r is None:
                    continue
            else:
                continue  # placed by stronger evidence (an op, a module)
            reg.layer[i], reg.role[i], reg.region[i], reg.source[i] = lay, r, region_name(lay, r), SOURCE
            placed += 1
            ns += int(K["dur_ns"][i])
    return placed, ns, moved


def _context(t: int, m_start, ok_idx, m_lay, m_role) -> tuple[int | None, str | None]:
    """(layer, role) of the MoE block a side-stream kernel starting at `t` ran beside: the latest-started placed
    main-stream kernel p before it, when p is a MoE part (or the post-attention norm) of layer k and the first
    placed main-stream kernel after `t` that is not a norm is still in layer k or in layer k + 1's attention (so
    no later layer's MoE block, which could have forked it, started before it)."""
    starts = m_start[ok_idx]
    k = int(np.searchsorted(starts, t, side="right")) - 1
    if k < 0:
        return None, None
    p = ok_idx[k]
    lay, role = int(m_lay[p]), str(m_role[p])
    if role not in _FORK_ROLES:
        return None, None
    for q in ok_idx[k + 1:].tolist():
        rq = str(m_role[q])
        if rq == "norm":
            continue
        if int(m_lay[q]) == lay or (int(m_lay[q]) == lay + 1 and rq.startswith("attn.")):
            return lay, role
        return None, None
    return lay, role
