"""`mmprof ranks` (imbalance across ranks, collective bandwidth); `report --by-shape` is in test_by_shape.py.

The straggler test records the reference runtime under torchrun (gloo TP 2) with rank 1 sleeping in layer 3's
MoE block; the bandwidth tests recompute every figure from the raw Kineto JSON of real multi-rank traces.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict

import orjson
import pytest

from mmprof.analysis.ranks.collectives import bus_factor
from mmprof.analysis.attribution.flops import op_cost
from mmprof.analysis.ranks.imbalance import rank_analysis
from mmprof.hardware import link_peak
from mmprof.importers import import_paths
from mmprof.profiles.io import load_profile
from mmprof.units import fmt_ns
from tests.conftest import open_data, ROOT, data_file
from tests.test_record import run_record, script, torchrun

SLEEP_S = 0.25  # well above the CPU noise of a first forward on a loaded 2-core machine (~0.1 s seen)
SLOW_RANK, SLOW_LAYER = 1, 3


def _cli(args, capsys):
    from mmprof.cli import main

    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def _raw(path):
    return json.load(open_data(path))["traceEvents"]


# -- a TP 2 run with one rank made slow on purpose ----------------------------------------------------
@pytest.fixture(scope="module")
def slowed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slowed")
    proc, out = run_record(tmp, cmd=[torchrun(), "--nproc-per-node", "2", script("runtime_tp_slow.py")],
                           env={"MMPROF_TEST_SLOW": f"{SLOW_RANK}:{SLOW_LAYER}:{SLEEP_S}"})
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.slow
def test_slowed_rank_is_named_with_its_layer_and_the_others_wait(slowed, capsys):
    rc, out, err = _cli(["ranks", str(slowed), "--json"], capsys)
    assert rc == 0, err
    doc = orjson.loads(out)
    sleep = SLEEP_S * 1e9
    phases = {p["phase"]: p for p in doc["phases"]}
    assert set(phases) == {"prefill", "decode"}
    for p in phases.values():
        assert p["finding"] and p["straggler"] == SLOW_RANK, p["verdict"]
        assert p["layer"] == f"layers.{SLOW_LAYER}" and p["role"].startswith("moe"), p["verdict"]
        # one sleep per forward: the extra time in that layer is at least the sleep; no upper bound, since what CPU
        # noise adds depends on the machine's load (a fixed 100 ms margin failed on a loaded 2-core CI machine)
        assert p["extra_ns"] >= 0.9 * sleep, p
        assert p["others_wait_ns"] >= 0.8 * sleep and p["collective"] == "allreduce", p
        assert f"rank {SLOW_RANK} is the straggler" in p["verdict"] and f"in layers.{SLOW_LAYER} (" in p["verdict"]
    decode = [s for s in doc["steps"] if s["phase"] == "decode"]
    assert len(decode) == 3
    for s in decode:
        # each step's extra time by layer (docs/glossary.md "straggler layer"): the slowed layer first
        assert s["rank"] == SLOW_RANK and s["regions"][0]["region"] == f"layers.{SLOW_LAYER}"
    per = {(r["phase"], r["rank"]): r for r in doc["per_rank"]}
    fast = 1 - SLOW_RANK
    assert per[("decode", fast)]["wait_ns"] - per[("decode", SLOW_RANK)]["wait_ns"] >= 0.7 * sleep
    assert per[("decode", SLOW_RANK)]["straggler_steps"] == 3
    assert any("start-up skew" in n for n in doc["notes"])
    # the terminal view and report's section say the same
    rc, text, _ = _cli(["ranks", str(slowed)], capsys)
    assert rc == 0 and all(p["verdict"][:60] in " ".join(text.split()) for p in phases.values())
    rc, out, _ = _cli(["report", str(slowed), "--json"], capsys)
    assert [p["verdict"] for p in orjson.loads(out)["ranks"]["phases"]] == [p["verdict"] for p in doc["phases"]]


# -- bandwidths against what the raw traces imply -----------------------------------------------------
def _stats(profile):
    return {(c.name, c.bytes): c for c in rank_analysis(profile).collectives}


def test_gloo_tp2_bandwidth_matches_raw_gloo_ranges():
    """transformers' M3 at TP 2 over gloo: each gloo:* range is one call; its input dims give the size."""
    files = [data_file("hf_moe", f"m3_tp2_rank{r}.json.gz") for r in (0, 1)]
    per_rank = []
    for f in files:
        calls = defaultdict(list)
        for e in sorted((e for e in _raw(f) if str(e.get("name", "")).startswith("gloo:")), key=lambda e: e["ts"]):
            n = 1
            for d in e["args"]["Input Dims"][0]:
                n *= d
            name = {"gloo:all_gather": "allgather", "gloo:all_reduce": "allreduce"}[e["name"]]
            size = n * 4 * (2 if name == "allgather" else 1)   # float32; all-gather: the gathered output
            calls[name].append((size, round(e["dur"] * 1000)))
        per_rank.append(calls)
    inst = defaultdict(list)
    for name in per_rank[0]:
        assert len(per_rank[0][name]) == len(per_rank[1][name])
        for (s0, d0), (s1, d1) in zip(per_rank[0][name], per_rank[1][name]):
            assert s0 == s1
            inst[(name, s0)].append((min(d0, d1), max(d0, d1) - min(d0, d1)))
    got = _stats(import_paths(files))
    assert set(got) == set(inst)
    for key, xs in inst.items():
        c = got[key]
        t = statistics.median(x[0] for x in xs)
        alg = key[1] / (t * 1e-9) / 1e9
        assert c.calls == len(xs) and c.ranks == 2 and not c.lower_bound and c.group_size == 2
        assert c.time_ns == pytest.approx(t, abs=2)
        assert c.algbw_gbs == pytest.approx(alg, rel=1e-5)
        assert c.busbw_gbs == pytest.approx(alg * (1.0 if key[0] == "allreduce" else 0.5), rel=1e-5)
        assert c.skew_ns == pytest.approx(statistics.median(x[1] for x in xs), abs=4)
        assert c.peak_gbs is None and c.of_peak is None   # a CPU: no link peak, never a guess


