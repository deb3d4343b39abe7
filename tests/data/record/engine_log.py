"""A stand-in for a vLLM engine's start-up output, for `mmprof record`'s log capture (no profiling code).

The parent (the "front end") prints a line of its own, then starts one spawn child (the "engine core") that, like
vLLM 0.26's EngineCore, prefixes every line it writes with `(EngineCore pid=N) ` (vllm/utils/system_utils.py:209
`_add_prefix`) and logs through Python logging in vLLM's format (vllm/logger.py:23 `_FORMAT`, date format
"%m-%d %H:%M:%S"), coloured as vLLM colours it on a terminal (vllm/logging_utils/formatter.py ColoredFormatter);
the messages are vLLM's own format strings filled in (each names its source line). The child runs three
`mmprof.step.N` steps of a small matmul (so it is a captured rank), writes a progress bar with carriage returns
(as tqdm does), a line with invalid UTF-8 and a NUL, and an unterminated last line.

argv: OUT_JSON [--lines N] [--close-stdout]
  OUT_JSON       where both processes write what they saw: isatty() of stdout / stderr, terminal size, pid
  --lines N      also print N filler lines from the child (a huge log: the size bound)
  --close-stdout the child closes its stdout before printing (its log goes to stderr only)
"""

import json
import logging
import multiprocessing as mp
import os
import sys

GREEN, YELLOW, GREY, RESET = "\033[32m", "\033[33m", "\033[90m", "\033[0m"


def seen(fd):
    """What the process finds at fd: "closed", "tty" or "not a tty" (as the workload itself would test it)."""
    try:
        os.fstat(fd)
    except OSError:
        return "closed"
    return "tty" if os.isatty(fd) else "not a tty"


def report(out, who):
    try:
        size = list(os.get_terminal_size(1))
    except OSError:
        size = None
    what = {"stdout": seen(1), "stderr": seen(2), "size": size, "pid": os.getpid()}  # before open() takes fd 1
    with open(f"{out}.{who}", "w") as f:
        json.dump(what, f)


class Prefixed:
    """vLLM's decoration: every line written through it starts with the process prefix."""

    def __init__(self, stream, prefix):
        self.stream, self.prefix, self.start = stream, prefix, True

    def write(self, s):
        for piece in s.splitlines(keepends=True):
            if self.start:
                self.stream.write(self.prefix)
            self.stream.write(piece)
            self.start = piece.endswith("\n")
        return len(s)

    def flush(self):
        self.stream.flush()

    def isatty(self):
        return self.stream.isatty()


def engine_core(out, lines, close_stdout):
    import torch

    report(out, "child")
    if close_stdout:
        os.close(1)
        sys.stdout = open(os.devnull, "w")
    prefix = f"(EngineCore pid={os.getpid()}) "
    if sys.stderr is not None:
        sys.stderr = Prefixed(sys.stderr, prefix)
    if not close_stdout and sys.stdout is not None:
        sys.stdout = Prefixed(sys.stdout, prefix)
    stream = sys.stderr if close_stdout or sys.stdout is None else sys.stdout
    if stream is None:
        stream = open(os.devnull, "w")
    color = stream.isatty()
    fmt = (f"%(levelname)s {GREY}%(asctime)s{RESET} {GREY}[%(filename)s:%(lineno)d]{RESET} %(message)s" if color
           else "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(fmt, datefmt="%m-%d %H:%M:%S"))
    log = logging.getLogger("vllm_standin")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    lvl = {logging.INFO: f"{GREEN}INFO{RESET}", logging.WARNING: f"{YELLOW}WARNING{RESET}"} if color else {}
    for k, v in lvl.items():
        logging.addLevelName(k, v)
    # vllm/platforms/cuda.py:482
    log.info("Using %s attention backend out of potential backends: %s.", "FLASH_ATTN",
             "['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION']")
    # vllm/model_executor/layers/fused_moe/oracle/unquantized.py:242
    log.info("Using TRITON Unquantized MoE backend out of potential backends: "
             "['FlashInfer TRTLLM', 'FlashInfer CUTLASS', 'TRITON'].")
    w = torch.randn(16, 32)
    for i in range(3):
        with torch.profiler.record_function(f"mmprof.step.{i}"):
            y = torch.randn(8, 16) @ w
        if i == 0:
            # vllm/model_executor/layers/fused_moe/fused_moe.py:1108
            log.warning("Using default MoE config. Performance might be sub-optimal! Config file not found at %s",
                        "/opt/vllm/model_executor/layers/fused_moe/configs/E=32,N=512,device_name=NVIDIA_H200.json")
    for i in range(lines):
        stream.write(f"filler line {i} " + "x" * 60 + "\n")
    for pct in (10, 50, 100):  # tqdm on a terminal: carriage returns, one line at the end
        stream.write(f"\rCapturing CUDA graphs: {pct:3d}%")
        stream.flush()
    stream.write("\n")
    stream.flush()
    sys.stderr.flush()
    try:
        os.write(2, prefix.encode() + b"binary \xff\xfe noise \x00 here\n")
    except OSError:
        pass
    # vllm/v1/worker/gpu_model_runner.py:6845
    log.info("Graph capturing finished in %.0f secs, took %.2f GiB", 6.0, 0.21)
    stream.write("unterminated last line")
    stream.flush()


if __name__ == "__main__":
    out = sys.argv[1]
    n = int(sys.argv[sys.argv.index("--lines") + 1]) if "--lines" in sys.argv else 0
    report(out, "parent")
    if sys.stdout is not None:
        print("INFO 12-01 10:21:02 [utils.py:253] front end: starting the engine core", flush=True)
    p = mp.get_context("spawn").Process(target=engine_core, args=(out, n, "--close-stdout" in sys.argv))
    p.start()
    p.join()
    if sys.stdout is not None:
        print("front end: done", flush=True)
    sys.exit(p.exitcode)
