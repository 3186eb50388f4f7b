"""Seeded PPO runs give the trajectories and parameters recorded before the speed work (tests/assets/ppo).

Each case trains a few iterations from a fixed seed and is compared with a fixture: every
rollout (normalised observations, sampled actions, log-probabilities, values, normalised rewards,
episode ends, bootstrap values), the iteration records, the final parameters, optimiser moments and
normaliser statistics. An optimisation must keep all of them, to float tolerance: a changed
summation order moves the last bits, a changed behaviour moves far more. The same holds for another
CPU, whose BLAS and torch kernels sum in another order (the fixture was recorded with AVX-512 ones).
Pendulum's smooth dynamics keep rounding differences at rounding size (tight elementwise tolerance).
The unimal's contacts amplify them: a contact made one step earlier moves a few normalised
observations by up to 1.2e-2 within 96 steps (torch's scalar kernels, as on a CPU without AVX2)
while the rest stay near rounding size, so each of its arrays is compared by its norm: the relative
error ||got - expected|| / ||expected|| is at most 4.3e-4 on every kernel tried, far below what a
change of behaviour gives (order 0.1).

``python tests/ppo/test_ppo_equivalence.py`` re-records the fixture; do so only for a deliberate change
of behaviour, and say which in the commit.
"""

import sys
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from derl.checked_config import load_config, load_preset
from derl.ppo.rollout import sync_vector_env
from derl.ppo.trainer import PPO
from derl.training.envs import UnimalEnvFactory

ASSETS = Path(__file__).parents[1] / "assets"
FIXTURE = ASSETS / "ppo" / "equivalence.npz"
QUADRUPED = ASSETS / "envs" / "quadruped.xml"
ITERATIONS = 3
ROLLOUT_FIELDS = ("obs", "actions", "log_probs", "values", "rewards", "terminated", "truncated",
                  "final_values", "bootstrap_value")
RECORD_FIELDS = ("return", "loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
PPO_KEYS = {"PPO.NUM_ENVS": 4, "PPO.TIMESTEPS": 32, "PPO.BATCH_SIZE": 32,
            "PPO.MAX_STATE_ACTION_PAIRS": 4 * 32 * ITERATIONS}


def _pendulum(_index: int) -> gym.Env:
    return gym.make("Pendulum-v1", max_episode_steps=50)


def _cases():
    """name -> (config, make_env, seed). Short episodes, so ends and time limits fall in the run."""
    unimal = load_preset("ft", {**PPO_KEYS, "ENV.EPISODE_LENGTH": 40})
    return {
        "unimal": (unimal, UnimalEnvFactory(unimal.world, str(QUADRUPED), seed=3), 7),
        "pendulum": (load_config(None, PPO_KEYS), partial(sync_vector_env, _pendulum), 2),
    }


PENDULUM_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
# The largest relative error in norm seen on any array, over OpenBLAS's SkylakeX, Haswell, Zen,
# Sandybridge and Nehalem kernels and torch's avx512, avx2 and scalar (ATEN_CPU_CAPABILITY=default)
# ones, was 4.3e-4 (exp_avg); 2e-3 leaves room for CPUs not tried.
UNIMAL_NORM_TOLERANCE = 2e-3


def _assert_close_in_norm(got: np.ndarray, expected: np.ndarray, key: str) -> None:
    """``got`` is within ``UNIMAL_NORM_TOLERANCE`` of ``expected`` in relative norm, NaN where it is."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected), err_msg=key)
    finite = ~np.isnan(expected)
    error = np.linalg.norm(got[finite] - expected[finite]) / np.linalg.norm(expected[finite])
    assert error <= UNIMAL_NORM_TOLERANCE, f"{key}: relative error {error:.2e} in norm"


def run_case(name: str) -> dict[str, np.ndarray]:
    """Trains case ``name`` and returns every compared array, keyed ``name/what``."""
    cfg, make_env, seed = _cases()[name]
    ppo = PPO(cfg.trainer, make_env, seed)
    out: dict[str, list] = {}
    try:
        ppo.collector.reset(seed)
        for _ in range(ITERATIONS):
            record = ppo.iterate()
            for field in ROLLOUT_FIELDS:
                out.setdefault(field, []).append(getattr(ppo.rollout, field).copy())
            out.setdefault("records", []).append([record.get(key, np.nan) for key in RECORD_FIELDS])
    finally:
        ppo.pool.close()
    arrays = {key: np.stack(values) for key, values in out.items()}
    arrays["params"] = ppo.optimizer.params.detach().numpy().copy()
    arrays["exp_avg"] = ppo.optimizer.exp_avg.numpy().copy()
    arrays["exp_avg_sq"] = ppo.optimizer.exp_avg_sq.numpy().copy()
    for norm in ("obs_norm", "ret_norm"):
        state = getattr(ppo, norm).state_dict()
        arrays[norm] = np.concatenate([np.ravel(state["mean"]), np.ravel(state["var"]), [state["count"]]])
    return {f"{name}/{key}": value for key, value in arrays.items()}


@pytest.mark.recorded
@pytest.mark.parametrize("name", ["unimal", "pendulum"])
def test_seeded_run_matches_the_recorded_one(name):
    expected = np.load(FIXTURE)
    got = run_case(name)
    assert sorted(got) == sorted(key for key in expected.files if key.startswith(f"{name}/"))
    for key, value in got.items():
        if value.dtype == bool:
            np.testing.assert_array_equal(value, expected[key], err_msg=key)
        elif name == "unimal":
            _assert_close_in_norm(value.astype(np.float64), expected[key].astype(np.float64), key)
        else:
            np.testing.assert_allclose(value, expected[key], **PENDULUM_TOLERANCE, err_msg=key)


def test_the_fixture_exercises_episode_ends():
    expected = np.load(FIXTURE)
    for name in ("unimal", "pendulum"):
        assert expected[f"{name}/truncated"].any(), name  # bootstrapped from the true final observation
    assert expected["unimal/terminated"].any()  # a fall


if __name__ == "__main__" and sys.argv[1:] == []:
    FIXTURE.parent.mkdir(exist_ok=True)
    np.savez_compressed(FIXTURE, **run_case("unimal"), **run_case("pendulum"))
    print(f"recorded {FIXTURE}")
