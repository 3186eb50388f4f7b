"""Every task's step hooks compute the same on torch tensors as on NumPy arrays, on identical states.

Tasks are one code for both simulation backends (``derl.envs.tasks.base``): their step hooks compute
with ``scene.xp``. Here a CPU ``UnimalBatch`` runs a few steps; ``Twin`` then binds a second task of
the same config to a ``Scene`` of copies of the batch's arrays (NumPy, torch float64, torch float32),
with the batch task's per-env state copied in, and runs one step's hooks as ``UnimalBatch.step``
orders them, on the batch's states before and after its next step. The NumPy twin reproduces the
batch's own step exactly (so the twin holds everything the hooks read); the torch twins must match
it, bit for bit up to float64 rounding, and to float32 tolerance, with tensors of their own dtype
as results. Then each twin draws env 1's next episode (host NumPy, the same seed) into its arrays
and reads its start: the twins' states must agree again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import array_api_compat
import array_api_compat.numpy as xnp
import array_api_compat.torch as xtorch
import mujoco
import numpy as np
import pytest
import torch

from derl.checked_config import load_config
from derl.envs.batch import UnimalBatch
from derl.envs.observations import Proprioception
from derl.envs.scene import Scene
from derl.envs.tasks import Task, make_task
from tests.envs.test_envs_tasks import CONFIGS, FIXTURE

ENVS = 3
WARMUP = 4  # batch steps before the twins copy its state
COMPARED = 2  # steps whose hooks the twins run
SIM_ARRAYS = ("qpos", "qvel", "xpos", "xmat", "site_xpos", "sensordata", "torso_height")
# (relative, absolute): float32 holds positions of metres to ~1e-6 m; rewards scale differences of
# them by up to 100 (ENV.REACH_REWARD_PARAMS) or 1 / dt = 50.
TOLERANCE = {torch.float64: (1e-12, 1e-12), torch.float32: (1e-4, 1e-3)}


class NoNumpy(torch.Tensor):
    """A tensor NumPy cannot read: NumPy would take a CPU tensor (its functions handing back ndarrays,
    its ufuncs tensors), so a ``np.`` call left in a step hook fails here, not only on a GPU. Torch
    operations keep the subclass."""

    def __array__(self, *args, **kwargs):
        raise TypeError("a NumPy call on a tensor (step hooks compute with scene.xp)")


def _walk(owner: Any, path: str, seen: set[int]) -> Iterator[tuple[str, Any, str, Any]]:
    seen.add(id(owner))
    for name, value in vars(owner).items():
        if array_api_compat.is_array_api_obj(value) and value.ndim:
            yield f"{path}.{name}", owner, name, value
        elif (type(value).__module__.startswith("derl.envs") and not isinstance(value, Scene)
              and hasattr(value, "__dict__") and id(value) not in seen):
            yield from _walk(value, f"{path}.{name}", seen)


def task_arrays(task: Task) -> dict[str, Any]:
    """Every array (NumPy or tensor) ``task`` holds, by attribute path, through the ``derl.envs``
    objects it owns (arena, height map, props, height patch); not through the scene or the models."""
    return {path: value for path, _, _, value in _walk(task, "task", set())}


def forbid_numpy(task: Task) -> None:
    """Makes every tensor of ``task`` a ``NoNumpy`` view (views of one array stay views of it)."""
    for _, owner, name, value in list(_walk(task, "task", set())):
        if isinstance(value, torch.Tensor):
            setattr(owner, name, value.as_subclass(NoNumpy))


def copy_task_state(source: Task, target: Task) -> None:
    """Writes every array of ``source`` into the array of ``target`` at the same path, in place (views
    into a height map stay views), in the target's namespace, device and dtype."""
    targets = task_arrays(target)
    for path, value in task_arrays(source).items():
        into = targets[path]
        xp = array_api_compat.array_namespace(into)
        into[...] = xp.asarray(to_numpy(value), dtype=into.dtype, device=array_api_compat.device(into))


def to_numpy(value: Any) -> np.ndarray:
    return value.cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


