"""The array code's fixed cost per step on the host: for a batch of one env (the single Gymnasium env)
each array call is most of a step's cost beside the physics, so the step path calls NumPy's C
functions and methods, never its Python-level wrappers (``np.take``, ``np.astype``,
``np.cumulative_sum``, ``ndarray.any``, ``ndarray.sum``: 0.5-0.8 us each on top of the C call under
them; ``derl.arrays`` has the cheap calls)."""

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

import derl
from derl.checked_config import load_config
from derl.envs import ENV_ID, UnimalVectorEnv

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).parents[1] / "assets" / "envs" / "quadruped.xml"
NUMPY = str(Path(np.__file__).parent)
DERL = str(Path(derl.__file__).parent)
#: NumPy's Python functions a step may call: the dispatchers of np.concat and np.where (C functions) and
#: count_nonzero's alias to C (0.2 us)
ALLOWED = {"concatenate", "where", "count_nonzero", "_count_nonzero_dispatcher"}


def numpy_python_calls(step) -> set[str]:
    """The NumPy functions written in Python that derl's code calls in ``step()`` (``sys.setprofile``;
    not those that other packages call: mujoco.batch's handling of ids at a restart)."""
    called: set[str] = set()

    def profile(frame, event, _arg):
        if (event == "call" and frame.f_code.co_filename.startswith(NUMPY)
                and frame.f_back.f_code.co_filename.startswith(DERL)):
            called.add(f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        step()
    finally:
        sys.setprofile(None)
    return called


def _disallowed(called: set[str]) -> list[str]:
    return sorted(name for name in called if name.split(":")[1] not in ALLOWED)


def test_a_single_ft_env_step_and_reset_call_no_numpy_python_wrapper():
    cfg = load_config(ROOT / "configs" / "evo" / "ft.yml")
    env = gym.make(ENV_ID, xml_path=FIXTURE, world=cfg, seed=0)
    env.reset()
    action = env.action_space.sample()
    assert _disallowed(numpy_python_calls(lambda: env.unwrapped.step(action))) == []  # gymnasium's checker aside
    assert _disallowed(numpy_python_calls(env.unwrapped.reset)) == []


def test_an_ft_batch_step_calls_no_numpy_python_wrapper():
    cfg = load_config(ROOT / "configs" / "evo" / "ft.yml")
    env = UnimalVectorEnv(FIXTURE, cfg, 2)
    env.reset(seed=0)
    actions = np.zeros((2, env.single_action_space.shape[0]), np.float32)
    assert _disallowed(numpy_python_calls(lambda: env.step(actions))) == []
    env.sim.scene.qpos[1, 2] = -1.0  # env 1 falls: the step restarts it
    assert _disallowed(numpy_python_calls(lambda: env.step(actions))) == []


def test_proprioception_slices_the_consecutive_columns():
    """The hinge angles and the agent's velocities are consecutive columns of ``qpos`` and ``qvel``: sliced
    (a view, which the concatenation copies), not gathered; the sensors' scattered columns are gathered."""
    cfg = load_config(ROOT / "configs" / "evo" / "ft.yml")
    env = gym.make(ENV_ID, xml_path=FIXTURE, world=cfg).unwrapped
    assert [isinstance(columns, slice) for _, columns in env.sim._proprio._takes] == [True, True, False]
