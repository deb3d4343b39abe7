"""The Triton kernel switches end to end on the tiny model (runtime/kernels/, docs/runtime.md "The Triton decode
kernels"): generate() with them gives the PyTorch path's tokens, and logits within the reordering bound of
tolerance.py (the kernels sum in another order and round less often), in eager decode and in the graphs' static
step (a CPU stand-in capture, as test_graph_runner.py), with block reuse on; the dispatch log says what ran per
decode step, and where the kernels cannot run the PyTorch path runs and the row carries the reason (FP003's
evidence). On the CPU the kernels run under Triton's interpreter (conftest.py)."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from mmprof.runtime import Switches, Workload, build_model, generate, get_preset  # noqa: E402
from tests.runtime.tolerance import assert_same_tokens_unless_near_tie, longest_reduction, reorder_tolerance  # noqa: E402

KERNELS = dict(triton_norm_rope=True, triton_attention=True, triton_moe=True)
KERNEL_OPS = {"attn.norm_rope", "attn.decode"}
WL = Workload(batch=1, prompt_len=40, decode_steps=1, seed=1)
# tiny with 4 layers (2 dense + full, 2 MoE + sparse; the interpreter is slow): 40 tokens in blocks of 16 are 3 key
# blocks of which top-4 keeps all; K=2: sparse layer 2 computes the selection, layer 3 reuses it


def _fake_capture(step, warmup_step):
    warmup_step()
    step()
    return step


GPU = bool(os.environ.get("MMPROF_GPU_TESTS")) and torch.cuda.is_available()
DEV = "cuda" if GPU else "cpu"


def _interpreter_or_gpu() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") or GPU


needs_kernels = pytest.mark.skipif(not _interpreter_or_gpu(), reason="needs TRITON_INTERPRET=1 (conftest.py) or a GPU")


@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("triton")
    return {dt: build_model(get_preset("tiny", n_layers=4), Switches(block_reuse=2), device=DEV, dtype=dt, seed=0)
            for dt in (torch.float32, torch.bfloat16)}


def _run(model, sw: Switches, capture=None):
    model.set_switches(sw)
    model.dispatch.clear()
    res = generate(model, WL, keep_logits=True, graph_capture=capture)
    return res, list(model.dispatch.records)


def _check_close(model, ref, got, dtype) -> None:
    tol = reorder_tolerance(dtype, ref.logits, model.args.n_layers,
                            longest_reduction(model.args, WL.prompt_len + WL.decode_steps))
    for i, (a, b) in enumerate(zip(ref.logits, got.logits)):
        assert float((a.float() - b.float()).abs().max()) <= tol, f"step {i}"
    assert_same_tokens_unless_near_tie(ref, got, tol)


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eager_decode_with_the_kernels_gives_the_pytorch_tokens(tiny, dtype):
    model = tiny[dtype]
    ref, _ = _run(model, Switches(block_reuse=2))
    got, rows = _run(model, Switches(block_reuse=2, **KERNELS))
    _check_close(model, ref, got, dtype)
    decode = [r for r in rows if r.phase == "decode"]
    per_step = model.args.n_layers
    for op in KERNEL_OPS:
        got_rows = [r for r in decode if r.op == op]
        assert len(got_rows) == per_step * WL.decode_steps and {(r.impl, r.requested) for r in got_rows} == {
            ("triton", "triton")}, op
    experts = [r for r in decode if r.op == "moe.experts"]
    assert len(experts) == model.args.mlp_types.count("moe") * WL.decode_steps
    assert {(r.impl, r.requested, r.reason) for r in experts} == {("triton", "triton", None)}
    # the selection still alternates computed / reused (the top-k now runs inside the attention kernel)
    idx = {(r.layer, r.impl) for r in decode if r.op == "attn.indexer"}
    assert idx == {(2, "computed"), (3, "reused")}
    # prefill is not theirs: no kernel rows, and the experts row requests what moe_impl asks
    pre = [r for r in rows if r.phase == "prefill"]
    assert not [r for r in pre if r.op in KERNEL_OPS]
    assert {r.requested for r in pre if r.op == "moe.experts"} == {"grouped_mm"}


@needs_kernels
def test_static_step_with_the_kernels_matches_the_graph_rung(tiny):
    """The graphs' static step (device-tensor position, whole-capacity caches) with the kernels, through the CPU
    stand-in capture: the graph rung's tokens, and one set of kernel rows per replayed step."""
    model = tiny[torch.float32]
    ref, _ = _run(model, Switches(block_reuse=2, graphs=True), _fake_capture)
    got, rows = _run(model, Switches(block_reuse=2, graphs=True, **KERNELS), _fake_capture)
    _check_close(model, ref, got, torch.float32)
    steps = {r.step for r in rows if r.op == "attn.decode"}
    assert steps == set(range(1, WL.decode_steps + 1))


