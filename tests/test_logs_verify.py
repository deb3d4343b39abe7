"""Engine logs beside real vLLM 0.26 traces: `--log` on verify-fastpath / report / import, LG001 spec assertions,
LG002 (log vs kernels), and bad logs.

The traces are real (tests/data/vllm_own: vLLM 0.26 on one H200); the logs are synthetic-but-faithful
(tests/data/logs/make_logs.py: vLLM 0.26's own format strings filled in for those runs, the trace's own pid). The
truths: Qwen2-MoE and the tiny M3 have no tuned fused-MoE file for their shapes (E=32,N=512 / E=32,N=768 on H200:
vllm/model_executor/layers/fused_moe/configs/ holds neither), so vLLM warns at fused_moe.py:1108 and runs the
Triton `fused_moe_kernel` with its default tile config; the attention of both ran FlashAttention 3
(flash::FlashAttnFwdSm90, FlashAttention library), so a log saying FLASHINFER is not the log of this trace.
Kernel times are recounted from the raw trace JSON (tests/conftest.py:open_data), not through mmprof.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re

import pytest

from mmprof.cli import main
from mmprof.importers import import_paths
from mmprof.importers.logs import attach_log_file
from mmprof.profiles.io import load_profile, save_profile
from tests.conftest import ROOT, data_file, open_data

QWEN = ("vllm_own", "qwen2moe_graphs_b1.pt.trace.json.xz")
M3 = ("vllm_own", "m3_graphs_b1.pt.trace.json.xz")
LOG_QWEN = data_file("logs", "vllm026_qwen2moe_graphs_b1.log")
LOG_FORCED = data_file("logs", "vllm026_qwen2moe_forced_flashinfer.log")
LOG_M3 = data_file("logs", "vllm026_m3_graphs_b1.log")


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The two real traces saved as Profiles (imported once for the module)."""
    d = tmp_path_factory.mktemp("logs")
    out = {}
    for key, parts in (("qwen", QWEN), ("m3", M3)):
        out[key] = d / f"{key}.json.gz"
        save_profile(import_paths([data_file(*parts)]), out[key])
    return out


def raw_kernel_ns(parts, name_rx: str) -> tuple[int, int]:
    """(count, summed duration in ns) of the trace's kernel events whose name matches, from the raw JSON."""
    with open_data(data_file(*parts)) as f:
        doc = json.load(f)
    durs = [e["dur"] for e in doc["traceEvents"] if e.get("cat") == "kernel" and re.search(name_rx, e.get("name", ""))]
    return len(durs), round(sum(durs) * 1000)


def verify_json(args, capsys) -> tuple[int, dict]:
    rc, out, err = run_cli(["verify-fastpath", *args, "--json"], capsys)
    return rc, json.loads(out)


def fact(d: dict, rule: str) -> dict:
    facts = [f for f in d["log"]["facts"] if f["rule"] == rule]
    assert facts, f"no {rule} among {[f['rule'] for f in d['log']['facts']]}"
    return facts[0]


def test_default_moe_config_is_named_with_the_kernels_and_time_it_concerns(saved, capsys):
    rc, d = verify_json([str(saved["qwen"]), "--log", str(LOG_QWEN)], capsys)
    f = fact(d, "vllm.moe.default_config")
    assert f["kind"] == "default_config" and f["fallback"] and f["value"] == "E=32,N=512,device_name=NVIDIA_H200"
    assert f["fields"]["E"] == "32" and f["fields"]["N"] == "512"
    n, ns = raw_kernel_ns(QWEN, r"^fused_moe_kernel")
    assert f["events"] == n == 24
    assert abs(f["time_ns"] - ns) <= n  # the importer rounds each µs duration to ns
    assert f["judged_by"] == "regions" and f["concerns"].startswith("layers.*.moe.routed")
    assert set(f["phases"]) == {"prefill", "decode"} and sum(f["phases"].values()) == f["time_ns"]
    assert f["ranks"] == [0]  # the log's EngineCore pid is the trace's process (meta ranks[0].pid)
    lg2 = next(r for r in d["results"] if r["code"] == "LG002")
    assert lg2["status"] == "pass" and "fallback" in lg2["message"] and "E=32,N=512" in lg2["message"]
    assert rc == 1  # FP001: the shared expert is its own MLP in vLLM (tests/data/vllm_own/README.md)


