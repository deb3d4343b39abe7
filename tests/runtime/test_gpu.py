"""GPU checks (run with MMPROF_GPU_TESTS=1 on a CUDA/ROCm machine): the fast paths really run there and
agree with the baselines in bf16; the CPU equivalents of these checks are in test_runtime.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from mmprof.runtime import Switches, Workload, build_model, generate, get_preset  # noqa: E402


@pytest.mark.gpu
def test_grouped_mm_runs_on_gpu_and_matches_loop():
    m = build_model(get_preset("tiny"), device="cuda", dtype=torch.bfloat16, seed=0)
    outs = {}
    for sw in (Switches.baseline(), Switches(block_reuse=1)):  # reuse changes numerics: compare at K=1
        m.set_switches(sw)
        m.dispatch.clear()
        outs[sw.moe_impl] = generate(m, Workload(batch=4, prompt_len=256, decode_steps=4), keep_logits=True)
        impls = {(r.op, r.impl) for r in m.dispatch.records}
        assert ("moe.experts", "grouped_mm" if sw.moe_impl == "grouped" else "loop") in impls, impls
    diff = max(float((a - b).abs().max()) for a, b in zip(outs["loop"].logits, outs["grouped"].logits))
    assert diff < 5e-2 * max(1.0, float(outs["loop"].logits[0].abs().max()))


@pytest.mark.gpu
def test_sparse_gather_decode_matches_masked_on_gpu():
    from mmprof.runtime.attention import attend_sparse_gather, attend_sparse_masked

    torch.manual_seed(0)
    q = torch.randn(2, 8, 1, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 2, 1000, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    sel = torch.tensor([0, 3, 62, -1], device="cuda").expand(2, 2, 1, 4).contiguous()
    a = attend_sparse_gather(q, k, v, 999, 0.125, sel, 16)
    b = attend_sparse_masked(q, k, v, 999, 0.125, sel, 16)
    assert float((a.float() - b.float()).abs().max()) < 2e-2
