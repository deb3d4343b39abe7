"""`mmprof record` keeps the wrapped command's output as the run's log, and the command sees what it would see.

The truths are the terminal's and POSIX's: a program whose stdout is a terminal finds `isatty()` true and the
terminal's size, one whose stdout is a pipe finds it false, one started with stdout closed finds it closed; the
bytes the program writes reach mmprof's own stdout / stderr unchanged. The engine stand-in
(tests/data/record/engine_log.py) prints vLLM 0.26's messages in vLLM's format from a spawn child that prefixes its
lines as vLLM's EngineCore does (vllm/utils/system_utils.py:209).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from mmprof.capture.command import run_command
from mmprof.capture.output import OutputCapture
from mmprof.profiles.io import load_profile
from tests.conftest import data_file

ENGINE = str(data_file("record", "engine_log.py"))


def record_cmd(tmp_path: Path, *args: str, cmd: list[str]) -> list[str]:
    return [sys.executable, "-m", "mmprof", "record", "-o", str(tmp_path / "p.json.gz"), *args, "--", *cmd]


def seen(tmp_path: Path, who: str) -> dict:
    return json.loads((tmp_path / f"seen.{who}").read_text())


def log_rows(profile) -> list[dict]:
    df = profile.df("log")
    return [{c: (None if v != v else v) for c, v in row.items()} for row in df.astype(object).to_dict("records")]


def test_record_keeps_the_log_per_process_with_ranks_and_facts(tmp_path):
    r = subprocess.run(record_cmd(tmp_path, cmd=[sys.executable, ENGINE, str(tmp_path / "seen")]),
                       capture_output=True, cwd=tmp_path, timeout=180)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert b"\xff\xfe noise \x00 here" in r.stderr           # bytes pass through unchanged, invalid UTF-8 too
    assert r.stdout.startswith(b"INFO 12-01 10:21:02 [utils.py:253] front end: starting the engine core\n")
    assert seen(tmp_path, "parent")["stdout"] == seen(tmp_path, "child")["stdout"] == "not a tty"  # a pipe, as given
    p = load_profile(tmp_path / "p.json.gz")
    child = seen(tmp_path, "child")["pid"]
    rank_of = {r["pid"]: r["rank"] for r in p.meta["ranks"]}
    rows = log_rows(p)
    engine = [x for x in rows if x["process"] == "EngineCore"]
    assert engine and all(x["pid"] == child and x["rank"] == rank_of[child] for x in engine)
    front = [x for x in rows if x["text"].startswith("front end")]
    assert front and all(x["rank"] == -1 and x["pid"] == -1 for x in front)
    default = next(x for x in rows if "Using default MoE config" in x["text"])
    assert (default["level"], default["format"], default["stream"]) == ("WARNING", "vllm", "stdout")
    assert default["time_ns"] > 1_600_000_000 * 10**9           # wall clock at arrival (Unix epoch, ns)
    assert any(x["text"] == "Capturing CUDA graphs: 100%" for x in rows)  # the progress bar's last state
    assert any(x["text"].startswith("unterminated last line") for x in rows)
    assert {s["stream"] for s in p.meta["log"]["sources"]} == {"stdout", "stderr"}
    assert b"log: kept" in r.stderr


def _run_in_pty(argv: list[str], cwd: Path, rows: int = 40, cols: int = 100) -> tuple[int, bytes]:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=cwd)
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            out += data
        elif p.poll() is not None:
            break
    os.close(master)
    return p.wait(timeout=60), out


def test_on_a_terminal_the_command_still_sees_a_terminal_of_the_same_size(tmp_path):
    rc, out = _run_in_pty(record_cmd(tmp_path, cmd=[sys.executable, ENGINE, str(tmp_path / "seen")]), tmp_path)
    assert rc == 0, out.decode(errors="replace")[-2000:]
    for who in ("parent", "child"):
        s = seen(tmp_path, who)
        assert (s["stdout"], s["stderr"], s["size"]) == ("tty", "tty", [100, 40])
    assert b"\x1b[33mWARNING\x1b[0m" in out                     # it coloured its log, as on a terminal
    assert b"\r\n" in out and b"\r\r\n" not in out              # newline translation happened once
    rows = log_rows(load_profile(tmp_path / "p.json.gz"))
    w = next(x for x in rows if "Using default MoE config" in x["text"])
    assert w["level"] == "WARNING" and "\x1b" not in w["text"]  # colours removed from the kept copy


def test_no_log_inherits_stdio_and_keeps_nothing(tmp_path):
    rc, out = _run_in_pty(record_cmd(tmp_path, "--no-log", cmd=[sys.executable, ENGINE, str(tmp_path / "seen")]),
                          tmp_path)
    assert rc == 0
    assert seen(tmp_path, "child")["stdout"] == "tty"
    p = load_profile(tmp_path / "p.json.gz")
    assert p.n("log") == 0 and "log" not in p.meta


def test_a_closed_stdout_stays_closed_for_the_command(tmp_path):
    argv = record_cmd(tmp_path, cmd=[sys.executable, ENGINE, str(tmp_path / "seen")])
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path, timeout=180,
                       preexec_fn=lambda: os.close(1))
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert seen(tmp_path, "parent")["stdout"] == "closed" and seen(tmp_path, "parent")["stderr"] == "not a tty"
    p = load_profile(tmp_path / "p.json.gz")
    assert [s["stream"] for s in p.meta["log"]["sources"]] == ["stderr"]  # only what could be captured


def test_a_huge_output_is_bounded_and_keeps_the_fact_lines(tmp_path):
    argv = record_cmd(tmp_path, "--log-limit", "64KiB",
                      cmd=[sys.executable, ENGINE, str(tmp_path / "seen"), "--lines", "100000"])
    r = subprocess.run(argv, capture_output=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
    assert r.stdout.count(b"filler line ") == 100_000            # every byte still passed through
    p = load_profile(tmp_path / "p.json.gz")
    texts = [t for t in p.col("log", "text", decode=True)]
    assert len(texts) < 2000 and sum(len(t) + 40 for t in texts) <= 64 * 1024 + 200
    assert any("Using default MoE config" in t for t in texts)   # in the head
    assert any("Graph capturing finished" in t for t in texts)   # after the filler: in the tail
    out = [s for s in p.meta["log"]["sources"] if s["stream"] == "stdout"][0]
    assert out["lines"] >= 100_000 and out["dropped"] == out["lines"] - out["kept"] > 90_000


def test_output_capture_passes_bytes_unchanged_and_keeps_lines(capfd):
    code = ("import sys, os; sys.stdout.write('a\\r\\nb\\x1b[1mc\\x1b[0m\\n'); sys.stdout.flush(); "
            "os.write(2, b'e\\xff\\n'); print('tail', end='')")
    out = OutputCapture(use_pty=False)
    assert run_command([sys.executable, "-c", code], None, output=out) == 0
    assert out.drain(10)
    got = capfd.readouterr()
    assert got.out == "a\r\nb\x1b[1mc\x1b[0m\ntail"               # what the command wrote, byte for byte
    assert got.err.encode("utf-8", "surrogateescape") in (b"e\xff\n", "e\ufffd\n".encode())
    lines, sources = out.snapshot()
    assert [(ln.stream, ln.text) for ln in lines if ln.stream == "stdout"] == [("stdout", "a"), ("stdout", "bc"),
                                                                               ("stdout", "tail")]
    assert [ln.text for ln in lines if ln.stream == "stderr"] == ["e\ufffd"]
    assert {s["stream"]: s["bytes"] for s in sources} == {"stdout": 18, "stderr": 3}


def test_output_capture_on_a_pty_gives_the_command_a_terminal(capfd):
    out = OutputCapture(use_pty=True)
    code = "import os, sys; print(os.isatty(1), os.isatty(2)); sys.stderr.write('err\\n')"
    assert run_command([sys.executable, "-c", code], None, output=out) == 0
    assert out.drain(10)
    got = capfd.readouterr()
    assert got.out == "True True\n"                               # OPOST off on the pty: no \r added
    assert sorted((ln.stream, ln.text) for ln in out.snapshot()[0]) == [("stderr", "err"), ("stdout", "True True")]


def test_when_our_reader_goes_away_the_command_gets_a_broken_pipe(tmp_path):
    code = ("import sys, time\nfor i in range(200000):\n    print('x' * 100)\n"
            "sys.stderr.write('never reached\\n')")
    argv = record_cmd(tmp_path, cmd=[sys.executable, "-c", "import torch\n" + code])
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    p.stdout.read(4096)
    p.stdout.close()                                              # `| head -c 4096`
    _, err = p.communicate(timeout=180)
    assert p.returncode != 0                                      # it died of the broken pipe, as it would unwrapped
    assert b"never reached" not in err
    assert b"Traceback (most recent call last)" not in err or b"BrokenPipeError" in err
