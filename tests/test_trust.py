"""Trust (issue 13): importers refuse what they cannot read, one error path, limits, outputs never destroy inputs.

The fuzz suite (tests/test_fuzz_cli.py) runs every command over a mutated corpus; these tests pin the individual
behaviours with real files where there are some.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mmprof.analysis.compare.diff import diff_profiles
from mmprof.cli import main
from mmprof.errors import BadInput, SchemaError, UnsupportedFormat
from mmprof.fileio import atomic_write, read_bytes, track_inputs
from mmprof.importers import detect, import_paths
from mmprof.profiles.io import load_profile, save_profile
from tests.conftest import ROOT, data_file
from tests.fuzz_corpus import counter_collection_csv, kineto_seed

SAMPLES = data_file("samples")


def _cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    cap = capsys.readouterr()
    return e.value.code, cap.out, cap.err


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mmprof: error: ") and "Traceback" not in err, err
    return lines[0]


# -- importers refuse what they cannot read -------------------------------------------------------------------
def test_counter_collection_csv_is_refused_never_read_as_kernels(tmp_path, capsys):
    """34 dispatches x 10 counters used to become 340 "kernels" and 10x their time."""
    f = tmp_path / "1234_counter_collection.csv"
    f.write_text(counter_collection_csv(dispatches=34, counters=10))
    with pytest.raises(UnsupportedFormat, match="counter-collection CSV"):
        detect(f)
    code, _, err = _cli(["summary", f], capsys)
    assert code == 2 and "counter-collection CSV (--pmc" in _one_error_line(err)


def test_counter_csv_beside_a_kernel_trace_is_skipped_with_a_warning(tmp_path):
    kt = shutil.copy(SAMPLES / "rocprofv3" / "csv" / "kernel_trace.csv", tmp_path / "7_kernel_trace.csv")
    (tmp_path / "7_counter_collection.csv").write_text(counter_collection_csv(dispatches=3, counters=4,
                                                                              start=2414192765353337))
    alone = import_paths([SAMPLES / "rocprofv3" / "csv" / "kernel_trace.csv"])
    p = import_paths([kt])
    assert p.n("kernels") == alone.n("kernels")
    assert any("counter-collection CSV" in w for w in p.meta["warnings"])
    p = import_paths([tmp_path])  # a directory: the counter CSV is a side file
    assert p.n("kernels") == alone.n("kernels")


@pytest.mark.parametrize("header, what", [
    ('"Sample_Timestamp","Exec_Mask","Dispatch_Id","Instruction","Instruction_Comment","Correlation_Id"\n'
     '3464444413017201,65535,1,"s_endpgm","",1\n', "PC-sampling"),
    ('"Kind","Operation","Agent_Id","Allocation_Size","Address","Correlation_Id","Start_Timestamp","End_Timestamp"\n'
     '"MEMORY_ALLOCATION","MEMORY_ALLOCATION_ALLOCATE","Agent 0",1024,"0x7f",1,816098791282238,816098791339655\n',
     "memory allocation"),
])
def test_other_non_trace_csv_kinds_are_named(tmp_path, header, what):
    f = tmp_path / "x.csv"
    f.write_text(header)
    with pytest.raises(UnsupportedFormat, match=what):
        detect(f)


def test_files_of_different_runs_are_refused_unless_one_run(capsys, tmp_path):
    kin = SAMPLES / "kineto"
    cases = [([kin / "nccl_data.json.xz", kin / "sampled_rank-1.json.gz"], "disagree on the world size"),
             ([kin / "sampled_rank-0.json.gz", SAMPLES / "rocprofv3" / "csv" / "kernel_trace.csv"], "different tools"),
             ([SAMPLES / "rocprofv3" / "rocpd" / "14_results.db", SAMPLES / "rocprofv3" / "rocpd" / "28_results.db"],
              "different programs")]
    for files, why in cases:
        code, _, err = _cli(["import", *files, "-o", tmp_path / "o.json"], capsys)
        line = _one_error_line(err)
        assert code == 2 and "different runs" in line and why in line and "--one-run" in line
    # ranks of one run (sampled_rank-0 and -1 of one 128-rank job) import together
    assert import_paths([kin / "sampled_rank-0.json.gz", kin / "sampled_rank-1.json.gz"]).ranks == [0, 1]
    # and the user can say two files are one run
    code, out, err = _cli(["import", *cases[2][0], "--one-run", "-o", tmp_path / "o.json"], capsys)
    assert code == 0 and load_profile(tmp_path / "o.json").ranks == [0, 1]


def test_kineto_files_far_apart_in_time_are_different_runs(tmp_path):
    a, b = kineto_seed(), kineto_seed()
    a["distributedInfo"] = {"rank": 0, "world_size": 2}
    b["distributedInfo"] = {"rank": 1, "world_size": 2}
    for e in b["traceEvents"]:
        e["ts"] += 3 * 86400 * 1e6  # three days later
    b.pop("baseTimeNanoseconds")
    for name, doc in (("a.json", a), ("b.json", b)):
        (tmp_path / name).write_text(json.dumps(doc))
    with pytest.raises(BadInput, match="timestamps lie 3 days apart"):
        import_paths([tmp_path / "a.json", tmp_path / "b.json"])
    assert import_paths([tmp_path / "a.json", tmp_path / "b.json"], one_run=True).ranks == [0, 1]


def test_diff_warns_first_when_the_sides_differ_in_device_vendor_or_tool():
    amd = import_paths([SAMPLES / "rocprofv3" / "rocpd" / "14_results.db"])
    nv = import_paths([SAMPLES / "kineto" / "nccl_data.json.xz"])
    res = diff_profiles(amd, nv)
    first = res.warnings[0]   # issue 31: the flags of the what-is-compared block, the device first
    assert first.startswith("different devices (AMD Instinct MI300X") and "NVIDIA A100-PG509-200" in first
    assert any(w.startswith("recorded by different profilers (rocprofv3 vs PyTorch profiler (Kineto))")
               for w in res.warnings)
    assert {r.label: r.same for r in res.compared.rows}["device"] is False
    same = diff_profiles(nv, import_paths([SAMPLES / "kineto" / "nccl_data.json.xz"]), force=True)
    assert not any(w.startswith(("different devices", "recorded by different")) for w in same.warnings)


# -- one error path --------------------------------------------------------------------------------------------
def test_a_bug_is_exit_2_with_one_internal_error_line(monkeypatch, capsys):
    import mmprof.cli.summary as summary_cmd

    def boom(*a, **k):
        raise KeyError("\x1b[31mname\nsecond line")

    monkeypatch.setattr(summary_cmd, "load_any", boom)
    code, _, err = _cli(["summary", SAMPLES / "kineto" / "triton_example.json.gz"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("mmprof: internal error: KeyError: ") and "please report it; --debug" in lines[0]
    assert "\x1b" not in err and "\\x1b[31m" in lines[0] and "\\n" in lines[0]
    with pytest.raises(KeyError):  # --debug: the traceback
        main(["--debug", "summary", str(SAMPLES / "kineto" / "triton_example.json.gz")])


@pytest.mark.parametrize("doc, needle", [
    ({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1e300, "dur": 1, "pid": 0, "tid": 0},
                      {"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "dur": 1e300, "pid": 0, "tid": 0}]}, None),
    ({"distributedInfo": {"rank": 2**63}, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1,
                                                           "dur": 1, "pid": 0, "tid": 0}]}, "is not a rank"),
])
def test_out_of_range_numbers_are_dropped_or_refused(tmp_path, doc, needle):
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc))
    if needle:
        with pytest.raises(BadInput, match=needle):
            import_paths([f])
    else:
        p = import_paths([f])
        assert p.n("kernels") == 0 and any("2 kernel events with a timestamp or duration out of range" in w
                                           for w in p.meta["warnings"])


def test_one_wild_timestamp_is_dropped_not_a_1000_ms_wall(tmp_path):
    doc = kineto_seed()
    good = import_paths([_write(tmp_path / "good.json", doc)])
    doc["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "wild", "pid": 0, "tid": 8, "ts": 1e300,
                               "dur": 5.0, "args": {"device": 0, "stream": 8}})
    p = import_paths([_write(tmp_path / "wild.json", doc)])
    assert p.n("kernels") == good.n("kernels")
    assert any("out of range" in w for w in p.meta["warnings"])
    k = p.tables["kernels"]
    assert int((k["start_ns"] + k["dur_ns"]).max() - k["start_ns"].min()) < 10**7  # a few ms, as the seed


def test_rank_option_and_rank_names_beyond_int64(tmp_path, capsys):
    f = SAMPLES / "kineto" / "triton_example.json.gz"
    code, _, err = _cli(["import", f, "--rank", str(2**70), "-o", tmp_path / "o.json"], capsys)
    assert code == 2 and "'--rank'" in _one_error_line(err) and "not in the range 0<=x<=2147483647" in err
    g = shutil.copy(f, tmp_path / f"trace_rank-{'9' * 30}.json.gz")
    assert import_paths([g]).ranks == [0]  # not a rank number: the name says nothing


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d["tables"]["kernels"].update(n=-1), "n must be a row count"),
    (lambda d: d["tables"]["kernels"].update(n=2**40), "rows exceed the limit"),
    (lambda d: d["tables"]["kernels"]["columns"].update(name={"const": 10**6}), "string ids"),
    (lambda d: d["tables"]["kernels"]["columns"].update(rank={"const": "x"}), "const must be a 64-bit integer"),
    (lambda d: d["tables"]["kernels"]["columns"].update(dur_ns={"const": -5}), "durations"),
    (lambda d: d["tables"]["kernels"]["columns"].update(launch={"const": 10**6}), "row numbers of table"),
    (lambda d: d.update(meta=[1]), "meta  must be an object"),
    (lambda d: d["meta"].update(ranks={"rank": 0}), "meta ranks must be a list"),
    (lambda d: d["meta"].update(parallel={"world_size": 2**41}), "parallel.world_size"),
    (lambda d: d["meta"]["ranks"][0].update(devices=[{"name": 7}]), "devices[].name"),
    (lambda d: d.update(strings=[1, 2]), "not strings"),
])
def test_tampered_profiles_are_refused(tmp_path, mutate, needle):
    p = import_paths([SAMPLES / "kineto" / "triton_example.json.gz"])
    path = save_profile(p, tmp_path / "p.json")
    doc = json.loads(path.read_text())
    mutate(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=needle.replace("[", r"\[").replace("]", r"\]")) as e:
        load_profile(path)
    assert isinstance(e.value, SchemaError) or "exceed the limit" in str(e.value)


@pytest.mark.parametrize("key, value, needle", [  # the message names the key (or the field it fills)
    ("num_key_value_heads", 0, "num_key_value_heads|n_kv_heads"),
    ("num_attention_heads", "64", "num_attention_heads"),
    ("hidden_size", 6144.5, "hidden_size"),
    ("hidden_size", None, "hidden_size"),
    ("num_experts_per_tok", None, "num_experts_per_tok"),
    ("hidden_size", 0, "hidden_size"),
])
def test_hf_config_values_are_refused_never_replaced_by_m3_defaults(tmp_path, key, value, needle):
    from mmprof.runtime.config import load_config

    cfg = json.loads(data_file("m3_config", "config.json").read_text())
    cfg["text_config"][key] = value
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    with pytest.raises(BadInput, match=needle):
        load_config(f)
    cfg["text_config"][key] = 6144.0 if key == "hidden_size" else cfg["text_config"].get(key)


def test_integral_float_sizes_are_read_as_integers(tmp_path):
    from mmprof.runtime.config import load_config

    cfg = json.loads(data_file("m3_config", "config.json").read_text())
    cfg["text_config"]["hidden_size"] = 6144.0
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    assert load_config(f).hidden_size == 6144


def test_utf8_bom_before_a_valid_trace_is_recognised(tmp_path):
    raw = gzip.decompress((SAMPLES / "kineto" / "triton_example.json.gz").read_bytes())
    f = tmp_path / "bom.json"
    f.write_bytes(b"\xef\xbb\xbf" + raw)
    assert detect(f) == "kineto"
    assert import_paths([f]).n("kernels") == import_paths([SAMPLES / "kineto" / "triton_example.json.gz"]).n("kernels")
    c = tmp_path / "bom.csv"
    c.write_bytes(b"\xef\xbb\xbf" + (SAMPLES / "rocprofv3" / "csv" / "kernel_trace.csv").read_bytes())
    assert import_paths([c]).n("kernels") == import_paths([SAMPLES / "rocprofv3" / "csv" / "kernel_trace.csv"]).n(
        "kernels") > 0


def test_deep_json_is_one_line(tmp_path, capsys):
    f = tmp_path / "deep.json"
    f.write_bytes(b'{"traceEvents": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    for cmd in (["summary", f], ["shapes", "--model", f]):
        code, _, err = _cli(cmd, capsys)
        assert code == 2
        _one_error_line(err)


# -- limits -----------------------------------------------------------------------------------------------------
def test_gzip_bomb_is_refused_with_the_override_named(tmp_path, monkeypatch):
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as g:
        g.write(b'{"traceEvents": [' + b" " * (300 * 2**20) + b"]}")
    assert bomb.stat().st_size < 2**20
    with pytest.raises(BadInput, match="expands more than 64x.*MMPROF_MAX_INPUT_BYTES"):
        read_bytes(bomb)
    monkeypatch.setenv("MMPROF_MAX_INPUT_BYTES", "1M")
    with pytest.raises(BadInput, match="decompresses to more than 1,048,576 bytes.*--max-input-bytes"):
        read_bytes(bomb)


def test_event_cap_and_its_override(tmp_path, monkeypatch, capsys):
    f = SAMPLES / "kineto" / "triton_example.json.gz"
    code, _, err = _cli(["--max-events", "5", "summary", f], capsys)
    assert code == 2 and "exceed the limit of 5" in _one_error_line(err) and "MMPROF_MAX_EVENTS" in err
    code, _, _ = _cli(["--max-events", "0", "summary", f], capsys)
    assert code == 0
    assert "MMPROF_MAX_EVENTS" not in os.environ  # the option is scoped to its command


def test_world_size_from_a_tiny_file_allocates_nothing(tmp_path):
    doc = kineto_seed()
    doc["distributedInfo"]["world_size"] = 2**31  # the largest world size: counted, never enumerated
    p = import_paths([_write(tmp_path / "t.json", doc)])
    assert any(f"{2**31 - 1} of {2**31} ranks have no trace" in w and f"missing: 1-{2**31 - 1})" in w
               for w in p.meta["warnings"])
    doc["distributedInfo"]["world_size"] = 2**41
    p = import_paths([_write(tmp_path / "u.json", doc)])
    assert any("is not a world size; ignored" in w for w in p.meta["warnings"])


# -- outputs never destroy inputs ---------------------------------------------------------------------------------
@pytest.fixture()
def profile_file(tmp_path):
    return save_profile(import_paths([SAMPLES / "kineto" / "triton_example.json.gz"]), tmp_path / "p.json")


def _digest(p) -> str:
    return hashlib.sha256(open(p, "rb").read()).hexdigest()


def test_an_output_that_is_an_input_is_refused(tmp_path, profile_file, capsys):
    p = profile_file
    trace = shutil.copy(SAMPLES / "kineto" / "triton_example.json.gz", tmp_path / "t.json.gz")
    spec = shutil.copy(ROOT / "mmprof" / "rules" / "builtin_fastpath.toml", tmp_path / "s.toml")
    hard = tmp_path / "hardlink.json"
    os.link(p, hard)
    link = tmp_path / "symlink.json"
    link.symlink_to(p)
    cases = [["report", p, "--html", p], ["report", p, "--markdown", p], ["diff", p, trace, "--html", p],
             ["diff", trace, p, "--markdown", trace], ["verify-fastpath", p, "--junit", p],
             ["verify-fastpath", p, "--spec", spec, "--junit", spec], ["import", trace, "-o", trace],
             ["report", p, "--html", hard], ["report", p, "--html", link]]
    before = {f: _digest(f) for f in (p, trace, spec)}
    for args in cases:
        code, _, err = _cli(args, capsys)
        assert code == 2 and "refusing to write over an input of this command" in _one_error_line(err), args
    assert {f: _digest(f) for f in before} == before
    assert link.is_symlink()


def test_symlink_outputs_write_their_target_and_stay_links(tmp_path, profile_file, capsys):
    target = tmp_path / "real.html"
    target.write_text("old")
    link = tmp_path / "out.html"
    link.symlink_to(target)
    code, _, _ = _cli(["report", profile_file, "--html", link], capsys)
    assert code in (0, 1) and link.is_symlink() and target.read_text().startswith("<!DOCTYPE html>")


def test_missing_output_folders_are_refused_never_created(tmp_path, profile_file, capsys):
    """docs/limits.md: mmprof creates no folders for outputs (a typo in a path must not scatter folders)."""
    for args in (["report", profile_file, "--markdown", tmp_path / "a" / "b" / "r.md"],
                 ["export", profile_file, "-o", tmp_path / "a" / "x.json"],
                 ["import", profile_file, "-o", tmp_path / "a" / "p.json"]):
        code, _, err = _cli(args, capsys)
        assert code == 2 and "does not exist; create it first" in _one_error_line(err), args
    assert not (tmp_path / "a").exists()
    (tmp_path / "file").write_text("x")
    for out, needle in ((tmp_path / "file" / "r.md", "a file is in the way"), (tmp_path, "is a directory")):
        code, _, err = _cli(["report", profile_file, "--markdown", out], capsys)
        assert code == 2 and needle in _one_error_line(err)
    assert (tmp_path / "file").read_text() == "x"


@pytest.mark.parametrize("cmd", [["export", "{p}", "-o", "{out}"], ["import", "{p}", "-o", "{out}"],
                                 ["report", "{p}", "--html", "{out}"], ["diff", "{p}", "{p}", "--markdown", "{out}"],
                                 ["verify-fastpath", "{p}", "--junit", "{out}"]])
def test_every_writer_refuses_its_input_by_any_name(tmp_path, profile_file, capsys, cmd):
    """The one guard (mmprof.fileio.check_output) is behind every command that writes: the input itself, a hard
    link to it and a symlink to it are refused, exit 2, the input unchanged."""
    os.link(profile_file, tmp_path / "hard")
    (tmp_path / "soft").symlink_to(profile_file)
    before = _digest(profile_file)
    for out in (profile_file, tmp_path / "hard", tmp_path / "soft"):
        code, _, err = _cli([a.format(p=profile_file, out=out) for a in cmd], capsys)
        assert code == 2 and "refusing to write over an input" in _one_error_line(err), (cmd, out)
    assert _digest(profile_file) == before and (tmp_path / "soft").is_symlink()


def test_devices_and_fifos_are_never_replaced_by_a_regular_file(tmp_path, profile_file, capsys):
    """A character device is written into (/dev/null: exit 0; /dev/full: disk full, one line, exit 2); a FIFO with
    no reader is one line, never a hang; a FIFO with a reader receives the output; none becomes a regular file."""
    code, _, _ = _cli(["export", profile_file, "-o", "/dev/null"], capsys)
    assert code == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    code, _, err = _cli(["export", profile_file, "-o", "/dev/full"], capsys)
    assert code == 2 and "No space left on device" in _one_error_line(err) and stat.S_ISCHR(os.stat("/dev/full").st_mode)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, _, err = _cli(["export", profile_file, "-o", fifo], capsys)
    assert code == 2 and "no process is reading" in _one_error_line(err) and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == sorted(["fifo", Path(profile_file).name])  # no .tmp left


def test_a_failed_write_leaves_no_temporary_file(tmp_path, profile_file, monkeypatch, capsys):
    """A write that fails half-way (here: the disk fills) leaves the old file and no `.tmp` beside it."""
    import mmprof.fileio as fio

    out = tmp_path / "r.md"
    out.write_text("old")
    real = os.fsync

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fio.os, "fsync", full)
    code, _, err = _cli(["report", profile_file, "--markdown", out], capsys)
    monkeypatch.setattr(fio.os, "fsync", real)
    assert code == 2 and "No space left on device" in _one_error_line(err)
    assert out.read_text() == "old" and [f.name for f in tmp_path.iterdir() if f.name.endswith(".tmp")] == []
    assert fio.pending_temporaries() == set()


def test_sigterm_mid_write_leaves_no_temporary_file(tmp_path, profile_file):
    """SIGTERM while an export is written: exit 143, the temporary file removed (mmprof.cli.main's handler)."""
    script = (f"import os, signal, mmprof.render.perfetto as pf\n"
              f"real = pf.trace_chunks\n"
              f"def slow(*a, **k):\n"
              f"    for i, c in enumerate(real(*a, **k)):\n"
              f"        yield c\n"
              f"        os.kill(os.getpid(), signal.SIGTERM)\n"
              f"pf.trace_chunks = slow\n"
              f"from mmprof.cli import main\n"
              f"main(['export', {str(profile_file)!r}, '-o', {str(tmp_path / 'x.json')!r}])\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 143 and "terminated by signal 15" in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path)) == [Path(profile_file).name]


def test_special_files_are_written_into_not_replaced(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there before the write (`cat fifo &`)
    try:
        with track_inputs():
            atomic_write(fifo, b"hello")
        got = os.read(reader, 100)
    finally:
        os.close(reader)
    assert got == b"hello" and stat.S_ISFIFO(os.stat(fifo).st_mode)
    with pytest.raises(BadInput, match="no process is reading"):  # no reader: one line, never a hang
        atomic_write(fifo, b"hello")
    atomic_write("/dev/null", b"x")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_dash_writes_stdout_in_a_real_process(tmp_path, profile_file):
    r = subprocess.run([sys.executable, "-m", "mmprof", "report", str(profile_file), "--markdown", "-"],
                       capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode in (0, 1) and "| " in r.stdout and not (tmp_path / "-").exists()


def _write(path, doc):
    path.write_text(json.dumps(doc))
    return path


# -- numbers against independent counts --------------------------------------------------------------------------
@pytest.mark.parametrize("path, sql", [
    ("rocprofv3/rocpd/14_results.db", "SELECT COUNT(*), SUM(\"end\" - start) FROM {t}"),
    ("rocprofv3/rocpd/28_results.db", "SELECT COUNT(*), SUM(\"end\" - start) FROM {t}"),
    ("nsys/perlmutter-cloverleaf-cuda.sqlite", "SELECT COUNT(*), SUM(\"end\" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL"),
    ("nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite", "SELECT COUNT(*), SUM(\"end\" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL"),
])
def test_summary_kernel_count_and_time_match_the_raw_sqlite(path, sql, capsys):
    from tests.conftest import sql_rows

    f = SAMPLES / path
    t = next(n for (n,) in sql_rows(f, "SELECT name FROM sqlite_master WHERE type='table'")
             if n.startswith("rocpd_kernel_dispatch_")) if "rocpd" in path else None
    n, total = sql_rows(f, sql.format(t=t))[0]
    code, out, _ = _cli(["summary", f, "--json"], capsys)
    ranks = json.loads(out)["ranks"]
    assert code == 0 and sum(r["kernels"] for r in ranks) == n and sum(r["kernel_time_ns"] for r in ranks) == total


def test_summary_matches_the_raw_csv(capsys):
    import csv as _csv

    f = SAMPLES / "rocprofv3" / "csv" / "kernel_trace.csv"
    rows = list(_csv.DictReader(f.open()))
    code, out, _ = _cli(["summary", f, "--json"], capsys)
    r = json.loads(out)["ranks"][0]
    assert code == 0 and r["kernels"] == len(rows)
    assert r["kernel_time_ns"] == sum(int(x["End_Timestamp"]) - int(x["Start_Timestamp"]) for x in rows)


# -- record: the wrapped command's files, the trace folder, a killed record ---------------------------------------
def _record(tmp_path, *args, cmd, timeout=180):
    return subprocess.run([sys.executable, "-m", "mmprof", "record", *map(str, args), "--", *map(str, cmd)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_record_never_writes_over_the_wrapped_script_or_its_files(tmp_path):
    """`record -o` onto the script it runs, or onto any file on the wrapped command line (`--cfg=FILE` too), is
    refused before the command runs (mmprof.capture.record.protect_command_files + the output guard)."""
    prog = tmp_path / "work.py"
    prog.write_text("print('ran')\n")
    cfg = tmp_path / "cfg.json"
    cfg.write_text("{}")
    before = {f: _digest(f) for f in (prog, cfg)}
    for out, cmd in ((prog, [sys.executable, prog]), (cfg, [sys.executable, prog, f"--cfg={cfg}"]),
                     (cfg, [sys.executable, prog, cfg])):
        r = _record(tmp_path, "-o", out, cmd=cmd)
        assert r.returncode == 2 and "refusing to write over an input" in _one_error_line(r.stderr), r.stderr
        assert "ran" not in r.stdout  # refused before the command ran
    assert {f: _digest(f) for f in before} == before


def test_record_keeps_files_in_the_trace_folder_it_did_not_write(tmp_path):
    """The trace folder may hold a user's own files named like mmprof's (`rank0.pid1.partial`, `proc7.meta.json`):
    record neither deletes nor reads them (only what this run wrote is collected)."""
    tdir = tmp_path / "prof.traces"
    tdir.mkdir()
    mine = {"rank0.pid1.partial": "{\"pid\": 1, \"rank\": 0}", "proc7.meta.json": "notes", "proc1.forked": "x",
            "rank3.pid9.seg0.pt.trace.json.gz": "not a trace"}
    for n, text in mine.items():
        (tdir / n).write_text(text)
    r = _record(tmp_path, "-o", tmp_path / "prof.json.gz", cmd=[sys.executable, data_file("record", "plain_script.py")])
    for n, text in mine.items():
        assert (tdir / n).read_text() == text, n
    assert "forked child" not in r.stderr and "rank 3" not in r.stderr


def test_corrupt_partial_markers_are_warnings_not_internal_errors(tmp_path):
    from mmprof.capture.record import collect

    for i, text in enumerate(['{"pid": "x", "steps_seen": "many", "argv": 5, "dist": "r", "segments": 3}',
                              '[1, 2]', '{"rank": 2e400, "world_size": -5, "notes": {"a": 1}}', '{"pid": 1',
                              '\x00\xff']):
        (tmp_path / f"rank{i}.pid{i}.partial").write_bytes(text.encode("utf-8", "surrogateescape")
                                                         if isinstance(text, str) else text)
    for k, data in enumerate([b"\x1f\x8b garbage", b"[1, 2", b"42"]):  # flushed segments of rank0, damaged
        (tmp_path / f"rank0.pid0.seg{k}.pt.trace.json.gz").write_bytes(data)
    procs, forked, warnings = collect(tmp_path)
    assert any("segments are unreadable" in w for w in warnings)
    assert len(procs) == 5 and all(p.trace is None and not p.finished for p in procs)
    assert all(p.world_size is None or p.world_size > 0 for p in procs)


def test_a_killed_record_ends_its_workload(tmp_path):
    """SIGKILL to `mmprof record` (nothing can be forwarded): the workload gets SIGTERM from the kernel
    (PR_SET_PDEATHSIG, mmprof.capture.command._die_with_parent) and exits."""
    pidfile = tmp_path / "pid"
    prog = tmp_path / "sleepy.py"
    prog.write_text(f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(300)\n")
    p = subprocess.Popen([sys.executable, "-m", "mmprof", "record", "-o", str(tmp_path / "o.json.gz"), "--",
                          sys.executable, str(prog)], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import time

    for _ in range(600):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.1)
    child = int(pidfile.read_text())
    p.kill()
    p.wait()
    for _ in range(300):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.1)
    else:
        os.kill(child, 9)
        raise AssertionError("the workload outlived a killed record")


# -- limits applied while reading, before the work (issue 25: hangs and blow-ups) ---------------------------------
def test_a_gzip_bomb_stops_at_the_floor_not_at_its_end(tmp_path, monkeypatch):
    """The expansion ratio is checked against the compressed bytes read so far (mmprof.fileio._gunzip): a bomb is
    refused after GZIP_RATIO_FLOOR bytes, whatever its full size. Floor lowered to 1 MiB here; the 40 MiB bomb
    must be refused with Python-side allocations far below its size (tracemalloc, not a clock)."""
    import tracemalloc

    import mmprof.fileio as fio

    monkeypatch.setattr(fio, "GZIP_RATIO_FLOOR", 2**20)
    monkeypatch.delenv("MMPROF_MAX_INPUT_BYTES", raising=False)
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb") as g:
        for _ in range(40):
            g.write(b" " * 2**20)
    tracemalloc.start()
    try:
        with pytest.raises(BadInput, match=r"expands more than 64x .*MMPROF_MAX_INPUT_BYTES"):
            read_bytes(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 24 * 2**20, peak  # one 16 MiB chunk plus the buffer up to the floor, never the 40 MiB


def test_events_are_counted_before_the_parse(tmp_path, monkeypatch, capsys):
    """The Kineto event limit and the events-per-gzipped-byte limit are checked on the raw bytes (the count of
    "ph" keys) before msgspec builds a single event: the parse is what takes the memory."""
    import mmprof.importers._chrome as ch
    from mmprof.fileio import check_density

    def boom(*a, **k):
        raise AssertionError("parsed before the limit was checked")

    monkeypatch.setattr(ch, "_TRACE", type("D", (), {"decode": staticmethod(boom)}))
    monkeypatch.setenv("MMPROF_MAX_EVENTS", "3")
    f = tmp_path / "t.json"
    f.write_text(json.dumps(kineto_seed()))
    with pytest.raises(BadInput, match="exceed the limit of 3; raise it with MMPROF_MAX_EVENTS"):
        ch.decode(f.read_bytes(), str(f))
    monkeypatch.delenv("MMPROF_MAX_EVENTS")
    with pytest.raises(BadInput, match="per compressed byte .*MMPROF_MAX_EVENTS=N"):
        check_density(2_000_000, 1_000_000, "x.json.gz")  # 2 events per gzipped byte: no real trace (<= 0.1)
    check_density(150_000, 1_000_000, "x.json.gz")  # 0.15 per byte: a dense but plausible trace passes
    check_density(900_000, 1000, "x.json.gz")  # below the floor of a million events: always read


def test_deep_annotation_nesting_is_linear(tmp_path):
    """20,000 nested annotations: imported (no recursion), every scope kept with its depth, and scope paths hold at
    most MAX_PATH_DEPTH levels (the quadratic join is what took 3.9 GiB)."""
    from mmprof.importers._nesting import MAX_PATH_DEPTH
    from tests.fuzz_corpus import nested_annotations

    f = tmp_path / "deep.json"
    f.write_text(json.dumps(nested_annotations(kineto_seed(), 20_000)))
    p = import_paths([f])
    S = p.tables["scopes"]
    assert len(S["depth"]) >= 20_000 and int(S["depth"].max()) >= 19_999
    paths = [p.strings[i] for i in set(p.tables["kernels"]["scope_path"].tolist()) if i >= 0]
    assert paths and max(x.count(" > ") + 1 for x in paths) <= MAX_PATH_DEPTH


def test_megabyte_names_are_cut_at_import_and_stay_distinct(tmp_path, capsys):
    """Names beyond MAX_NAME_CHARS are cut at import to head + tail around their length and hash (two names that
    differ only in the middle stay two names), with a warning; summary then does linear work."""
    from mmprof.profiles.profile import MAX_NAME_CHARS

    doc = kineto_seed()
    ks = [i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel"]
    assert len(ks) >= 2
    for j, i in enumerate(ks[:2]):
        doc["traceEvents"][i]["name"] = "gemm<" + "x" * 2**20 + ("a" if j else "b") + "x" * 2**19 + ">"
    f = tmp_path / "long.json"
    f.write_text(json.dumps(doc))
    p = import_paths([f])
    names = {p.strings[i] for i in p.tables["kernels"]["name"].tolist()}
    cut = [n for n in names if "characters, cut; sha1" in n]
    assert len(cut) == 2 and all(len(n) <= MAX_NAME_CHARS + 100 for n in names)
    assert any("were cut" in w for w in p.meta.get("warnings", []))
    code, out, _ = _cli(["summary", f, "--json"], capsys)
    assert code == 0 and len(out) < 2**20


@pytest.mark.parametrize("node", ["/dev/zero", "fifo"])
def test_devices_and_fifos_are_not_inputs(tmp_path, node, capsys):
    """/dev/zero would be read up to the 16 GiB limit and a FIFO without writer blocks forever: refused."""
    if node == "fifo":
        node = tmp_path / "fifo"
        os.mkfifo(node)
    for args in (["summary", node], ["shapes", "--model", node], ["verify-fastpath", "--spec", node, node]):
        code, _, err = _cli(args, capsys)
        assert code == 2 and _one_error_line(err), args


# -- one error path: OS errors, stdout, --debug, wrong exit codes ------------------------------------------------
def _proc(args, **kw):
    return subprocess.run([sys.executable, "-m", "mmprof", *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, **kw)


def test_a_closed_or_full_stdout_is_exit_2_never_1(profile_file):
    """A closed stdout pipe (`mmprof X | head -1`: the reader went away, issue 33) ends quietly with the exit code
    the command had decided, the gate's verdict included; /dev/full (the output was lost) is exit 2 and one line,
    for the gate too (exit 1 means violations)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for args in (["verify-fastpath", profile_file], ["summary", profile_file, "--json"], ["rules"]):
        with open(os.devnull, "w") as null:
            want = subprocess.run([sys.executable, "-m", "mmprof", *map(str, args)], stdout=null, cwd=ROOT,
                                  env=env).returncode
        r, w = os.pipe()
        os.close(r)
        p = subprocess.run([sys.executable, "-m", "mmprof", *map(str, args)], stdout=w, stderr=subprocess.PIPE,
                           text=True, cwd=ROOT, env=env)
        os.close(w)
        assert p.returncode == want and p.stderr == "", (args, p.stderr)
        with open("/dev/full", "w") as full:
            p = subprocess.run([sys.executable, "-m", "mmprof", *map(str, args)], stdout=full, stderr=subprocess.PIPE,
                               text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert p.returncode == 2 and "No space left on device" in p.stderr and "Traceback" not in p.stderr, args


def test_debug_is_only_the_global_option(profile_file, capsys):
    """`--debug` as a value (a classify name, a phase) is that value, not the traceback switch."""
    code, out, err = _cli(["classify", "--name", "--debug"], capsys)
    assert code == 0 and "Traceback" not in err
    code, _, err = _cli(["report", profile_file, "--phase", "--debug"], capsys)
    assert code == 2 and "Traceback" not in err and _one_error_line(err).startswith("mmprof: error:")


def test_file_too_large_is_one_line(tmp_path, profile_file):
    """`ulimit -f` (RLIMIT_FSIZE): Python ignores SIGXFSZ, the write fails with EFBIG: one line, exit 2, no .tmp."""
    import resource

    def small():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    r = subprocess.run([sys.executable, "-m", "mmprof", "export", str(profile_file), "-o", str(tmp_path / "x.json")],
                       capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       preexec_fn=small)
    assert r.returncode == 2 and "File too large" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert os.listdir(tmp_path) == [Path(profile_file).name]


def test_junit_is_written_for_bad_input_too(tmp_path, capsys):
    """docs/fastpath.md: the JUnit file is written in every case; a bad input is one <error> test case."""
    import xml.etree.ElementTree as ET

    xml = tmp_path / "j.xml"
    for args in (["verify-fastpath", tmp_path / "missing.json", "--junit", xml],
                 ["verify-fastpath", SAMPLES / "kineto" / "triton_example.json.gz", "--spec", tmp_path / "no.toml",
                  "--junit", xml]):
        xml.unlink(missing_ok=True)
        code, _, err = _cli(args, capsys)
        assert code == 2 and _one_error_line(err)
        root = ET.parse(xml).getroot()
        assert root.get("errors") == "1" and root.find(".//error").get("type") == "BadInput"
    prof = tmp_path / "p.json"
    shutil.copy(SAMPLES / "kineto" / "triton_example.json.gz", prof)
    before = _digest(prof)
    (tmp_path / "bad.toml").write_text("x =")
    for out in (prof, tmp_path / "link.xml"):  # the error comes before the profile is read: still never over it
        if out != prof:
            out.symlink_to(prof)
        code, _, err = _cli(["verify-fastpath", prof, "--spec", tmp_path / "bad.toml", "--junit", out], capsys)
        assert code == 2 and "not valid TOML" in _one_error_line(err)
    assert _digest(prof) == before


def test_rocpd_views_and_dangling_tables_are_refused(tmp_path, capsys):
    """A rocpd database whose suffixed tables are views (garbage or dangling) is damaged: exit 2, never a summary
    of empty names with exit 0."""
    import sqlite3

    src = SAMPLES / "rocprofv3" / "rocpd" / "14_results.db"
    con = sqlite3.connect(src)
    sfx = next(n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")
               if n.startswith("rocpd_string_"))[len("rocpd_string"):]
    con.close()
    for name, sql in (("dangling", f"CREATE VIEW rocpd_string{sfx} AS SELECT * FROM gone"),
                      ("garbage", f"CREATE VIEW rocpd_string{sfx} AS SELECT 1 AS id, 'x' AS string")):
        f = tmp_path / f"{name}.db"
        shutil.copy(src, f)
        c = sqlite3.connect(f)
        c.execute(f"DROP TABLE rocpd_string{sfx}")
        c.execute(sql)
        c.commit()
        c.close()
        code, _, err = _cli(["summary", f], capsys)
        assert code == 2 and "is a view, not a table" in _one_error_line(err), name


@pytest.mark.parametrize("key, value", [("mlp_layer_types", ["dense", 7]), ("mlp_layer_types", ["dense", "xyz"]),
                                        ("moe_layer_freq", [1, "x"]), ("mlp_layer_types", [["dense"], "sparse"])])
def test_garbage_per_layer_lists_are_refused(tmp_path, key, value, capsys):
    from tests.fuzz_corpus import config_seed

    cfg = config_seed()
    tc = cfg["text_config"]
    n = tc["num_hidden_layers"]
    tc.pop("moe_layer_freq", None) if key == "mlp_layer_types" else tc.pop("mlp_layer_types", None)
    tc[key] = (value * n)[:n]
    f = _write(tmp_path / "config.json", cfg)
    code, _, err = _cli(["shapes", "--model", f, "--json"], capsys)
    assert code == 2 and f"`{key}`[" in _one_error_line(err)


def test_nsys_report_names_the_export_command(tmp_path, capsys):
    f = tmp_path / "run.nsys-rep"
    f.write_bytes(os.urandom(4096))
    code, _, err = _cli(["summary", f], capsys)
    assert code == 2 and "nsys export --type sqlite" in _one_error_line(err)


def test_seed_beyond_64_bits_is_a_usage_error():
    r = _proc(["run", "--seed", str(2**64), "--preset", "tiny"])
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--seed" in r.stderr
