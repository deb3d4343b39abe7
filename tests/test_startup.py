"""Small commands import only what they need: `mmprof --version`, `--help` and `rules` read no trace, so they must
not load numpy or pandas (about 0.3 s of a 0.4 s start; docs/benchmarks.md has the start-up figures). Checked in a
fresh interpreter by the modules loaded, never by time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("numpy", "pandas", "torch", "pyarrow")
PROBE = """
import json, sys
from mmprof.cli import main
try:
    main({args!r})
except SystemExit as e:
    code = e.code
sys.stdout.flush()
print("\\n@@" + json.dumps({{"code": code, "heavy": sorted(m for m in {heavy!r} if m in sys.modules)}}))
"""


def _probe(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE.format(args=args, heavy=HEAVY)], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.rsplit("@@", 1)[1])


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["rules"], ["rules", "FP001"], ["rules", "--markdown"]])
def test_small_commands_do_not_import_numpy_or_pandas(args):
    r = _probe(args)
    assert r["code"] in (0, None)
    assert r["heavy"] == [], f"mmprof {' '.join(args)} imported {r['heavy']}"


def test_the_package_still_exports_profile_io_lazily():
    import mmprof

    assert mmprof.load_profile is __import__("mmprof.profiles", fromlist=["load_profile"]).load_profile
    assert mmprof.Profile.__name__ == "Profile"
    with pytest.raises(AttributeError):
        mmprof.no_such_name  # noqa: B018


def test_read_only_commands_turn_numpy_huge_page_hint_off_and_workloads_keep_it():
    """mmprof/cli/__init__.py:_hugepage_hint: the analysis commands set NUMPY_MADVISE_HUGEPAGE=0 before numpy loads
    (it is read once, at numpy's import); commands that run a workload (run, record, demo) leave the environment as
    it was, and a value the user set is never replaced. Checked in fresh interpreters (numpy not yet imported)."""
    import os
    import subprocess
    import sys

    code = ("import os, sys; from mmprof.cli import _hugepage_hint; _hugepage_hint(sys.argv[1:]); "
            "print(os.environ.get('NUMPY_MADVISE_HUGEPAGE', '-'))")
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}

    def hint(*argv, **extra):
        out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                             env={**env, **extra}, check=True)
        return out.stdout.strip()

    assert hint("diff", "a.json", "b.json") == "0" and hint("--debug", "report", "p.json") == "0"
    assert hint("run", "--preset", "tiny") == "-" and hint("record", "--", "python", "x.py") == "-"
    assert hint("demo") == "-" and hint("--version") == "-"
    assert hint("diff", "a", "b", NUMPY_MADVISE_HUGEPAGE="1") == "1"
