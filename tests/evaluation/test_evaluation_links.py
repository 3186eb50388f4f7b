"""``tools/evaluate.py`` refuses a folder of ``eval/`` that is a symbolic link before it writes anything.

Before, ``eval/<task>`` or ``eval/claims/<task>`` linked to a folder outside gave a warning, a claim and
``eval/summary.json``, then a 30-line ``NotAFolder`` traceback and exit 1.
"""

import shutil
import subprocess
import sys

import pytest

from derl.analysis.run import RunView
from derl.evolution.process import EXIT_FATAL
from tests.evaluation.test_evaluation import BUDGET, ROOT


@pytest.mark.parametrize("linked", ["point_nav", "claims", "claims/point_nav", "point_nav/{best}-s0"])
def test_a_linked_folder_of_eval_is_refused_in_one_line_before_anything_is_written(tiny_run, tmp_path, linked):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("eval"))
    outside = tmp_path / "outside"
    outside.mkdir()
    link = run / "eval" / linked.format(best=RunView(run).top(1)[0].id)
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    before = sorted(path.relative_to(run) for path in (run / "eval").rglob("*"))

    done = subprocess.run([sys.executable, "tools/evaluate.py", str(run), "--workers", "1", "--tasks", "point_nav",
                           "--top", "1", *BUDGET], cwd=ROOT, capture_output=True, text=True, timeout=120)

    assert done.returncode == EXIT_FATAL, done.stderr
    assert done.stderr.splitlines() == [f"error: {link} is not a folder (a symbolic link or a file): remove it or "
                                        "use another OUT_DIR"]
    assert done.stdout == ""
    assert sorted(path.relative_to(run) for path in (run / "eval").rglob("*")) == before  # no claim, no summary
    assert list(outside.iterdir()) == []
