"""`mmprof diff`: verdicts with known answers, path changes, matching by region and family, renderers, CLI."""

from __future__ import annotations

import json

import orjson
import pytest

from mmprof.analysis.compare.diff import diff_profiles
from mmprof.errors import NoEvidence, NotComparable
from mmprof.importers import import_paths
from mmprof.profiles import save_profile
from tests.conftest import data_file
from tests.profile_builder import BIG, SKINNY, Synth, decode_run


def _shift_run(compute_us: int, memory_us: int, gap_us: int, steps: int = 3, extra: str | None = None):
    """Per decode step: one compute-bound GEMM, one memory-bound GEMM, then a host-bound gap."""
    s = Synth()
    t = 0
    for step in range(1, steps + 1):
        s.kernel("big_gemm", t, compute_us * 1000, op=BIG, phase="decode", step=step, scope="layers.0.moe.routed",
                 launch_at=t - 500, launch_dur=200)
        t += compute_us * 1000
        s.kernel(extra or "skinny_gemm", t, memory_us * 1000, op=SKINNY, phase="decode", step=step,
                 scope="layers.0.attn.qkv", launch_at=t - 500, launch_dur=200)
        t += (memory_us + gap_us) * 1000
        s.kernel("tiny_norm", t, 1, phase="decode", step=step, launch_at=t - 100, launch_dur=50)  # closes the window
        t += 1000
    return s.build()


def test_bottleneck_moved_from_compute_to_memory():
    d = diff_profiles(_shift_run(58, 22, 20), _shift_run(31, 47, 22))
    assert d.dominant == ("compute_bound", "memory_bound") and d.moved
    assert "compute-bound 58% -> 31%, memory-bound 22% -> 47%: the bottleneck moved from compute to memory bandwidth" \
        in d.verdict
    cats = {c.category: c for c in d.categories}
    assert cats["idle_host"].before_share == pytest.approx(20_000 / 100_001, abs=1e-4)
    assert sum(c.after_share for c in d.categories) == pytest.approx(1.0)
    assert d.step().change == pytest.approx(0.0, abs=1e-9)


def test_still_bound_and_step_time_change():
    d = diff_profiles(decode_run(steps=3, layers=2), decode_run(steps=3, layers=2, gemm_scale=0.5))
    assert not d.moved and d.dominant[1] == "memory_bound"
    assert "the bottleneck is still memory bandwidth" in d.verdict
    st = d.step("decode")
    assert st.before_ns == 286_000 and st.after_ns == 173_000
    assert st.change == pytest.approx(173 / 286 - 1)
    assert d.verdict.startswith("decode step 286.0 us -> 173.0 us (-39.5%)")


def test_path_change_loop_to_grouped_and_shared_fused():
    before = decode_run(steps=3, layers=2, moe="loop", shared="separate")
    after = decode_run(steps=6, layers=2, moe="grouped", shared="fused")   # different step counts: per-step times
    d = diff_profiles(before, after)
    by_region = {p.region: p for p in d.path_changes}
    routed = by_region["moe.routed"]
    assert [v.example for v in routed.vanished] == ["Cijk_Alik_Bljk_BBS_BH_MT64x64_expert"]
    assert [v.example for v in routed.appeared] == ["cutlass_grouped_gemm_sm90_bf16"]
    assert routed.vanished[0].count == 8                      # 4 experts x 2 layers per step
    assert " -> " in routed.summary
    shared = by_region["moe.shared"]
    assert shared.appeared == [] and shared.vanished[0].example == "nvjet_tst_128x64_shared"
    assert set(by_region) == {"moe.routed", "moe.shared"}     # nothing else changed path
    scope = {x.key: x for x in d.by_scope}
    assert scope["moe.shared"].before_ns == 30_000 and scope["moe.shared"].after_ns == 0
    assert scope["attn.core"].delta_ns == 0                   # per step, though the step counts differ
    assert scope["moe.routed"].before_count == 8 and scope["moe.routed"].after_count == 2


