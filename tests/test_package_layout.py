"""The package's layout rules that a reader relies on (docs/architecture.md, issue 21): a module's name says one
thing, and the renderers are made of named steps. (Terminal layout of the renderers is tests/test_layout.py,
after render/text/layout.py.)
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "mmprof"

# Module names that meant several things (issue 21: launch-queue analysis / rank launcher / torchrun entry,
# graph summary / replay attribution / graph capture, Profile / Transformer): no module may take them again.
RETIRED = {"launch", "graphs", "model"}
# The runtime's modules still named so. The integrator renames them (mmprof/runtime/ is his area); remove each
# entry with its rename, until this list is empty.
RUNTIME_PENDING: set[str] = set()  # empty since the runtime's renames (transformer, graph_runner, torchrun)


def _modules() -> list[str]:
    return sorted(p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py"))


def _name(rel: str) -> str:
    return rel.rsplit("/", 1)[-1][:-3]


def _clashes(mods: list[str]) -> list[str]:
    commands = {_name(m) for m in mods if m.startswith("cli/") and m.count("/") == 1 and not _name(m).startswith("_")}
    by_name: dict[str, list[str]] = defaultdict(list)
    for m in mods:
        if _name(m) != "__init__" and m not in RUNTIME_PENDING:
            by_name[_name(m)].append(m)
    bad = []
    for name, paths in sorted(by_name.items()):
        if len(paths) == 1:
            continue
        views = {p for p in paths if p in (f"cli/{name}.py", f"render/text/{name}.py")}
        packages = [p.split("/", 1)[0] for p in paths if p not in views]
        if not views or len(set(packages)) != len(packages) or (f"cli/{name}.py" in views and name not in commands):
            bad.append(f"{name}: {', '.join(sorted(paths))}")
    return bad


def test_module_names_unique():
    """A module name is used once, except for one command's stack, which shares the command's name across the
    layers: `cli/X.py` (the command: options -> one library call), `render/text/X.py` (its renderer) and its
    library, at most one module per top-level package (e.g. analysis/views/report.py; capture/workflows/shapes.py with
    runtime/shapes.py, the analytic shapes it shows). A name repeated with no command or renderer of that name,
    or twice in one package, is two things under one name."""
    mods = _modules()
    assert {"cli/report.py", "cli/diff.py", "cli/shapes.py"} <= set(mods)  # the rule reads real command modules
    assert _clashes(mods) == []
    # the layout before issue 21's renames is refused: two launch.py, two graphs.py (one under the runtime is
    # pending), a library twice in one package
    old = ["analysis/launch.py", "capture/launch.py", "analysis/graphs.py", "importers/graphs.py",
           "cli/report.py", "render/text/report.py", "analysis/views/report.py", "analysis/checks/report.py"]
    assert _clashes(old) == ["graphs: analysis/graphs.py, importers/graphs.py",
                             "launch: analysis/launch.py, capture/launch.py",
                             "report: analysis/checks/report.py, analysis/views/report.py, cli/report.py, "
                             "render/text/report.py"]


def test_retired_module_names_are_not_reused():
    mods = _modules()
    stale = RUNTIME_PENDING - set(mods)
    assert not stale, f"{sorted(stale)} renamed: remove them from RUNTIME_PENDING"
    reused = [m for m in mods if _name(m) in RETIRED and m not in RUNTIME_PENDING]
    assert not reused, f"{reused}: these names meant several things; name the module after what it holds"


MAX_FUNCTION_LINES = 80


def _long_functions(root: Path) -> list[str]:
    out = []
    for p in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    out.append(f"{p.relative_to(root).as_posix()}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_function_over_80_lines_in_render(tmp_path):
    """Renderers are named steps (issue 21: a 193-line generator was split): every function or method in
    mmprof/render/, nested ones included, counted from its `def` line to its last line, is at most 80 lines."""
    assert _long_functions(PKG / "render") == []
    # the counter sees an 81-line method nested in a class, and passes an 80-line one
    (tmp_path / "m.py").write_text("class C:\n    def long(self):\n" + "        x = 1\n" * 80
                                   + "    def short(self):\n" + "        x = 1\n" * 79)
    assert _long_functions(tmp_path) == ["m.py:2 long (81 lines)"]


def test_architecture_doc_names_files_that_exist():
    """docs/architecture.md says where each change goes (its "where to edit" list): every file it names exists, so a
    rename that forgets the doc fails here. Paths are relative to mmprof/ or the repository; a bare file name must
    exist somewhere in mmprof/ or in tests/; `<name>` placeholders and the old side of a rename (`old` -> `new`)
    are skipped."""
    import re

    repo = PKG.parent
    doc = (repo / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"[\w/.<>-]+\.(?:py|toml)\b", doc))
    assert len(named) >= 20
    missing = []
    for p in sorted(named):
        if "<" in p or ">" in p or re.search(re.escape(p) + r"`\s*->", doc):  # a placeholder, or a rename's old side
            continue
        p = p.removeprefix("mmprof/")
        bare = "/" not in p and (any(PKG.rglob(p)) or (repo / "tests" / p).exists())
        if not ((PKG / p).exists() or (repo / p).exists() or bare):
            missing.append(p)
    assert missing == []


MAX_MODULE_LINES = 700  # docs/architecture.md "Module size": one concern per module, not a cut for a count


def test_no_module_over_700_lines():
    """A module holds one concern with its helpers (issue 29: modules had been cut to stay under 500 lines,
    `diff_setup.py` "to keep diff.py under 500 lines"); the limit that keeps a module readable is 700 lines."""
    big = [f"{p.relative_to(PKG).as_posix()} ({n} lines)" for p in sorted(PKG.rglob("*.py"))
           if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert big == []


def _private_imports(root: Path) -> list[str]:
    """`from mmprof.x import _name` where `_name` is not a private submodule of the importer's own package:
    a module that needs another's helper needs it public (or the two are one module)."""
    out = []
    for p in sorted(root.rglob("*.py")):
        me = ".".join(p.with_suffix("").relative_to(root.parent).parts)
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if not isinstance(node, ast.ImportFrom) or not node.module or node.level:
                continue
            if node.module.split(".")[0] != root.name:
                continue
            base = root.parent.joinpath(*node.module.split("."))
            for a in node.names:
                if not a.name.startswith("_") or a.name.startswith("__"):
                    continue
                submodule = (base / f"{a.name}.py").exists() or (base / a.name).is_dir()
                if submodule and me.startswith(node.module + "."):
                    continue  # a private submodule, imported inside its own package
                out.append(f"{p.relative_to(root.parent).as_posix()}:{node.lineno} {a.name} from {node.module}")
    return out


