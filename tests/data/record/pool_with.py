"""A `with multiprocessing.Pool(...)` block (spawn or forkserver, argv[1]) mapping 8 small matmul tasks over 2
workers: leaving the block terminates the workers with SIGTERM, whatever they are doing (one may still be
starting its capture)."""
import multiprocessing as mp
import sys


def work(i):
    import torch

    x = torch.randn(64, 64)
    return float((x @ x).sum())


if __name__ == "__main__":
    with mp.get_context(sys.argv[1]).Pool(2) as pool:
        print(len(pool.map(work, range(8))), "tasks")
