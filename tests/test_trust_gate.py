"""Issue 25 on the gate: selectors that name nothing that can exist are refused (no vacuous PASS), spec regexes
are bounded, checks are judged per phase, and "not applicable" is a result of its own."""

from __future__ import annotations

import pytest

from mmprof.analysis.checks.selectors import compile_bounded, valid_names, validate_spec
from mmprof.analysis.checks.spec import load_spec, parse_spec
from mmprof.analysis.checks.verify import verify
from mmprof.analysis.classify import load_rules
from mmprof.cli import main
from mmprof.errors import BadInput
from mmprof.profiles.io import save_profile
from tests.conftest import ROOT
from tests.fastpath_fixtures import runtime_profile


def _spec(text: str):
    import tomllib

    return parse_spec(tomllib.loads(text), "test.toml")


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


# -- selectors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["forbid", "require", "max_launches"])
@pytest.mark.parametrize("key, value, nearest", [
    ("family", "gemmm", "gemm"), ("family", "grouped_gem", "grouped_gemm"), ("library", "cuBLASS", "cuBLAS"),
    ("path", "fallbak", "fallback"), ("variant", "nvjit_tst_*", None), ("region", "layers.*.moe.routd", "layers.*.moe.routed"),
])
def test_a_selector_no_rule_can_produce_is_refused(kind, key, value, nearest):
    """Issue 25: `kind = "forbid"`, `family = "gemmm"` printed PASS and exited 0. The families, libraries, paths
    and variants come from the kernel rules (mmprof/rules/kernels_*.toml), regions from rules/roles.toml."""
    extra = 'max = 4\n' if kind == "max_launches" else ""
    region = value if key == "region" else "layers.*.moe.routed"
    sel = "" if key == "region" else f'{key} = "{value}"\n'
    if key == "region" and kind != "max_launches":
        sel = 'family = "gemm"\n'
    spec = _spec(f'[spec]\nchecks = []\n[[assert]]\nid = "x"\nkind = "{kind}"\nregion = "{region}"\n{sel}{extra}')
    with pytest.raises(BadInput, match="matches nothing the kernel rules or roles can produce") as e:
        verify(runtime_profile(device="nvidia"), spec)
    if nearest:
        assert f"nearest: {nearest}" in str(e.value)


def test_forbid_typo_exits_2_on_the_command_line(tmp_path, capsys):
    prof = tmp_path / "p.json.gz"
    save_profile(runtime_profile(device="nvidia"), prof)
    spec = tmp_path / "s.toml"
    spec.write_text('[spec]\nchecks = []\n[[assert]]\nid = "typo"\nkind = "forbid"\nfamily = "gemmm"\n')
    rc, out, err = run_cli(["verify-fastpath", str(prof), "--spec", str(spec)], capsys)
    assert rc == 2 and "PASS" not in out
    assert err.count("\n") == 1 and "family 'gemmm'" in err and "nearest: gemm" in err


def test_valid_names_are_read_from_the_rules_not_hard_coded(tmp_path):
    """A family that only a user's rules file defines is valid with that file and refused without it."""
    rules = tmp_path / "r.toml"
    rules.write_text('[[rule]]\nid = "site.x"\npattern = "my_site_kernel"\nfamily = "site_family"\nlibrary = "SiteLib"\n')
    spec = _spec('[spec]\nchecks = []\n[[assert]]\nid = "x"\nkind = "forbid"\nfamily = "site_family"\n')
    with pytest.raises(BadInput, match="site_family"):
        validate_spec(spec)
    validate_spec(spec, load_rules([rules]))
    v = valid_names()
    every_family = {r.family for r in load_rules().rules}
    assert every_family <= v["family"]  # every family a built-in rule can give (kernels adds more: read at run time)
    assert {"moe.routed", "attn.indexer", "attn.core"} <= v["layer_roles"] and "lm_head" in v["model_roles"]


def test_every_shipped_spec_validates():
    """The built-in specs and examples/specs/*.toml name only things the rules produce (no false refusal)."""
    specs = [load_spec(), load_spec(ROOT / "mmprof" / "rules" / "builtin_fastpath_generic.toml")]
    specs += [load_spec(p) for p in sorted((ROOT / "examples" / "specs").glob("*.toml"))]
    assert len(specs) >= 4
    for s in specs:
        validate_spec(s)


@pytest.mark.parametrize("glob", ["layers.*.moe.routed", "layers.3.attn.indexer", "layers.1?.mlp", "embed", "*",
                                  "layers.*", "layers.*.moe.*"])
def test_valid_region_globs_are_accepted(glob):
    validate_spec(_spec(f'[spec]\nchecks = []\n[[assert]]\nid = "x"\nkind = "forbid"\nregion = "{glob}"\n'))


# -- bounded regexes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("rx", ["(a+)+$", "(a*)*b", "(?:x{1,}y?)+", "(\\w+\\s?)*$", "((ab)*c)+"])
def test_nested_quantifiers_are_refused(rx):
    """(a+)+ against 'aaaa...!' backtracks exponentially in Python's re: such a spec would hang the gate."""
    for key in ("name", "pattern"):
        body = f"name = '{rx}'\nregion = '*'\nkind = 'forbid'" if key == "name" else f"pattern = '{rx}'\nkind = 'forbid_pattern'"
        with pytest.raises(BadInput, match="nests a repeat inside a repeat"):
            _spec(f'[spec]\nchecks = []\n[[assert]]\nid = "x"\n{body}\n')


@pytest.mark.parametrize("rx", ["Mxfp4.*[Ee]mulat", "^nvjet_\\w+_\\d+x\\d+", "(ab)+", "a+b+c*", "(?:gemm|bmm)_\\d+"])
def test_ordinary_regexes_are_accepted(rx):
    import re

    assert compile_bounded(rx, "w", "name").pattern == re.compile(rx).pattern


def test_backreference_refused():
    with pytest.raises(BadInput, match="backreference"):
        compile_bounded(r"(a)\1", "w", "pattern")