def test_without_triton_the_pytorch_path_runs_and_says_why(tiny, monkeypatch):
    """No Triton (or a CPU without the interpreter): the same model runs the PyTorch path, and every kernel
    switch's decode row carries `requested` triton and the reason, which verify-fastpath's FP003 reports."""
    from mmprof.runtime.kernels import support

    monkeypatch.setattr(support, "_TRITON", "triton is not installed")
    model = tiny[torch.float32]
    ref, _ = _run(model, Switches(block_reuse=2))
    got, rows = _run(model, Switches(block_reuse=2, **KERNELS))
    assert torch.equal(ref.tokens, got.tokens)
    decode = [r for r in rows if r.phase == "decode"]
    fell = [r for r in decode if r.op in KERNEL_OPS | {"moe.experts"}]
    assert fell and all(r.requested == "triton" and r.reason.startswith("triton is not installed") for r in fell)
    assert {r.impl for r in fell if r.op in KERNEL_OPS} == {"eager"}
    assert {r.impl for r in fell if r.op == "moe.experts"} <= {"grouped_mm", "grouped_bmm"}  # moe_impl's path


def test_unavailable_reasons_name_the_device_and_the_shape():
    from mmprof.runtime.kernels.support import shape_unsupported, triton_unavailable

    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        assert "CUDA/ROCm GPU" in (triton_unavailable(torch.device("cpu")) or "CUDA/ROCm GPU")
    odd = get_preset("tiny", head_dim=24, rotary_dim=8, index_head_dim=24)
    assert "head_dim 24" in shape_unsupported("triton_attention", odd, 64)
    assert "multiple of 16" in shape_unsupported("triton_moe", get_preset("tiny"), 40)
    assert shape_unsupported("triton_norm_rope", odd, 40) is None
    assert shape_unsupported("triton_attention", get_preset("small"), 768) is None


# what the general classification rules (mmprof/rules/kernels_*.toml; none written for these names) must make of
# every Triton kernel the runtime launches, by family: the name says what the kernel is
FAMILIES = {
    "qk_norm_rope_kv_insert_kernel": "rope",
    "sparse_indexer_block_score_kernel": "indexer_score",
    "sparse_attention_decode_kernel": "sparse_attention",
    "sparse_attention_decode_combine_kernel": "sparse_attention",
    "decode_attention_splitk_kernel": "attention",
    "decode_attention_combine_kernel": "attention",
    "moe_fused_gate_logits_kernel": "moe",
    "moe_topk_sigmoid_renorm_kernel": "moe",
    "fused_moe_decode_gate_up_act_kernel": "grouped_gemm",
    "fused_moe_decode_down_kernel": "grouped_gemm",
    "fused_moe_decode_down_expert_kernel": "grouped_gemm",
    "moe_decode_combine_sum_kernel": "moe",
}


def test_every_triton_kernel_is_classified_by_the_general_rules():
    """The kernel names are read from the kernel modules' source (every `@triton.jit` function not starting with
    `_` is a kernel a launcher starts), so a new or renamed kernel must be added here and classify."""
    import ast
    from pathlib import Path

    from mmprof.analysis.attribution.classify import load_rules

    kdir = Path(__file__).resolve().parents[2] / "mmprof" / "runtime" / "kernels"
    names = set()
    for p in kdir.glob("*.py"):
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and any(
                    ast.unparse(d).startswith("triton.jit") for d in node.decorator_list):
                names.add(node.name)
    names.discard("dot")  # a helper the kernels call, never launched
    assert names == set(FAMILIES)
    rules = load_rules()
    got = {n: rules.classify(n).family for n in names}
    assert got == FAMILIES