def test_chosen_backends_agree_with_the_kernels(saved, capsys):
    _, d = verify_json([str(saved["m3"]), "--log", str(LOG_M3)], capsys)
    got = {(f["subject"], f["value"]): f["verdict"] for f in d["log"]["facts"] if f["kind"] == "backend"}
    assert got[("attention", "FLASH_ATTN")] == "agrees"         # full-attention layers 0-1: FlashAttention 3
    assert got[("sparse_attention", "Triton")] == "agrees"      # layers 2-5: _gqa_sparse_* Triton kernels
    assert got[("indexer", "Triton")] == "agrees"               # _index_block_score / _topk_index_*
    assert got[("moe", "TRITON")] == "agrees"
    sparse = fact(d, "vllm.minimax_m3.sparse_attention")
    n, ns = raw_kernel_ns(M3, r"^_gqa_sparse|^_merge_topk")
    assert sparse["events"] == n and abs(sparse["time_ns"] - ns) <= n
    fp002 = next(r for r in d["results"] if r["code"] == "FP002")
    assert any("engine log:" in e and "indexer" in e for e in fp002["evidence"])  # cited beside the kernels


def test_a_log_that_names_another_backend_than_the_kernels_is_a_finding(saved, capsys):
    rc, d = verify_json([str(saved["qwen"]), "--log", str(LOG_FORCED)], capsys)
    f = fact(d, "vllm.attention.backend_selected")
    assert f["value"] == "FLASHINFER" and f["forced"] and f["verdict"] == "disagrees"
    assert any("FlashAttention" in x for x in f["instead"])
    lg2 = next(r for r in d["results"] if r["code"] == "LG002")
    assert lg2["status"] == "fail" and "FLASHINFER" in lg2["message"] and "FlashAttention" in lg2["message"]
    assert rc == 1


def test_text_output_names_backends_fallback_and_time(saved, capsys):
    rc, out, _ = run_cli(["verify-fastpath", str(saved["qwen"]), "--log", str(LOG_QWEN)], capsys)
    assert "engine log:" in out and "FLASH_ATTN" in out and "agrees" in out
    assert "fallback" in out and "E=32,N=512" in out and "fused_moe_kernel" in out and "LG002" in out
    assert all(len(line) <= 80 for line in out.splitlines())  # pytest's console is 80 columns


SPEC = """
[spec]
id = "gate-on-the-log"
checks = ["FP000"]

[[assert]]
id = "attention-flash"
kind = "log"
subject = "attention"
fact = "backend"
value = "FLASH_ATTN"

[[assert]]
id = "moe-config-tuned"
kind = "log"
subject = "moe"
fact = "default_config"
expect = "absent"

[[assert]]
id = "graphs-on"
kind = "log"
subject = "cudagraph"
fact = "mode"
value = ["FULL*", "PIECEWISE"]
"""


