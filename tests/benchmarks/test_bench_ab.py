"""bench ab: another revision's package imported beside this one, iterations alternating."""

import argparse
import shutil
import subprocess

import pytest

from benchmarks.ab import compare, rename_imports, run
from derl.paths import REPO_ROOT as ROOT


def test_imports_of_derl_are_renamed_and_nothing_else():
    source = ("from derl.ppo import train\nimport derl.envs\n    from derl import config\n"
              "import derlish\nfrom derl_tools import x\ntext = 'from derl.ppo'\n")
    assert rename_imports(source) == (
        "from derl_base.ppo import train\nimport derl_base.envs\n    from derl_base import config\n"
        "import derlish\nfrom derl_tools import x\ntext = 'from derl.ppo'\n")


def test_compare_takes_the_median_of_paired_ratios():
    # Pair 2 ran on a host twice as slow: its ratio stays 1.25.
    result = compare(base=[0.5, 1.0, 0.6], new=[0.4, 0.8, 0.4])
    assert result["speedup_paired_median"] == 1.25
    assert result["speedup_of_totals"] == pytest.approx(2.1 / 1.6, abs=1e-4)
    assert result["base_median_seconds"] == 0.6 and result["new_median_seconds"] == 0.4


def test_a_against_itself(tmp_path):
    if shutil.which("git") is None or subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT,
                                                     capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    result = run(argparse.Namespace(base="HEAD", xml=None, iters=2, env="ft"))
    assert result["base"] == "HEAD" and result["iters"] == 2
    assert 0.2 < result["speedup_paired_median"] < 5.0


def test_a_against_itself_on_vt(tmp_path):
    """``--env vt``: both revisions train the VT preset (its terrain and height-map input)."""
    if shutil.which("git") is None or subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT,
                                                     capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    result = run(argparse.Namespace(base="HEAD", xml=None, iters=2, env="vt"))
    assert result["env"] == "vt" and 0.2 < result["speedup_paired_median"] < 5.0


def test_an_unknown_revision_is_one_line():
    if shutil.which("git") is None:
        pytest.skip("no git")
    with pytest.raises(SystemExit, match="error: git archive 'no-such-rev' failed"):
        run(argparse.Namespace(base="no-such-rev", xml=None, iters=2, env="ft"))