def test_nccl_single_rank_bandwidth_matches_kernel_args():
    """A100 NCCL rank 0 of 2: kernel args give the message; one rank only, so the bandwidth is a lower bound."""
    path = data_file("samples", "kineto", "nccl_data.json.xz")
    elem = {"Float": 4, "Long": 8}
    inst = defaultdict(list)
    for e in _raw(path):
        a = e.get("args") or {}
        if e.get("cat") == "kernel" and "Collective name" in a:
            size = max(a["In msg nelems"], a["Out msg nelems"]) * elem[a["dtype"]]
            inst[(a["Collective name"], size)].append(round(e["dur"] * 1000))
    prof = import_paths([path])
    got = _stats(prof)
    assert set(got) == set(inst) and len(got) == 7
    for key, ds in inst.items():
        c = got[key]
        t = statistics.median(ds)
        assert c.calls == len(ds) and c.lower_bound and c.ranks == 1
        assert c.algbw_gbs == pytest.approx(key[1] / (t * 1e-9) / 1e9, rel=1e-5)
        assert c.busbw_gbs == pytest.approx(c.algbw_gbs * bus_factor(key[0], 2), rel=1e-9)
        assert c.peak_gbs is None   # "A100-PG509-200": which A100 cannot be told, so no peak
    # with a known device the bus bandwidth is set against its NVLink peak (300 GB/s per direction)
    prof.meta["ranks"][0]["devices"][0].update(name="NVIDIA A100-SXM4-40GB", peak_key=None)
    for c in rank_analysis(prof).collectives:
        assert c.peak_gbs == 300.0 and c.of_peak == pytest.approx(c.busbw_gbs / 300.0)


