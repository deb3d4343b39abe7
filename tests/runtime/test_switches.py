"""A runtime switch is declared once (a `switch(...)` field of `Switches`, runtime/config.py) and everything else is
derived from that declaration: validation, `Switches.baseline()`, the CLI option of `mmprof run` /
`verify-fastpath --run` and the RunOptions override. The truth these tests hold the code to is the declaration
itself: a switch added in one place must show up in each of those without another edit.
"""

from __future__ import annotations

import dataclasses

import click
import pytest
from click.testing import CliRunner

import mmprof.capture.workflows.run_options as run_options_mod
import mmprof.cli._options as options_mod
from mmprof.capture.workflows.run_options import RunOptions
from mmprof.errors import BadInput
from mmprof.runtime import Switches
from mmprof.runtime.config import switch


@dataclasses.dataclass
class WithNewRungs(Switches):
    """Switches plus two switches declared the one way a new rung is declared (a bool and a choice)."""

    early_exit: bool = switch(False, baseline=False, help="Stop at an early layer (a test-only rung).")
    kv_dtype: str = switch("bf16", baseline="fp32", choices=("fp32", "bf16", "fp8"), op="attn.kv",
                           help="KV cache storage type (a test-only switch).")


@pytest.fixture
def new_rungs(monkeypatch):
    """The CLI and RunOptions read the switches from `Switches`; point them at the extended declaration."""
    monkeypatch.setattr(options_mod, "Switches", WithNewRungs)
    monkeypatch.setattr(run_options_mod, "Switches", WithNewRungs)
    return WithNewRungs


def _command():
    seen = {}

    @click.command()
    @options_mod.switch_options
    def cmd(**values):
        seen["opts"] = options_mod.run_options(device="cpu", dtype=None, **values)

    return cmd, seen


def test_new_switch_is_a_field_with_its_baseline_and_validation(new_rungs):
    names = [s.name for s in new_rungs.specs()]
    assert names == ["moe_impl", "shared_expert", "block_reuse", "attention", "graphs", "compile", "compile_prefill",
                     "triton_norm_rope", "triton_attention", "triton_moe", "early_exit", "kv_dtype"]
    assert new_rungs().early_exit is False and new_rungs().kv_dtype == "bf16"  # the declared defaults
    base = new_rungs.baseline()
    assert (base.early_exit, base.kv_dtype) == (False, "fp32")  # the declared baseline values
    assert (base.moe_impl, base.block_reuse) == ("loop", 1)  # the existing ones unchanged
    with pytest.raises(BadInput, match=r"kv_dtype must be fp32\|bf16\|fp8, not 'int4'"):
        new_rungs(kv_dtype="int4")
    with pytest.raises(BadInput, match="early_exit must be True or False, not 1"):
        new_rungs(early_exit=1)


def test_new_switch_is_a_cli_option_that_reaches_the_runtime_switches(new_rungs):
    cmd, seen = _command()
    r = CliRunner().invoke(cmd, ["--help"])
    assert r.exit_code == 0
    assert "--early-exit / --no-early-exit" in r.output and "Stop at an early layer" in r.output
    assert "--kv-dtype [fp32|bf16|fp8]" in r.output

    r = CliRunner().invoke(cmd, ["--early-exit", "--kv-dtype", "fp8", "--baseline"])
    assert r.exit_code == 0, r.output
    sw = seen["opts"].switches()
    assert isinstance(sw, WithNewRungs)
    assert (sw.early_exit, sw.kv_dtype, sw.moe_impl) == (True, "fp8", "loop")  # given values over the baseline

    r = CliRunner().invoke(cmd, [])
    sw = seen["opts"].switches()
    assert (sw.early_exit, sw.kv_dtype, sw.moe_impl) == (False, "bf16", "grouped")  # not given: the fast base
    r = CliRunner().invoke(cmd, ["--kv-dtype", "int4"])
    assert r.exit_code == 2 and "int4" in r.output  # click refuses a value the declaration does not list


def test_run_options_refuse_an_undeclared_switch():
    with pytest.raises(BadInput, match="unknown switch"):
        RunOptions(overrides={"early_exit": True}).switches()  # not declared in the real Switches
    assert RunOptions(overrides={"block_reuse": 2, "graphs": None}).switches() == Switches(block_reuse=2)


def test_the_real_switches_keep_their_cli():
    """The options the declarations build are the ones `mmprof run --help` documented before (docs/cli.md)."""
    from mmprof.cli.run import run

    params = {p.name: p for p in run.params}
    assert params["moe_impl"].opts == ["--moe-impl"] and list(params["moe_impl"].type.choices) == ["loop", "grouped"]
    assert list(params["shared_expert"].type.choices) == ["separate", "fused"]
    assert list(params["attention"].type.choices) == ["sparse", "dense"]
    assert params["block_reuse"].type.min == 1 and params["block_reuse"].metavar == "K"
    assert params["graphs"].opts == ["--graphs"] and params["graphs"].secondary_opts == ["--no-graphs"]
    cmd, seen = _command()
    assert CliRunner().invoke(cmd, []).exit_code == 0
    assert seen["opts"].overrides == {s.name: None for s in Switches.specs()}  # unset: the base decides
    assert seen["opts"].switches() == Switches()


torch = pytest.importorskip("torch")


def test_every_declared_op_is_logged_by_the_runtime():
    """Each switch that names a dispatch op really writes rows of that op, under both bases, and the row's
    `requested` follows the switch (runtime/dispatch.py; DEVELOPERS.md "The dispatch log")."""
    from mmprof.runtime import Workload, build_model, generate, get_preset

    model = build_model(get_preset("tiny"), seed=0)
    for sw in (Switches(), Switches.baseline()):
        model.set_switches(sw)
        model.dispatch.clear()
        generate(model, Workload(batch=1, prompt_len=32, decode_steps=1, seed=0))
        ops = {r.op for r in model.dispatch.records}
        for spec in Switches.specs():
            if spec.op and getattr(sw, spec.name) is not False:  # a bool switch logs its op when on (compile:
                # off in both bases, needs the graphs' static step: tests/runtime/test_compile.py)
                assert spec.op in ops, f"{spec.name} declares op {spec.op} but no such row was logged"
        requested = {r.requested for r in model.dispatch.records if r.op == "moe.experts"}
        assert requested == {"grouped_mm" if sw.moe_impl == "grouped" else "loop"}
