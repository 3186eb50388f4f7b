"""The architecture check (`make lint`): import-linter keeps derl's floors, the learner apart from the
robot, and every package free of import circles, counting imports inside functions.

Each violation is planted in a copy of the package, hidden inside a function as such an import would
be, and the contracts of pyproject.toml must fail on it.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(checkout: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on ``checkout`` (its ``pyproject.toml`` and its ``derl``; no cache written)."""
    env = dict(os.environ, PYTHONPATH=str(checkout))  # that derl, not the one installed
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=120)


def _copy_with(tmp_path: Path, module: str, planted: str) -> Path:
    """A copy of the checkout's ``derl`` and ``pyproject.toml`` with ``planted`` appended to ``module``."""
    shutil.copytree(ROOT / "derl", tmp_path / "derl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    path = tmp_path / module
    path.write_text(path.read_text() + "\n\n" + planted)
    return tmp_path


def test_the_tree_keeps_every_contract():
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout
    assert f"Analyzed {len(list((ROOT / 'derl').rglob('*.py')))} files" in done.stdout  # this checkout's


@pytest.mark.parametrize("module, planted, broken", [
    # The ground floor reaching a domain, as load_config once did to check a config.
    ("derl/config/keys.py", "def _check(cfg):\n    from derl.envs.tasks import check_task_config\n",
     "derl.config is not allowed to import derl.envs"),
    # The evolution reaching the read side (videos through derl.analysis, as it once did).
    ("derl/evolution/backend.py", "def _video():\n    from derl.analysis.replay import replay\n",
     "derl.evolution is not allowed to import derl.analysis"),
    # The learner reaching the robot world, below it in no floor but forbidden all the same.
    ("derl/ppo/policy.py", "def _body():\n    from derl.morphology import Genome\n",
     "derl.ppo is not allowed to import derl.morphology"),
    # A circle inside a package: run.py and replay.py importing each other.
    ("derl/analysis/run.py", "def _replay():\n    from derl.analysis.replay import replay\n",
     "No cycles are allowed in derl.analysis"),
])
def test_an_upward_import_or_a_circle_breaks_the_check(tmp_path, module, planted, broken):
    done = _lint_imports(_copy_with(tmp_path, module, planted))
    assert done.returncode == 1, done.stdout + done.stderr
    assert broken in done.stdout