def test_renamed_kernel_for_the_same_op_lines_up():
    def run(name):
        s = Synth()
        for step in (1, 2):
            s.kernel(name, step * 100_000, 40_000, op=SKINNY, phase="decode", step=step, scope="layers.3.attn.qkv")
            s.kernel("flash_fwd_kernel", step * 100_000 + 40_000, 10_000, phase="decode", step=step,
                     scope="layers.3.attn.core")
        return s.build()

    d = diff_profiles(run("nvjet_tst_128x64_64x4_qkv"), run("Cijk_Alik_Bljk_BBS_BH_MT128x64_qkv"))
    qkv = next(m for m in d.matched if m.key.startswith("attn.qkv / "))
    assert qkv.before_ns == qkv.after_ns == 40_000            # same region and family on both sides
    pc = next(p for p in d.path_changes if p.region == "attn.qkv")
    assert pc.vanished[0].family == pc.appeared[0].family
    assert {x.key for x in d.by_layer} == {"layer 3"}


def test_ranks_filter_and_missing_phase():
    before = decode_run(steps=2, layers=1, ranks=2, allreduce_ns=20_000)
    after = decode_run(steps=2, layers=1, ranks=2, allreduce_ns=200_000)
    d = diff_profiles(before, after)
    assert d.dominant[1] == "communication" and "moved from memory bandwidth to communication" in d.verdict
    assert [r.key for r in d.by_rank] == ["rank 0", "rank 1"]
    assert d.by_rank[0].delta_ns == 180_000
    d1 = diff_profiles(before, after, rank=1)
    assert d1.rank == 1 and [r.key for r in d1.by_rank] == ["rank 1"]
    assert diff_profiles(before, after, phase="prefill").phase == "prefill"
    with pytest.raises(NoEvidence, match="no 'verify' phase"):
        diff_profiles(before, after, phase="verify")
    with pytest.raises(NoEvidence, match="rank 5"):
        diff_profiles(before, after, rank=5)


def test_identical_real_trace_is_refused_and_has_no_changes_when_forced():
    # issue 31: a file compared with itself is refused (the same content hash), also when imported twice; with
    # force the diff runs and says nothing changed, within noise
    p = import_paths([data_file("samples", "kineto", "sampled_rank-0.json.gz")])
    again = import_paths([data_file("samples", "kineto", "sampled_rank-0.json.gz")])
    with pytest.raises(NotComparable, match="same trace .* --force"):
        diff_profiles(p, again)
    d = diff_profiles(p, again, force=True)
    assert d.preface[0].startswith("compared although the two inputs hold the same trace")
    assert d.answer.faster is None
    assert d.path_changes == [] and not d.moved
    assert all(s.change == 0 for s in d.steps)
    assert all(m.delta_ns == 0 for m in d.matched)


def test_external_hf_traces_name_the_attention_path_change():
    """Two plain torch.profiler traces of Hugging Face transformers (eager vs sdpa attention)."""
    eager = import_paths([data_file("diff_external", "eager.json.gz")])
    sdpa = import_paths([data_file("diff_external", "sdpa.json.gz")])
    d = diff_profiles(eager, sdpa, labels=("eager", "sdpa"))
    assert d.source == ("cpu_ops", "cpu_ops") and d.per_step
    assert d.steps[0].before_steps == d.steps[0].after_steps == 6
    assert d.step().change < 0                                    # sdpa ran faster in these recorded traces
    appeared = [v for p in d.path_changes for v in p.appeared]
    vanished = [v for p in d.path_changes for v in p.vanished]
    assert any(v.family == "attention" and "scaled_dot_product" in v.example for v in appeared)
    assert any("softmax" in v.example for v in vanished)
    assert not any("softmax" in v.example for v in appeared)
    assert not any("scaled_dot_product" in v.example for v in vanished)
    assert "step" in d.verdict and "%" in d.verdict


