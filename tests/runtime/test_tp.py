"""Tensor / expert parallelism: shard-plan arithmetic and vLLM's refusals (pure), and real multi-process
gloo runs at TP=2, TP=4 and TP=2+EP=2 that must reproduce the TP=1 logits (float32)."""

from __future__ import annotations

import pytest

from mmprof.errors import BadInput
from mmprof.runtime import ShardRefused, get_preset, shard_plan

torch = pytest.importorskip("torch")


def test_m3_plan_matches_vllm_per_rank_shapes():
    m3 = get_preset("m3")
    p8 = shard_plan(m3, tp=8, rank=5)
    assert (p8.n_heads, p8.n_kv_heads, p8.kv_replicas, p8.n_index_heads) == (8, 1, 2, 1)
    assert p8.kv_head_start == 2 and p8.q_head_start == 40
    assert p8.qkv_index_n == 1536 and p8.o_proj_k == 1024
    assert p8.dense_intermediate == 1536 and p8.moe_intermediate == 384 and p8.vocab_rows == 25008
    p4 = shard_plan(m3, tp=4, rank=0)
    assert p4.qkv_index_n == 2560 and p4.moe_intermediate == 768 and p4.vocab_rows == 50016
    ep = shard_plan(m3, tp=8, ep=8, rank=3)
    assert (ep.expert_start, ep.n_local_experts, ep.moe_intermediate) == (48, 16, 3072)


def test_refusals_carry_reason():
    m3 = get_preset("m3")
    with pytest.raises(ShardRefused, match="attention heads"):
        shard_plan(m3, tp=3)
    with pytest.raises(ShardRefused, match="tp_size % num_kv_heads"):
        shard_plan(get_preset("m3", n_kv_heads=8, index_n_heads=8, n_heads=96), tp=12)
    with pytest.raises(ShardRefused, match="padded vocab"):
        shard_plan(get_preset("tiny", vocab_size=250, n_heads=6, n_kv_heads=3, index_n_heads=3,
                              dense_intermediate=192, moe_intermediate=48, shared_intermediate=48), tp=3)
    with pytest.raises(ShardRefused, match="expert-parallel"):
        shard_plan(m3, tp=4, ep=2)
    assert issubclass(ShardRefused, BadInput)


def test_meta_build_per_rank_shapes():
    from mmprof.runtime import build_model

    model = build_model(get_preset("m3-rank-slice", tp=8, layers=3), device="meta", dtype=torch.bfloat16)
    assert model.layers[2].attn.qkv.weight.shape == (1536, 6144)
    assert model.layers[2].mlp.w13.shape == (129, 768, 6144)  # 128 experts + fused shared slot
    assert model.lm_head.weight.shape == (25008, 6144)
    assert model.layers[2].mlp.gate.weight.dtype == torch.float32  # router stays fp32


def _spawn(world: int, ep: int, tmp_path, switches: dict):
    import os

    import torch.multiprocessing as mp

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only: no interface guessing on CI boxes

    from .tp_worker import run_rank

    mp.spawn(run_rank, args=(world, ep, str(tmp_path / "init"), str(tmp_path), switches), nprocs=world, join=True)
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]


@pytest.fixture(scope="module")
def tp1(tmp_path_factory):
    return _spawn(1, 1, tmp_path_factory.mktemp("tp1"), {})[0]


@pytest.mark.slow
@pytest.mark.parametrize("world,ep,switches", [(2, 1, {"moe_impl": "loop", "shared_expert": "separate"}),
                                               (4, 1, {}), (2, 2, {})],
                         ids=["tp2-baseline", "tp4-fast", "tp2-ep2-fast"])