def test_a_spec_gates_on_log_facts(saved, tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    rc, d = verify_json([str(saved["qwen"]), "--spec", str(spec), "--log", str(LOG_QWEN)], capsys)
    res = {r["id"]: r for r in d["results"]}
    assert res["attention-flash"]["status"] == "pass" and res["attention-flash"]["code"] == "LG001"
    assert res["graphs-on"]["status"] == "pass"
    bad = res["moe-config-tuned"]
    assert bad["status"] == "fail" and "E=32,N=512" in bad["message"] and "fused_moe_kernel" in bad["message"]
    assert rc == 1
    # the forced run: the attention assertion fails and says what the log states
    rc, d = verify_json([str(saved["qwen"]), "--spec", str(spec), "--log", str(LOG_FORCED)], capsys)
    res = {r["id"]: r for r in d["results"]}
    assert res["attention-flash"]["status"] == "fail" and "FLASHINFER" in res["attention-flash"]["message"]


def test_a_log_assertion_without_a_log_or_a_statement_is_never_a_pass(saved, tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    rc, d = verify_json([str(saved["qwen"]), "--spec", str(spec)], capsys)
    assert {r["status"] for r in d["results"] if r["code"] == "LG001"} == {"no_evidence"}
    assert rc == 2
    other = tmp_path / "trt.log"  # another engine's log (TensorRT-LLM lines, tensorrtllm_backend#396)
    other.write_text("[TensorRT-LLM][INFO] MPI size: 4, rank: 0\n[TensorRT-LLM][INFO] TRTGptModel maxBatchSize: 1\n")
    rc, d = verify_json([str(saved["qwen"]), "--spec", str(spec), "--log", str(other)], capsys)
    assert {r["id"]: r["status"] for r in d["results"] if r["code"].startswith("LG")} == {
        "log-agrees-with-trace": "no_evidence", "attention-flash": "no_evidence", "moe-config-tuned": "no_evidence",
        "graphs-on": "no_evidence"}
    assert rc == 2


@pytest.mark.parametrize("body,msg", [
    ('kind = "require"\nregion = "layers.*.moe.routed"\nfamily = "grouped_gemm"\nsubject = "moe"',
     "belong to kind = \"log\""),
    ('kind = "log"\nsubject = "moe"\nregion = "layers.*.moe.routed"', "do not apply to a log assertion"),
    ('kind = "log"\nsubject = "moe"\nexpect = "maybe"', "present or absent"),
    ('kind = "log"\nvalue = "X"', "needs a `fact`"),
])
def test_bad_log_assertions_are_refused(saved, tmp_path, capsys, body, msg):
    spec = tmp_path / "bad.toml"
    spec.write_text(f'[[assert]]\nid = "a"\n{body}\n')
    rc, out, err = run_cli(["verify-fastpath", str(saved["qwen"]), "--spec", str(spec)], capsys)
    assert rc == 2 and msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_report_lists_facts_and_fallbacks_with_kernel_time(saved, capsys):
    rc, out, _ = run_cli(["report", str(saved["qwen"]), "--log", str(LOG_QWEN)], capsys)
    assert rc == 0 and "engine log" in out and "fallback" in out and "fused_moe_kernel" in out
    rc, out, _ = run_cli(["report", str(saved["qwen"]), "--log", str(LOG_QWEN), "--json"], capsys)
    d = json.loads(out)
    f = next(f for f in d["log"]["facts"] if f["rule"] == "vllm.moe.default_config")
    assert f["time_ns"] > 0 and d["log"]["fallbacks"] == 1


def test_import_keeps_the_log_and_old_profiles_still_load(tmp_path, capsys):
    out = tmp_path / "with_log.json.gz"
    rc, _, err = run_cli(["import", str(data_file(*QWEN)), "--log", str(LOG_QWEN), "-o", str(out)], capsys)
    assert rc in (0, None), err
    p = load_profile(out)
    assert p.n("log") == len(LOG_QWEN.read_text().splitlines())
    assert p.meta["log"]["sources"][0]["stream"] == "file"
    assert set(p.col("log", "rank").tolist()) == {-1, 0}  # the front end's lines (no prefix) have no rank
    rc, out2, _ = run_cli(["verify-fastpath", str(out), "--json"], capsys)
    assert any(r["code"] == "LG002" for r in json.loads(out2)["results"])  # no --log needed any more
    old = ROOT / "examples" / "h200" / "graphs" / "graphs_b1.json.gz"  # written by schema 2
    with gzip.open(old) as f:
        assert json.load(f)["schema_version"] == 2
    assert load_profile(old).n("log") == 0


def test_log_given_twice_replaces_and_says_so(saved):
    p = attach_log_file(load_profile(saved["qwen"]), LOG_QWEN)
    q = attach_log_file(p, LOG_M3)
    assert q.n("log") == len(LOG_M3.read_text().splitlines())
    assert any("replaced by the one given with --log" in w for w in q.meta["warnings"])


def test_crlf_gzip_and_a_huge_log_give_the_same_facts(saved, tmp_path, capsys):
    lines = LOG_QWEN.read_text().splitlines()
    crlf = tmp_path / "crlf.log"
    crlf.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    gz = tmp_path / "log.gz"
    with gzip.open(gz, "wb") as f:
        f.write(LOG_QWEN.read_bytes())
    huge = tmp_path / "huge.log"  # the start-up, 40 MB of request lines, the fallback, more request lines
    filler = "(APIServer pid=7) INFO 12-01 10:30:00 [loggers.py:127] Engine 000: Avg prompt throughput: 0.0\n" * 200_000
    with open(huge, "w") as f:
        f.write("\n".join(lines[:8]) + "\n" + filler * 2 + "\n".join(lines[8:]) + "\n" + filler)
    assert huge.stat().st_size > 40 * 2**20
    want = None
    for log in (LOG_QWEN, crlf, gz, huge):
        _, d = verify_json([str(saved["qwen"]), "--log", str(log)], capsys)
        got = sorted((f["rule"], f["value"], f["events"]) for f in d["log"]["facts"])
        want = want or got
        assert got == want, log
    src = d["log"]["sources"][0]
    assert src["lines"] > 600_000 and src["kept"] < 60_000 and src["dropped"] == src["lines"] - src["kept"]


def test_escape_sequences_and_invisible_characters_never_reach_the_terminal(saved, tmp_path, capsys):
    nasty = tmp_path / "nasty.log"
    nasty.write_bytes(
        b"(EngineCore pid=1535) WARNING 12-01 10:21:40 [fused_moe.py:1108] Using default MoE config. Performance "
        b"might be sub-optimal! Config file not found at /x/\x1b]0;pwned\x07\xe2\x80\xae\x1b[2J/"
        b"E=32,N=512,device_name=NVIDIA_H200.json\n\xff\xfe\x00binary\x1b[31m\n")
    rc, out, err = run_cli(["verify-fastpath", str(saved["qwen"]), "--log", str(nasty)], capsys)
    assert "E=32,N=512" in out
    for bad in ("\x1b", "\u202e", "\x00", "\x07"):
        assert bad not in out and bad not in err
    rc, out, _ = run_cli(["verify-fastpath", str(saved["qwen"]), "--log", str(nasty), "--json"], capsys)
    assert "\u202e" not in out and "\x1b" not in out  # JSON escapes them (render/safe.py json_text)


@pytest.mark.parametrize("what", ["missing", "directory", "fifo", "binary", "empty"])
def test_bad_log_files_are_one_line_errors_or_no_evidence(saved, tmp_path, capsys, what):
    path = tmp_path / what
    if what == "directory":
        path.mkdir()
    elif what == "fifo":
        os.mkfifo(path)
    elif what == "binary":
        path.write_bytes(random.Random(0).randbytes(300_000))
    elif what == "empty":
        path.write_bytes(b"")
    rc, out, err = run_cli(["verify-fastpath", str(saved["qwen"]), "--log", str(path), "--json"], capsys)
    assert "Traceback" not in err
    if what != "binary":
        assert rc == 2 and len(err.strip().splitlines()) == 1 and str(path) in err
    else:  # read, nothing the rules know: LG002 has no evidence (never a pass); FP001 still fails the trace
        lg2 = next(r for r in json.loads(out)["results"] if r["code"] == "LG002")
        assert lg2["status"] == "no_evidence" and rc == 1


def test_an_engine_log_given_as_the_trace_is_named(capsys, tmp_path):
    rc, _, err = run_cli(["import", str(LOG_QWEN), "-o", str(tmp_path / "x.json")], capsys)
    assert rc == 2 and "an engine log (vllm)" in err and "--log" in err