def test_cpu_against_gpu_profile_warns():
    s = Synth(device={"index": 0, "name": "cpu", "vendor": "cpu"})
    s.op(SKINNY, 0, 10_000)
    d = diff_profiles(s.build(), decode_run(steps=1, layers=1))
    assert any("CPU (ops) profile with a GPU (kernels) profile" in w for w in d.warnings)
    # issue 25: the warning about what is compared comes before the verdict, on the terminal too
    assert any("CPU (ops) profile" in w for w in d.preface)
    from io import StringIO

    from rich.console import Console

    from mmprof.render.text.diff import render_diff
    buf = StringIO()
    render_diff(d, Console(file=buf, width=200, color_system=None))
    out = buf.getvalue()
    assert out.index("CPU (ops) profile") < out.index("verdict:")
    assert out.count("CPU (ops) profile") == 1


def test_verdict_names_every_bigger_move():
    # issue 25 (h200x2 eager -> graphs, batch 64): host-bound -> memory-bound named, communication 44.8% -> 3.8%
    # left out; a category that moved more points than the ones the verdict names is named too
    from mmprof.analysis.compare.result import CategoryChange
    from mmprof.analysis.compare.verdict import verdict_line
    from mmprof.analysis.timeline.breakdown import CATEGORIES, LABELS
    share = {"idle_host": (0.40, 0.10), "memory_bound": (0.10, 0.45), "communication": (0.448, 0.038)}
    cats = [CategoryChange(c, LABELS[c], *share.get(c, (0.0, 0.0)), 0, 0) for c in CATEGORIES]
    v = verdict_line("decode", cats, None, ("idle_host", "memory_bound"))
    assert "moved from launch/queue overhead to memory bandwidth" in v
    assert "also communication 44.8% -> 3.8% (-41 pp)" in v
    v = verdict_line("decode", cats, None, ("memory_bound", "memory_bound"))
    assert "still memory bandwidth" in v and "communication" in v   # -41 pp > +35 pp
    assert "launch/queue" not in v                                 # -30 pp: less than the named move


EVIL = "<script>alert(1)</script>"


def test_html_and_markdown_escape_trace_strings():
    from mmprof.render.html import diff_html
    from mmprof.render.markdown import diff_markdown

    s = Synth()
    s.kernel(EVIL, 0, 50_000, op=SKINNY, scope="layers.0.attn.core|x")
    s.kernel("ok_kernel", 60_000, 10_000, op=SKINNY, scope="layers.0.attn.core|x")
    d = diff_profiles(s.build(), decode_run(steps=1, layers=1))
    assert any(v.example == EVIL for p in d.path_changes for v in p.vanished)
    html = diff_html(d)
    assert "<script" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in html
    assert html.count("<svg") == 3                        # stacked categories, time per layer, top deltas
    md = diff_markdown(d)
    assert "<script" not in md and "&lt;script&gt;" in md
    assert "core\\|x" in md                              # a pipe from a trace cannot split a table cell


def test_terminal_rendering_escapes_markup():
    from rich.console import Console

    from mmprof.render.text.diff import render_diff

    s = Synth()
    s.kernel("[red]fake[/red]", 0, 50_000, op=SKINNY, scope="layers.0.attn.core")
    d = diff_profiles(s.build(), decode_run(steps=1, layers=1))
    con = Console(record=True, width=200)
    render_diff(d, con)
    assert "[red]fake[/red]" in con.export_text()


