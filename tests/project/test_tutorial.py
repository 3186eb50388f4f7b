"""The first study of docs/getting-started.md runs as written: every ```bash block of the page, in
one shell, one after the other, in a fresh copy of the checkout (``sh`` blocks are servers or
set-up, shown only). ``.venv`` in the copy is the interpreter running the tests; the copy's own code
comes first on ``PYTHONPATH``."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"


def bash_blocks(text: str) -> list[str]:
    """The ```bash fenced blocks of a Markdown page, in order."""
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def test_the_page_has_the_tutorial_commands():
    commands = "\n".join(bash_blocks(PAGE.read_text()))
    for tool in ("evo_single_proc.py --cfg configs/evo/quick.yml", "tools/status.py", "tools/report.py",
                 "tools/replay.py", "tools/evaluate.py", "tools/train_ppo.py"):
        assert tool in commands, tool


@pytest.mark.slow
def test_the_first_study_runs_as_written(tmp_path):
    copy = tmp_path / "derl"
    copy.mkdir()
    for name in ("derl", "configs", "tools", "evo_single_proc.py", "pyproject.toml"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, copy / name)
    (copy / ".venv").symlink_to(Path(sys.executable).parents[1])
    script = "set -euo pipefail\n" + "\n".join(bash_blocks(PAGE.read_text()))
    env = {**os.environ, "MUJOCO_GL": "egl", "PYTHONPATH": str(copy)}
    done = subprocess.run(["bash", "-c", script], cwd=copy, env=env, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((copy / "output" / "quick" / "summary.json").read_text())
    assert summary["published"] == summary["total"] == 16
    # The study shows evolution working: its best body keeps its feet for most of an episode and moves
    # forward when its final policy is replayed (the page's promise for a newcomer).
    replayed = subprocess.run([sys.executable, "tools/replay.py", "output/quick", summary["best"]["id"],
                               "--episodes", "1"], cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    first = json.loads(replayed.stdout)
    assert first["length"] >= 300 and first["x_pos"] > 0, first
    assert (copy / "output" / "quick" / "report" / "index.html").is_file()
    assert (copy / "best.mp4").is_file() or (copy / "best.gif").is_file()
    assert (copy / "output" / "quick" / "eval" / "summary.csv").is_file()
    assert (copy / "output" / "best" / "metrics.json").is_file()
