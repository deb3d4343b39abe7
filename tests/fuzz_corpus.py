"""A bad-input corpus for the CLI fuzz suite (tests/test_fuzz_cli.py), generated from real and small synthetic seeds.

`build_corpus(dest)` writes one file per case under `dest` and returns the cases. Every input kind mmprof reads
is a seed: a Kineto trace (JSON and gzip), a rocpd and an Nsight Systems SQLite file, rocprofv3 CSV and JSON, a
saved mmprof Profile, a fast-path spec (TOML) and a Hugging Face config.json. Each seed is mutated the ways bad
inputs arrive in practice (the list of issue 13 and more): empty, truncated, bit flips, a UTF-8 BOM, gzip
bombs, JSON nested 100k deep, integers beyond 2**63, 1e300 / inf timestamps, wrong JSON types at every level,
missing columns, text in numeric columns, corrupt SQLite pages, tampered Profile columns and metadata, hostile
strings (ESC sequences, OSC hyperlinks, bidi overrides, NUL, Rich markup, newlines that forge output lines)
in every name field, plus seeded random leaf replacements. Deterministic for a given seed.
"""

from __future__ import annotations

import copy
import csv
import gzip
import io
import json
import random
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import DATA

# hostile strings: terminal escapes, OSC title / hyperlink, bidi override, NUL, C1, Rich markup, forged lines
HOSTILE = ["\x1b[31mRED\x1b[0m", "\x1b]0;pwned\x07", "\u202eevil\u202c", "a\x00b", "\x9b31m", "[/]", "[bold red]x",
           "[link=http://evil.example]click[/link]", "x\nall checks PASS", "x\r\x1b[2K", "\x07\x08\x7f",
           # the second corpus's classes (issue 25): OSC 8 hyperlink, OSC 52 clipboard write, C1 NEL / CSI, JSON line
           # separators, bidi isolates and the Arabic letter mark
           "\x1b]8;;http://evil.example\x07link\x1b]8;;\x07", "\x1b]52;c;cHduZWQ=\x07", "\x85\x9b2J",
           "a\u2028b\u2029c", "\u2066iso\u2069\u061c",
           # issue 33: zero-width and other invisible format characters (text that hides what it says)
           "gemm\u200b\u200c\u200d\u2060", "\u00ad\U000e0041\u180e"]
BIG_INTS = [2**63, 2**64 + 7, -(2**63) - 1, 10**30]
# layer indices a label parser must not turn into an overflowing number (issue 25: "an overflowing layer-range case
# dies of SIGSEGV"), and the label forms that carry one (our scopes, HF / vLLM module paths, record's module ranges)
LAYER_NUMBERS = [str(2**63), str(2**64 + 1), "1" + "0" * 30, "-1", "-" + str(2**63 + 1), "0" * 4000 + "7", "1e30"]
LAYER_FORMS = ["layers.{n}.attn.qkv", "model.layers.{n}.self_attn", "nn.Module: model.layers.{n}.mlp",
               "model.layers.{n}.mlp (Qwen3MoeSparseMoeBlock)", "layers.0-{n}.moe.routed", "layers.{n}-{n}.mlp",
               "h.{n}.attn", "model.layers.{n}.mlp.experts"]
ODD_VALUES: list[Any] = [*BIG_INTS, 1e300, -1e300, -1, 0, "abc", "", None, [], {}, True, [1, 2, 3], {"a": 1}]


@dataclass
class Case:
    name: str            # kind/mutation
    kind: str            # kineto | rocpd | nsys | csv | rocjson | profile | spec | config
    path: Path
    valid: bool | None   # True: must work (exit 0/1); False: must be refused (exit 2); None: either


