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
    """``lint-imports`` on ``checkout`` (its ``pyproject.toml``, its ``derl`` and its ``tools/benchmarks``; no cache
    written)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(checkout), str(checkout / "tools")]))  # not the installed
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=120)


def _copy_with(tmp_path: Path, module: str, planted: str) -> Path:
    """A copy of the checkout's ``derl``, ``tools/benchmarks`` and ``pyproject.toml`` with ``planted`` appended to
    ``module``."""
    for package in ("derl", "tools/benchmarks"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    path = tmp_path / module
    path.write_text(path.read_text() + "\n\n" + planted)
    return tmp_path


def test_the_tree_keeps_every_contract():
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout
    files = [*(ROOT / "derl").rglob("*.py"), *(ROOT / "tools" / "benchmarks").rglob("*.py")]
    assert f"Analyzed {len(files)} files" in done.stdout  # this checkout's


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
    # derl reaching the benchmarks, which live beside it in tools/ so that a user never imports them.
    ("derl/evolution/backend.py", "def _instant():\n    from benchmarks.sim_backend import InstantBackend\n",
     "derl is not allowed to import benchmarks"),
    # A circle inside a package: run.py and replay.py importing each other.
    ("derl/analysis/run.py", "def _replay():\n    from derl.analysis.replay import replay\n",
     "No cycles are allowed in derl.analysis"),
])
def test_an_upward_import_or_a_circle_breaks_the_check(tmp_path, module, planted, broken):
    done = _lint_imports(_copy_with(tmp_path, module, planted))
    assert done.returncode == 1, done.stdout + done.stderr
    assert broken in done.stdout


# The type-check gate (`make lint`'s mypy, pyproject.toml [tool.mypy]): a config section's keys are typed
# attributes, so reading a misspelt one fails. The planted module is checked with the project's settings;
# what it does not read (the third-party packages, the heavy package __init__s above the config modules)
# is skipped so that a cold cache takes seconds, not the minutes of the whole tree.
PLANTED_WORLD = """\
from derl.envs.config import WorldCfg


def episode_steps(world: WorldCfg) -> int:
    return world.ENV.{name}
"""
SKIPPED = ["torch", "torch.*", "numpy", "numpy.*", "gymnasium", "gymnasium.*", "warp", "warp.*", "array_api_compat",
           "array_api_compat.*", "imageio", "imageio.*", "psutil", "psutil.*", "derl.envs", "derl.morphology"]


def _mypy(tmp_path: Path, name: str) -> subprocess.CompletedProcess:
    """mypy on a module reading ``world.ENV.<name>``, under pyproject.toml's [tool.mypy] (its ``files`` left out)."""
    import tomllib

    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    settings.pop("files")
    settings["follow_imports"] = "silent"  # errors of the modules it reads are the gate's, not this test's
    settings["cache_dir"] = str(tmp_path / "cache")
    settings["overrides"] = [*settings.get("overrides", []),
                             {"module": SKIPPED, "follow_imports": "skip", "ignore_missing_imports": True}]
    config = tmp_path / "mypy.ini"
    lines = ["[mypy]", *(f"{k} = {_ini(v)}" for k, v in settings.items() if k != "overrides")]
    for override in settings["overrides"]:
        lines.append(f"[mypy-{','.join(override['module'])}]")
        lines += [f"{k} = {_ini(v)}" for k, v in override.items() if k != "module"]
    config.write_text("\n".join(lines) + "\n")
    planted = tmp_path / f"planted_{name.lower()}.py"
    planted.write_text(PLANTED_WORLD.format(name=name))
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config), str(planted)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _ini(value) -> str:
    if isinstance(value, bool):
        return str(value)
    return ",".join(value) if isinstance(value, list) else str(value)


def test_a_misspelt_config_key_fails_the_type_check(tmp_path):
    wrong = _mypy(tmp_path, "EPISODE_LENGTHH")
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert '"EnvCfg" has no attribute "EPISODE_LENGTHH"' in wrong.stdout
    right = _mypy(tmp_path, "EPISODE_LENGTH")  # the same cache: seconds
    assert right.returncode == 0, right.stdout + right.stderr


def test_every_world_parameter_of_the_envs_is_typed():
    """The gate sees a world's keys only through an annotation: no ``world`` parameter of derl.envs goes without."""
    import ast

    bare = []
    for path in sorted((ROOT / "derl" / "envs").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                bare += [f"{path.relative_to(ROOT)}:{node.lineno} {node.name}" for a in arguments
                         if a.arg == "world" and (a.annotation is None or ast.unparse(a.annotation) != "WorldCfg")]
    assert not bare, bare
