"""PPO learns an evaluation task: point_nav on a sampled morphology beats the random policy."""

from pathlib import Path

import numpy as np
import pytest

from derl.checked_config import load_config
from derl.envs import UnimalEnv
from derl.morphology import random_genome, to_mjcf
from derl.training.run import CHECKPOINT_FILE, evaluate, train_to_folder

ROOT = Path(__file__).resolve().parents[2]
EPISODES = 20
SEEDS = (0, 1, 2)


@pytest.mark.slow
def test_ppo_beats_the_random_policy_on_point_nav(tmp_path):
    """Three seeds of 100k env steps each (25 s to 2 minutes each on 2 cores) in a 10 x 10 m arena,
    goals within 3.5 m, 200-step episodes; their mean metric over 20 episodes against the random
    policy's. One seed is not enough: a change that moves float rounding (the hand-written
    gradient, derl/ppo/gradients.py) sends a training elsewhere. Measured (2026-11-23): random -0.13
    (std 0.30); seeds 0, 1, 2 trained 0.07, 0.02, 0.34 (mean 0.15) before the hand-written gradient, -0.10, 0.25, 0.21
    (mean 0.12) after. The margin asked, 0.1, is below both means' gaps."""
    base = load_config()
    xml = tmp_path / "unimal.xml"
    xml.write_text(to_mjcf(random_genome(base.unimal, np.random.default_rng(3), "learner"), base.unimal))

    def config(seed: int):
        return load_config(ROOT / "configs" / "eval" / "point_nav.yml", {
            "TERRAIN.SIZE": [5, 5, 1], "OBJECT.PLACEMENT_BUFFER_WIDTH": 1, "OBJECT.PLACEMENT_BUFFER_LEN": 1,
            "ENV.EPISODE_LENGTH": 200, "PPO.NUM_ENVS": 8, "PPO.TIMESTEPS": 128,
            "PPO.MAX_STATE_ACTION_PAIRS": 100_000, "RNG_SEED": seed, "CHECKPOINT_PERIOD": 1000})

    cfg = config(0)
    env = UnimalEnv(xml, cfg)
    rng = np.random.default_rng(0)
    random_metrics = []
    for k in range(EPISODES):
        env.reset(seed=1000 + k)
        done = False
        while not done:
            *_, terminated, truncated, info = env.step(rng.uniform(-1, 1, env.action_space.shape))
            done = terminated or truncated
        random_metrics.append(info["metric"])
    env.close()
    trained = []
    for seed in SEEDS:
        folder = tmp_path / f"train-{seed}"
        train_to_folder(config(seed), {"xml": str(xml)}, folder, progress=False)
        trained.append(evaluate(cfg.world, cfg.DEVICE, folder / CHECKPOINT_FILE, None, EPISODES, seed=1000)["metric"])
    assert np.mean(trained) > np.mean(random_metrics) + 0.1, (trained, np.mean(random_metrics))
