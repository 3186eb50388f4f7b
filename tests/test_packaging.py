"""derl is a package: a build system, an editable install, no import-path tricks in the code."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = [*ROOT.glob("derl/**/*.py"), *ROOT.glob("tools/**/*.py"), *ROOT.glob("tools/**/*.sh"),
        ROOT / "evo_single_proc.py"]


def test_pyproject_has_a_build_system():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    assert project["project"]["name"] == "derl"
    assert "-e ." in (ROOT / "Makefile").read_text()


def test_no_import_path_edits_in_the_code():
    offenders = [str(path.relative_to(ROOT)) for path in CODE
                 if re.search(r"sys\.path\.(insert|append)|PYTHONPATH", path.read_text())]
    assert offenders == []
