"""The same outputs for every command (issue 32): `--markdown` / `--html` for verify-fastpath and shapes as for
report and diff, errors as JSON under `--json`, one spelling per option (dtype names, `ranks --step-rows`)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import data_file, run_main

VLLM = str(data_file("samples", "vllm", "m3_eager_b8.pt.trace.json.xz"))
M3_TINY = str(data_file("samples", "vllm", "config", "m3_tiny_config.json"))


run = run_main


def test_verify_fastpath_writes_markdown_and_html(tmp_path, capsys):
    md, page = tmp_path / "gate.md", tmp_path / "gate.html"
    rc, out, _ = run(["verify-fastpath", VLLM, "--markdown", str(md), "--html", str(page)], capsys)
    assert rc == 1 and "FAIL:" in out  # the terminal output as well
    text = md.read_text()
    assert text.startswith("### mmprof verify-fastpath: ❌ FAIL")
    assert "| FP001 | shared\\-expert\\-fused | ❌ FAIL |" in text and "judged from" in text
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "FAIL" in html and "<script" not in html
    assert "layers.*.moe.routed" in html and "module events" in html
    rc, out, _ = run(["verify-fastpath", VLLM, "--markdown", "-"], capsys)
    assert rc == 1 and out.startswith("### mmprof verify-fastpath") and "┃" not in out  # only the Markdown


def test_shapes_writes_markdown_and_html(tmp_path, capsys):
    md, page = tmp_path / "s.md", tmp_path / "s.html"
    rc, _, _ = run(["shapes", "--model", M3_TINY, "--tp", "8", "--engine", "vllm-cuda", "--markdown", str(md),
                    "--html", str(page)], capsys)
    assert rc == 0
    text = md.read_text()
    assert "in the vllm\\-cuda layout, TP 8" in text and "block\\_sparse\\_moe.experts.w13\\_weight" in text
    assert "\\(32, 192, 2048\\)" in text  # Markdown punctuation is escaped
    assert "<!DOCTYPE html>" in page.read_text() and "(32, 192, 2048)" in page.read_text()


@pytest.mark.parametrize("args, kind", [
    (["shapes", "--profile", VLLM, "--model", M3_TINY, "--tp", "8", "--json"], "BadInput"),
    (["verify-fastpath", "no-such-file.json", "--json"], "BadInput"),
    (["shapes", "--engine", "vlm", "--json"], "BadInput"),
    (["shapes", "--dtype", "int8", "--json"], "UsageError"),
])
def test_errors_come_as_json_under_json(args, kind, capsys):
    rc, out, err = run(args, capsys)
    doc = json.loads(out)
    assert rc == 2 and doc["error"]["type"] == kind and doc["exit_code"] == 2
    assert doc["error"]["message"] and err.startswith("mmprof: error:")  # the line on stderr stays


def test_dtype_spellings_are_accepted_by_every_command(capsys):
    rc, out, _ = run(["shapes", "--dtype", "bfloat16", "--tp", "2", "--model", "tiny", "--json"], capsys)
    assert rc == 0 and json.loads(out)["dtype"] == "bf16"
    rc, out, _ = run(["shapes", "--dtype", "float32", "--tp", "2", "--model", "tiny", "--json"], capsys)
    assert json.loads(out)["dtype"] == "fp32"
    from mmprof.cli._common import DtypeType

    run_dtype = DtypeType(("float32", "bfloat16"), short=False)  # `mmprof run --dtype`
    assert run_dtype.convert("bf16", None, None) == "bfloat16" and run_dtype.convert("fp32", None, None) == "float32"


def test_ranks_step_rows_and_the_deprecated_steps(capsys):
    """`record --steps N` captures N steps; `ranks --steps` only set table rows: it is `--step-rows` now, and the
    old spelling still works with a warning."""
    p = str(data_file("hf_moe", "m3_tp2_rank0.json.gz"))
    q = str(data_file("hf_moe", "m3_tp2_rank1.json.gz"))
    from mmprof.importers import import_paths
    from mmprof.profiles.io import save_profile
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        prof = Path(d) / "tp2.json.gz"
        save_profile(import_paths([p, q]), prof)
        rc, out, err = run(["ranks", str(prof), "--step-rows", "1"], capsys)
        assert rc == 0 and "deprecated" not in err
        rc, out2, err = run(["ranks", str(prof), "--steps", "1"], capsys)
        assert rc == 0 and "`ranks --steps` is deprecated, use --step-rows" in err and out2 == out
