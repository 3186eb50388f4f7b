"""The UNIMAL env: one compiled MuJoCo model per body and world (shared by the envs of a world that
episodes never change, ``Task.static_model``), the episode re-drawn in place at each reset.

The world is the task's (``derl.envs.tasks``: arena, props, observations, reward terms,
termination, metric); the env runs the agent and the loop. Step = ``FRAME_SKIP`` (4) MuJoCo
substeps of 5 ms with the action written to ``ctrl`` (MuJoCo clamps it to [-1, 1]). The episode
is truncated after ``ENV.EPISODE_LENGTH`` steps and terminated when the agent falls (head height
above the ground under it <= STAND_HEIGHT_RATIO x its standing height, the head's start height
minus BODY.FLOOR_OFFSET), when the task ends it (e.g. near a side edge), when the head leaves the
map (``info["out_of_map"]``) or the physics goes unstable (a new MuJoCo warning or a non-finite
state: ``info["unstable"]``, and non-finite observation values are zeroed).

Reward = the task's terms + ``__reward__ctrl`` = -CTRL_COST_WEIGHT * sum(a^2) on the action
received: the sum of the ``__reward__*`` values in ``info`` except the task's ``aggregates``
(MVT's ``__reward__manipulation`` = reach + push). ``info`` also holds ``energy`` = sum
|qfrc_actuator| (the actuator forces in joint space after the step, DERL's energy; summed over the
episode by ``EpisodeStats``; not a reward term), ``x_pos`` (head x) and ``metric``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from derl.envs.observations import Proprioception
from derl.envs.scene import Scene
from derl.envs.tasks import CTRL_TERM, check_task_config, make_task
from derl.envs.world import build_world, head_height

FRAME_SKIP = 4
WARNING_CHECK_PERIOD = 8


_last_static_model: tuple[str, mujoco.MjModel] | None = None


def _compile(world_xml: str, static: bool) -> mujoco.MjModel:
    """The compiled world. Envs of a static world (``Task.static_model``) built one after another
    from the same XML, as a trainer builds its pool, share one model: one copy in the CPU caches
    instead of ``NUM_ENVS`` (each env keeps its own ``MjData``). Only the last such model is kept,
    so a worker that trains one body after another holds one at a time. Measured on FT, end to end:
    +1.8% env steps per CPU-second on a 6-limb body, +5.6% on a 9-limb one (medians of 8 alternating
    runs each), identical trajectories; 31 fewer models (about 10 MB) per worker.
    """
    global _last_static_model
    if not static:
        return mujoco.MjModel.from_xml_string(world_xml)
    if _last_static_model is None or _last_static_model[0] != world_xml:
        _last_static_model = (world_xml, mujoco.MjModel.from_xml_string(world_xml))
    return _last_static_model[1]


def _as_slice(indices: np.ndarray) -> slice | np.ndarray:
    """A slice for consecutive indices (the agent's joints precede the props': every task's case),
    so that adding the reset noise is a view, not a gather and a scatter."""
    if len(indices) and np.array_equal(indices, np.arange(indices[0], indices[0] + len(indices))):
        return slice(int(indices[0]), int(indices[0]) + len(indices))
    return indices


def _length(indices: slice | np.ndarray) -> int:
    return indices.stop - indices.start if isinstance(indices, slice) else len(indices)


class UnimalEnv(gym.Env):
    """A UNIMAL morphology doing ``ENV.TASK`` in the task's world.

    Args:
        xml_path: the unimal's MJCF file (``derl.morphology.to_mjcf`` output), or None with ``mjcf``.
        cfg: the config (ENV, TERRAIN, OBJECT, HFIELD, XML keys are read).
        mjcf: the unimal's MJCF text instead of a file.
        seed: seeds the env's generator now, so that ``reset()`` without a seed is reproducible.
        render_mode: None or "rgb_array" (the task's camera, ``track``).
        width, height: size of rendered frames.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, xml_path: str | Path | None, cfg, seed: int | None = None,
                 render_mode: str | None = None, width: int = 640, height: int = 480, *,
                 mjcf: str | None = None):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        check_task_config(cfg)
        if (xml_path is None) == (mjcf is None):
            raise ValueError("give exactly one of xml_path and mjcf")
        if mjcf is None:
            path = Path(xml_path)
            if not path.is_file():
                raise FileNotFoundError(f"unimal MJCF not found: {path}")
            mjcf = path.read_text()
        self.cfg = cfg
        self.render_mode = render_mode
        self.task = make_task(cfg)
        self.model = _compile(build_world(mjcf, cfg, self.task), self.task.static_model())
        self.data = mujoco.MjData(self.model)
        self.dt = FRAME_SKIP * self.model.opt.timestep
        self._half_substep = self.model.opt.timestep / 2  # tolerance of the time-based reset check
        self.head_body = self.model.body("torso/0").id
        arena = self.task.arena
        self.arena = arena
        self.scene = Scene(self.model, self.data, self.dt, self.head_body, arena.heights, arena.extent.ground_z)
        self._init_agent(cfg, head_height(mjcf))
        self.task.bind(self.scene)
        self._init_spaces(cfg)
        self._steps = 0
        self._time_floor = 0.0
        self._warnings = 0
        self._advanced = False
        self._renderer: mujoco.Renderer | None = None
        self._render_size = (height, width)
        if seed is not None:
            self._np_random, self._np_random_seed = gym.utils.seeding.np_random(seed)
            self.action_space.seed(seed)

    # ------------------------------------------------------------------ set-up
    def _init_agent(self, cfg, start_height: float) -> None:
        model, data = self.model, self.data
        root = model.joint("root")
        if root.type[0] != mujoco.mjtJoint.mjJNT_FREE or root.qposadr[0] != 0:
            raise ValueError("unimal MJCF: joint 'root' must be the head's free joint, first in the model")
        if model.nu == 0:
            raise ValueError("unimal MJCF has no actuators")
        agent_joints = np.flatnonzero(model.body_rootid[model.jnt_bodyid] == self.head_body)
        agent_dofs = np.flatnonzero(model.body_rootid[model.dof_bodyid] == self.head_body)
        ends = np.append(model.jnt_qposadr[1:], model.nq)
        self._agent_qpos = _as_slice(np.concatenate([np.arange(model.jnt_qposadr[j], ends[j]) for j in agent_joints]))
        self._agent_dofs = _as_slice(agent_dofs)
        hinges = agent_joints[model.jnt_type[agent_joints] == mujoco.mjtJoint.mjJNT_HINGE]
        self._noise = float(cfg.ENV.RESET_NOISE_SCALE)
        self._max_steps = int(cfg.ENV.EPISODE_LENGTH)
        self.fall_height = cfg.ENV.STAND_HEIGHT_RATIO * (start_height - cfg.BODY.FLOOR_OFFSET)
        self._ctrl_weight = float(cfg.ENV.CTRL_COST_WEIGHT)
        self._proprio = Proprioception(model, data, cfg.ENV.OBS_TYPES, model.jnt_qposadr[hinges], agent_dofs)
        self._qpos, self._qvel, self._ctrl = data.qpos, data.qvel, data.ctrl
        self._qfrc_actuator = data.qfrc_actuator
        self._warning_counts = data.warning.number  # a live view: no struct wrapper per read

    def _init_spaces(self, cfg) -> None:
        sizes = {"proprioceptive": self._proprio.size, **self.task.obs_sizes()}
        kept = [k for k in cfg.ENV.KEYS_TO_KEEP if k in sizes]  # declared keys not built (hfield) are left out
        self.observation_space = gym.spaces.Dict(
            {k: gym.spaces.Box(-np.inf, np.inf, (sizes[k],), np.float64) for k in kept})
        self._keys = tuple(self.observation_space.spaces)  # Gymnasium sorts them by name
        self._proprio_only = self._keys == ("proprioceptive",)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.model.nu,), np.float32)

    @property
    def torso_height(self) -> float:
        """The head's height above the ground under it, after the last step or reset."""
        return self.scene.torso_height

    # ------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        rng = self.np_random
        model, data, scene = self.model, self.data, self.scene
        mujoco.mj_resetData(model, data)
        self.task.initialize_episode(scene, rng)
        self._upload_terrain()
        self._add_reset_noise(rng)
        mujoco.mj_forward(model, data)
        self.task.start(scene)
        self._steps = 0
        self._advanced = False  # an advance() not followed by its step() is dropped with the episode
        self._time_floor = -self._half_substep
        self._new_warnings()
        scene.torso_height, _ = self.arena.clearance(*self._qpos[0:3].tolist())
        return self._observe(), {}

    def _add_reset_noise(self, rng: np.random.Generator) -> None:
        """U(+-RESET_NOISE_SCALE) on the agent's qpos, then its qvel (one draw); the head quaternion
        renormalised."""
        split = _length(self._agent_qpos)
        noise = rng.uniform(-self._noise, self._noise, split + _length(self._agent_dofs))
        self._qpos[self._agent_qpos] += noise[:split]
        quat = self._qpos[3:7]
        quat /= math.sqrt(quat.dot(quat))
        self._qvel[self._agent_dofs] += noise[split:]

    def advance(self, action) -> None:
        """The physics of a step; the next ``step(action)``, with the same action, does the rest.

        A pool runs every env's physics first, then every env's Python (``derl.ppo.pool``): 32
        envs' Python back to back stays in the CPU caches that ``mj_step`` would evict between
        them. Measured end to end (in-process A/B, PPO iterations alternating with the one-phase
        step): +3% to +10% env steps per CPU-second on the 9-limb issue-13 body, -3% to +3% on a
        10-limb one, +3% on an 8-limb one (paired medians of 20-40 iterations, noisy host).
        """
        self.task.before_step(self.scene)
        self._ctrl[:] = action
        mujoco.mj_step(self.model, self.data, FRAME_SKIP)
        self._advanced = True

    def step(self, action) -> tuple[dict, float, bool, bool, dict[str, Any]]:
        if not self._advanced:
            self.advance(action)
        self._advanced = False
        qpos, task, scene = self._qpos, self.task, self.scene
        self._steps += 1
        self._time_floor += self.dt
        x, y, z = qpos[:3].tolist()
        scene.torso_height, out_of_map = self.arena.clearance(x, y, z)
        reward, info = task.reward(scene)
        ctrl_cost = -self._ctrl_weight * float(np.dot(action, action))
        info[CTRL_TERM] = ctrl_cost
        info["energy"] = sum(map(abs, self._qfrc_actuator.tolist()))
        info["x_pos"] = x
        info["metric"] = task.metric(scene)
        terminated = scene.torso_height <= self.fall_height or out_of_map or task.terminate(scene)
        if out_of_map:
            info["out_of_map"] = True
        obs = self._observe()
        # MuJoCo resets the state (time back to 0) on bad qpos/qvel/qacc: time shows it for free,
        # except in an episode's first substep; the counters are read then and periodically.
        unstable = not math.isfinite(x + y + z) or self.data.time < self._time_floor
        ending = terminated or self._steps >= self._max_steps
        if unstable or ending or self._steps % WARNING_CHECK_PERIOD == 1:
            unstable = self._new_warnings() or unstable
        reward += ctrl_cost
        if unstable:
            obs, reward = self._finite(obs, reward, info)
            info["unstable"] = terminated = True
        truncated = not terminated and self._steps >= self._max_steps
        return obs, reward, terminated, truncated, info

    @staticmethod
    def _finite(obs: dict[str, np.ndarray], reward: float, info: dict) -> tuple[dict[str, np.ndarray], float]:
        """Zeroes the non-finite values an unstable step may leave, in place for ``info``."""
        for key, value in info.items():
            if not math.isfinite(value):
                info[key] = 0.0
        obs = {k: np.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0) for k, v in obs.items()}
        return obs, reward if math.isfinite(reward) else 0.0

    # ------------------------------------------------------------------ state
    def _new_warnings(self) -> bool:
        """Whether a MuJoCo warning counter rose since the last call (reading them costs ~2 us,
        so the step reads them every WARNING_CHECK_PERIOD steps)."""
        count = int(self._warning_counts.sum())
        rose, self._warnings = count != self._warnings, count
        return rose

    def _observe(self) -> dict[str, np.ndarray]:
        obs = {"proprioceptive": self._proprio()}
        if self._proprio_only:
            return obs
        self.task.observe(self.scene, obs)
        return {k: obs[k] for k in self._keys}

    # ------------------------------------------------------------------ render
    def _upload_terrain(self) -> None:
        """Sends the height fields, re-drawn in place, to the renderer (if any)."""
        if self._renderer is not None and self.model.nhfield:
            # mujoco.Renderer keeps its GL context private; re-uploading a height field needs it.
            self._renderer._gl_context.make_current()
            for hfield in range(self.model.nhfield):
                mujoco.mjr_uploadHField(self.model, self._renderer._mjr_context, hfield)

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        if self._renderer is None:
            height, width = self._render_size
            self.model.vis.global_.offwidth = max(self.model.vis.global_.offwidth, width)
            self.model.vis.global_.offheight = max(self.model.vis.global_.offheight, height)
            self._renderer = mujoco.Renderer(self.model, height, width)
            self._upload_terrain()
        self._renderer.update_scene(self.data, camera="track")
        return self._renderer.render()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
