"""The UNIMAL physics of ``N`` envs of one body and world: one ``mujoco.batch.Batch``, tasks over arrays.

``UnimalBatch`` is the loop the Gymnasium envs share (``derl.envs.vector_env.UnimalVectorEnv``, the
vector env a trainer steps, and ``derl.envs.unimal_env.UnimalEnv``, one env): it steps every
simulation in one call and computes observations, rewards, flags and metrics over ``[N, ...]``
arrays; per-env Python runs only where episodes end on the host (``restart``). It never resets by
itself. One code over NumPy (MuJoCo C) and torch tensors (MuJoCo Warp on a device): what differs
is the physics object (``derl.envs.physics``), the array namespace (``Scene.xp``) and where a
restart draws its episodes (``restart``).

Step = ``FRAME_SKIP`` (4) MuJoCo substeps of 5 ms with the actions written to ``ctrl`` (MuJoCo clamps
them to [-1, 1]). An episode is truncated after ``ENV.EPISODE_LENGTH`` steps and terminated when the
agent falls (head height above the ground under it <= STAND_HEIGHT_RATIO x its standing height, the
head's start height minus BODY.FLOOR_OFFSET), when the task ends it (e.g. near a side edge), when the
head leaves the map (``out_of_map``) or the physics goes unstable (a MuJoCo warning counter rose, or a
non-finite state: ``unstable``; the episode's non-finite observation, reward and info values are
zeroed).

Reward = the task's terms + ``__reward__ctrl`` = -CTRL_COST_WEIGHT * sum(a^2) on the actions received:
the sum of the ``__reward__*`` infos except the task's ``aggregates`` (MVT's
``__reward__manipulation`` = reach + push). The infos also hold ``energy`` = sum |qfrc_actuator| (the
actuator forces in joint space after the step, DERL's energy; summed over the episode by the
trainer; not a reward term), ``x_pos`` (head x) and ``metric``.

Which arrays the observations and rewards read is as in DERL: hinge angles and the agent's
velocities are ``qpos`` and ``qvel`` after the step; sensors, ``xpos``, ``xmat`` and ``site_xpos``
are the derived fields MuJoCo computes at the start of the step's last substep.
"""

from __future__ import annotations

import copy
from pathlib import Path

import array_api_compat
import gymnasium as gym
import mujoco
import numpy as np

from derl.arrays import any_set, astype, cumulative_sum, namespace, to_host
from derl.envs.config import WorldCfg
from derl.envs.observations import Proprioception, as_slice
from derl.envs.physics import MujocoDataPhysics, MujocoPhysics, Physics
from derl.envs.scene import Scene
from derl.envs.tasks import CTRL_TERM, check_task_config, make_task
from derl.envs.tasks.base import Task
from derl.envs.world import compile_world, head_height
from derl.fileio.reads import read_bytes

FRAME_SKIP = 4


def make_physics(backend: str, model: mujoco.MjModel, num_envs: int, *, threads: int = 1,
                 persistent: bool = False, device: str = "cpu", nconmax: int = 64, njmax: int = 256,
                 per_world: tuple[str, ...] = ()) -> Physics:
    """The ``backend`` simulator of ``num_envs`` copies of ``model``; ``per_world``: the model fields
    episodes change per env (MuJoCo C keeps a whole model per env instead; one ``MjData`` for one env)."""
    if backend == "mujoco":
        return MujocoDataPhysics(model) if num_envs == 1 else MujocoPhysics(model, num_envs, threads, persistent)
    if backend == "warp":
        from derl.envs.warp_physics import WarpPhysics  # lazy: warp is an optional install (requirements-gpu.txt)

        return WarpPhysics(model, num_envs, device, nconmax=nconmax, njmax=njmax, per_world=per_world)
    raise ValueError(f"unknown simulation backend {backend!r}; use mujoco or warp")


def unimal_mjcf(xml_path: str | Path | None, mjcf: str | None) -> str:
    """The unimal's MJCF text, given as a file or as text (exactly one of them)."""
    if (xml_path is None) == (mjcf is None):
        raise ValueError("give exactly one of xml_path and mjcf")
    if mjcf is not None:
        return mjcf
    assert xml_path is not None  # exactly one of them is given
    path = Path(xml_path)
    try:  # never through a link or from a FIFO: an evolution's xml/ is a shared, untrusted folder
        return read_bytes(path).decode()
    except FileNotFoundError:
        raise FileNotFoundError(f"unimal MJCF not found: {path}") from None