# -- seeds -----------------------------------------------------------------------------------------------------
def kineto_seed() -> dict:
    """A small, valid Kineto trace: two steps on the main thread, a side thread launching inside them, GEMM and
    NCCL kernels with launches and ops, a memcpy, GPU-side annotations and device properties."""
    ev: list[dict] = []
    corr = 100
    for step in (1, 2):
        t0 = step * 1000.0
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                   "ts": t0, "dur": 900.0})
        ev.append({"ph": "X", "cat": "user_annotation", "name": "mmprof.decode", "pid": 1, "tid": 1, "ts": t0 + 1,
                   "dur": 800.0})
        ev.append({"ph": "X", "cat": "user_annotation", "name": "layers.0.attn.qkv", "pid": 1, "tid": 1,
                   "ts": t0 + 2, "dur": 300.0})
        for j, (tid, kname) in enumerate([(1, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
                                          (1, "void at::native::vectorized_elementwise_kernel<4>"),
                                          (7, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL")]):
            corr += 1
            ts = t0 + 10 + 100 * j
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": tid, "ts": ts, "dur": 20.0,
                       "args": {"External id": corr, "Input Dims": [[8, 64], [64, 64]],
                                "Input type": ["c10::BFloat16", "c10::BFloat16"]}})
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid,
                       "ts": ts + 2, "dur": 5.0, "args": {"correlation": corr, "External id": corr}})
            ev.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": 7 if tid == 7 else 8,
                       "ts": ts + 30, "dur": 50.0, "args": {"correlation": corr, "External id": corr, "device": 0,
                                                             "stream": 7 if tid == 7 else 8, "grid": [4, 1, 1],
                                                             "block": [128, 1, 1]}})
        ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 8,
                   "ts": t0 + 500, "dur": 10.0, "args": {"device": 0, "stream": 8, "bytes": 4096}})
        ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{step}", "pid": 0, "tid": 8,
                   "ts": t0 + 30, "dur": 700.0, "args": {"device": 0, "stream": 8}})
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem":
                                                      85045477376, "computeMajor": 9, "computeMinor": 0,
                                                      "numSms": 132, "warpSize": 32}],
            "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}, "traceEvents": ev,
            "baseTimeNanoseconds": 1700000000000000000}


def config_seed() -> dict:
    """A small MiniMax-M3-style HF config (4 layers) from the real config.json of tests/data/m3_config."""
    cfg = json.loads((DATA / "m3_config" / "config.json").read_text())
    tc = cfg["text_config"]
    tc.update({"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
               "head_dim": 32, "rotary_dim": 16, "dense_intermediate_size": 512, "intermediate_size": 128,
               "shared_intermediate_size": 128, "num_local_experts": 8, "vocab_size": 1024})
    for k in ("moe_layer_freq", "mlp_layer_types", "layer_types"):
        if isinstance(tc.get(k), list):
            tc[k] = tc[k][:2] + tc[k][-2:]
    sp = tc.get("sparse_attention_config")
    if isinstance(sp, dict):
        for k, v in list(sp.items()):
            if isinstance(v, list):
                sp[k] = v[:2] + v[-2:]
        sp["sparse_num_index_heads"] = 2
        sp["sparse_index_dim"] = 32
    for k in ("index_n_heads",):
        if k in tc:
            tc[k] = 2
    tc["index_head_dim"] = 32
    return cfg


def rocjson_seed() -> dict:
    doc = json.loads((DATA / "rocprofv3_json" / "14_results.json").read_text())
    tool = doc["rocprofiler-sdk-tool"][0]
    br = tool["buffer_records"]
    br["kernel_dispatch"] = br["kernel_dispatch"][:12]
    br["hip_api"] = br["hip_api"][:40]
    return doc


def spec_seed() -> str:
    return (DATA.parent.parent / "mmprof" / "rules" / "builtin_fastpath.toml").read_text()


# -- mutations ---------------------------------------------------------------------------------------------------
def leaves(doc: Any, path: tuple = ()) -> list[tuple]:
    """Paths of every value in a JSON document (containers too), outermost first."""
    out = [path]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += leaves(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:6]):  # a few elements of long lists are enough
            out += leaves(v, path + (i,))
    return out