def test_sampled_128_rank_job_aligns_by_call_order_and_reports_no_sizes():
    """Ranks 0 and 1 of a 128-rank NCCL job: the kernels are all SendRecv; the nccl:* range around each launch
    names the collective. No message sizes in these old traces: no bandwidth, never a guess."""
    files = [data_file("samples", "kineto", f"sampled_rank-{r}.json.gz") for r in (0, 1)]
    norm = {"nccl:all_reduce": "allreduce", "nccl:all_to_all": "all_to_all", "nccl:_all_gather_base": "allgather"}
    per_rank = []
    for f in files:
        ev = _raw(f)
        launch = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"}
        ranges = [e for e in ev if e.get("name") in norm]
        calls = defaultdict(list)
        for k in sorted((e for e in ev if e.get("cat") == "kernel" and "nccl" in e["name"]), key=lambda e: e["ts"]):
            lc = launch[k["args"]["correlation"]]
            (r,) = [r for r in ranges if r["tid"] == lc["tid"] and r["ts"] <= lc["ts"] <= r["ts"] + r["dur"]]
            calls[norm[r["name"]]].append(round(k["dur"] * 1000))
        per_rank.append(calls)
    result = rank_analysis(import_paths(files))
    got = {c.name: c for c in result.collectives}
    assert set(got) == set(per_rank[0]) == {"allreduce", "all_to_all", "allgather"}
    for name, c in got.items():
        pairs = list(zip(per_rank[0][name], per_rank[1][name]))
        assert c.calls == len(pairs) == len(per_rank[1][name])
        assert c.time_ns == pytest.approx(statistics.median(min(p) for p in pairs), abs=2)
        assert c.bytes is None and c.algbw_gbs is None and c.busbw_gbs is None
    # the all-to-all launched from a backward thread gets its step from the main thread's ProfilerStep range
    # (steps across threads), so the ranks align by step with no fallback
    assert not any("step labels" in n for n in result.notes) and not result.warnings


def test_start_up_skew_is_not_counted_as_waiting():
    """Our gloo traces: rank 1 entered the first all-reduce long before rank 0 (process start)."""
    files = [data_file("kineto_own", f"gloo_rank{r}.json.gz") for r in (0, 1)]
    first = [min((e for e in _raw(f) if str(e.get("name", "")).startswith("gloo:")), key=lambda e: e["ts"])
             for f in files]
    skew = abs(round(first[1]["dur"] * 1000) - round(first[0]["dur"] * 1000))
    assert skew > 100e6
    result = rank_analysis(import_paths(files))
    assert any(fmt_ns(skew) in n for n in result.notes)
    assert all(r.wait_ns < 0.05 * skew for r in result.per_rank)
    assert all(not p.finding for p in result.phases)


def test_four_ranks_waits_and_stragglers_match_a_plain_recount():
    """TP 4 over gloo (examples/cpu-tp): recount every instance's waits from the collectives table in plain
    Python (call order per collective, phase and step; the first call of each rank left out) and compare."""
    prof = load_profile(ROOT / "examples" / "cpu-tp" / "tp4_fused.json.gz")
    c = prof.df("collectives").sort_values(["rank", "start_ns"])
    calls = defaultdict(list)        # (name, phase, step, k) -> [(rank, dur)]
    seen, first = defaultdict(int), set()
    for row in c.itertuples():
        key = (str(row.name), str(row.phase), int(row.step))
        calls[(*key, seen[(row.rank, *key)])].append((row.rank, row.dur_ns))
        seen[(row.rank, *key)] += 1
        if row.rank not in {r for r, _ in first}:
            first.add((row.rank, (*key, 0)))
    wait = defaultdict(float)        # (phase, step, rank) -> ns
    for key, xs in calls.items():
        assert len(xs) == 4
        lo = min(d for _, d in xs)
        for r, d in xs:
            if (r, key) not in first:
                wait[(key[1], key[2], r)] += d - lo
    result = rank_analysis(prof)
    # the excerpt holds decode step 2 of the run (examples/trim.py): one step, counted from the collectives table
    steps = {(k[1], k[2]) for k in calls}
    assert steps == {("decode", 2)} and len(result.steps) == len(steps) and result.ranks == [0, 1, 2, 3]
    for s in result.steps:
        w = {r: wait[(s.phase, s.step, r)] for r in range(4)}
        assert s.rank == min(w, key=w.get)
        assert s.others_wait_ns == pytest.approx(statistics.mean(v for r, v in w.items() if r != s.rank), abs=4)
        assert s.spread_ns == pytest.approx(max(w.values()) - min(w.values()), abs=4)
    for r in result.per_rank:
        assert r.transfer_ns + r.wait_ns == pytest.approx(r.comm_ns) and r.busy_ns <= r.step_ns


