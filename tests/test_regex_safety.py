"""Issue 33: every regex from a user (spec `pattern` and `name`, `--rules` files) and every built-in rule pattern
runs with a bound on its work (mmprof/regex_safety.py): RE2 (linear time) where the pattern allows, else Python's
`re` only for shapes that cannot backtrack, else one line and exit 2, whether or not the names at hand trigger it.

The truth each test expects: RE2 matches in time linear in the text (google-re2 / RE2's design: a DFA / NFA
simulation, no backtracking, https://github.com/google/re2/wiki/WhyRE2); Python's `re` backtracks (a repeat inside
a repeat on 'aaaa...b' takes 2**n steps, CPython Modules/_sre/sre_lib.h). No test here times anything: a pattern
that would backtrack is run only after the test has checked it runs on RE2 (a regression fails on that check, or
hangs, never passes).
"""

from __future__ import annotations

import lzma
import re

import pytest

from mmprof import regex_safety
from mmprof.analysis.attribution.classify import builtin_rules, load_rules
from mmprof.analysis.checks.selectors import compile_bounded as spec_regex
from mmprof.cli import main
from mmprof.errors import BadInput
from mmprof.labels import roles
from mmprof.profiles.io import save_profile
from mmprof.regex_safety import backtrack_shape, compile_bounded
from tests.conftest import ROOT
from tests.profile_builder import Synth

# Shapes that take exponential (or high-polynomial) time on Python's re for some text; the case is the
# first ("a spec pattern with a nested quantifier keeps verify-fastpath running 90 s").
HANGS = ["(a+)+$", "(a|a)+$", "(a|aa)+$", "(.*a){12}", "a*a*a*a*a*a*a*a*b", "(\\w+\\s?)*$", "(x+x+)+y",
         "^(([a-z])+.)+[A-Z]([a-z])+$", "(a?){30}a{30}"]
EVIL = "a" * 40 + "!"


@pytest.mark.skipif(regex_safety._re2 is None, reason="google-re2 is a dependency (pyproject); absent only by hand")
@pytest.mark.parametrize("rx", HANGS)
def test_backtracking_shapes_run_on_the_linear_engine(rx):
    b = compile_bounded(rx, "spec", "pattern")
    assert b.engine == "re2"  # checked before the evil text is searched: a regression fails here, not by hanging
    assert b.search(EVIL * 200) is None or b.search(EVIL * 200) is not None  # runs (linear time), whatever it finds
    short = "aaa!"  # same answer as Python's re where re is quick
    assert (b.search(short) is None) == (re.search(rx, short, re.ASCII) is None)


@pytest.mark.parametrize("rx, why", [
    ("(?=x)(a+)+$", "nests a repeat inside a repeat"),
    ("(?<!q)(a|a)+$", "can start with the same character"),
    ("(?!z)a*a*a*b", "len(text)**4"),
    ("(a)\\1", "backreference"),
    ("(?P<x>a)(?P=x)", "backreference"),
    ("(a)?(?(1)b|c)", "conditional"),
    ("(?!x)\\w*\\d*y", "len(text)**3"),
])
def test_shapes_that_backtrack_are_refused_where_re2_cannot_take_them(rx, why):
    """Lookarounds and backreferences are what RE2 does not take: those patterns run on Python's re only when their
    shape bounds the work; the issue's other case ("a spec whose pattern backtracks is accepted when the names at
    hand don't trigger it") is refused at load, before any name is seen."""
    with pytest.raises(BadInput, match=re.escape(why)) as e:
        compile_bounded(rx, "s.toml: assertion x", "pattern")
    assert "\n" not in str(e.value) and str(e.value).startswith("s.toml: assertion x: `pattern` regex")


@pytest.mark.parametrize("rx", ["(?<![a-z])rope(?![a-z])", "^(?!.*attn).*?cache", "gemm(?!a)", "^_?(?:attn|fwd)(?!_)\\w*$"])
def test_lookarounds_of_a_bounded_shape_run_on_python_re(rx):
    b = compile_bounded(rx, "w", "pattern")
    assert b.engine == "re" and backtrack_shape(re._parser.parse(rx)) is None


def test_without_re2_every_backtracking_shape_is_refused(monkeypatch):
    """The H200 image (or any install without google-re2's wheel) falls back to Python's re: the same patterns are
    then refused, never run."""
    monkeypatch.setattr(regex_safety, "_re2", None)
    for rx in HANGS:
        with pytest.raises(BadInput):
            compile_bounded(rx, "w", "pattern")
    assert compile_bounded("^nvjet_\\w+x\\d+", "w", "name").engine == "re"


