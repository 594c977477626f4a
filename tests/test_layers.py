"""The package's shape: stages import only the stages below them (import-linter's layers
contract in pyproject.toml, run by CI as `lint-imports`), no import cycle between any two
modules, and modules a reader can hold in their head."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "attnbench"
MAX_LINES = 400  # kernels/ excepted: a kernel and its launch stay in one file


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack, on_stack, found = [], set(), []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_cycle_between_any_two_modules():
    """Every import counts, lazy ones inside functions too; only imports made for type
    annotations alone (under TYPE_CHECKING) are left out, as the layers contract does."""
    graph = grimp.build_graph("attnbench", exclude_type_checking_imports=True, cache_dir=None)
    assert len(graph.modules) > 50
    assert _cycles(graph) == []


def test_the_cycle_finder_sees_a_cycle():
    class Graph:
        modules = {"a", "b", "c"}
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}}

        def find_modules_directly_imported_by(self, module):
            return self.edges[module]

    assert _cycles(Graph()) == [["a", "b", "c"]]


def test_lint_imports_fails_when_a_lower_layer_imports_a_higher_one(tmp_path):
    """The layers contract is live: the same tree with one upward import is refused."""
    shutil.copytree(PACKAGE, tmp_path / "attnbench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    lint = [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"]
    kept = subprocess.run(lint, cwd=tmp_path, capture_output=True, text=True)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    target = tmp_path / "attnbench" / "kernels" / "target.py"
    target.write_text(target.read_text() + "\nimport attnbench.studies.time  # noqa\n")
    broken = subprocess.run(lint, cwd=tmp_path, capture_output=True, text=True)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "attnbench.kernels is not allowed to import attnbench.studies" in broken.stdout


def test_no_module_outside_the_kernels_is_over_400_lines():
    long = {
        str(path.relative_to(ROOT)): lines
        for path in PACKAGE.rglob("*.py")
        if "kernels" not in path.parts and (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_command_line_builds_no_rows_and_does_no_math():
    """cli/ parses options and shows results: rows come from the studies, numbers from the
    measurements."""
    banned = re.compile(r"\bcase_row\b|\bRow\(|import numpy|attnbench\.measure\.metrics")
    for path in (PACKAGE / "cli").glob("*.py"):
        assert not banned.findall(path.read_text()), path.name
