"""Speed of `mmprof diff` on two profiles of 1M kernels each (goal: under 5 s end to end, load + diff).

Generates two synthetic M3-like decode profiles (8 ranks, 62 layers, every kernel with its launch call and its
CPU op carrying shapes; the "after" run swaps the routed-expert GEMM loop for one grouped GEMM and fuses the
shared expert), saves them as .json.gz, then times in fresh processes, interleaved over --rounds rounds (medians;
ratios within each round, since this machine is shared and noisy): `mmprof diff BEFORE AFTER --json`, the same
with the terminal tables, and a process that only loads both (`mmprof.cli._common.load_any`, what the CLI does
first) - wall, CPU and peak RSS of each; plus the same work in process (load both + diff_profiles).
Goal (issue 24): the CLI under 5 s and within 2x loading both. Prints one JSON line.

    python benchmarks/diff_speed.py [--kernels 1000000] [--keep DIR] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mmprof.profiles.io import load_profile, save_profile  # noqa: E402
from mmprof.profiles.profile import Profile, StringTable  # noqa: E402
from mmprof.profiles.schema import TABLES, column_kind  # noqa: E402

BF16 = '"c10::BFloat16"'


def layer_kernels(after: bool) -> list[tuple[str, str, str]]:
    """(role, kernel name, op) of one layer; op is a key of OPS."""
    ks = [("attn.norm", "triton_red_fused_rms_norm_0", "norm"), ("attn.qkv", "nvjet_tst_128x64_64x4_1x2_h_bz_TNT", "qkv"),
          ("attn.norm_rope", "triton_poi_fused_rope_1", "rope"), ("attn.indexer", "indexer_score_kernel", "norm"),
          ("attn.indexer", "topk_kernel", "norm"), ("attn.core", "flash_fwd_splitkv_kernel", "sdpa"),
          ("attn.o_proj", "nvjet_tst_64x64_64x4_1x2_h_bz_TNT", "oproj"),
          ("attn.o_proj", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", None),
          ("moe.router", "nvjet_tst_64x8_64x4_1x2_h_bz_TNT", "router")]
    if after:
        ks.append(("moe.routed", "cutlass_grouped_gemm_sm90_bf16_64x128", "grouped"))
    else:
        ks += [("moe.routed", "Cijk_Alik_Bljk_BBS_BH_MT64x64x64_MI16x16x1", "expert")] * 4
        ks.append(("moe.shared", "nvjet_tst_128x64_64x4_1x2_h_bz_TNT", "expert"))
    return ks


OPS = {
    "norm": ("aten::rms_norm", "[[8, 6144]]", f"[{BF16}]"),
    "qkv": ("aten::mm", "[[8, 6144], [6144, 1792]]", f"[{BF16}, {BF16}]"),
    "rope": ("aten::mul", "[[8, 48, 128], [8, 48, 128]]", f"[{BF16}, {BF16}]"),
    "sdpa": ("aten::_scaled_dot_product_flash_attention", "[[1, 48, 8, 128], [1, 8, 4096, 128], [1, 8, 4096, 128]]",
             f"[{BF16}, {BF16}, {BF16}]"),
    "oproj": ("aten::mm", "[[8, 6144], [6144, 6144]]", f"[{BF16}, {BF16}]"),
    "router": ("aten::mm", "[[8, 6144], [6144, 256]]", f"[{BF16}, {BF16}]"),
    "expert": ("aten::mm", "[[8, 6144], [6144, 1536]]", f"[{BF16}, {BF16}]"),
    "grouped": ("aten::_grouped_mm", "[[32, 6144], [4, 6144, 1536], [4]]", f"[{BF16}, {BF16}, \"int\"]"),
}


def make_profile(n_kernels: int, after: bool, ranks: int = 8, layers: int = 62, seed: int = 0) -> Profile:
    rng = np.random.default_rng(seed + int(after))
    st = StringTable()
    ks = layer_kernels(after)
    per_layer = len(ks)
    per_step = per_layer * layers
    steps = max(n_kernels // (ranks * per_step), 1)
    n = ranks * steps * per_step
    name_ids = np.array([st.id(k[1]) for k in ks])
    scope_ids = np.array([[st.id(f"layers.{lay}.{k[0]}") for k in ks] for lay in range(layers)]).reshape(-1)
    op_keys = [k[2] for k in ks]
    op_names = np.array([st.id(OPS[o][0]) if o else -1 for o in op_keys])
    op_dims = np.array([st.id(OPS[o][1]) if o else -1 for o in op_keys])
    op_types = np.array([st.id(OPS[o][2]) if o else -1 for o in op_keys])
    decode, prefill = st.id("decode"), st.id("prefill")
    pos = np.tile(np.arange(per_layer), layers * steps * ranks)           # kernel slot in its layer
    step = np.tile(np.repeat(np.arange(steps), per_step), ranks)
    rank = np.repeat(np.arange(ranks), steps * per_step)
    dur = rng.integers(4_000, 30_000, n) * (1 if not after else 1)
    gap = rng.integers(500, 3_000, n)
    t = np.empty(n, dtype=np.int64)
    for r in range(ranks):  # cumulative per rank, vectorised
        sl = slice(r * steps * per_step, (r + 1) * steps * per_step)
        t[sl] = np.cumsum(dur[sl] + gap[sl]) - dur[sl]
    t += 1_000_000_000
    has_op = op_names[pos] >= 0
    op_idx = np.where(has_op, np.cumsum(has_op) - 1, -1)
    no = int(has_op.sum())
    tables = {name: {} for name in TABLES}
    K = tables["kernels"]
    K.update(rank=rank, device=np.zeros(n, np.int64), stream=np.full(n, 7), start_ns=t, dur_ns=dur,
             name=name_ids[pos].astype(np.int32), correlation=np.arange(n), launch=np.arange(n), op=op_idx,
             scope=scope_ids[np.tile(np.arange(per_step), steps * ranks)].astype(np.int32),
             phase=np.where(step == 0, prefill, decode).astype(np.int32), step=step)
    L = tables["launches"]
    L.update(rank=rank, tid=np.ones(n, np.int64), start_ns=t - gap - 800, dur_ns=np.full(n, 1_500), name=np.full(n, st.id("cudaLaunchKernel"), np.int32),
             correlation=np.arange(n), op=op_idx)
    O = tables["ops"]
    sel = np.flatnonzero(has_op)
    O.update(rank=rank[sel], tid=np.ones(no, np.int64), start_ns=t[sel] - gap[sel] - 1_000, dur_ns=np.full(no, 2_000),
             name=op_names[pos[sel]].astype(np.int32), input_dims=op_dims[pos[sel]].astype(np.int32),
             input_types=op_types[pos[sel]].astype(np.int32), external_id=np.arange(no),
             scope=K["scope"][sel], phase=K["phase"][sel], step=step[sel])
    for tname, cols in TABLES.items():
        m = len(next(iter(tables[tname].values()))) if tables[tname] else 0
        for c, ctype, _ in cols:
            if c not in tables[tname]:
                kind = column_kind(ctype)
                tables[tname][c] = np.full(m, np.nan) if kind == "float" else np.full(m, -1, dtype=np.int32 if kind == "str" else np.int64)
    meta = {"source": {"format": "synthetic-benchmark", "files": []}, "clock": {"unit": "ns"},
            "ranks": [{"rank": r, "devices": [{"index": 0, "name": "AMD Instinct MI355X", "peak_key": "mi355x"}]}
                      for r in range(ranks)]}
    return Profile(meta, st.strings, tables)


CHILD_LOAD = "import sys\nfrom mmprof.cli._common import load_any\nfor p in sys.argv[1:]:\n    load_any(p)\n"


def timed(cmd: list[str]) -> dict:
    """Run one command in a fresh process: wall seconds, CPU seconds (user + sys) and peak RSS (MB) of that
    process alone (os.wait4), and its stdout."""
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read().decode(errors="replace"), fe.read().decode(errors="replace")
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "sys": ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024,
            "rc": proc.returncode, "out": out, "err": err}


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--keep", help="write the two profiles here and keep them (reused when they are there)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of (diff, load only); medians")
    ap.add_argument("--generate", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="mmprof-diff-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    pb, pa = tmp / "before.json.gz", tmp / "after.json.gz"
    t0 = time.perf_counter()
    if args.generate:   # the child that writes the profiles (so this process stays small: see below)
        save_profile(make_profile(args.kernels, False), pb)
        save_profile(make_profile(args.kernels, True), pa)
        return
    if not (args.keep and pb.exists() and pa.exists()):
        subprocess.run([sys.executable, __file__, "--generate", "--keep", str(tmp), "--kernels", str(args.kernels)],
                       check=True)
    gen_s = time.perf_counter() - t0
    env_py = [sys.executable]
    rounds = []
    # the processes first: a child forked from this one once it holds two loaded profiles would count this
    # process's memory in its peak RSS until it execs
    for _ in range(args.rounds):  # interleaved, so a burst of load from other jobs hits both sides of a ratio
        cli = timed(env_py + ["-m", "mmprof", "diff", str(pb), str(pa), "--json"])
        text = timed(env_py + ["-m", "mmprof", "diff", str(pb), str(pa)])
        load = timed(env_py + ["-c", CHILD_LOAD, str(pb), str(pa)])
        rounds.append({"cli": cli, "text": text, "load": load})
    from mmprof.analysis.compare.diff import diff_profiles

    t0 = time.perf_counter()
    lb, la = load_profile(pb), load_profile(pa)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = diff_profiles(lb, la)
    diff_s = time.perf_counter() - t0
    n_k, n_o = int(lb.n("kernels")), int(lb.n("ops"))
    for r in rounds:
        r["ok"] = r["cli"]["rc"] == 0 and json.loads(r["cli"]["out"])["verdict"] == res.verdict and r["text"]["rc"] == 0
    med = lambda xs: round(statistics.median(xs), 2)  # noqa: E731
    print(json.dumps({
        "benchmark": "diff_speed", "kernels_per_profile": n_k, "ops_per_profile": n_o,
        "file_mb": round(os.path.getsize(pb) / 2**20, 1), "generate_s": round(gen_s, 2),
        "in_process": {"load_both_s": round(load_s, 2), "diff_s": round(diff_s, 2)},
        "rounds": args.rounds,
        "cli_json_s": med([r["cli"]["wall"] for r in rounds]), "cli_text_s": med([r["text"]["wall"] for r in rounds]),
        "load_both_process_s": med([r["load"]["wall"] for r in rounds]),
        "cli_over_load": med([r["cli"]["wall"] / r["load"]["wall"] for r in rounds]),
        "cli_over_load_cpu": med([r["cli"]["cpu"] / r["load"]["cpu"] for r in rounds]),
        "cli_cpu_s": med([r["cli"]["cpu"] for r in rounds]), "load_cpu_s": med([r["load"]["cpu"] for r in rounds]),
        "cli_sys_s": med([r["cli"]["sys"] for r in rounds]), "load_sys_s": med([r["load"]["sys"] for r in rounds]),
        "cli_rss_mb": med([r["cli"]["rss_mb"] for r in rounds]), "load_rss_mb": med([r["load"]["rss_mb"] for r in rounds]),
        "cli_ok": all(r["ok"] for r in rounds), "goal": "cli_json_s < 5 and cli_over_load <= 2",
        "path_changes": len(res.path_changes), "machine": f"{cpu_model()}, {os.cpu_count()} cpus",
        "load_avg": round(os.getloadavg()[0], 1),
        "numpy_madvise_hugepage": os.environ.get("NUMPY_MADVISE_HUGEPAGE", "default"), "python": platform.python_version(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S")}))


if __name__ == "__main__":
    main()
