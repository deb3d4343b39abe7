"""Run a command unchanged: inherited stdio (or its stdout / stderr passed through an `OutputCapture`, which keeps
them as the run's log), signals forwarded, its exit code returned (`mmprof record` and the external-tool backends).
A command that does not stop after a stop signal is ended, in bounded time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from mmprof.errors import BadInput


STOP_GRACE_S = 15.0  # after a stop signal: how long the command gets before SIGTERM, then before SIGKILL


def run_command(cmd: list[str], env: dict[str, str] | None = None, stop_grace_s: float = STOP_GRACE_S,
                say=None, output=None) -> int:
    """Run `cmd` with inherited stdio; forward SIGINT/SIGTERM/SIGHUP; return its exit code (128+N on signal N).

    With `output` (a `mmprof.capture.output.OutputCapture`) its stdout and stderr are the capture's ends (a
    pseudo-terminal where ours is a terminal, else a pipe; a closed one stays closed), forwarded to ours unchanged.

    When stdin is a terminal the command stays in our process group (so it can read the terminal and gets
    Ctrl-C from it directly) and SIGTERM/SIGHUP are forwarded to it; otherwise it runs in its own process
    group and every signal is forwarded to the whole group (torchrun and its workers alike).

    A stop signal starts a watchdog: a command still running `stop_grace_s` seconds later gets SIGTERM, and
    `stop_grace_s` after that SIGKILL (its whole process group, or its process tree when it shares ours); a
    second Ctrl-C skips the wait. `say(text)` hears each escalation (the caller prints it). Every captured
    process writes its trace on SIGTERM, so what was captured is kept; only a SIGKILL loses the unwritten part.
    """
    if not cmd:
        raise BadInput("no command given: use `mmprof record [OPTIONS] -- CMD ARGS...`")
    interactive = _isatty(sys.stdin)
    fds = output.open() if output is not None else {}
    closed = closed_at_start()  # mmprof started with them closed: the command must see them closed too

    def preexec() -> None:
        for fd in closed:
            try:
                os.close(fd)  # whatever mmprof opened since may have taken the number
            except OSError:
                pass
        _die_with_parent()

    try:
        proc = subprocess.Popen(cmd, env=env, process_group=None if interactive else 0, preexec_fn=preexec,
                                stdout=fds.get("stdout"), stderr=fds.get("stderr"))
    except FileNotFoundError:
        raise BadInput(f"{cmd[0]}: command not found") from None
    except PermissionError:
        raise BadInput(f"{cmd[0]}: permission denied") from None
    except OSError as e:
        raise BadInput(f"{cmd[0]}: cannot run it ({e.strerror or e})") from None
    finally:
        if output is not None:
            output.started()  # our copies of the command's ends closed; forwarding starts (even for no process)

    done = threading.Event()
    hurry = threading.Event()
    watch: list[threading.Thread] = []

    def send(signum: int) -> None:
        try:
            if interactive:
                for pid in [proc.pid] + _descendants(proc.pid):
                    os.kill(pid, signum)
            else:
                os.killpg(proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def watchdog(first: int) -> None:
        name = signal.Signals(first).name
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if sig == first:
                continue
            hurry.wait(stop_grace_s)
            hurry.clear()
            if done.is_set():
                return
            if say is not None:
                say(f"the command is still running {stop_grace_s:g} s after {name}: sending "
                    f"{signal.Signals(sig).name} to it" + (" (nothing more can be written after this)"
                                                          if sig == signal.SIGKILL else ""))
            send(sig)
            name = signal.Signals(sig).name

    def forward(signum, frame):
        if not (interactive and signum == signal.SIGINT):  # else the terminal already delivered it to the command
            try:
                if interactive:
                    proc.send_signal(signum)
                else:
                    os.killpg(proc.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass
        if watch:
            hurry.set()  # a second stop signal: no more waiting
            return
        t = threading.Thread(target=watchdog, args=(signum,), name="mmprof-stop-watchdog", daemon=True)
        watch.append(t)
        t.start()

    sigs = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
    old = {}
    try:
        for s in sigs:
            try:
                old[s] = signal.signal(s, forward)
            except ValueError:  # not the main thread: no forwarding
                pass
        rc = proc.wait()
    finally:
        done.set()
        hurry.set()
        for s, h in old.items():
            signal.signal(s, h)
    return 128 - rc if rc < 0 else rc


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (Linux /proc; [] elsewhere), deepest last."""
    children: dict[int, list[int]] = {}
    try:
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                children.setdefault(ppid, []).append(int(d))
    except OSError:
        return []
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM it when mmprof dies, even by SIGKILL (Linux prctl PR_SET_PDEATHSIG), so
    a killed `record` never leaves its workload running (SIGTERM / SIGINT to mmprof are forwarded to the whole
    process group above; a launcher such as torchrun passes the SIGTERM on to its workers)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)
    except Exception:  # not Linux: the forwarding above still covers SIGTERM / SIGINT / SIGHUP
        pass


def closed_at_start() -> list[int]:
    """The standard output / error fds that were closed when mmprof started (Python then sets sys.__stdout__ /
    sys.__stderr__ to None): a later open() may reuse the number, but the command must still find them closed."""
    return [fd for fd, f in ((1, sys.__stdout__), (2, sys.__stderr__)) if f is None]


def _isatty(f) -> bool:
    try:
        return f is not None and f.isatty()
    except (ValueError, AttributeError):
        return False
