"""Issue 56's figures, counted from the source so that they stay true: a published record is typed once
(``PublicationStore.read_metadata`` builds a ``PublishedRecord`` from JSON its schema passed) and read by its
fields from there to the report, and ``dict[str, Any]`` is not how the search and the read side pass data.

How they are counted:

- ``dict[str, Any]``: the lines of ``derl/``'s Python files that contain the text, comments included (88 in
  all and 36 in ``derl/evolution`` before the issue).
- String reads of a published record's fields: every ``x["name"]`` and ``x.get("name", ...)`` whose name is
  a field of ``PublishedRecord`` (``record.FIELDS``), found by walking the syntax tree, in the modules that
  hold published records (those that import ``derl.evolution.folder.record``, ``derl.evolution.results``,
  ``derl.analysis.records`` or ``derl.analysis.run``, and these four), outside the schema checks (the whole
  of ``derl/evolution/folder/schema.py``, and any function named ``from_json`` or ``*_problem``). A read of
  another JSON kind whose key has a field's name there (``published/<n>.json``'s ``id``, an evaluation row's
  ``seed``) counts too: the figure is an upper bound. 37 in the same modules before the issue.
"""

from __future__ import annotations

import ast
from pathlib import Path

from derl.evolution.folder.record import FIELDS

ROOT = Path(__file__).resolve().parents[2]
HOLDERS = ("derl.evolution.folder.record", "derl.evolution.results", "derl.analysis.records", "derl.analysis.run")
SCHEMA = ROOT / "derl" / "evolution" / "folder" / "schema.py"


def _sources(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _dict_any_lines(folder: str) -> int:
    return sum("dict[str, Any]" in line for path in _sources(folder) for line in path.read_text().splitlines())


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _holds_records(path: Path, tree: ast.Module) -> bool:
    """True for a module that holds published records: one of ``HOLDERS``, or one that imports from one."""
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    return _module(path) in HOLDERS or bool(imported & set(HOLDERS))


def _field_reads(tree: ast.AST, in_check: bool = False) -> list[tuple[int, str]]:
    """``(line, name)`` of each read of a record field by its name, outside the schema checks."""
    if isinstance(tree, ast.FunctionDef):
        in_check = in_check or tree.name == "from_json" or tree.name.endswith("_problem")
    key = None
    if isinstance(tree, ast.Subscript) and isinstance(tree.slice, ast.Constant):
        key = tree.slice.value
    elif isinstance(tree, ast.Call) and isinstance(tree.func, ast.Attribute) and tree.func.attr == "get" \
            and tree.args and isinstance(tree.args[0], ast.Constant):
        key = tree.args[0].value
    found = [(getattr(tree, "lineno", 0), key)] if key in FIELDS and not in_check else []
    for child in ast.iter_child_nodes(tree):
        found.extend(_field_reads(child, in_check))
    return found


def test_few_dicts_of_anything_in_derl_and_its_search():
    assert _dict_any_lines("derl") <= 50
    assert _dict_any_lines("derl/evolution") <= 15


def test_a_published_record_is_read_by_its_fields():
    reads = []
    for path in _sources("derl"):
        tree = ast.parse(path.read_text())
        if path != SCHEMA and _holds_records(path, tree):
            reads.extend(f"{path.relative_to(ROOT)}:{line} {key}" for line, key in _field_reads(tree))
    assert len(reads) <= 10, reads


def test_the_counter_sees_a_read_by_name_and_spares_the_checks():
    source = ("def f(r):\n    return r['publication'], r.get('lineage'), r.publication, r['other']\n"
              "def metadata_problem(data):\n    return data['id']\n")
    assert [key for _, key in _field_reads(ast.parse(source))] == ["publication", "lineage"]