def test_bus_factors_and_link_peaks():
    assert bus_factor("allreduce", 8) == pytest.approx(1.75)
    assert bus_factor("allgather", 8) == bus_factor("reduce_scatter", 8) == bus_factor("all_to_all", 8) == 0.875
    assert bus_factor("broadcast", 8) == 1.0 and bus_factor("barrier", 8) is None
    assert link_peak({"name": "NVIDIA H200", "vendor": "nvidia"}).gbs_per_direction == 450.0
    assert link_peak({"name": "AMD Instinct MI355X", "arch": "gfx950"}).gbs_per_direction == pytest.approx(537.6)
    assert link_peak({"name": "AMD Instinct MI300X"}).link.startswith("xGMI")
    assert link_peak({"name": "cpu", "vendor": "cpu"}) is None and link_peak({"name": "H100 PCIe"}) is None


def test_ranks_cli_on_real_traces_and_errors(tmp_path, capsys):
    d = tmp_path / "tp2"
    d.mkdir()
    for r in (0, 1):
        (d / f"rank{r}.json.gz").write_bytes(data_file("hf_moe", f"m3_tp2_rank{r}.json.gz").read_bytes())
    rc, out, err = _cli(["ranks", str(d), "--model", str(data_file("hf_moe", "configs", "m3.json")), "--json"],
                        capsys)
    assert rc == 0, err
    doc = orjson.loads(out)
    # regions come from matching the op shapes with the config: the straggler's extra time has layers
    assert any(x["region"].startswith("layers.") for s in doc["steps"] for x in s["regions"])
    assert doc["ranks"] == [0, 1] and len(doc["per_rank"]) == 2
    rc, _, err = _cli(["ranks", str(d), "--phase", "decode"], capsys)
    assert rc == 2 and "no 'decode' phase" in err


def test_fused_moe_op_cost():
    # vLLM's fused experts: 64 tokens x top-2 of 8 experts, H 3072, gate/up 2 x 1024, down 1024
    dims = [[64, 3072], [8, 2048, 3072], [8, 3072, 1024], [64, 2], [64, 2]]
    types = ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "float", "int"]
    c = op_cost("vllm::outplace_fused_experts", dims, types)
    assert c.family == "grouped_gemm" and c.dtype_class == "bf16"
    assert c.flops == 2 * 64 * 2 * (2048 * 3072 + 3072 * 1024)
    assert c.bytes == 2 * 64 * 3072 * 2 + 8 * (2048 * 3072 + 3072 * 1024) * 2 + 64 * 2 * (4 + 4)
    assert op_cost("sglang::inplace_fused_experts", dims, types).flops == c.flops
    # int4-packed weights (K halved) are not guessed at
    assert op_cost("vllm::outplace_fused_experts", [[64, 3072], [8, 2048, 1536], [8, 3072, 512], [64, 2], [64, 2]],
                   types) is None



def test_every_percentage_says_what_it_is_of():
    """Issue 25: "the other ranks wait 36.25 ms per step (8% of the step)" on a 195 ms step was the spread of the
    waits, not the wait; "no consistent straggler" sat beside "rank 1 holds the others back". Now each share is
    recomputed here from the numbers beside it, and a finding names a rank only when the straggler is consistent."""
    import re

    prof = load_profile(ROOT / "examples" / "cpu-tp" / "tp4_fused.json.gz")
    result = rank_analysis(prof, threshold=0.0)  # every phase a finding, to see its wording
    for v in result.phases:
        if v.straggler is None:
            continue
        assert "median step" in v.verdict
        m = re.search(r"wait ([\d.]+ [mu]?s) per step[^(]*\((\d+)% of the ([\d.]+ [mu]?s) median step", v.verdict)
        if m:  # the wait's share is of the median step, and is the wait's, not the spread's
            assert fmt_ns(v.step_ns) == m.group(3)
            assert int(m.group(2)) == round(100 * v.others_wait_ns / v.step_ns)
        f = next(x for x in result.findings if x.startswith(f"{v.phase}:"))
        assert bool(re.search(r"rank \d", f.split("differ")[0])) == v.consistent
    for s in result.steps:
        assert s.step_ns and s.wait_share == pytest.approx(s.others_wait_ns / s.step_ns)
        assert s.share == pytest.approx(s.spread_ns / s.step_ns)
