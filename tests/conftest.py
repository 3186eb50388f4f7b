"""Shared test set-up: this checkout is the one imported, rendering is headless.

pytest puts the repository root on ``sys.path`` (``pythonpath`` in pyproject.toml); subprocesses
(tools, evo_single_proc.py, workers) get it through ``PYTHONPATH``, so they run this checkout's
code even when the virtual environment's editable install points at another checkout.
"""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

ROOT = Path(__file__).resolve().parents[1]
# The declared defaults (docs/reference/config.md) as a --cfg file: evo_single_proc.py requires one;
# tests override keys.
DEFAULT_CFG = ROOT / "tests" / "assets" / "evolution" / "defaults.yml"
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
os.environ.setdefault("MUJOCO_GL", "egl")

# check_env's advice on unbounded Box spaces. derl's observations (positions, velocities, contact forces)
# are unbounded by design, as are those of Gymnasium's MuJoCo envs, whose own check_env test expects
# these two warnings too (Gymnasium tests/envs/test_envs.py, CHECK_ENV_IGNORE_WARNINGS).
UNBOUNDED_OBSERVATIONS = ("A Box observation space minimum value is -infinity",
                          "A Box observation space maximum value is infinity")


def check_env_strictly(env: gym.Env) -> None:
    """Gymnasium's ``check_env``, with every warning it gives a failure but the two on unbounded observations."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    unexpected = [str(w.message) for w in caught if not any(text in str(w.message) for text in UNBOUNDED_OBSERVATIONS)]
    assert not unexpected, unexpected


def sampled_xml(folder: Path, seed: int) -> Path:
    """The MJCF of ``random_genome`` with generator seed ``seed`` under the default config (written once per folder)."""
    import numpy as np

    from derl.checked_config import load_config
    from derl.morphology import random_genome, to_mjcf

    path = folder / f"sampled-{seed}.xml"
    if not path.exists():
        cfg = load_config()
        path.write_text(to_mjcf(random_genome(cfg.unimal, np.random.default_rng(seed), f"test-{seed}"), cfg.unimal))
    return path


# The shared tiny real run (tests/analysis/test_report.py): its overrides, read by the tests.
TINY_RUN = {"search": 6, "init": 4, "iterations": 20, "episode_length": 100, "video_length": 24}


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A finished real search, shared by the report tests: 6 morphologies (4 initial), 20 PPO
    iterations of 64 env steps each, 100-step episodes, a 24-frame video of the last one
    (EVO.VIDEOS_LAST_N 1), TensorBoard curves per morphology. About 20 s on 2 cores."""
    out = tmp_path_factory.mktemp("tiny") / "run"
    overrides = [
        "OUT_DIR", str(out), "EVO.NUM_PROCESSES", "2", "EVO.INIT_POPULATION_SIZE", str(TINY_RUN["init"]),
        "EVO.SEARCH_SPACE_SIZE", str(TINY_RUN["search"]), "EVO.AGING_WINDOW_SIZE", "4",
        "PPO.NUM_ENVS", "2", "PPO.TIMESTEPS", "32", "PPO.MAX_STATE_ACTION_PAIRS", str(64 * TINY_RUN["iterations"]),
        "ENV.EPISODE_LENGTH", str(TINY_RUN["episode_length"]), "EVO.VIDEOS_LAST_N", "1",
        "PPO.VIDEO_LENGTH", str(TINY_RUN["video_length"]), "TENSORBOARD.PER_MORPHOLOGY", "true",
    ]
    done = subprocess.run([sys.executable, "evo_single_proc.py", "--cfg", "configs/evo/quick.yml", *overrides],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out