class Twin:
    """``sim``'s task on copies of its arrays in another namespace: what the batch's task computes, as
    another backend would compute it. For the GPU backend, ``Twin(batch, array_api_compat.torch,
    torch.float32, "cuda")`` runs the tasks on the device on a CPU batch's states; ``step`` loads its
    "after" state from any scene (NumPy or tensors), so a GPU batch's states can be compared too.

    Args:
        sim: the batch whose model, config and state the twin copies.
        xp: ``array_api_compat.numpy`` or ``array_api_compat.torch``.
        dtype: the twin scene's float type (the height map stays float32, as the batch's).
        device: where the twin's arrays live.
    """

    def __init__(self, sim: UnimalBatch, xp: Any, dtype: Any, device: Any = "cpu"):
        self.xp, self.dtype, self.device = xp, dtype, device
        source = sim.scene
        self.task = task = make_task(sim.task.world, sim.num_envs)
        arrays = {name: self._convert(getattr(source, name)) for name in SIM_ARRAYS}
        self.scene = Scene(source.model, source.models, source.dt, source.head, task.arena.heights,
                           source.ground_z, **arrays)
        task.bind(self.scene)
        forbid_numpy(task)
        self.namespaces = {path: array_api_compat.array_namespace(v) for path, v in task_arrays(task).items()}
        model, head = source.model, source.head
        joints = np.flatnonzero(model.body_rootid[model.jnt_bodyid] == head)
        hinges = joints[model.jnt_type[joints] == mujoco.mjtJoint.mjJNT_HINGE]
        dofs = np.flatnonzero(model.body_rootid[model.dof_bodyid] == head)
        self.proprio = Proprioception(model, arrays, task.world.ENV.OBS_TYPES, model.jnt_qposadr[hinges], dofs)

    def _convert(self, value: np.ndarray) -> Any:
        dtype = self.dtype if np.issubdtype(value.dtype, np.floating) else None
        array = self.xp.asarray(to_numpy(value), dtype=dtype, device=self.device, copy=True)
        return array.as_subclass(NoNumpy) if isinstance(array, torch.Tensor) else array

    def load(self, scene: Scene) -> None:
        """Copies ``scene``'s simulator arrays into the twin's, in place."""
        for name in SIM_ARRAYS:
            getattr(self.scene, name)[...] = self._convert(getattr(scene, name))

    def sync(self, sim: UnimalBatch) -> None:
        """The batch's arrays and task state, copied."""
        self.load(sim.scene)
        copy_task_state(sim.task, self.task)

    def step(self, after: Scene) -> dict[str, Any]:
        """One step's hooks in ``UnimalBatch.step``'s order: ``before_step`` on the twin's state, then
        ``after``'s arrays loaded (the physics), then the ground clearance, reward, metric, termination
        and observation; every result keyed by name."""
        task, scene = self.task, self.scene
        task.before_step(scene)
        self.load(after)
        qpos = scene.qpos
        height, out_of_map = task.arena.clearance(qpos[:, 0], qpos[:, 1], qpos[:, 2])
        reward, terms = task.reward(scene)
        results = {"height": height, "out_of_map": out_of_map, "reward": reward, **terms,
                   "metric": task.metric(scene), "terminate": task.terminate(scene),
                   "proprioceptive": self.proprio()}
        obs = {}
        task.observe(scene, obs)
        return {**results, **{f"obs/{key}": value for key, value in obs.items()}}


def assert_close(actual: Any, expected: np.ndarray, tolerance: tuple[float, float] | None, name: str) -> None:
    """Floats to ``tolerance`` (relative, absolute; None: bit for bit and of the same dtype), anything
    else exactly."""
    actual = to_numpy(actual)
    if np.issubdtype(actual.dtype, np.floating) and tolerance:
        np.testing.assert_allclose(actual, expected, *tolerance, err_msg=name)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=name, strict=tolerance is None)


def assert_results_match(expected: dict[str, Any], twin: Twin, actual: dict[str, Any]) -> None:
    """``actual`` (from ``twin``) holds arrays of the twin's namespace, device and float type, equal to
    ``expected`` (NumPy, float64) to the float type's tolerance."""
    assert actual.keys() == expected.keys()
    tolerance = TOLERANCE.get(twin.dtype)
    for key, value in actual.items():
        if isinstance(expected[key], bool):  # a task without the termination returns False
            assert value is expected[key], key
            continue
        assert array_api_compat.array_namespace(value) is twin.xp, f"{key}: {type(value).__name__}"
        assert array_api_compat.device(value) == array_api_compat.device(twin.scene.qpos), key
        if twin.xp.isdtype(value.dtype, "real floating"):
            assert value.dtype == twin.dtype, f"{key}: {value.dtype}"
        assert_close(value, expected[key], tolerance, key)