def put(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    d = copy.deepcopy(doc)
    cur = d
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return d


def deep_json(depth: int = 100_000) -> bytes:
    return b'{"traceEvents": ' + b"[" * depth + b"]" * depth + b"}"


def nested_annotations(seed: dict, depth: int) -> dict:
    """The seed with `depth` user annotations nested inside each other around its events (each one wider than the
    next): deep input that must cost memory and time linear in the depth, never recursion."""
    ev = seed["traceEvents"]
    t0 = min(e["ts"] for e in ev if isinstance(e.get("ts"), (int, float)))
    t1 = max(e["ts"] + e.get("dur", 0) for e in ev if isinstance(e.get("ts"), (int, float)))
    pid, tid = next((e["pid"], e["tid"]) for e in ev if e.get("cat") == "cpu_op")
    outer = [{"ph": "X", "cat": "user_annotation", "name": f"scope{i}", "pid": pid, "tid": tid,
              "ts": t0 - depth + i, "dur": (t1 - t0) + 2 * (depth - i)} for i in range(depth)]
    return {**seed, "traceEvents": outer + list(ev)}


def random_leaf_mutations(doc: Any, rng: random.Random, n: int) -> list[tuple[str, Any]]:
    paths = [p for p in leaves(doc) if p]
    out = []
    for i in range(n):
        p = rng.choice(paths)
        v = rng.choice(ODD_VALUES + HOSTILE)
        out.append((f"rand{i}", put(doc, p, v)))
    return out


def _jb(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def kineto_mutations(seed: dict, rng: random.Random) -> list[tuple[str, bytes, bool | None]]:
    ev = seed["traceEvents"]
    k = next(i for i, e in enumerate(ev) if e.get("cat") == "kernel")
    op = next(i for i, e in enumerate(ev) if e.get("cat") == "cpu_op")
    out: list[tuple[str, bytes, bool | None]] = [("valid", _jb(seed), True)]
    for field in ("ts", "dur", "tid", "pid"):
        for v in (2**64, -(2**63) - 1, 1e300, None):
            out.append((f"kernel_{field}_{v}", _jb(put(seed, ("traceEvents", k, field), v)), None))
    for v in (2**64, 10**30, -5, "x"):
        out.append((f"correlation_{v}", _jb(put(seed, ("traceEvents", k, "args", "correlation"), v)), None))
        out.append((f"external_{v}", _jb(put(seed, ("traceEvents", op, "args", "External id"), v)), None))
    out.append(("step_2e70", _jb(put(seed, ("traceEvents", 0, "name"), f"ProfilerStep#{2**70}")), None))
    out.append(("world_size_2e41", _jb(put(seed, ("distributedInfo", "world_size"), 2**41)), None))
    out.append(("rank_2e63", _jb(put(seed, ("distributedInfo", "rank"), 2**63)), None))
    out.append(("rank_neg", _jb(put(seed, ("distributedInfo", "rank"), -3)), None))
    for v in (5, {}, ["x"], None, "\x1b]0;t\x07GPU"):
        out.append((f"devname_{type(v).__name__}", _jb(put(seed, ("deviceProperties", 0, "name"), v)), None))
    out.append(("devprops_str", _jb(put(seed, ("deviceProperties",), "H100")), None))
    out.append(("events_dict", _jb(put(seed, ("traceEvents",), {"a": 1})), False))
    out.append(("events_of_ints", _jb(put(seed, ("traceEvents",), [1, 2, 3])), False))
    out.append(("args_list", _jb(put(seed, ("traceEvents", k, "args"), [1, 2])), None))
    out.append(("grid_huge", _jb(put(seed, ("traceEvents", k, "args", "grid"), [2**64, -1, "x"])), None))
    out.append(("ts_1e300_one", _jb(put(seed, ("traceEvents", 0, "ts"), 1e300)), None))
    out.append(("ts_inf_text", _jb(seed).replace(b'"ts": 1000.0,', b'"ts": Infinity,', 1), None))
    for i, h in enumerate(HOSTILE):
        d = put(seed, ("traceEvents", k, "name"), "gemm_" + h)
        d = put(d, ("traceEvents", op, "name"), "aten::mm" + h)
        d = put(d, ("traceEvents", 2, "name"), "layers.0." + h)
        out.append((f"hostile_names_{i}", _jb(d), True))
    out.append(("deep_nesting", deep_json(), False))
    out.append(("nested_annotations_3000", _jb(nested_annotations(seed, 3000)), True))
    out.append(("kernel_name_1mib", _jb(put(seed, ("traceEvents", k, "name"), "gemm<" + "x" * 2**20 + ">")), True))
    out.append(("kernel_name_nested_templates", _jb(put(seed, ("traceEvents", k, "name"),
                                                        "k" + "<a" * 20000 + ">" * 20000)), True))
    # a kernel rule's prefix repeated over 64K characters: every occurrence a match start (quadratic backtracking
    # before the rules searched at most CLASSIFY_MAX_CHARS)
    for prefix in ("vllm::", "cvt_", "cub::"):
        out.append((f"kernel_name_repeats_{prefix.strip(':_')}", _jb(put(seed, ("traceEvents", k, "name"),
                                                                        prefix * (65536 // len(prefix)))), True))
    # layer numbers beyond every integer type, negative, and layer ranges, in annotations and module paths
    ann = next(i for i, e in enumerate(ev) if str(e.get("name", "")).startswith("layers."))
    for i, n in enumerate(LAYER_NUMBERS):  # every number and every form, a third of the pairs
        for j, form in enumerate(LAYER_FORMS):
            if (i + j) % 3:
                continue
            d = put(seed, ("traceEvents", ann, "name"), form.format(n=n))
            if form.startswith("nn.Module: "):
                d = put(d, ("traceEvents", ann, "cat"), "python_function")
            out.append((f"layer_{n[:12]}_{j}", _jb(d), True))
    out.append(("bom", b"\xef\xbb\xbf" + _jb(seed), True))
    out.append(("bare_array", _jb(ev), True))
    out.append(("legacy_v1", b'{"traceEvents":[{}, {"ph":"X","ts":"1","dur":"2"}]}', False))
    out += [(n, _jb(d), None) for n, d in random_leaf_mutations(seed, rng, 8)]
    return out


def profile_mutations(doc: dict, rng: random.Random) -> list[tuple[str, bytes, bool | None]]:
    out: list[tuple[str, bytes, bool | None]] = [("valid", _jb(doc), True)]
    k = doc["tables"]["kernels"]
    cols = k["columns"]
    for v in (-1, 2**40, 2**64, 1.5, "3", None):
        out.append((f"n_{v}", _jb(put(doc, ("tables", "kernels", "n"), v)), None))
    for col, v in (("rank", "x"), ("rank", 2**70), ("start_ns", None), ("step", [1]), ("dur_ns", -5),
                   ("name", 10**6), ("name", -7), ("launch", 10**6), ("stream", 1.5)):
        out.append((f"const_{col}_{v}", _jb(put(doc, ("tables", "kernels", "columns", col), {"const": v})), None))
    n = k["n"]
    out.append(("name_out_of_range", _jb(put(doc, ("tables", "kernels", "columns", "name"), [10**6] * n)), False))
    out.append(("neg_durations", _jb(put(doc, ("tables", "kernels", "columns", "dur_ns"), [-1000] * n)), False))
    out.append(("huge_start", _jb(put(doc, ("tables", "kernels", "columns", "start_ns"), [2**63 - 1] * n)), None))
    out.append(("list_of_str", _jb(put(doc, ("tables", "kernels", "columns", "rank"), ["a"] * n)), False))
    out.append(("b64_bad", _jb(put(doc, ("tables", "kernels", "columns", "rank"), {"dtype": "<i8", "b64": "!!"})),
                False))
    out.append(("dtype_bad", _jb(put(doc, ("tables", "kernels", "columns", "rank"), {"dtype": "<f2", "b64": ""})),
                False))
    for key, v in (("meta", []), ("meta", "x"), ("strings", {"a": 1}), ("strings", [1, 2]), ("tables", []),
                   ("schema_version", "1"), ("schema_version", -1)):
        out.append((f"{key}_{type(v).__name__}", _jb(put(doc, (key,), v)), None))
    for path, v in ((("meta", "ranks"), {"rank": 0}), (("meta", "ranks"), [{"rank": "0"}]),
                    (("meta", "ranks"), [{"rank": 2**70}]), (("meta", "ranks"), ["x"]),
                    (("meta", "parallel"), "tp8"), (("meta", "parallel", "world_size"), 2**41),
                    (("meta", "parallel", "world_size"), "8"), (("meta", "warnings"), 5),
                    (("meta", "warnings"), [1, None]), (("meta", "ranks", 0, "devices"), "H100"),
                    (("meta", "ranks", 0, "devices"), [{"index": "x", "name": 7, "peak_key": 9}]),
                    (("meta", "source"), "kineto"), (("meta", "model"), "m3"), (("meta", "run"), [1]),
                    (("meta", "capture"), 3)):
        out.append(("meta_" + "_".join(map(str, path[1:])) + f"_{type(v).__name__}", _jb(put(doc, path, v)), None))
    strings = list(doc["strings"])
    for i, h in enumerate(HOSTILE[:6]):
        s2 = [x + h for x in strings]
        out.append((f"hostile_strings_{i}", _jb(put(doc, ("strings",), s2)), True))
    out += [(n, _jb(d), None) for n, d in random_leaf_mutations(doc, rng, 10)]
    return out


def config_mutations(cfg: dict, rng: random.Random) -> list[tuple[str, bytes, bool | None]]:
    out: list[tuple[str, bytes, bool | None]] = [("valid", _jb(cfg), True)]
    tc = ("text_config",)
    for key, v in (("num_key_value_heads", 0), ("num_attention_heads", "8"), ("hidden_size", 256.5),
                   ("hidden_size", None), ("hidden_size", 0), ("hidden_size", -256), ("hidden_size", 2**64),
                   ("num_hidden_layers", None), ("num_hidden_layers", 10**9), ("num_local_experts", 0),
                   ("num_experts_per_tok", None), ("head_dim", "32"), ("vocab_size", True),
                   ("intermediate_size", 1e300), ("moe_layer_freq", "all"), ("moe_layer_freq", [2**70] * 4),
                   ("layer_types", [None, 1, {}, []]), ("rope_theta", "x"), ("max_position_embeddings", -1)):
        out.append((f"{key}_{v!r}"[:60], _jb(put(cfg, tc + (key,), v)), False if v in (0, None) else None))
    out.append(("text_config_list", _jb(put(cfg, tc, [1, 2])), False))
    out.append(("not_object", b"[1, 2, 3]", False))
    out.append(("deep_nesting", b'{"text_config": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", False))
    out += [(n, _jb(d), None) for n, d in random_leaf_mutations(cfg, rng, 8)]
    return out


def rocjson_mutations(doc: dict, rng: random.Random) -> list[tuple[str, bytes, bool | None]]:
    out: list[tuple[str, bytes, bool | None]] = [("valid", _jb(doc), True)]
    tool = ("rocprofiler-sdk-tool",)
    br = tool + (0, "buffer_records")
    for path, v in ((tool, {}), (tool, "x"), (tool, [1]), (tool, []), (tool + (0,), []),
                    (br, []), (br + ("kernel_dispatch",), {}), (br + ("kernel_dispatch", 0), 5),
                    (br + ("kernel_dispatch", 0, "start_timestamp"), 2**64),
                    (br + ("kernel_dispatch", 0, "start_timestamp"), "x"),
                    (br + ("kernel_dispatch", 0, "end_timestamp"), 1e300),
                    (br + ("kernel_dispatch", 0, "correlation_id"), "x"),
                    (br + ("hip_api", 0, "correlation_id"), {"internal": 2**70}),
                    (tool + (0, "agents"), "x"), (tool + (0, "agents", 0), 3), (tool + (0, "kernel_symbols"), 3),
                    (tool + (0, "strings"), [1]), (tool + (0, "metadata"), 1)):
        out.append(("_".join(map(str, path)) + f"_{type(v).__name__}", _jb(put(doc, path, v)), None))
    out += [(n, _jb(d), None) for n, d in random_leaf_mutations(doc, rng, 8)]
    return out


def csv_mutations(text: str) -> list[tuple[str, bytes, bool | None]]:
    table = list(csv.reader(io.StringIO(text)))
    head, rows = table[0], table[1:]

    def dump(t: list[list[str]]) -> str:
        buf = io.StringIO()
        csv.writer(buf, quoting=csv.QUOTE_MINIMAL, lineterminator="\n").writerows(t)
        return buf.getvalue()

    def with_col(name: str, value: str, row: int = 0) -> str:
        i = head.index(name)
        rr = [list(r) for r in rows]
        rr[row][i] = value
        return dump([head] + rr)

    def without(name: str) -> str:
        i = head.index(name)
        return dump([[c for j, c in enumerate(r) if j != i] for r in [head] + rows])

    out: list[tuple[str, bytes, bool | None]] = [("valid", text.encode(), True)]
    for v in ("inf", "1e30", "-1", "abc", "", "nan", str(2**64), "1e300"):
        out.append((f"start_{v}", with_col("Start_Timestamp", v).encode(), None))
        out.append((f"end_{v}", with_col("End_Timestamp", v).encode(), None))
    for v in ("Agent 99999999999999999999", str(2**64), "-1", "x"):
        out.append((f"agent_{v}", with_col("Agent_Id", v).encode(), None))
    out.append(("grid_huge", with_col("Grid_Size_X", str(2**70)).encode(), None))
    out.append(("wg_zero", with_col("Workgroup_Size_X", "0").encode(), None))
    for name in ("Kernel_Name", "End_Timestamp", "Start_Timestamp", "Correlation_Id"):
        out.append((f"no_{name}", without(name).encode(), None))
    for i, h in enumerate(HOSTILE[:6]):
        out.append((f"hostile_{i}", with_col("Kernel_Name", "k" + h).encode(), "\x00" not in h or None))
    out.append(("bom", b"\xef\xbb\xbf" + text.encode(), True))
    out.append(("nul_bytes", text.encode().replace(b",", b",\x00", 3), None))
    out.append(("unbalanced_quote", text.encode().replace(b'"KERNEL_DISPATCH"', b'"KERNEL_DISPATCH', 1), None))
    out.append(("latin1", text.encode() + b'"KERNEL_DISPATCH",2,1,1,1,9,9,"\xff\xfe",1,5,9,0,0,1,1,1,1,1,1\n', None))
    out.append(("counter_collection", counter_collection_csv().encode(), False))
    out.append(("pc_sampling", b'"Sample_Timestamp","Exec_Mask","Dispatch_Id","Instruction","Instruction_Comment",'
                b'"Correlation_Id"\n3464444413017201,65535,1,"s_endpgm","",1\n', False))
    out.append(("memory_allocation", b'"Kind","Operation","Agent_Id","Allocation_Size","Address","Correlation_Id",'
                b'"Start_Timestamp","End_Timestamp"\n"MEMORY_ALLOCATION","MEMORY_ALLOCATION_ALLOCATE","Agent 0",'
                b'1024,"0x7ffb26354000",1,816098791282238,816098791339655\n', False))
    return out


COUNTER_COLUMNS = ["Correlation_Id", "Dispatch_Id", "Agent_Id", "Queue_Id", "Process_Id", "Thread_Id", "Grid_Size",
                   "Kernel_Id", "Kernel_Name", "Workgroup_Size", "LDS_Block_Size", "Scratch_Size", "VGPR_Count",
                   "Accum_VGPR_Count", "SGPR_Count", "Counter_Name", "Counter_Value", "Start_Timestamp",
                   "End_Timestamp"]


def counter_collection_csv(dispatches: int = 34, counters: int = 10, dur_ns: int = 13_530,
                           start: int = 3200098838431081) -> str:
    """A rocprofv3 `--pmc` counter-collection CSV in the column layout of rocprofiler-sdk's docs
    (source/docs/data/counter_collection.csv): one row per dispatch x counter, each row repeating the dispatch's
    start and end. Our own rows: `dispatches` kernels of `dur_ns` each, `counters` counters per dispatch."""
    rows = ['"' + '","'.join(COUNTER_COLUMNS) + '"']
    t = start
    names = ["SQ_WAVES", "SQ_INSTS_VALU", "SQ_INSTS_SALU", "SQ_BUSY_CYCLES", "GRBM_COUNT", "GRBM_GUI_ACTIVE",
             "TCC_HIT_sum", "TCC_MISS_sum", "TCP_TCC_READ_REQ_sum", "SQ_WAIT_INST_ANY"]
    for d in range(1, dispatches + 1):
        for c in range(counters):
            rows.append(f'{d},{d},"Agent 1",1,15606,15606,1048576,{17 + d % 4},"void addition_kernel<float>(float*, '
                        f'float const*, float const*, int, int)",64,0,0,8,0,16,"{names[c % len(names)]}",'
                        f'{16384.0 + c:.6f},{t},{t + dur_ns}')
        t += 100_000
    return "\n".join(rows) + "\n"


def spec_mutations(text: str) -> list[tuple[str, bytes, bool | None]]:
    out: list[tuple[str, bytes, bool | None]] = [("valid", text.encode(), True), ("empty", b"", False),
                                                 ("bom", b"\xef\xbb\xbf" + text.encode(), True)]
    first = text.index("[[assert]]")
    # layers beyond the model's are refused since issue 32 (a spec must not pass on the layers that happen to exist)
    extra = [('layers = "' + ",".join(["0-65535"] * 50_000) + '"', None), ('layers = "0-4000000000"', None), ("layers = [1, 2, 4000000000]", None), ('layers = "5-2"', None),
             ("max = -1", None), ("max = 9223372036854775807", None), ("min_time_share = 5", None),
             ('min_time_share = "x"', None), ("every_layer = 3", None), ('family = 7', None),
             ("family = [1, 2]", None), ('name = "(unclosed"', None), ('region = {a = 1}', None),
             ('phase = "warmup"', None), ('kind = 5', None), ('description = ["x"]', None)]
    for i, (line, valid) in enumerate(extra):
        t = text[:first] + text[first:].replace('kind = "require"\n', f'kind = "require"\n{line}\n', 1)
        if t == text:
            t = text + "\n[[assert]]\nid = \"extra\"\nkind = \"require\"\nregion = \"x\"\n" + line + "\n"
        out.append((f"assert_{i}", t.encode(), valid))
    for line in ('checks = "FP001"', "checks = [1]", 'checks = ["FP999"]', "sparse_layers = 2e9", "id = 5",
                 "sparse_layers = -1", "moe_layers = [1, -2]"):
        out.append((f"spec_{line[:20]}", text.replace("[spec]\n", f"[spec]\n{line}\n", 1).encode(), None))
    out.append(("hostile_id", text.replace('id = "mmprof-reference-fast"', 'id = "\\u001b[31mX\\u0007"').encode(),
                None))
    out.append(("not_toml", b"[[[ not toml", False))
    out.append(("deep_toml", b"a = " + b"[" * 50_000 + b"]" * 50_000 + b"\n", False))
    out.append(("binary", bytes(range(256)) * 4, False))
    return out


# -- SQLite ----------------------------------------------------------------------------------------------------
def _sqlite_variants(src: Path, dest: Path, table_hint: str) -> list[tuple[str, Path, bool | None]]:
    """Copies of a real SQLite file with one damage each: dropped columns, text in numeric columns, extreme
    values, hostile names, corrupt pages, truncation."""
    out: list[tuple[str, Path, bool | None]] = []
    base = dest / f"{src.stem}__valid{src.suffix}"
    shutil.copy(src, base)
    out.append(("valid", base, True))
    con = sqlite3.connect(base)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    con.close()
    target = next((t for t in tables if table_hint in t), None)

    def edit(name: str, sql: Callable[[str], list[str]], valid: bool | None = None) -> None:
        p = dest / f"{src.stem}__{name}{src.suffix}"
        shutil.copy(src, p)
        con = sqlite3.connect(p)
        try:
            for s in sql(target):
                con.execute(s)
            con.commit()
        except sqlite3.Error:
            con.close()
            p.unlink()
            return
        con.close()
        out.append((name, p, valid))

    if target:
        cols = [r[1] for r in sqlite3.connect(base).execute(f'PRAGMA table_info("{target}")')]
        views = [r[0] for r in sqlite3.connect(base).execute("SELECT name FROM sqlite_master WHERE type='view'")]
        drop_views = [f'DROP VIEW "{v}"' for v in views]  # a view naming the column would block the drop
        for c in [c for c in cols if c.lower() in ("start", "end", "shortname", "demangledname", "kernel_id",
                                                    "agent_id", "deviceid", "correlationid")][:4]:
            edit(f"drop_{c}", lambda t, c=c: drop_views + [f'ALTER TABLE "{t}" DROP COLUMN "{c}"'])
            edit(f"text_{c}", lambda t, c=c: [f"UPDATE \"{t}\" SET \"{c}\" = 'abc' WHERE rowid % 3 = 0"])
            edit(f"big_{c}", lambda t, c=c: [f'UPDATE "{t}" SET "{c}" = 9223372036854775807 WHERE rowid % 2 = 0'])
            edit(f"neg_{c}", lambda t, c=c: [f'UPDATE "{t}" SET "{c}" = -9223372036854775807 WHERE rowid % 2 = 1'])
            edit(f"null_{c}", lambda t, c=c: [f'UPDATE "{t}" SET "{c}" = NULL WHERE rowid % 2 = 1'])
            edit(f"float_{c}", lambda t, c=c: [f'UPDATE "{t}" SET "{c}" = 1e300 WHERE rowid % 2 = 1'])
        edit("empty_table", lambda t: [f'DELETE FROM "{t}"'])
    strings = next((t for t in tables if t in ("StringIds",) or t.startswith("rocpd_string")), None)
    if strings:
        col = "value" if strings == "StringIds" else "string"
        for i, h in enumerate(HOSTILE[:4]):
            esc = h.replace("'", "''")
            edit(f"hostile_{i}", lambda t, s=strings, c=col, e=esc: [f"UPDATE \"{s}\" SET \"{c}\" = \"{c}\" || '{e}'"],
                 True)
    raw = src.read_bytes()
    for i, off in enumerate((4096, len(raw) // 2, len(raw) - 4096)):
        p = dest / f"{src.stem}__corrupt{i}{src.suffix}"
        p.write_bytes(raw[:off] + bytes(random.Random(i).randrange(256) for _ in range(4096)) + raw[off + 4096:])
        out.append((f"corrupt_page_{i}", p, None))
    p = dest / f"{src.stem}__truncated{src.suffix}"
    p.write_bytes(raw[: len(raw) // 3])
    out.append(("truncated", p, None))
    p = dest / f"{src.stem}__header_only{src.suffix}"
    p.write_bytes(raw[:100])
    out.append(("header_only", p, False))
    return out


# -- the corpus ------------------------------------------------------------------------------------------------
def _generic(name: str, data: bytes) -> list[tuple[str, bytes, bool | None]]:
    """Byte-level damage any file kind can suffer."""
    rng = random.Random(len(data))
    flipped = bytearray(data)
    for _ in range(max(1, len(data) // 500)):
        i = rng.randrange(len(flipped))
        flipped[i] = rng.randrange(256)
    return [("empty", b"", False), ("truncated_half", data[: len(data) // 2], None),
            ("bitflips", bytes(flipped), None), ("gzip", gzip.compress(data, mtime=0), True),
            ("gzip_truncated", gzip.compress(data, mtime=0)[:-20], False), ("nul_only", b"\x00" * 64, False)]


def build_corpus(dest: Path, seed: int = 13, profile_bytes: bytes | None = None) -> list[Case]:
    """Write every case under `dest`; `profile_bytes` is a saved Profile (JSON) of the Kineto seed."""
    rng = random.Random(seed)
    dest.mkdir(parents=True, exist_ok=True)
    cases: list[Case] = []

    def emit(kind: str, items, suffix: str) -> None:
        for name, data, valid in items:
            p = dest / f"{kind}__{name}"[:120]
            p = p.with_name("".join(c if c.isalnum() or c in "._-" else "_" for c in p.name) + suffix)
            if isinstance(data, Path):
                p = data
            else:
                p.write_bytes(data)
            cases.append(Case(f"{kind}/{name}", kind, p, valid))

    k = kineto_seed()
    emit("kineto", kineto_mutations(k, rng) + _generic("kineto", _jb(k)), ".json")
    emit("kineto_gz", [("valid", gzip.compress(_jb(k), mtime=0), True)], ".json.gz")
    for src in ("triton_example.json.gz", "event_sync_trace.json.gz", "inference_rank_1.json.gz"):
        emit("kineto_real", [(src.split(".")[0], (DATA / "samples" / "kineto" / src).read_bytes(), True)], ".json.gz")
    kt = (DATA / "samples" / "rocprofv3" / "csv" / "kernel_trace.csv").read_text()
    emit("csv", csv_mutations(kt) + _generic("csv", kt.encode()), ".csv")
    rj = rocjson_seed()
    emit("rocjson", rocjson_mutations(rj, rng) + _generic("rocjson", _jb(rj)), ".json")
    cfg = config_seed()
    emit("config", config_mutations(cfg, rng) + _generic("config", _jb(cfg)), ".json")
    sp = spec_seed()
    emit("spec", spec_mutations(sp) + [g for g in _generic("spec", sp.encode()) if g[0] != "gzip"], ".toml")
    if profile_bytes is not None:
        doc = json.loads(profile_bytes)
        emit("profile", profile_mutations(doc, rng) + _generic("profile", profile_bytes), ".json")
    sqld = dest / "sqlite"
    sqld.mkdir(exist_ok=True)
    emit("rocpd", _sqlite_variants(DATA / "samples" / "rocprofv3" / "rocpd" / "14_results.db", sqld,
                                   "kernel_dispatch"), ".db")
    emit("nsys", _sqlite_variants(DATA / "samples" / "nsys" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite", sqld,
                                  "CUPTI_ACTIVITY_KIND_KERNEL"), ".sqlite")
    return cases
