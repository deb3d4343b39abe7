"""`mmprof record`: real commands run under the start-up hook on CPU, merged into Profiles.

Every test runs `python -m mmprof record` as a user would (a subprocess), on the helper programs in
tests/data/record/ (none of which contains profiling code), and checks the command's output, its exit
code, the per-process trace files and the merged Profile.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mmprof.analysis.checks.verify import verify
from mmprof.profiles.io import load_profile
from tests.conftest import ROOT, data_file

HOOK_DIR = ROOT / "mmprof" / "capture" / "hook"


def torchrun() -> str:
    exe = Path(sys.executable).with_name("torchrun")
    return str(exe) if exe.exists() else shutil.which("torchrun")


def run_record(tmp_path: Path, *args: str, cmd: list[str], env: dict | None = None, timeout: float = 120):
    out = tmp_path / "prof.json.gz"
    full = [sys.executable, "-m", "mmprof", "record", "-o", str(out), *args, "--", *cmd]
    e = dict(os.environ)
    e.update(env or {})
    proc = subprocess.run(full, capture_output=True, text=True, timeout=timeout, env=e, cwd=tmp_path)
    return proc, out


def script(name: str) -> str:
    return str(data_file("record", name))


def ops_df(profile):
    df = profile.df("ops")
    df["name"] = df["name"].astype(str)
    return df


# -- (a) a plain torch script -----------------------------------------------------------------------
def test_plain_script_output_exit_code_shapes_and_scopes(tmp_path):
    proc, out = run_record(tmp_path, cmd=[sys.executable, script("plain_script.py")])
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "plain_script: start\nplain_script: done True\n"  # stdout untouched
    assert "plain_script: to stderr" in proc.stderr
    p = load_profile(out)
    assert p.meta["source"]["format"] == "record"
    assert p.meta["capture"]["mode"] == "full" and p.meta["capture"]["backend"] == "torch"
    assert p.meta["command"][-1].endswith("plain_script.py")
    assert [r["status"] for r in p.meta["ranks"]] == ["complete"]
    ops = ops_df(p)
    mm = ops[ops.name == "aten::mm"]
    assert len(mm) == 3
    assert set(mm.input_dims.astype(str)) == {"[[8, 16], [16, 32]]"}
    assert sorted(mm.step.tolist()) == [0, 1, 2]
    scopes = set(p.df("scopes").name.astype(str))
    assert {"user.matmul", "mmprof.step.0", "mmprof.step.1", "mmprof.step.2"} <= scopes
    traces = sorted(f.name for f in (tmp_path / "prof.traces").iterdir())
    assert len([t for t in traces if t.endswith(".pt.trace.json.gz")]) == 1
    assert not [t for t in traces if t.endswith(".partial")]


# -- (b) torchrun, 2 ranks, gloo -----------------------------------------------------------------
@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("gloo")
    proc, out = run_record(tmp_path, cmd=[torchrun(), "--nproc-per-node", "2", script("dist_allreduce.py")])
    return tmp_path, proc, out


@pytest.mark.slow
def test_torchrun_two_ranks_gloo(gloo_run):
    tmp_path, proc, out = gloo_run
    assert proc.returncode == 0, proc.stderr
    assert "rank 0: ok True" in proc.stdout and "rank 1: ok True" in proc.stdout
    p = load_profile(out)
    assert p.ranks == [0, 1]
    assert p.meta["parallel"]["world_size"] == 2
    assert [r["status"] for r in p.meta["ranks"]] == ["complete", "complete"]
    assert len({r["pid"] for r in p.meta["ranks"]}) == 2
    # the torchrun launcher imports torch but is not a rank: only the two workers wrote traces
    metas = list((tmp_path / "prof.traces").glob("*.meta.json"))
    assert sorted(m.name.split(".")[0] for m in metas) == ["rank0", "rank1"]
    ops = ops_df(p)
    for r in (0, 1):
        mine = ops[ops["rank"] == r]
        assert (mine.name == "c10d::allreduce_").sum() == 4  # one all_reduce per step, 4 steps
        assert sorted(set(mine[mine.name == "aten::mm"].step)) == [0, 1, 2, 3]
    gloo = p.df("scopes")
    gloo = gloo[gloo.name.astype(str) == "gloo:all_reduce"]
    assert sorted(set(gloo["rank"])) == [0, 1]
    assert not p.meta["warnings"]


@pytest.mark.slow
def test_torchrun_gloo_collectives_table(gloo_run):
    _, proc, out = gloo_run
    assert proc.returncode == 0, proc.stderr
    coll = load_profile(out).df("collectives")
    assert sorted(set(coll["rank"])) == [0, 1]
    assert (coll.name.astype(str) == "allreduce").sum() >= 8


# -- (c) a rank that dies mid-run ---------------------------------------------------------------
@pytest.mark.slow
def test_rank_killed_with_flush_keeps_its_earlier_steps(tmp_path):
    cmd = [torchrun(), "--nproc-per-node", "2", script("dist_allreduce.py"), "--crash-rank", "1", "--crash", "kill",
           "--crash-after", "2"]
    proc, out = run_record(tmp_path, "--flush-every", "1", "--json", cmd=cmd)
    assert proc.returncode == 1, proc.stderr  # torchrun's own exit code for a failed worker, passed through
    assert "rank 1: crashing (kill)" in proc.stdout
    p = load_profile(out)
    ranks = {r["rank"]: r for r in p.meta["ranks"]}
    assert ranks[1]["status"] == "partial" and ranks[1]["partial"] is True
    # the survivor may finish, or be torn down by torchrun once rank 1 died: with --flush-every 1 its
    # flushed steps are kept either way
    assert ranks[0]["status"] in ("complete", "partial")
    assert len(ops_df(p).query("rank == 0 and name == 'aten::mm'")) >= 2
    ops = ops_df(p)
    r1 = ops[(ops["rank"] == 1) & (ops.name == "aten::mm")]
    assert sorted(set(r1.step)) == [0, 1]  # the steps flushed before SIGKILL, nothing after
    assert any("rank 1" in w and "did not finish" in w for w in p.meta["warnings"])
    assert "partial" in proc.stderr
    # the marker of the dead process stays next to its (recovered) trace
    assert list((tmp_path / "prof.traces").glob("rank1.*.partial"))
    # --json prints the record result after the command's own output
    doc = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert doc["exit_code"] == 1 and doc["partial_ranks"] == [1]


@pytest.mark.slow
def test_rank_os_exit_mid_run_keeps_its_data(tmp_path):
    # os._exit skips atexit; the hook's os._exit wrapper writes the trace first, so nothing is lost
    cmd = [torchrun(), "--nproc-per-node", "2", script("dist_allreduce.py"), "--crash-rank", "1", "--crash", "exit"]
    proc, out = run_record(tmp_path, cmd=cmd)
    assert proc.returncode == 1, proc.stderr
    p = load_profile(out)
    ranks = {r["rank"]: r for r in p.meta["ranks"]}
    assert ranks[1]["status"] == "complete" and ranks[1]["partial"] is False
    assert any("os._exit(7)" in n for n in ranks[1]["notes"])
    assert 0 in ranks  # the survivor is reported; whether torchrun tore it down before it wrote is a race
    ops = ops_df(p)
    r1 = ops[(ops["rank"] == 1) & (ops.name == "aten::mm")]
    assert sorted(r1.step) == [0, 1]  # the two steps it ran before os._exit(7)
    assert any(w.startswith("rank 1: exited through os._exit(7)") for w in p.meta["warnings"])
    # rank 1 finished its trace, so its marker is gone; rank 0's stays exactly when torchrun tore it down before
    # it finished (the race above: a dead process's marker stays beside its trace, test_rank_killed_...)
    left = {f.name.split(".")[0] for f in (tmp_path / "prof.traces").glob("*.partial")}
    assert "rank1" not in left
    assert ("rank0" in left) == bool(ranks[0]["partial"]), (left, ranks[0])


@pytest.mark.slow
def test_rank_killed_without_flush_is_reported_missing(tmp_path):
    cmd = [torchrun(), "--nproc-per-node", "2", script("dist_allreduce.py"), "--crash-rank", "1", "--crash", "kill"]
    proc, out = run_record(tmp_path, cmd=cmd)
    assert proc.returncode == 1, proc.stderr
    p = load_profile(out)
    ranks = {r["rank"]: r for r in p.meta["ranks"]}
    assert ranks[1]["status"] == "no-data" and ranks[1]["partial"] is True
    assert ranks[0]["status"] in ("complete", "partial")  # finished, or torn down by torchrun and flushed on SIGTERM
    assert p.ranks == [0, 1] and sorted(set(p.df("ops")["rank"])) == [0]  # rank 0's data is kept
    assert any("rank(s) 1 wrote no trace" in w for w in p.meta["warnings"])
    assert "no-data" in proc.stderr


@pytest.mark.parametrize("in_range", [False, True])
def test_os_exit_after_work_keeps_the_trace(tmp_path, in_range):
    cmd = [sys.executable, script("os_exit_script.py"), "5"] + (["--in-range"] if in_range else [])
    proc, out = run_record(tmp_path, cmd=cmd)
    assert proc.returncode == 5, proc.stderr
    assert proc.stdout == "os_exit_script: exiting\n"
    p = load_profile(out)
    rank = p.meta["ranks"][0]
    assert rank["status"] == "complete" and rank["partial"] is False
    assert rank["notes"] == ["exited through os._exit(5); the trace was written just before"]
    assert "rank 0: exited through os._exit(5); the trace was written just before" in p.meta["warnings"]
    mm = ops_df(p)
    mm = mm[mm.name == "aten::mm"]
    assert len(mm) == 4 if in_range else len(mm) == 3  # --in-range: one more matmul inside the open range
    assert sorted(mm.step[mm.step >= 0]) == [0, 1, 2]
    assert ("still.open" in set(p.df("scopes").name.astype(str))) is in_range
    assert not list((tmp_path / "prof.traces").glob("*.partial"))


def test_os_exit_from_another_thread_keeps_exit_code_and_reports_why(tmp_path):
    # torch.profiler stopped from a thread other than its starter segfaults: the hook must not try, so the
    # program still exits with its own code, and the report says why this process has no trace
    proc, out = run_record(tmp_path, cmd=[sys.executable, script("os_exit_script.py"), "6", "--from-thread"])
    assert proc.returncode == 2, proc.stderr  # mmprof: nothing usable captured
    assert "(the command exited with code 6)" in proc.stderr
    assert "[mmprof] could not write the trace of pid" in proc.stderr and "another thread" in proc.stderr
    marker = json.loads(next((tmp_path / "prof.traces").glob("*.partial")).read_text())
    assert any("started by another thread" in n for n in marker["notes"])


@pytest.mark.slow
def test_torchrun_entry_point_ending_in_os_exit_is_captured(tmp_path):
    # mmprof.runtime.torchrun ends with os._exit (as the H200 run of `mmprof record -- torchrun ... -m
    # mmprof.runtime.torchrun` did, which then captured nothing)
    cmd = [torchrun(), "--nproc-per-node", "1", "-m", "mmprof.runtime.torchrun", "--preset", "tiny",
           "--prompt-len", "16", "--decode-steps", "2"]
    proc, out = run_record(tmp_path, cmd=cmd, env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert '"decode_steps": 2' in proc.stdout
    p = load_profile(out)
    assert [(r["rank"], r["status"]) for r in p.meta["ranks"]] == [(0, "complete")]
    assert any("os._exit(0)" in n for n in p.meta["ranks"][0]["notes"])
    ops = ops_df(p)
    assert {"prefill", "decode"} <= set(ops.phase.astype(str))
    assert sorted(set(ops.step[ops.step >= 0])) == [0, 1, 2]
    assert "layers.0.attn.qkv" in set(p.df("scopes").name.astype(str))


# -- (d) transformers' MiniMax M3, tiny config ---------------------------------------------------
@pytest.mark.slow
def test_transformers_minimax_m3_tiny(tmp_path):
    proc, out = run_record(tmp_path, cmd=[sys.executable, script("m3_transformers.py")])
    assert proc.returncode == 0, proc.stderr
    assert "m3 logits (1, 1, 128)" in proc.stdout
    p = load_profile(out)
    ops = ops_df(p)
    assert sorted(set(ops.step[ops.step >= 0])) == [0, 1, 2]
    lin = ops[ops.name == "aten::linear"]
    dims = lin.input_dims.astype(str)
    assert dims.str.contains(r"\[1, 12, 64\]").any()  # prefill: 12 prompt tokens, hidden 64
    assert dims.str.contains(r"\[1, 1, 64\]").any()   # decode: one token
    assert (ops.input_dims.notna()).sum() > 100
    # no code change, yet every module call is a range named by its path: the structure is known
    names = set(p.df("scopes").name.astype(str))
    assert "model.layers.1.mlp.shared_experts (MiniMaxM3VLDenseMLP)" in names
    assert "model.layers.1.self_attn.indexer (MiniMaxM3VLIndexer)" in names
    res = verify(p)
    st = {r.id: r.status for r in res.results}
    assert st["shared-expert-fused"] == "fail" and st["routed-experts-grouped"] == "pass"
    shared = next(r for r in res.results if r.id == "shared-expert-fused")
    assert "layers 1" in shared.evidence[0]
    # --no-modules: no module ranges, so no structure (the user's own annotations only)
    proc, out = run_record(tmp_path, "--no-modules", cmd=[sys.executable, script("m3_transformers.py")])
    assert proc.returncode == 0, proc.stderr
    p2 = load_profile(out)
    assert not any("(" in n for n in p2.df("scopes").name.astype(str))
    assert {r.id: r.status for r in verify(p2).results}["shared-expert-fused"] == "no_evidence"


# -- (e) the reference runtime under torchrun ----------------------------------------------------
@pytest.mark.slow
def test_reference_runtime_torchrun_two_ranks(tmp_path):
    proc, out = run_record(tmp_path, cmd=[torchrun(), "--nproc-per-node", "2", script("runtime_tp.py")])
    assert proc.returncode == 0, proc.stderr
    p = load_profile(out)
    assert p.ranks == [0, 1] and p.meta["parallel"]["world_size"] == 2
    scopes = p.df("scopes")
    names = set(scopes.name.astype(str))
    assert {"layers.0.attn.qkv", "layers.0.attn.o_proj", "embed", "lm_head"} <= names
    assert any(n.endswith(".moe.router") for n in names)
    ops = ops_df(p)
    for r in (0, 1):
        mine = ops[ops["rank"] == r]
        assert {"prefill", "decode"} <= set(mine.phase.astype(str))
        assert (mine.name == "c10d::allreduce_").sum() > 0


@pytest.mark.slow
def test_reference_runtime_light_mode_switches_only_at_a_safe_point(tmp_path):
    # The runtime's step.0 range closes inside mmprof.prefill; restarting the profiler there crashes torch
    # (SIGSEGV) when prefill's range exits. The switch must wait until prefill has closed.
    proc, out = run_record(tmp_path, "--light", cmd=[sys.executable, script("runtime_single.py")])
    assert proc.returncode == 0, proc.stderr
    assert "runtime ok" in proc.stdout
    ops = ops_df(load_profile(out))
    shaped = ops.input_dims.notna()
    assert shaped[ops.phase.astype(str) == "prefill"].all() and (ops.phase.astype(str) == "prefill").sum() > 100
    assert not shaped[ops.phase.astype(str) == "decode"].any() and (ops.phase.astype(str) == "decode").sum() > 100


# -- (f) light mode ------------------------------------------------------------------------------
def test_light_mode_shapes_first_step_only(tmp_path):
    proc, out = run_record(tmp_path, "--light", cmd=[sys.executable, script("plain_script.py")])
    assert proc.returncode == 3, proc.stderr
    p = load_profile(out)
    assert p.meta["capture"]["mode"] == "light"
    ops = ops_df(p)
    mm = ops[ops.name == "aten::mm"].sort_values("step")
    assert mm.step.tolist() == [0, 1, 2]  # every step's ops are still there
    assert mm.input_dims.astype(str).tolist()[0] == "[[8, 16], [16, 32]]"
    assert mm.input_dims.isna().tolist() == [False, True, True]  # shapes for the first step only
    meta = json.loads(next((tmp_path / "prof.traces").glob("*.meta.json")).read_text())
    assert [s["record_shapes"] for s in meta["segments"]] == [True, False]


@pytest.mark.parametrize("in_step", [False, True])
def test_light_mode_on_the_gpu_start_path(tmp_path, in_step):
    # benchmarks/h200/record_gpu.py's `light` case (cuda_script.py) on a CPU, with the hook's GPU-build start
    # path forced (fake_gpu.py): the capture starts at the first "GPU use", not at import.
    cmd = [sys.executable, script("gpu_path_light.py"), "4"] + (["--in-step"] if in_step else [])
    proc, out = run_record(tmp_path, "--light", cmd=cmd)
    assert proc.returncode == 0, proc.stderr
    p = load_profile(out)
    ops = ops_df(p)
    # the start point: cuda_script's CPU randn before it is not captured (nor step 0's with --in-step)
    assert (ops.name == "aten::randn").sum() == (3 if in_step else 4)
    mm = ops[ops.name == "aten::mm"]
    assert len(mm) == 4  # every step's matmul is there
    shaped = mm[mm.input_dims.notna()]
    assert len(shaped) == 1 and shaped.input_dims.astype(str).tolist() == ["[[64, 256], [256, 256]]"]
    # started inside step 0's range, that range's start is not in the trace, so its ops have no step
    assert shaped.step.tolist() == [-1 if in_step else 0]
    assert sorted(mm.step[mm.input_dims.isna()]) == [1, 2, 3]
    meta = json.loads(next((tmp_path / "prof.traces").glob("*.meta.json")).read_text())
    assert [s["record_shapes"] for s in meta["segments"]] == [True, False]
    assert meta["steps_seen"] == 4 and meta["segments"][1]["first_step"] == 1


def test_window_skip_and_steps(tmp_path):
    proc, out = run_record(tmp_path, "--skip", "1", "--steps", "1", cmd=[sys.executable, script("plain_script.py")])
    assert proc.returncode == 3, proc.stderr
    p = load_profile(out)
    assert p.meta["capture"]["window"]["skip"] == 1 and p.meta["capture"]["window"]["steps"] == 1
    ops = ops_df(p)
    assert set(ops.step) == {1}
    assert (ops.name == "aten::mm").sum() == 1


def test_window_that_never_opens_is_an_error_not_a_pass(tmp_path):
    proc, _ = run_record(tmp_path, "--skip", "5", "--steps", "1", cmd=[sys.executable, script("plain_script.py")])
    assert proc.returncode == 2
    assert "plain_script: done True" in proc.stdout  # the command still ran, output intact
    assert "mmprof: error: nothing captured: the capture window never opened" in proc.stderr


# -- (g) SIGTERM to mmprof record ------------------------------------------------------------------
def test_sigterm_is_forwarded_and_trace_flushed(tmp_path):
    out = tmp_path / "prof.json.gz"
    p = subprocess.Popen([sys.executable, "-m", "mmprof", "record", "-o", str(out), "--",
                          sys.executable, script("loop_until_signal.py")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGTERM)
    rest, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, err
    prof = load_profile(out)
    rank = prof.meta["ranks"][0]
    assert rank["status"] == "complete"
    assert any("stopped by signal 15" in n for n in rank["notes"])
    steps = set(ops_df(prof).step)
    assert {0, 1, 2} <= steps  # the steps before the signal are in the trace


# -- workers, fork, the program's own profiler, chaining -----------------------------------------
@pytest.mark.slow
def test_spawn_workers_are_captured_and_fork_children_noted(tmp_path):
    proc, out = run_record(tmp_path, cmd=[sys.executable, script("mp_workers.py"), "spawn"])
    assert proc.returncode == 0, proc.stderr
    assert "exitcodes [0, 0]" in proc.stdout
    p = load_profile(out)
    assert len(p.meta["ranks"]) == 3  # the parent and both spawned workers
    scopes = p.df("scopes")
    by_rank = scopes.groupby("rank").name.apply(lambda s: set(s.astype(str)))
    assert sum(bool({"worker.0.step.0", "worker.1.step.0"} & s) for s in by_rank) == 2

    proc, out = run_record(tmp_path, cmd=[sys.executable, script("mp_workers.py"), "fork"])
    assert proc.returncode == 0, proc.stderr
    p = load_profile(out)
    assert p.meta["capture"]["forked_not_captured"] == 2
    assert any("forked child" in w for w in p.meta["warnings"])


def test_fork_children_capture_themselves_when_parent_profiler_not_running(tmp_path):
    # The parent waits for its window (no worker.* steps of its own), so no profiler runs when it forks:
    # each forked worker starts its own session and captures its second step, then os._exits (as
    # multiprocessing's fork workers do); the trace is written at os._exit.
    proc, out = run_record(tmp_path, "--step-marker", "worker.*", "--skip", "1", "--steps", "1",
                           cmd=[sys.executable, script("mp_workers.py"), "fork"])
    assert proc.returncode == 0, proc.stderr
    p = load_profile(out)
    assert [r["status"] for r in p.meta["ranks"]] == ["complete", "complete"]
    assert set(p.df("scopes").name.astype(str)) == {"worker.0.step.1", "worker.1.step.1"}
    assert p.meta["capture"]["forked_not_captured"] == 0


def test_fork_workers_on_the_gpu_start_path_are_kept(tmp_path):
    # The H200 `fork-cuda` case on a CPU: the GPU start path is forced (fake_gpu.py), the parent never uses
    # the "GPU" so it never starts; each fork worker starts at its first "GPU" use, works, and ends with
    # os._exit (multiprocessing's fork workers never run atexit): both workers' data must be kept.
    proc, out = run_record(tmp_path, cmd=[sys.executable, script("mp_workers.py"), "fork", "--fake-gpu"])
    assert proc.returncode == 0, proc.stderr
    assert "exitcodes [0, 0]" in proc.stdout
    p = load_profile(out)
    assert [r["status"] for r in p.meta["ranks"]] == ["complete", "complete"]
    assert all(r["notes"] == ["exited through os._exit(0); the trace was written just before"]
               for r in p.meta["ranks"])
    assert len({r["pid"] for r in p.meta["ranks"]}) == 2
    scopes = p.df("scopes")
    by_rank = {r: set(g.name.astype(str)) for r, g in scopes.groupby("rank")}
    assert sorted(map(sorted, by_rank.values())) == [["worker.0.step.0", "worker.0.step.1"],
                                                     ["worker.1.step.0", "worker.1.step.1"]]
    ops = ops_df(p)
    assert (ops.name == "aten::mm").sum() == 4  # two matmuls in each worker
    assert p.meta["capture"]["forked_not_captured"] == 0 and not p.meta["warnings"]


def test_program_running_its_own_profiler_is_not_broken(tmp_path):
    own = tmp_path / "own.json"
    proc, out = run_record(tmp_path, cmd=[sys.executable, script("own_profiler.py"), str(own)])
    assert proc.returncode == 0, proc.stderr
    assert "own trace written True" in proc.stdout
    names = {e.get("name") for e in json.loads(own.read_text())["traceEvents"]}
    assert "inside.own.profiler" in names
    p = load_profile(out)
    scopes = set(p.df("scopes").name.astype(str))
    assert "before.own.profiler" in scopes and "inside.own.profiler" not in scopes
    assert any("own torch.profiler" in w for w in p.meta["warnings"])


def test_existing_sitecustomize_still_runs(tmp_path):
    user = tmp_path / "usersite"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import sys\nsys.stdout.write('original sitecustomize ran\\n')\n")
    proc, out = run_record(tmp_path, cmd=[sys.executable, script("plain_script.py")], env={"PYTHONPATH": str(user)})
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.startswith("original sitecustomize ran\n")
    assert load_profile(out).n("ops") > 0


def test_hook_is_inert_without_record_dir_and_never_imports_torch(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MMPROF_RECORD")}
    env["PYTHONPATH"] = str(HOOK_DIR)
    code = "import sys; print('torch' in sys.modules, any(type(f).__name__ == '_TorchWatcher' for f in sys.meta_path))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.stdout.strip() == "False False"
    env["MMPROF_RECORD_DIR"] = str(tmp_path / "t")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.stdout.strip() == "False True"  # armed, but torch is still not imported by the hook
    assert not (tmp_path / "t").exists()     # nothing written by a process that never imports torch


# -- bad usage ----------------------------------------------------------------------------------
def test_no_torch_process_is_a_clear_error(tmp_path):
    proc, _ = run_record(tmp_path, cmd=[sys.executable, "-c", "print('hello')"])
    assert proc.stdout == "hello\n"
    assert proc.returncode == 2
    assert "mmprof: error: no process captured anything" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_command_and_unknown_command(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mmprof", "record", "-o", str(tmp_path / "x.json")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no command given" in r.stderr
    proc, _ = run_record(tmp_path, cmd=["definitely-not-a-command-xyz"])
    assert proc.returncode == 2
    assert "mmprof: error: definitely-not-a-command-xyz: command not found" in proc.stderr


# -- backends with fake tools on PATH -----------------------------------------------------------
def _fake_path(tmp_path: Path, tool: str) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    dst = bin_dir / tool
    shutil.copy(data_file("record", "fakebin", tool), dst)
    dst.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def test_rocprofv3_backend_command_line_and_import(tmp_path):
    argv = tmp_path / "argv.txt"
    env = {"PATH": _fake_path(tmp_path, "rocprofv3"), "FAKE_ARGV_FILE": str(argv),
           "FAKE_ROCPD_SAMPLE": str(data_file("samples", "rocprofv3", "rocpd", "14_results.db"))}
    proc, out = run_record(tmp_path, "--backend", "rocprofv3",
                           cmd=[sys.executable, "-c", "import sys; print('app ran'); sys.exit(5)"], env=env)
    assert proc.returncode == 5, proc.stderr
    assert proc.stdout == "app ran\n"
    args = argv.read_text().split()
    assert args[:6] == ["--kernel-trace", "--hip-trace", "--marker-trace", "--output-format", "rocpd", "-d"]
    assert args[7:9] == ["-o", "rank%env{RANK}%.pid%pid%"] and args[9] == "--"
    p = load_profile(out)
    assert p.meta["source"]["format"] == "record" and p.meta["source"]["imported_format"] == "rocpd"
    assert p.meta["capture"]["backend"] == "rocprofv3"
    assert p.n("kernels") == 301  # the sample's dispatches, imported


def test_nsys_backend_profile_export_and_import(tmp_path):
    argv = tmp_path / "argv.txt"
    env = {"PATH": _fake_path(tmp_path, "nsys"), "FAKE_ARGV_FILE": str(argv),
           "FAKE_NSYS_SAMPLE": str(data_file("samples", "nsys", "perlmutter-cloverleaf-cuda.sqlite"))}
    proc, out = run_record(tmp_path, "--backend", "nsys", cmd=[sys.executable, "-c", "print('app ran')"], env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "app ran\n"
    args = argv.read_text().split()
    assert args[:5] == ["profile", "-t", "cuda,nvtx,osrt", "--trace-fork-before-exec=true", "--force-overwrite=true"]
    assert args[6].endswith("rank%q{RANK}")
    p = load_profile(out)
    assert p.meta["source"]["imported_format"] == "nsys-sqlite"
    assert p.n("kernels") == 271   # the CloverLeaf sample (its first 600 ms, tests/data/samples/nsys/README.md)


@pytest.mark.parametrize("tool", ["rocprofv3", "nsys"])
def test_absent_tool_is_capture_unavailable(tmp_path, tool):
    empty = tmp_path / "empty"
    empty.mkdir()
    py_dir = str(Path(sys.executable).parent)
    proc, _ = run_record(tmp_path, "--backend", tool, cmd=[sys.executable, "-c", "print(1)"],
                         env={"PATH": f"{empty}{os.pathsep}{py_dir}{os.pathsep}/usr/bin:/bin"})
    if shutil.which(tool, path=f"{empty}{os.pathsep}{py_dir}{os.pathsep}/usr/bin:/bin"):
        pytest.fail(f"{tool} is installed on this machine; this test needs it absent")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"mmprof: error: --backend {tool}: `{tool}` is not on PATH; " + {
        "rocprofv3": "it ships with ROCm (rocprofiler-sdk; rocpd output needs ROCm >= 7.0): add /opt/rocm/bin to PATH",
        "nsys": "install NVIDIA Nsight Systems (or the CUDA toolkit) and put its bin folder on PATH"}[tool]
    assert proc.stdout == ""  # the command did not run


# -- the session, in process ---------------------------------------------------------------------
def test_capture_session_light_segments_and_markers(tmp_path):
    import torch

    from mmprof.capture import CaptureSession

    with CaptureSession(tmp_path, mode="light", rank=3, world_size=4) as s:
        assert s.marker_path.exists()
        for _ in range(3):
            torch.ones(4, 4) @ torch.ones(4, 4)
            s.step()
    assert not s.marker_path.exists()
    assert s.trace_path == tmp_path / f"rank3.pid{os.getpid()}.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(s.trace_path.read_bytes()))
    assert doc["record_shapes"] == 1 and [g["record_shapes"] for g in doc["mmprof_segments"]] == [True, False]
    mms = [e for e in doc["traceEvents"] if e.get("name") == "aten::mm"]
    assert len(mms) == 3 and sum("Input Dims" in e["args"] for e in mms) == 1
    meta = json.loads(s.meta_path.read_text())
    assert meta["rank"] == 3 and meta["world_size"] == 4 and meta["steps_seen"] == 3 and meta["finished"]
    assert not list(tmp_path.glob("*.seg*"))  # segments were folded into the one trace


def test_capture_session_defers_switch_until_safe_point(tmp_path):
    import torch

    from mmprof.capture import CaptureSession

    s = CaptureSession(tmp_path, mode="light", name="defer")
    open_ranges = [1]
    s.can_switch = lambda: open_ranges[0] == 0
    s.start()
    torch.ones(2, 2) @ torch.ones(2, 2)
    s.step()                                   # a range is still open: no restart yet
    assert len(s.segments) == 1 and s._pending
    open_ranges[0] = 0
    s.safe_point()                             # now the light-mode switch happens
    assert [g["record_shapes"] for g in s.segments] == [True, False]
    s.export()
    assert s.trace_path.name == "defer.pt.trace.json.gz"


def test_capture_session_export_runs_once(tmp_path):
    import torch

    from mmprof.capture import CaptureSession

    s = CaptureSession(tmp_path, name="once")
    s.start()
    torch.ones(2, 2) @ torch.ones(2, 2)
    first = s.export()
    data = first.read_bytes()
    assert s.export() == first and first.read_bytes() == data  # os._exit's export, then atexit's: no-op
    s.start()                                                   # a late start (GPU init at exit) does nothing
    assert s._prof is None and len(s.segments) == 1 and not s.marker_path.exists()


def test_capture_session_is_never_stopped_from_another_thread(tmp_path):
    import threading

    import torch

    from mmprof.capture import CaptureSession

    s = CaptureSession(tmp_path, mode="light", name="thr")
    s.start()
    torch.ones(2, 2) @ torch.ones(2, 2)
    errors = []

    def other():
        s.step()  # a step counted on another thread: the light switch waits for the starting thread
        try:
            s.export()
        except RuntimeError as e:
            errors.append(str(e))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert s._pending and len(s.segments) == 1 and s._prof is not None  # nothing stopped from the wrong thread
    assert errors and "started by another thread" in errors[0]
    assert s.marker_path.exists()
    s.safe_point()  # back on the starting thread: the deferred switch happens
    assert [g["record_shapes"] for g in s.segments] == [True, False]
    assert s.export().name == "thr.pt.trace.json.gz" and not s.marker_path.exists()


def test_combine_traces_shifts_onto_first_base(tmp_path):
    from mmprof.capture.session import combine_traces

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"baseTimeNanoseconds": 1_000_000, "record_shapes": 1,
                             "traceEvents": [{"name": "x", "ph": "X", "ts": 5.0, "dur": 1}]}))
    b.write_text(json.dumps({"baseTimeNanoseconds": 3_000_000,
                             "traceEvents": [{"name": "y", "ph": "X", "ts": 1.0, "dur": 1}]}))
    out = combine_traces([a, b], tmp_path / "c.pt.trace.json.gz")
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert [(e["name"], e["ts"]) for e in doc["traceEvents"]] == [("x", 5.0), ("y", 2001.0)]
    assert doc["record_shapes"] == 1 and len(doc["mmprof_segments"]) == 2


# -- GPU (skipped on CPU machines; benchmarks/h200/record_gpu.py runs the same and more on an H200) ----
@pytest.mark.gpu
def test_gpu_kernels_captured_from_first_gpu_use(tmp_path):
    proc, out = run_record(tmp_path, cmd=[sys.executable, script("cuda_script.py"), "4"])
    assert proc.returncode == 0, proc.stderr
    p = load_profile(out)
    assert p.n("kernels") > 0 and p.n("launches") > 0
    k = p.df("kernels")
    assert sorted(set(k.step[k.step >= 0])) == [0, 1, 2, 3]
    ops = ops_df(p)
    # capture started at the first GPU use (.cuda()), so the CPU randn before it is not in the trace:
    # the script calls randn 1 + 4 times
    assert (ops.name == "aten::randn").sum() == 4
