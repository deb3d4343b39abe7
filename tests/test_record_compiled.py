"""`mmprof record` around a torch.compile(fullgraph=True) program, as vLLM runs its models.

Truth: vLLM 0.26 compiles the model's forward with Dynamo fullgraph capture (vllm/compilation/decorators.py,
`support_torch_compile`); record's global module hooks are traced by Dynamo, and a profiler query inside them
made the capture fail ("torch.* op returned non-Tensor", vLLM's engine core died on Qwen2-MoE, H200,
2026-12-01). The hooks now fold away while Dynamo traces (torch.compiler.is_compiling()), so the program runs,
and modules called outside the compiled region still get their ranges.
"""

from __future__ import annotations

import sys

from mmprof.profiles.io import load_profile
from tests.test_record import run_record, script


def test_fullgraph_compile_survives_module_hooks(tmp_path):
    proc, out = run_record(tmp_path, cmd=[sys.executable, script("compiled_module.py")])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ok (4, 16)" in proc.stdout
    p = load_profile(out)
    scopes = set(p.df("scopes").name.astype(str))
    assert {"mmprof.step.0", "mmprof.step.1", "mmprof.step.2"} <= scopes
    # the compiled module's own call runs outside Dynamo (the OptimizedModule wrapper): its range is there;
    # the inner blocks run inside the compiled graph and open none
    assert any(n.endswith("OptimizedModule") for n in scopes), sorted(scopes)
    assert not any("layers.0" in n for n in scopes)