def assert_states_match(expected: Twin, twin: Twin) -> None:
    """The twin task's arrays are still of the namespace they were bound in and equal ``expected``'s."""
    tolerance = TOLERANCE.get(twin.dtype)
    arrays = task_arrays(twin.task)
    for path, value in task_arrays(expected.task).items():
        assert array_api_compat.array_namespace(arrays[path]) is twin.namespaces[path], path
        assert_close(arrays[path], value, tolerance, path)


def run_batch(name: str) -> tuple[UnimalBatch, np.random.Generator]:
    """A batch of ``ENVS`` envs of the config, ``WARMUP`` steps into random actions (ended envs reset)."""
    sim = UnimalBatch(FIXTURE.read_text(), load_config(CONFIGS[name]), ENVS)
    sim.seed(0)
    sim.reset(np.arange(ENVS))
    rng = np.random.default_rng(0)
    for _ in range(WARMUP):
        *_, terminated, truncated, _ = sim.step(rng.uniform(-1, 1, (ENVS, sim.model.nu)))
        ended = np.flatnonzero(terminated | truncated)
        if len(ended):
            sim.reset(ended)
    return sim, rng


@pytest.mark.parametrize("name", list(CONFIGS))
def test_task_hooks_on_tensors_equal_those_on_numpy(name):
    """Step hooks on two steps, then an episode's draw and start, on NumPy, torch float64 and float32."""
    sim, rng = run_batch(name)
    reference, *twins = (Twin(sim, xnp, np.float64), Twin(sim, xtorch, torch.float64),
                         Twin(sim, xtorch, torch.float32))
    for twin in (reference, *twins):
        twin.sync(sim)
    for _ in range(COMPARED):
        obs, _, _, _, infos = sim.step(rng.uniform(-1, 1, (ENVS, sim.model.nu)))
        assert not infos["unstable"].any()  # nothing zeroed: the batch's values are the hooks'
        expected = reference.step(sim.scene)
        # The NumPy twin is the batch's own step: the twin copies all the hooks read.
        batch_view = {"height": sim.scene.torso_height, "out_of_map": infos["out_of_map"],
                      "metric": infos["metric"], "proprioceptive": obs["proprioceptive"],
                      **{key: infos[key] for key in (*sim.task.reward_terms, *sim.task.aggregates)},
                      **{f"obs/{key}": obs[key] for key in obs if key != "proprioceptive"}}
        for key, value in batch_view.items():
            assert_close(expected[key], value, None, key)
        for twin in twins:
            assert_results_match(expected, twin, twin.step(sim.scene))
    for twin in twins:
        assert_states_match(reference, twin)
    # Env 1's next episode, drawn on the host from one seed, written into each twin's arrays.
    for twin in (reference, *twins):
        twin.task.initialize_episode(twin.scene, 1, np.random.default_rng(7))
        twin.task.start(twin.scene, np.array([1]))
    for twin in twins:
        assert_states_match(reference, twin)
        for array in ("qpos", "qvel"):  # props placed
            assert_close(getattr(twin.scene, array), getattr(reference.scene, array), TOLERANCE[twin.dtype], array)


def test_a_numpy_call_in_a_step_hook_fails_on_tensors():
    sim, _ = run_batch("ft")
    twin = Twin(sim, xtorch, torch.float64)
    twin.sync(sim)
    twin.task.metric = lambda scene: np.copy(scene.qpos[:, 0])  # NumPy's spelling of Task.metric
    with pytest.raises(TypeError, match="a NumPy call on a tensor"):
        twin.step(sim.scene)
    twin.task.metric = lambda scene: np.abs(twin.task._x_before)  # a ufunc, on task state
    with pytest.raises(TypeError, match="a NumPy call on a tensor"):
        twin.step(sim.scene)
