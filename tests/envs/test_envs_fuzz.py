"""Random-action episodes on sampled morphologies: no exception, no NaN, unstable ends flagged."""

from pathlib import Path

import numpy as np
import pytest

from derl.checked_config import load_config, load_preset
from derl.envs import UnimalEnv
from derl.morphology import random_genome, to_mjcf

FIXTURE = Path(__file__).parents[1] / "assets" / "envs" / "quadruped.xml"
ENVS = ("ft", "vt", "mvt")


def run_episodes(xml: Path, name: str, episodes: int, seed: int, **overrides) -> list[dict]:
    """Plays random episodes; returns the last info of each, checking every observation."""
    env = UnimalEnv(xml, load_preset(name, overrides), seed=seed)
    finals = []
    for _ in range(episodes):
        obs, _ = env.reset()
        done = False
        while not done:
            assert all(np.isfinite(v).all() for v in obs.values())
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
            assert np.isfinite(reward)
            done = terminated or truncated
        finals.append(info)
    env.close()
    return finals


def fuzz(folder: Path, morphologies: int, episodes: int, **overrides) -> int:
    cfg = load_config()
    count = 0
    for seed in range(morphologies):
        xml = folder / f"{seed}.xml"
        genome = random_genome(cfg.unimal, np.random.default_rng(1000 + seed), f"fuzz-{seed}")
        xml.write_text(to_mjcf(genome, cfg.unimal))
        finals = run_episodes(xml, ENVS[seed % 3], episodes, seed, **overrides)
        count += len(finals)
    return count


def test_random_episodes_on_sampled_morphologies(tmp_path):
    assert fuzz(tmp_path, morphologies=6, episodes=3, **{"ENV.EPISODE_LENGTH": 60}) == 18


@pytest.mark.slow
def test_a_thousand_random_episodes_on_fifty_morphologies(tmp_path):
    assert fuzz(tmp_path, morphologies=50, episodes=20) == 1000


def test_an_exploding_morphology_ends_with_a_flag_not_a_crash(tmp_path):
    xml = tmp_path / "exploding.xml"
    text = FIXTURE.read_text()
    xml.write_text(text.replace('gear="200"', 'gear="1e12"').replace('gear="250"', 'gear="1e12"'))
    finals = run_episodes(xml, "vt", episodes=3, seed=0)
    assert all(info.get("unstable") for info in finals)