def test_every_built_in_pattern_is_bounded():
    """Kernel rules (rules/kernels_*.toml, cpu_ops.toml) and roles (rules/roles.toml) go through the same compile:
    each runs on RE2 or has a shape that bounds Python's re (a new rule that does not fails here)."""
    rules = builtin_rules()
    engines = {r.id: r.regex.engine for r in rules}
    assert all(isinstance(r.regex, regex_safety.BoundedRegex) for r in rules)
    on_re = [r for r in rules if engines[r.id] == "re"]
    for r in on_re:
        assert backtrack_shape(re._parser.parse(r.pattern, re.ASCII)) is None, r.id
        assert re.search(r"\(\?<?[=!]", r.pattern), f"{r.id} runs on re without needing it"
    if regex_safety._re2 is not None:
        assert len(on_re) <= 20 and len(rules) - len(on_re) >= 200  # lookaround rules only
    rr = roles()
    for table in (rr.paths, rr.model, rr.classes, rr.ops):
        assert all(isinstance(x.regex, regex_safety.BoundedRegex) for x in table)


def _reference_classify(rules, name: str):
    """First-match classification with every pattern compiled by Python's re (ASCII classes), the engine the rules
    were written for."""
    from mmprof.analysis.attribution.classify import CLASSIFY_MAX_CHARS
    from mmprof.names import function_name

    text, func = name[:CLASSIFY_MAX_CHARS], function_name(name)[:CLASSIFY_MAX_CHARS]
    for r in rules:
        rx = re.compile(r.pattern, re.ASCII | (re.IGNORECASE if r.ignore_case else 0))
        m = rx.search(func if r.on == "function" else text)
        if m:
            return r.id, m.group(0), m.groups()
    return None


def test_every_rule_classifies_the_kernel_corpus_as_python_re_would():
    """RE2 and Python's re agree on what each rule matches: the labelled kernel corpus (620 real names,
    tests/data/kernel_corpus) and every rule's own example classify to the same rule with the same groups."""
    rs = load_rules()
    lines = lzma.open(ROOT / "tests/data/kernel_corpus/corpus.tsv.xz", "rt").read().splitlines()[1:]
    names = [ln.split("\t")[0] for ln in lines] + [r.example for r in rs.rules if r.example]
    assert len(names) > 600
    from mmprof.analysis.attribution.classify import CLASSIFY_MAX_CHARS
    from mmprof.names import function_name

    for n in names:
        ref = _reference_classify(rs.rules, n)
        text, func = n[:CLASSIFY_MAX_CHARS], function_name(n)[:CLASSIFY_MAX_CHARS]
        got = None
        for r in rs.rules:
            m = r.regex.search(func if r.on == "function" else text)
            if m:
                got = (r.id, m.group(0), m.groups())
                break
        assert got == ref, n


def test_bad_and_long_patterns_are_one_line():
    for rx, msg in (("(", "bad regex"), ("a" * 5000, "at most 4,096"), ("", "non-empty"), ("[z-a]", "bad regex")):
        with pytest.raises(BadInput, match=re.escape(msg)) as e:
            compile_bounded(rx, "w", "pattern")
        assert "\n" not in str(e.value)
    with pytest.raises(BadInput, match="at most 1000"):
        spec_regex("a" * 1001, "w", "pattern")


def test_a_text_is_seen_up_to_max_chars():
    b = compile_bounded("x$", "w", "pattern", max_chars=100)
    assert b.search("a" * 99 + "x") and not b.search("a" * 100 + "x")


@pytest.mark.skipif(regex_safety._re2 is None, reason="google-re2 is a dependency (pyproject); absent only by hand")
def test_the_gate_with_a_nested_quantifier_and_a_name_that_triggers_it(tmp_path, capsys):
    """The issue's hang, end to end: verify-fastpath with `forbid_pattern` `(a|a)+$` and `name = '(x+)+y'` over a
    profile whose kernel names trigger both on Python's re (2**40 steps each). It ends with the verdict."""
    s = Synth()
    s.kernel("a" * 40 + "!", 0, 1000)
    s.kernel("x" * 40, 2000, 1000)
    s.kernel("gemm_kernel", 4000, 1000)
    prof = tmp_path / "p.json.gz"
    save_profile(s.build(), prof)
    spec = tmp_path / "s.toml"
    spec.write_text('[spec]\nchecks = []\n[[assert]]\nid = "p"\nkind = "forbid_pattern"\npattern = "(a|a)+$"\n'
                    '[[assert]]\nid = "n"\nkind = "forbid"\nname = "(x+)+y"\n')
    with pytest.raises(SystemExit) as e:
        main(["verify-fastpath", str(prof), "--spec", str(spec)])
    out = capsys.readouterr()
    assert e.value.code == 0, out.err
    assert "PASS" in out.out
