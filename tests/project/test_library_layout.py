"""What ``derl/`` holds and how its processes open a run (issue 56), checked from the source.

- ``derl/`` is the library a user imports: no benchmark nor GPU check (they live in ``tools/benchmarks``).
- No module of ``derl/`` or ``tools/`` is over 350 lines.
- A process opens a run folder once: ``RunDir(...)`` is built only where a search process starts (the
  node's coordinator, the worker), ``RunDir.open`` by what reads a run (status, ``RunView``, the
  evaluation through ``RunView``); a change of what it holds names to, or of how it treats a bad file, is a
  method of that one object (``hold_names_to``, ``skipping_bad_files``).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 350
# Where a RunDir is built, and how many times: each a process's one.
BUILDS = {"derl/evolution/coordinator.py": 1, "derl/evolution/worker.py": 1}
OPENS = {"derl/evolution/status.py": 1, "derl/analysis/run.py": 1}


def _library(root: Path = ROOT) -> list[Path]:
    return sorted((root / "derl").rglob("*.py"))


def _calls(attribute: str | None, root: Path = ROOT) -> Counter[str]:
    """Per file of ``derl/``: the calls ``RunDir(...)`` (``attribute`` None) or ``RunDir.<attribute>(...)``."""
    found: Counter[str] = Counter()
    for path in _library(root):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if attribute is None and isinstance(func, ast.Name) and func.id == "RunDir" or \
                    attribute is not None and isinstance(func, ast.Attribute) and func.attr == attribute \
                    and isinstance(func.value, ast.Name) and func.value.id == "RunDir":
                found[str(path.relative_to(root))] += 1
    return found


def test_the_library_holds_no_benchmark_nor_gpu_check():
    names = [str(path.relative_to(ROOT)) for path in _library() if "bench" in path.name or "gpu_check" in path.name]
    assert names == []
    assert not (ROOT / "derl" / "bench").exists()
    imports = [str(path.relative_to(ROOT)) for path in _library() if "benchmarks" in {
        (node.module or "").split(".")[0] for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)}]
    assert imports == []


def test_no_module_is_over_350_lines():
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines())
             for folder in ("derl", "tools") for path in (ROOT / folder).rglob("*.py")}
    assert {name: lines for name, lines in sizes.items() if lines > MAX_LINES} == {}


def test_a_process_builds_one_run_dir():
    assert dict(_calls(None)) == BUILDS
    assert dict(_calls("open")) == OPENS


def test_the_scan_finds_a_second_run_dir(tmp_path):
    """The scan has teeth: a module that builds a RunDir of its own is found (curves.py did, before)."""
    (tmp_path / "derl").mkdir()
    (tmp_path / "derl" / "curves.py").write_text("run = RunDir(root, skip=True)\nother = RunDir.open(root)\n")
    assert _calls(None, tmp_path) == {"derl/curves.py": 1} and _calls("open", tmp_path) == {"derl/curves.py": 1}