def _length(indices: slice | np.ndarray) -> int:
    return indices.stop - indices.start if isinstance(indices, slice) else len(indices)


class UnimalBatch:
    """``num_envs`` simulations of a unimal (MJCF text) doing ``world.ENV.TASK`` in the task's world.

    Args:
        mjcf: the unimal's MJCF (``derl.morphology.to_mjcf`` output).
        world: the config (ENV, TERRAIN, OBJECT, HFIELD, XML keys are read).
        num_envs: simulations in the batch.
        threads: threads that step them (``VECENV.THREADS``; MuJoCo C only).
        persistent: keep a whole ``MjData`` per simulation (``data(i)``: contacts and every field of
            its last step), for a single env's users and its renderer (MuJoCo C only).
        backend: ``mujoco`` or ``warp`` (``SIM.BACKEND``; ``derl.envs.physics``).
        device: where the warp backend simulates (a torch device name); its arrays are tensors there.
    """

    def __init__(self, mjcf: str, world: WorldCfg, num_envs: int, threads: int = 1, persistent: bool = False,
                 backend: str = "mujoco", device: str = "cpu"):
        check_task_config(world)
        self.task = task = make_task(world, num_envs)
        self.model = model = compile_world(mjcf, world, task)  # a terrain bank filled before the simulator copies it
        self.static = task.static_model()
        self._per_episode_hooks = not _draws_nothing_per_episode(task)
        rows = task.model_rows()
        refusal = task.shared_model_refusal() if backend != "mujoco" else None
        if refusal is not None:
            raise ValueError(refusal)
        # Tasks that change the model per episode (terrain, obstacles, goals) get a model per env.
        self.models = [model] * num_envs if self.static else [model, *(copy.copy(model) for _ in range(num_envs - 1))]
        self.physics = physics = make_physics(backend, model, num_envs, threads=threads, persistent=persistent,
                                              device=device, nconmax=int(world.SIM.NCONMAX), njmax=int(world.SIM.NJMAX),
                                              per_world=rows)
        if not self.static:
            physics.set_models(self.models)
        task.arena.set_model_rows(physics, np.arange(num_envs))  # per-world fields exist before any capture
        self.num_envs = num_envs
        self.dt = FRAME_SKIP * model.opt.timestep
        bound = physics.arrays
        self._ctrl, self._time, self._qfrc_actuator = bound["ctrl"], bound["time"], bound["qfrc_actuator"]
        self.head_body = model.body("torso/0").id
        self.arena = arena = task.arena
        xp, device = namespace(bound["qpos"]), array_api_compat.device(bound["qpos"])
        self.scene = scene = Scene(model, self.models, self.dt, self.head_body, arena.heights, arena.extent.ground_z,
                                   bound["qpos"], bound["qvel"], bound["xpos"], bound["xmat"], bound["site_xpos"],
                                   bound["sensordata"], xp.zeros(num_envs, dtype=bound["qpos"].dtype, device=device))
        self._init_agent(world, head_height(mjcf), bound)
        task.bind(scene)
        sizes = {"proprioceptive": self._proprio.size, **task.obs_sizes()}
        self.obs_sizes = {k: sizes[k] for k in sorted(world.ENV.KEYS_TO_KEEP) if k in sizes}  # hfield may be absent
        self._task_observes = any(key != "proprioceptive" for key in self.obs_sizes)  # e.g. hfield alone
        self.rngs = [np.random.default_rng() for _ in range(num_envs)]
        self._steps = scene.zeros(num_envs, dtype=xp.int64)  # the episode's steps: the time limit counts these
        self._time_before = scene.zeros(num_envs, dtype=self._time.dtype)
        # the step's constants as 0-d arrays of the scene (derl.envs.tasks.base.Task.bind says why): the least
        # advance of the time in a step (time_went_back: dt less half a substep), the fall height, the time
        # limit, the control weight
        self._least_advance = scene.asarray(self.dt - model.opt.timestep / 2, dtype=self._time.dtype)
        self._fall_height = scene.asarray(self.fall_height)
        self._max_steps = scene.asarray(self.max_steps, dtype=xp.int64)
        self._one_step = scene.asarray(1, dtype=xp.int64)
        self._minus_ctrl_weight = scene.asarray(-self._ctrl_weight)
        self._problems = xp.asarray(physics.problems(), copy=True)
        # Where a restart draws its episodes: on the host each env from its own generator (DERL's); on a
        # device, where the task draws nothing per episode but a terrain of the bank, every env's bank
        # entry and reset noise at once from the simulator's generator, so that a step never waits. A task
        # that draws its episodes (props, goals, obstacles, a redrawn terrain) restarts on the host on
        # every backend: its ended mask comes to the host (one sync per step on a device), its draws are
        # MuJoCo C's, their results go to the device.
        self._restart_on_host = array_api_compat.is_numpy_namespace(xp) or self._per_episode_hooks or not self.static

    def _init_agent(self, world: WorldCfg, start_height: float, bound: dict[str, np.ndarray]) -> None:
        model = self.model
        root = model.joint("root")
        if root.type[0] != mujoco.mjtJoint.mjJNT_FREE or root.qposadr[0] != 0:
            raise ValueError("unimal MJCF: joint 'root' must be the head's free joint, first in the model")
        if model.nu == 0:
            raise ValueError("unimal MJCF has no actuators")
        agent_joints = np.flatnonzero(model.body_rootid[model.jnt_bodyid] == self.head_body)
        agent_dofs = np.flatnonzero(model.body_rootid[model.dof_bodyid] == self.head_body)
        ends = np.append(model.jnt_qposadr[1:], model.nq)
        self._agent_qpos = as_slice(np.concatenate([np.arange(model.jnt_qposadr[j], ends[j]) for j in agent_joints]))
        self._agent_dofs = as_slice(agent_dofs)  # the agent's joints precede the props': every task's case
        hinges = agent_joints[model.jnt_type[agent_joints] == mujoco.mjtJoint.mjJNT_HINGE]
        self._noise = float(world.ENV.RESET_NOISE_SCALE)
        self.max_steps = int(world.ENV.EPISODE_LENGTH)
        self.fall_height = world.ENV.STAND_HEIGHT_RATIO * (start_height - world.BODY.FLOOR_OFFSET)
        self._ctrl_weight = float(world.ENV.CTRL_COST_WEIGHT)
        self._proprio = Proprioception(model, bound, world.ENV.OBS_TYPES, model.jnt_qposadr[hinges], agent_dofs)

    # ------------------------------------------------------------------ episodes
    def seed(self, seed: int) -> None:
        """Env i's generator from ``seed + i`` (Gymnasium's seeding of an env by its seed), and the
        simulator's own generator (a device's restarts) from ``seed``."""
        self.rngs = [gym.utils.seeding.np_random(seed + i)[0] for i in range(self.num_envs)]
        if not self._restart_on_host:
            self.physics.seed(seed)  # type: ignore[attr-defined]  # a device backend's (WarpPhysics), as here

    def reset(self, envs: np.ndarray) -> None:
        """Starts new episodes in the envs ``envs`` (host indices), each drawn with its own generator
        (on every backend: the first episodes of a seed are the same on MuJoCo C and on Warp)."""
        mask = np.zeros(self.num_envs, dtype=bool)
        mask[envs] = True  # the mask on the host, and the envs from it ascending: np.unique costs 5 us a reset
        self._start(self.scene.asarray(mask, dtype=self.scene.xp.bool), mask.nonzero()[0])

    def restart(self, ended) -> None:
        """Starts new episodes where the mask ``ended`` is set (the vector env's autoreset): on a device
        without leaving it where the task draws nothing per episode, else drawn on the host as ``reset``
        (``__init__``)."""
        if not self._restart_on_host:
            self._start(ended, None)
            return
        envs = to_host(ended).nonzero()[0]  # np.flatnonzero: the same through NumPy's Python
        if len(envs):  # on a device the vector env restarts at every step, mostly nothing
            self._start(ended, envs)

    def _start(self, ended, envs: np.ndarray | None) -> None:
        """Starts the episodes of the envs of the mask ``ended`` (``envs``: the same as host indices, or
        None to draw on the device): the model's defaults (``mj_resetData``), the task's per-episode
        draws, U(+-RESET_NOISE_SCALE) on the agent's qpos, then its qvel (``[N, nq_agent + nv_agent]``,
        rows valid where ``ended``), the head quaternion renormalised, in the noise's float type (then
        stored in the state's); the other envs are left as they are."""
        scene, task, physics, xp = self.scene, self.task, self.physics, self.scene.xp
        physics.reset(ended)
        noise = self._draw_on_device(ended) if envs is None else self._draw_per_env(envs)
        qpos, qvel, rows = scene.qpos, scene.qvel, ended[:, None]
        split = _length(self._agent_qpos)
        agent = qpos[:, self._agent_qpos]
        started = agent + noise[:, :split]
        quat = started[:, 3:7]  # the head's free joint comes first (_init_agent)
        started[:, 3:7] = quat / xp.sqrt(xp.vecdot(quat, quat))[:, None]  # np.dot's rounding on the host
        qpos[:, self._agent_qpos] = xp.where(rows, started, agent)
        agent = qvel[:, self._agent_dofs]
        qvel[:, self._agent_dofs] = xp.where(rows, agent + noise[:, split:], agent)
        if not self.static:
            physics.set_models(self.models, envs)  # the batch reads edited models once they are set again
        self.arena.cover(qpos, envs)  # a lazily drawn terrain, written where the bodies start
        physics.forward(ended)
        if self._per_episode_hooks:  # such tasks restart on the host (__init__)
            assert envs is not None  # a restart on the host names its envs
            task.start(scene, envs)
        self._steps[:] = xp.where(ended, 0, self._steps)
        self._problems[:] = xp.where(ended, physics.problems(), self._problems)
        if envs is None:  # on a device every row, kept where ended
            height, _ = self.arena.clearance(qpos[:, 0], qpos[:, 1], qpos[:, 2])
            scene.torso_height[:] = xp.where(ended, height, scene.torso_height)
        else:  # the restarted rows only: a restart of one env of 32 paid the batch's clearance (~30 us)
            rows = scene.asarray(envs, dtype=xp.int64)
            heads = qpos[rows]
            scene.torso_height[rows] = self.arena.clearance(heads[:, 0], heads[:, 1], heads[:, 2], rows)[0]

    def _draw_per_env(self, envs: np.ndarray):
        """Each env of ``envs`` (host indices, ascending) draws its episode from its own generator: the
        task's draws (terrain, props, goals), then the reset noise (float64, added in float64 on every
        backend)."""
        split = _length(self._agent_qpos)
        noise = np.zeros((self.num_envs, split + _length(self._agent_dofs)))
        for env in envs.tolist():
            rng = self.rngs[env]
            self.task.initialize_episode(self.scene, env, rng)
            noise[env] = rng.uniform(-self._noise, self._noise, noise.shape[1])
        self.task.arena.set_model_rows(self.physics, envs)
        return self.scene.asarray(noise, dtype=self.scene.xp.float64)

    def _draw_on_device(self, ended):
        """The episodes of the mask ``ended`` from the simulator's generator, on its device: a bank entry
        (``TerrainBank.choose_on_device``), then every env's reset noise (the ended rows are used)."""
        if self.arena.bank is not None:
            self.arena.bank.choose_on_device(self.physics, ended)
        return self.physics.uniform((  # type: ignore[attr-defined]  # a device backend's (WarpPhysics)
            self.num_envs, _length(self._agent_qpos) + _length(self._agent_dofs)), self._noise)

    # ------------------------------------------------------------------ step
    def step(self, actions: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray,
                                                  dict[str, np.ndarray]]:
        """Steps every env with its row of ``actions``: (obs, rewards, terminated, truncated, infos),
        ``[N, ...]`` arrays, the infos keyed as the module docstring says plus ``out_of_map`` and
        ``unstable`` flags."""
        scene, task, xp = self.scene, self.task, self.scene.xp
        # A lazily drawn terrain written within a step's reach of the bodies where they stand now, before the
        # physics steps on it and the observation reads it: a state written between steps is covered too.
        self.arena.cover(scene.qpos)
        task.before_step(scene)
        self._ctrl[:] = actions
        self._time_before[:] = self._time
        self.physics.step(FRAME_SKIP)
        self._steps = self._steps + self._one_step  # NumPy's in-place ops cost 0.8 us, these 0.3
        qpos = scene.qpos
        x, y, z = xp.asarray(qpos[:, 0], copy=True), qpos[:, 1], qpos[:, 2]
        scene.torso_height[:], out_of_map = self.arena.clearance(x, y, z)
        reward, infos = task.reward(scene)
        # np.vecdot: np.dot's rounding, per row
        ctrl_cost = self._minus_ctrl_weight * astype(xp.vecdot(actions, actions), scene.float_dtype)
        infos[CTRL_TERM] = ctrl_cost
        # each row added left to right, as Python's sum (NumPy's sum adds pairwise); nv >= 6: the head's free joint
        infos["energy"] = cumulative_sum(xp.abs(self._qfrc_actuator), axis=1)[:, -1]
        infos["x_pos"] = x
        infos["metric"] = task.metric(scene)
        terminated = (scene.torso_height <= self._fall_height) | out_of_map | task.terminate(scene)
        obs = self.observe()
        # MuJoCo C resets the state (time back to 0) on bad qpos/qvel/qacc: time shows it, except in an
        # episode's first substep; the simulator's warning counters (Warp: overflows) show the rest.
        problems = self.physics.problems()
        unstable = (~xp.isfinite(x + y + z) | time_went_back(self._time_before, self._time, self._least_advance)
                    | (problems != self._problems))
        self._problems[:] = problems
        reward = reward + ctrl_cost
        if any_set(unstable):  # on a device, zeroing always costs less than asking
            reward = self._zero_non_finite(xp, unstable, obs, reward, infos)
        terminated = terminated | unstable
        truncated = ~terminated & (self._steps >= self._max_steps)
        infos["out_of_map"] = out_of_map
        infos["unstable"] = unstable
        return obs, reward, terminated, truncated, infos

    @staticmethod
    def _zero_non_finite(xp, envs, obs: dict, reward, infos: dict):
        """Zeroes the non-finite values an unstable step leaves in the rows ``envs`` (a mask), in place."""
        for values in (*obs.values(), *infos.values()):
            if xp.isdtype(values.dtype, "real floating"):
                bad = ~xp.isfinite(values) & xp.reshape(envs, (-1, *[1] * (values.ndim - 1)))
                values[...] = xp.where(bad, 0.0, values)  # not values[bad]: a mask index waits for the device
        return xp.where(envs & ~xp.isfinite(reward), 0.0, reward)

    def observe(self, envs: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Every env's observation, ``[N, size]`` per key, or only the rows ``envs`` (host indices)."""
        obs = {"proprioceptive": self._proprio(envs)}
        if self._task_observes:
            self.task.observe(self.scene, obs, envs)
        return {k: obs[k] for k in self.obs_sizes}

    def data(self, env: int, data: mujoco.MjData | None = None) -> mujoco.MjData:
        """Env ``env``'s ``MjData`` (every field of its last call in a persistent MuJoCo C batch)."""
        return self.physics.data(env, data)  # type: ignore[attr-defined]  # the host backends' (MuJoCo C)


def time_went_back(before, after, least_advance):
    """Where a step advanced the simulation time by less than ``least_advance`` (its ``dt`` minus a
    tolerance, half a substep): MuJoCo C reset the state (time back to 0) on a bad qpos, qvel or qacc
    within the step.

    The step's own advance, not the episode's time against a running sum: MuJoCo Warp's time is float32,
    which after 5,000 steps of 4 x 5 ms is 0.015 s off (3,000 ulps at 100 s), more than the half-substep
    tolerance; one step's four additions are off by at most a few ulps. The time limit counts steps in
    an integer per env, not time.
    """
    return after - before < least_advance


def _draws_nothing_per_episode(task) -> bool:
    """Whether a task's episode hooks are the base's (nothing drawn or read per env at a reset)."""
    return type(task).initialize_episode is Task.initialize_episode and type(task).start is Task.start
