"""Bad input through the CLI: exit code 2 and one line on stderr, never a traceback."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from mmprof.cli import main
from tests.conftest import ROOT, data_file


def _cases(tmp):
    good = data_file("samples", "kineto", "triton_example.json.gz").read_bytes()
    (tmp / "obj.json").write_text(json.dumps({"hello": 1, "items": [1, 2]}))
    (tmp / "notes.txt").write_text("this is not a trace\n")
    (tmp / "trunc.json.gz").write_bytes(good[: len(good) // 2])
    (tmp / "empty.json").write_bytes(b"")
    (tmp / "future.json").write_text(json.dumps({"format": "mmprof-profile", "schema_version": 99, "meta": {},
                                                 "strings": [], "tables": {}}))
    (tmp / "nothing").mkdir()
    (tmp / "nothing" / "readme.md").write_text("no traces here")
    (tmp / "cut.json").write_bytes(gzip.decompress(good)[:500])
    return {
        "not_a_trace_object": (tmp / "obj.json", "not a PyTorch profiler"),
        "text_file": (tmp / "notes.txt", "not a recognised profiler file"),
        "truncated_gzip": (tmp / "trunc.json.gz", "truncated or corrupt gzip"),
        "empty": (tmp / "empty.json", "empty file"),
        "newer_schema": (tmp / "future.json", "schema version 99 is newer"),
        "dir_without_traces": (tmp / "nothing", "holds no profiler traces"),
        "missing": (tmp / "missing.json", "no such file"),
        "truncated_json": (tmp / "cut.json", "not valid JSON"),
    }


def _run_main(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    cap = capsys.readouterr()
    return e.value.code, cap.err


@pytest.mark.parametrize("command", ["summary", "import"])
@pytest.mark.parametrize("case", ["not_a_trace_object", "text_file", "truncated_gzip", "empty", "newer_schema",
                                  "dir_without_traces", "missing", "truncated_json"])
def test_bad_input_exit_2_one_line(tmp_path, capsys, command, case):
    path, needle = _cases(tmp_path)[case]
    args = [command, str(path)] + (["-o", str(tmp_path / "out.json")] if command == "import" else [])
    code, err = _run_main(args, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("mmprof: error: ") and needle in lines[0]
    assert "Traceback" not in err
    assert not (tmp_path / "out.json").exists()


def test_rank_with_many_files_and_unknown_format(tmp_path, capsys):
    a = data_file("samples", "kineto", "sampled_rank-0.json.gz")
    b = data_file("samples", "kineto", "sampled_rank-1.json.gz")
    code, err = _run_main(["import", str(a), str(b), "--rank", "1", "-o", str(tmp_path / "o.json")], capsys)
    assert code == 2 and "--rank applies to a single trace file" in err
    code, err = _run_main(["import", str(a), "--format", "nope", "-o", str(tmp_path / "o.json")], capsys)
    assert code == 2 and "unknown --format 'nope'" in err
    code, err = _run_main(["summary", str(a), "--rank", "9"], capsys)
    assert code == 2 and "rank 9 is not in this profile" in err


def test_clirunner_import_then_summary(tmp_path):
    from mmprof.cli import cli

    out = tmp_path / "p.json.gz"
    r = CliRunner().invoke(cli, ["import", str(data_file("samples", "kineto", "nccl_data.json.xz")), "-o", str(out)])
    assert r.exit_code == 0, r.output
    # the excerpt of nccl_data (its first 2 ProfilerSteps, tests/data/samples/README.md): 1,800 kernel events
    assert "rank(s) 0 of 2" in r.output and "kernels 1,800" in r.output
    r = CliRunner().invoke(cli, ["summary", str(out), "--json", "--top", "3"])
    assert r.exit_code == 0
    doc = json.loads(r.output)
    assert doc["ranks"][0]["kernels"] == 1800 and len(doc["ranks"][0]["top_kernels"]) == 3


@pytest.mark.parametrize("case", ["truncated_gzip", "not_a_trace_object", "dir_without_traces"])
def test_subprocess_exit_code_and_single_line(tmp_path, case):
    path, needle = _cases(tmp_path)[case]
    env = dict(os.environ)
    env.pop("MMPROF_DEBUG", None)
    r = subprocess.run([sys.executable, "-m", "mmprof", "summary", str(path)], capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr


def test_import_json_output_and_directory_without_ranks(tmp_path, capsys):
    from mmprof.cli import cli

    r = CliRunner().invoke(cli, ["import", str(data_file("samples", "kineto", "triton_example.json.gz")), "--rank", "2",
                                 "-o", str(tmp_path / "p.json"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["ranks"] == [2] and doc["rows"]["kernels"] == 1 and doc["format"] == "kineto"
    d = tmp_path / "d"
    d.mkdir()
    for n in ("a.json.gz", "b.json.gz"):
        (d / n).write_bytes(data_file("samples", "kineto", "triton_example.json.gz").read_bytes())
    code, err = _run_main(["import", str(d), "-o", str(tmp_path / "q.json")], capsys)
    assert code == 2 and "cannot tell its rank" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["summary", "report", "diff", "classify", "verify-fastpath"])
def test_an_empty_profile_is_no_evidence_exit_2(tmp_path, capsys, command):
    from mmprof.profiles import Profile, save_profile

    p = save_profile(Profile.empty({"source": {"format": "test"}}), tmp_path / "empty.json")
    args = [command, str(p)] + ([str(p)] if command == "diff" else [])
    code, err = _run_main(args, capsys)
    assert code == 2 and "Traceback" not in err


def test_usage_errors_are_one_line_naming_the_help(capsys):
    """A bad option value, a missing argument or an unknown command (click's UsageError) is one `mmprof: error:`
    line naming where the help is, exit 2 (issue 25: click printed three lines, Usage / Try / Error); a control
    character in the value is not echoed raw."""
    from mmprof.cli import main as cli_main

    for argv, says in ((["report", "--top", "abc\x1b[31m", "x.json"], "--top"), (["diff", "a"], "AFTER"),
                       (["frobnicate"], "frobnicate")):
        with pytest.raises(SystemExit) as e:
            cli_main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2, argv
        assert err.startswith("mmprof: error: ") and err.count("\n") == 1 and says in err and "--help" in err, err
        assert "\x1b" not in err
