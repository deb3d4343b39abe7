"""Plain torch work that ends through os._exit (no atexit), like mmprof.runtime.torchrun under torchrun.
Three `mmprof.step.N` steps of an (8,16)x(16,32) matmul, then os._exit(CODE). argv: [CODE] [--in-range]
[--from-thread] -- with --in-range os._exit is called while a record_function range is still open; with
--from-thread a second thread calls it (while the main thread waits in join)."""
import os
import sys
import threading

import torch

args = [a for a in sys.argv[1:] if not a.startswith("--")]
code = int(args[0]) if args else 0
w = torch.ones(16, 32)
for i in range(3):
    with torch.profiler.record_function(f"mmprof.step.{i}"):
        torch.ones(8, 16) @ w
print("os_exit_script: exiting", flush=True)
if "--from-thread" in sys.argv:
    t = threading.Thread(target=os._exit, args=(code,))
    t.start()
    t.join()
if "--in-range" in sys.argv:
    with torch.profiler.record_function("still.open"):
        torch.ones(8, 16) @ w
        os._exit(code)
os._exit(code)