def test_no_private_name_imported_across_modules(tmp_path):
    """No module imports another module's private name (issue 29: 13 did, `_setup`, `_moves`, `_phase_codes`...)."""
    assert _private_imports(PKG) == []
    # the finder sees a private function imported from a sibling and lets a private submodule of the package pass
    pkg = tmp_path / "mmprof"
    (pkg / "a").mkdir(parents=True)
    (pkg / "a" / "_helpers.py").write_text("def _x():\n    pass\n")
    (pkg / "a" / "b.py").write_text("from mmprof.a import _helpers\nfrom mmprof.a._helpers import _x\n")
    assert _private_imports(pkg) == ["mmprof/a/b.py:2 _x from mmprof.a._helpers"]


def _reexports(root: Path) -> list[str]:
    """Names a module imports from mmprof and never uses itself: kept only so that others can import them from it
    (a re-export), which hides where a name is defined. Importing a module for its side effects (the checks
    register themselves when `analysis/checks/fastpath.py` is imported) is not a re-export, and a package's
    `__init__.py` is its public surface (`mmprof.profiles.load_profile`), which may name what its modules define."""
    out = []
    for p in sorted(root.rglob("*.py")):
        if p.name == "__init__.py":
            continue
        tree = ast.parse(p.read_text(), str(p))
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == root.name):
                continue
            base = root.parent.joinpath(*node.module.split("."))
            for a in node.names:
                name = a.asname or a.name
                module = (base / f"{a.name}.py").exists() or (base / a.name).is_dir()
                if name not in used and not module:
                    out.append(f"{p.relative_to(root.parent).as_posix()}:{node.lineno} {name}")
    return out


def test_no_module_re_exports_another_modules_names(tmp_path):
    """A name is imported from the module that defines it (issue 29: the timeline re-exported the phases, diff
    re-exported its verdict and set-up helpers)."""
    assert _reexports(PKG) == []
    pkg = tmp_path / "mmprof"
    pkg.mkdir()
    (pkg / "a.py").write_text("def f():\n    pass\n")
    (pkg / "b.py").write_text("from mmprof.a import f  # noqa: F401 (re-exported)\n")
    (pkg / "c.py").write_text("from mmprof.a import f\n\nf()\n")
    assert _reexports(pkg) == ["mmprof/b.py:1 f"]
