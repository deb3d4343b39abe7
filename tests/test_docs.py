"""Docs that CI keeps true: the README's set-up commands, the CLI reference, the profile format."""

from __future__ import annotations

import re

from mmprof.cli import COMMANDS
from mmprof.profiles.schema import TABLES
from tests.conftest import ROOT


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def test_ci_runs_the_readme_test_command():
    readme = _readme()
    ci = (ROOT / ".ci" / "run").read_text()
    test_cmds = [line.strip() for line in ci.splitlines() if "pytest" in line and not line.strip().startswith("#")]
    assert len(test_cmds) == 1, test_cmds
    assert test_cmds[0] in readme, "the README's test command and .ci/run must be the same line"


def test_readme_setup_runs_demo_with_pinned_cpu_torch():
    readme = _readme()
    assert re.search(r"pip install torch==\d+\.\d+\.\d+ .*&& mmprof demo", readme)


def test_every_command_is_documented():
    readme = _readme()
    cli_doc = (ROOT / "docs" / "cli.md").read_text()
    for name in COMMANDS:
        assert f"mmprof {name}" in readme, f"README tour misses `mmprof {name}`"
        assert f"## `mmprof {name}`" in cli_doc, f"docs/cli.md misses a section for `mmprof {name}`"


def test_profile_format_doc_lists_every_column():
    doc = (ROOT / "docs" / "profile-format.md").read_text()
    for table, cols in TABLES.items():
        assert f"### `{table}`" in doc
        section = doc.split(f"### `{table}`", 1)[1].split("### ", 1)[0]
        for col, ctype, _ in cols:
            assert f"| `{col}` | {ctype} |" in section, f"docs/profile-format.md: {table}.{col} missing or stale"


def test_cli_reference_is_generated_and_current():
    from mmprof.cli._gen_docs import render

    assert (ROOT / "docs" / "cli.md").read_text() == render(), \
        "docs/cli.md is stale: python -m mmprof.cli._gen_docs > docs/cli.md"


def test_check_codes_in_rules_md_are_generated_and_current():
    from mmprof.analysis.checks.registry import load_info
    from mmprof.render.markdown import checks_markdown

    doc = (ROOT / "docs" / "rules.md").read_text()
    assert doc.endswith(checks_markdown(list(load_info().values()))), \
        "docs/rules.md is stale: regenerate its check codes with `mmprof rules --markdown`"


def test_every_check_code_has_an_implementation():
    """Codes are registered by the functions that implement them (no code only in a docstring)."""
    import mmprof.analysis.checks.shapes_analytic  # noqa: F401
    import mmprof.analysis.checks.shapes_observed  # noqa: F401
    import mmprof.analysis.checks.shapes_traced  # noqa: F401
    import mmprof.analysis.checks.verify  # noqa: F401
    from mmprof.analysis.checks.registry import implementations, load_info

    missing = [code for code in load_info() if not implementations(code)]
    assert not missing, f"codes without a registered implementation: {missing}"
