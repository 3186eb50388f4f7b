"""FT, VT and MVT replay seeded episodes recorded before the task layer was reshaped (tests/assets/envs).

``python tests/envs/test_envs_replay.py`` re-records the fixtures; do so only for a deliberate change of
behaviour, and say which in the commit.

The fixtures were recorded on one CPU; another computes the same float64 values in another order
(OpenBLAS picks its kernel per CPU: the control cost's dot product differs by one ulp between the
AVX-512 and the AVX2 kernels), so values are compared to float64 rounding, not bit for bit. MuJoCo's
dynamics do not pass through BLAS, so these rounding differences never feed back into the trajectory.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

from derl.checked_config import load_preset
from derl.envs import UnimalEnv

ASSETS = Path(__file__).parents[1] / "assets" / "envs"
FIXTURE = ASSETS / "quadruped.xml"
CASES = {
    "ft": {},
    "vt": {"TERRAIN.BANK_SIZE": 0},  # recorded with a terrain drawn per episode (the bank: test_envs_terrain_bank)
    "mvt": {"ENV.KEYS_TO_KEEP": ["proprioceptive", "hfield", "obj", "goal"]},
}
EPISODES, STEPS = 2, 40
# Float64 rounding, with room to spare: the largest difference seen between OpenBLAS kernels
# (SkylakeX, Haswell, Zen, Sandybridge, Nehalem) and torch's CPU capabilities is 1.4e-14 relative
# (3.6e-15 absolute, an object position of scale 42 less the torso's); atol covers values that cancel
# to about zero from terms of order 1e2 (float64 eps * 1e2 = 2e-14 per operation).
TOLERANCE = {"rtol": 1e-9, "atol": 1e-12}


def _box_qpos(env: UnimalEnv) -> int:
    return int(env.model.jnt_qposadr[env.model.body("box").jntadr[0]])


def _onto_terrain(env: UnimalEnv) -> None:
    env.qpos[0] += 20.0  # the obstacles of the second episode's terrain


def _next_to_box(env: UnimalEnv) -> None:
    box = env.qpos[_box_qpos(env):][:2]
    env.qpos[0:3] = box[0] - 0.6, box[1], env.qpos[2] + 1.0  # dropped: clear of any obstacle


def _box_towards_goal(env: UnimalEnv) -> None:
    goal = env.model.site_pos[env.model.site("goal").id]
    env.qpos[_box_qpos(env):][:3] = goal[0] - 0.5, goal[1], goal[2] + 1.0


# (episode, step) -> a teleport before that step, to reach every reward branch
SCRIPTS = {
    "ft": {},
    "vt": {(1, 5): _onto_terrain},
    "mvt": {(0, 5): _next_to_box, (0, 20): _box_towards_goal, (1, 10): _next_to_box},
}


def record(name: str) -> dict[str, np.ndarray]:
    """Two seeded episodes of random actions: observations, rewards, info values, flags."""
    env = UnimalEnv(FIXTURE, load_preset(name, {"ENV.EPISODE_LENGTH": STEPS, **CASES[name]}), seed=11)
    actions = np.random.default_rng(5).uniform(-1.2, 1.2, (EPISODES * STEPS, env.action_space.shape[0]))
    columns: dict[str, list] = {}

    def add(key: str, value) -> None:
        columns.setdefault(key, []).append(np.asarray(value, dtype=np.float64))

    steps = iter(actions)
    for episode in range(EPISODES):
        obs, _ = env.reset()
        for key, value in obs.items():
            add(f"reset/{key}", value)
        done, step = False, 0
        while not done:
            if (episode, step) in SCRIPTS[name]:
                SCRIPTS[name][episode, step](env)
            step += 1
            obs, reward, terminated, truncated, info = env.step(next(steps))
            for key, value in obs.items():
                add(f"obs/{key}", value)
            for key, value in info.items():
                add(f"info/{key}", value)
            add("reward", reward)
            add("done", (terminated, truncated))
            done = terminated or truncated
    return {key: np.stack(values) for key, values in columns.items()}


@pytest.mark.recorded
def test_replays_match_the_recording():
    for name in CASES:
        expected = np.load(ASSETS / f"replay_{name}.npz")
        got = record(name)
        assert sorted(got) == sorted(expected.files), name
        for key in expected.files:
            np.testing.assert_allclose(got[key], expected[key], **TOLERANCE, err_msg=f"{name} {key}")


if __name__ == "__main__":
    for case in sys.argv[1:] or CASES:
        np.savez_compressed(ASSETS / f"replay_{case}.npz", **record(case))