def _cli(args, capsys):
    from mmprof.cli import main

    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_cli_diff_json_markdown_html(tmp_path, capsys):
    b, a = tmp_path / "before.json", tmp_path / "after.json.gz"
    save_profile(decode_run(steps=2, layers=2), b)
    save_profile(decode_run(steps=2, layers=2, moe="grouped", shared="fused"), a)
    md, html = tmp_path / "d.md", tmp_path / "d.html"
    rc, out, err = _cli(["diff", str(b), str(a), "--json", "--markdown", str(md), "--html", str(html)], capsys)
    assert rc == 0, err
    doc = orjson.loads(out)
    assert doc["phase"] == "decode" and doc["steps"][1]["change"] < 0
    assert {p["region"] for p in doc["path_changes"]} == {"moe.routed", "moe.shared"}
    assert md.read_text().startswith("### mmprof diff: before.json") and "**Verdict:**" in md.read_text()
    assert html.read_text().startswith("<!DOCTYPE html>")
    rc, out, _ = _cli(["diff", str(b), str(a)], capsys)
    assert rc == 0 and "verdict:" in out and "moe.routed" in out


def test_cli_diff_raw_traces_and_errors(tmp_path, capsys):
    t = str(data_file("diff_external", "eager.json.gz"))
    rc, out, err = _cli(["diff", t, str(data_file("diff_external", "sdpa.json.gz")), "--json"], capsys)
    assert rc == 0, err
    assert json.loads(out)["source"] == ["cpu_ops", "cpu_ops"]
    rc, out, err = _cli(["diff", t, str(tmp_path / "missing.json")], capsys)
    assert rc == 2 and err.startswith("mmprof: error:") and "missing.json" in err
    rc, _, err = _cli(["diff", t, t], capsys)          # issue 31: one line naming --force, exit 2
    assert rc == 2 and err.count("\n") == 1 and "same trace" in err and "--force" in err
    rc, _, err = _cli(["diff", t, t, "--phase", "decode", "--force"], capsys)
    assert rc == 2 and "no 'decode' phase" in err


@pytest.mark.slow
def test_runtime_ladder_diffs_step_by_step(tmp_path):
    """CPU runs of the reference runtime, one switch flipped per rung: each diff names that change."""
    import torch

    from mmprof.runtime import Switches, Workload, build_model, get_preset, generate

    rungs = [dict(moe_impl="loop", shared_expert="separate", block_reuse=1),
             dict(moe_impl="grouped", shared_expert="separate", block_reuse=1),
             dict(moe_impl="grouped", shared_expert="fused", block_reuse=1),
             dict(moe_impl="grouped", shared_expert="fused", block_reuse=2)]
    model = build_model(get_preset("tiny"), Switches(**rungs[0]), device="cpu", seed=0)
    wl = Workload(batch=1, prompt_len=32, decode_steps=2)
    profiles = []
    for i, sw in enumerate(rungs):
        model.set_switches(Switches(**sw))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            generate(model, wl)
        path = tmp_path / f"rung{i}.json"
        prof.export_chrome_trace(str(path))
        profiles.append(import_paths([path]))
    d1 = diff_profiles(profiles[0], profiles[1])                 # loop -> grouped experts
    routed = next(p for p in d1.path_changes if p.region == "moe.routed")
    assert any(v.family == "grouped_gemm" and "_grouped_mm" in v.example for v in routed.appeared)
    assert not any(v.family == "grouped_gemm" for v in routed.vanished)
    d2 = diff_profiles(profiles[1], profiles[2])                 # separate -> fused shared expert
    shared = {x.key: x for x in d2.by_scope}["moe.shared"]
    assert shared.before_ns > 0 and shared.after_ns == 0 and shared.after_count == 0
    assert any(p.region == "moe.shared" and p.vanished and not p.appeared for p in d2.path_changes)
    d3 = diff_profiles(profiles[2], profiles[3])                 # indexer computed every layer -> every 2nd
    idx = {x.key: x for x in d3.by_scope}["attn.indexer"]
    assert idx.after_count < idx.before_count


def test_profiles_without_a_shared_phase_compare_whole_runs():
    s = Synth()
    s.kernel("k", 0, 10_000, op=SKINNY)
    s.kernel("k", 20_000, 10_000, op=SKINNY)
    d = diff_profiles(decode_run(steps=1, layers=1), s.build())
    assert d.phase == "whole run"
    assert any("share no phase" in w for w in d.warnings)
    assert d.step().after_ns == 30_000
