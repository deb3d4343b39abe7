"""A serving engine's process layout and shutdown, on CPU: the front end starts an "engine core" with the spawn
method; the engine core imports torch, installs its own SIGTERM handler (which asks its loop to stop, as vLLM's
EngineCoreProc does, vllm/v1/engine/core.py) and runs annotated steps until told to stop; the front end sends
it SIGTERM after `--steps` steps and, like vLLM's shutdown (vllm/v1/utils.py), waits `--timeout` seconds before
it kills what is left. The front end never imports torch."""
import argparse
import multiprocessing as mp
import signal
import time


def engine_core(ready, steps: int) -> None:
    import torch

    stop = {"now": False}

    def handler(signum, frame):  # vLLM: engine_core.shutdown_state = REQUESTED; the busy loop then exits
        stop["now"] = True

    signal.signal(signal.SIGTERM, handler)
    w = torch.randn(32, 32)
    i = 0
    while not stop["now"]:
        with torch.profiler.record_function(f"mmprof.step.{i}"):
            y = torch.randn(8, 32) @ w
            y = torch.softmax(y, -1)
        if i == steps:
            ready.set()
        i += 1
        time.sleep(0.002)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=5.0)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=engine_core, args=(ready, a.steps))
    p.start()
    ready.wait(120)
    p.terminate()                 # SIGTERM
    p.join(a.timeout)
    if p.is_alive():
        print("force killing the engine core", flush=True)
        p.kill()
        p.join()
    print("engine exit code", p.exitcode, flush=True)