def test_tp_logits_equal_tp1(tp1, tmp_path, world, ep, switches):
    outs = _spawn(world, ep, tmp_path, switches)
    for o in outs:  # every rank ends with the full-vocab logits
        for a, b in zip(tp1["logits"], o["logits"]):
            assert a.shape == b.shape
            assert float((a - b).abs().max()) < 1e-4 * max(1.0, float(a.abs().max()))
        assert torch.equal(o["tokens"], tp1["tokens"])
    if ep > 1:
        shared = {r["impl"] for r in outs[0]["dispatch"] if r["op"] == "moe.shared"}
        assert shared == {"separate"}  # fused falls back under EP, with the reason logged
        assert any("expert parallelism" in (r["reason"] or "") for r in outs[0]["dispatch"])
        assert outs[1]["plan"]["expert_start"] == 8


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_torchrun_launch_matches_single_rank(tmp_path):
    """The torchrun entry point (init_distributed from env, gloo) gives the single-rank tokens."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    base = [sys.executable, "-m", "mmprof.runtime.torchrun", "--prompt-len", "48", "--decode-steps", "3",
            "--batch", "2", "--device", "cpu"]
    one = subprocess.run(base, capture_output=True, text=True, env=env, timeout=120)
    assert one.returncode == 0, one.stderr
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--master-port", str(_free_port()), *base[1:]], capture_output=True, text=True, env=env,
                         timeout=180)
    if two.returncode:
        (tmp_path / "torchrun.stderr").write_text(two.stderr)
    assert two.returncode == 0, "\n".join(
        ln for ln in two.stderr.splitlines() if "rank" in ln.lower() or "what" in ln or "rror" in ln)[-3000:]
    r1 = json.loads(one.stdout.strip().splitlines()[-1])
    r2 = json.loads([ln for ln in two.stdout.splitlines() if ln.startswith("{")][-1])
    assert r2["tp"] == 2 and r2["backend"] == "gloo" and r1["tp"] == 1
    assert r1["tokens"] == r2["tokens"]


# -- parallel.apply: TP as a transform of the single-device model -------------------------------------------
@pytest.mark.parametrize("tp,ep", [(2, 1), (4, 1), (2, 2)], ids=["tp2", "tp4-kv-replicated", "tp2-ep2"])
def test_apply_on_real_weights_equals_loader_slices(tp, ep):
    """Sharding a materialised single-device model gives, tensor for tensor, what the loader puts into a rank
    built directly (two codes that read the same ShardPlan: the transform's spans and the loader's slices)."""
    import copy

    from mmprof.runtime import build_model
    from mmprof.runtime.parallel import apply
    from mmprof.runtime.weights import init_random

    args = get_preset("tiny")
    full = build_model(args, seed=0)
    for rank in range(tp):
        shard = apply(copy.deepcopy(full), shard_plan(args, tp, ep, rank))
        direct = build_model(args, tp=tp, ep=ep, rank=rank, seed=None)
        init_random(direct, 0, full=True)  # full tensors drawn, then sliced by the loader
        a, b = dict(shard.named_parameters()), dict(direct.named_parameters())
        assert list(a) == list(b)
        for name, pa in a.items():
            assert pa.shape == b[name].shape, name
            assert torch.equal(pa, b[name]), name
        assert shard.layers[3].mlp.fusable is (ep == 1) and shard.layers[0].attn.nkv == max(1, 2 // tp)
    with pytest.raises(ValueError, match="already sharded"):
        apply(shard, shard_plan(args, tp, ep, 0))


class _RecordingComm:
    """An 'active' Comm without peers: records each collective and the innermost runtime scope it ran in."""

    active, tp = True, 2

    def __init__(self, stack):
        self.stack, self.calls = stack, []

    def all_reduce(self, x):
        self.calls.append(("all_reduce", self.stack[-1]))
        return x

    def all_gather_last(self, x):
        self.calls.append(("all_gather", self.stack[-1]))
        return torch.cat([x, x], dim=-1)


@pytest.mark.parametrize("ep", [1, 2], ids=["tp2", "tp2-ep2"])
def test_apply_collectives_and_their_scopes(monkeypatch, ep):
    """Exactly the row-parallel collectives, each inside the scope DEVELOPERS.md names: one all-reduce per
    o_proj, per dense MLP, per MoE layer (inside moe.routed, shared expert included), the embedding's, and
    one logits all-gather; with the shared expert fused and separate."""
    import contextlib

    from mmprof.runtime import Switches, build_model, scopes
    from mmprof.runtime.kvcache import make_cache
    from mmprof.runtime.parallel import apply

    stack, orig = ["(none)"], scopes._scope

    @contextlib.contextmanager
    def tracked(name):
        stack.append(name)
        try:
            with orig(name):
                yield
        finally:
            stack.pop()

    monkeypatch.setattr(scopes, "_scope", tracked)
    prev = scopes.set_scopes_enabled(True)
    args = get_preset("tiny")
    try:
        for shared in ("fused", "separate"):
            model = build_model(args, Switches(shared_expert=shared), seed=0)
            comm = _RecordingComm(stack)
            apply(model, shard_plan(args, 2, ep, 1), comm)
            tokens = torch.randint(0, args.vocab_size, (1, 8))
            model(tokens, 0, make_cache(model, 1, 8))
            expect = [("all_reduce", "embed")]
            for i, kind in enumerate(args.mlp_types):
                expect.append(("all_reduce", f"layers.{i}.attn.o_proj"))
                expect.append(("all_reduce", f"layers.{i}.moe.routed" if kind == "moe" else f"layers.{i}.mlp"))
            expect.append(("all_gather", "lm_head"))
            assert comm.calls == expect, shared
            shared_rows = [r for r in model.dispatch.rows() if r["op"] == "moe.shared"]
            assert {r["impl"] for r in shared_rows} == {"separate" if ep > 1 else shared}
    finally:
        scopes.set_scopes_enabled(prev)


def test_rank_slice_has_no_collectives():
    """Without a process group a tp > 1 build is one rank's slice: local shapes, no hooks, folded ids."""
    from mmprof.runtime import build_model

    args = get_preset("tiny")
    for device in ("meta", "cpu"):
        m = build_model(args, tp=2, rank=1, device=device, seed=0 if device == "cpu" else None)
        hooks = [mod for mod in m.modules() if mod._forward_hooks]
        assert hooks == [] and not m.embed.comm.active
        assert m.layers[0].attn.o_proj.weight.shape == (128, 4 * args.head_dim)
        assert m.plan.rank == 1 and m.dispatch.rank == 1


def test_dispatch_log_takes_keywords_only():
    from mmprof.runtime import DispatchLog

    log = DispatchLog(rank=3)
    with pytest.raises(TypeError):
        log.log(1, "moe.experts", "loop", "loop", None, "layers.1.moe.routed")
    log.log(layer=1, op="moe.experts", impl="loop", requested="grouped_mm", scope="layers.1.moe.routed")
    assert log.rows()[0]["requested"] == "grouped_mm" and log.rows()[0]["rank"] == 3
