"""The UNIMAL env: one compiled MuJoCo model per env, terrain re-drawn in place at each reset.

Step = ``FRAME_SKIP`` (4) MuJoCo substeps of 5 ms with the action written to ``ctrl``
(MuJoCo clamps it to [-1, 1]). The episode is truncated after ``ENV.EPISODE_LENGTH`` steps and
terminated when the agent falls (head height above the ground under it <= STAND_HEIGHT_RATIO
x its start height), nears a side edge (locomotion: SIZE[1] - |y| <= 1), leaves the map
(``info["out_of_map"]``) or the physics goes unstable (a new MuJoCo warning or a non-finite
state: ``info["unstable"]``, and non-finite observation values are zeroed).

Reward = task terms (``derl.envs.tasks``) + ``__reward__ctrl`` = -CTRL_COST_WEIGHT * sum(a^2)
on the action received: the sum of the ``__reward__*`` values in ``info`` except the task's
``aggregates`` (MVT's ``__reward__manipulation`` = reach + push). ``info`` also holds ``energy`` =
sum |qfrc_actuator| (the actuator forces in joint space after the step, DERL's energy; summed
over the episode by ``EpisodeStats``; not a reward term), ``x_pos`` (head x) and ``metric``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from derl.envs.observations import HeightPatch, Proprioception
from derl.envs.tasks import TASKS
from derl.envs.terrain import WALL_HEIGHT, Corridor, draw_heights
from derl.envs.world import HFIELD_SINK, build_xml, uses_hfield

FRAME_SKIP = 4
OBS_KEYS = ("proprioceptive", "hfield", "obj", "goal")
EDGE_MARGIN = 1.0
WARNING_CHECK_PERIOD = 8


class UnimalEnv(gym.Env):
    """A UNIMAL morphology in the world of ``ENV.MODULES`` doing ``ENV.TASK``.

    Args:
        xml_path: the unimal's MJCF file (``derl.morphology.to_mjcf`` output), or None with ``mjcf``.
        cfg: the config (ENV, TERRAIN, OBJECT, HFIELD, XML keys are read).
        mjcf: the unimal's MJCF text instead of a file.
        seed: seeds the env's generator now, so that ``reset()`` without a seed is reproducible.
        render_mode: None or "rgb_array" (a camera that tracks the head).
        width, height: size of rendered frames.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, xml_path: str | Path | None, cfg, seed: int | None = None,
                 render_mode: str | None = None, width: int = 640, height: int = 480, *,
                 mjcf: str | None = None):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if cfg.ENV.TASK not in TASKS:
            raise ValueError(f"unknown ENV.TASK {cfg.ENV.TASK!r}; known: {sorted(TASKS)}")
        unknown = sorted(set(cfg.ENV.KEYS_TO_KEEP) - set(OBS_KEYS))
        if unknown:
            raise ValueError(f"unknown ENV.KEYS_TO_KEEP {unknown}; known: {list(OBS_KEYS)}")
        if (xml_path is None) == (mjcf is None):
            raise ValueError("give exactly one of xml_path and mjcf")
        if mjcf is None:
            path = Path(xml_path)
            if not path.is_file():
                raise FileNotFoundError(f"unimal MJCF not found: {path}")
            mjcf = path.read_text()
        self.cfg = cfg
        self.render_mode = render_mode
        self.model = mujoco.MjModel.from_xml_string(build_xml(mjcf, cfg))
        self.data = mujoco.MjData(self.model)
        self.dt = FRAME_SKIP * self.model.opt.timestep
        self._half_substep = self.model.opt.timestep / 2  # tolerance of the time-based reset check
        self.corridor = Corridor.from_cfg(cfg)
        self.head_body = self.model.body("torso/0").id
        self._init_agent(cfg)
        self._init_heights(cfg)
        self.task = TASKS[cfg.ENV.TASK](self)
        self._init_spaces(cfg)
        self.torso_height = 0.0
        self._steps = 0
        self._time_floor = 0.0
        self._warnings = 0
        self._renderer: mujoco.Renderer | None = None
        self._render_size = (height, width)
        if seed is not None:
            self._np_random, self._np_random_seed = gym.utils.seeding.np_random(seed)
            self.action_space.seed(seed)

    # ------------------------------------------------------------------ set-up
    def _init_agent(self, cfg) -> None:
        model, data = self.model, self.data
        root = model.joint("root")
        if root.type[0] != mujoco.mjtJoint.mjJNT_FREE or root.qposadr[0] != 0:
            raise ValueError("unimal MJCF: joint 'root' must be the head's free joint, first in the model")
        if model.nu == 0:
            raise ValueError("unimal MJCF has no actuators")
        agent_joints = np.flatnonzero(model.body_rootid[model.jnt_bodyid] == self.head_body)
        ends = np.append(model.jnt_qposadr[1:], model.nq)
        self._agent_qpos = np.concatenate([np.arange(model.jnt_qposadr[j], ends[j]) for j in agent_joints])
        self._agent_dofs = np.flatnonzero(model.body_rootid[model.dof_bodyid] == self.head_body)
        self._noise = float(cfg.ENV.RESET_NOISE_SCALE)
        self._max_steps = int(cfg.ENV.EPISODE_LENGTH)
        start_height = float(model.body_pos[self.head_body][2]) - self.corridor.ground_z
        orig_height = start_height - (0.0 if cfg.ENV.WALKER else cfg.BODY.FLOOR_OFFSET)
        self.fall_height = cfg.ENV.STAND_HEIGHT_RATIO * orig_height
        self._ctrl_weight = float(cfg.ENV.CTRL_COST_WEIGHT)
        self._proprio = Proprioception(model, data, cfg.ENV.OBS_TYPES)
        self._qpos, self._qvel, self._ctrl = data.qpos, data.qvel, data.ctrl
        self._qfrc_actuator = data.qfrc_actuator
        self._head_xmat = data.xmat[self.head_body]

    def _init_heights(self, cfg) -> None:
        """The padded height map (metres above the ground) read by the env and the hfield obs."""
        self._hfield = self.model.hfield("terrain") if uses_hfield(cfg) else None
        if self._hfield is not None:
            rows, cols, adr = self._hfield.nrow[0], self._hfield.ncol[0], self._hfield.adr[0]
            self._hfield_data = self.model.hfield_data[adr:adr + rows * cols].reshape(rows, cols)
            self._raised = np.zeros((rows, cols), dtype=bool)
        self.heights: np.ndarray | None = None
        self.map_pad = 0
        self._patch = None
        if self._hfield is None and "hfield" not in cfg.ENV.KEYS_TO_KEEP:
            return
        walls = int(cfg.HFIELD.PADDING)
        rows, cols = self.corridor.shape
        if "hfield" in cfg.ENV.KEYS_TO_KEEP:
            self.map_pad = walls + HeightPatch.reach_for(cfg.HFIELD.OBS_SIZE, cfg.HFIELD.NUM_DIVS) + 1
            self._patch = HeightPatch(cfg.HFIELD.OBS_SIZE, cfg.HFIELD.NUM_DIVS, cols + 2 * self.map_pad)
        else:
            self.map_pad = walls + 1
        # Outside the corridor: PADDING cells of wall (or gap without walls), then gap.
        gap = cfg.HFIELD.GAP_DEPTH
        self.heights = np.full((rows + 2 * self.map_pad, cols + 2 * self.map_pad), gap, np.float32)
        inner = self.map_pad - walls
        self.heights[inner:-inner, inner:-inner] = WALL_HEIGHT if self.corridor.walls else gap
        self._interior = self.heights[self.map_pad:-self.map_pad, self.map_pad:-self.map_pad]
        self._interior[:] = 0.0
        self._heights_flat = self.heights.ravel()  # a view: re-filled in place at each reset
        self._last_cell = (rows - 1, cols - 1)

    def _init_spaces(self, cfg) -> None:
        sizes = {"proprioceptive": self._proprio.size, **self.task.obs_sizes}
        if self._patch is not None:
            sizes["hfield"] = self._patch.size
        kept = [k for k in cfg.ENV.KEYS_TO_KEEP if k in sizes]  # keys never produced are left out
        self.observation_space = gym.spaces.Dict(
            {k: gym.spaces.Box(-np.inf, np.inf, (sizes[k],), np.float64) for k in kept})
        self._keys = tuple(self.observation_space.spaces)  # Gymnasium sorts them by name
        self._proprio_only = self._keys == ("proprioceptive",)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.model.nu,), np.float32)

    # ------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        rng = self.np_random
        model, data = self.model, self.data
        mujoco.mj_resetData(model, data)
        if self._hfield is not None:
            self._interior[:] = draw_heights(self.cfg, self.corridor, rng)
            # Flat vertices stay sunk below the floor box; obstacle vertices are raised to their height.
            # Heights stay within [0, max_height] by construction, so the data stays in [0, 1].
            elevation = self._hfield_data
            np.greater(self._interior, 0, out=self._raised)
            np.add(self._interior, HFIELD_SINK, out=elevation)
            elevation *= self._raised
            elevation *= 1.0 / self._hfield.size[2]
            self._upload_terrain()
        self.task.reset(rng)
        self._add_reset_noise(rng)
        mujoco.mj_forward(model, data)
        self.task.start()
        self._steps = 0
        self._time_floor = -self._half_substep
        self._new_warnings()
        self.torso_height, _ = self._ground_clearance(*self._qpos[0:3].tolist())
        return self._observe(), {}

    def _add_reset_noise(self, rng: np.random.Generator) -> None:
        """U(+-RESET_NOISE_SCALE) on the agent's qpos and qvel; the head quaternion renormalised."""
        qpos, noise = self._qpos, self._noise
        qpos[self._agent_qpos] += rng.uniform(-noise, noise, len(self._agent_qpos))
        qpos[3:7] /= np.linalg.norm(qpos[3:7])
        self._qvel[self._agent_dofs] += rng.uniform(-noise, noise, len(self._agent_dofs))

    def step(self, action) -> tuple[dict, float, bool, bool, dict[str, Any]]:
        qpos = self._qpos
        x_before = qpos[0]
        self._ctrl[:] = action
        mujoco.mj_step(self.model, self.data, FRAME_SKIP)
        self._steps += 1
        self._time_floor += self.dt
        x, y, z = float(qpos[0]), float(qpos[1]), float(qpos[2])
        self.torso_height, out_of_map = self._ground_clearance(x, y, z)
        reward, info = self.task.reward(x_before)
        ctrl_cost = -self._ctrl_weight * float(np.dot(action, action))
        info["__reward__ctrl"] = ctrl_cost
        info["energy"] = sum(map(abs, self._qfrc_actuator.tolist()))
        info["x_pos"] = x
        info["metric"] = self.task.metric()
        terminated = self.torso_height <= self.fall_height or out_of_map
        if self.task.edge_termination and self.corridor.half_width - abs(y) <= EDGE_MARGIN:
            terminated = True
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
        """Whether a MuJoCo warning counter rose since the last call (reading them costs ~1 us,
        so the step reads them every WARNING_CHECK_PERIOD steps)."""
        count = int(self.data.warning.number.sum())
        rose, self._warnings = count != self._warnings, count
        return rose

    def _ground_clearance(self, x: float, y: float, z: float) -> tuple[float, bool]:
        """(head height above the ground under it, whether the head is off the map)."""
        corridor = self.corridor
        z -= corridor.ground_z
        if not (corridor.x_min <= x <= corridor.x_max and -corridor.half_width <= y <= corridor.half_width):
            return z, True
        if self.heights is None:
            return z, False
        row, col = corridor.cell(x, y)
        return z - float(self._interior[row, col]), False

    def _observe(self) -> dict[str, np.ndarray]:
        obs = {"proprioceptive": self._proprio()}
        if self._proprio_only:
            return obs
        if self._patch is not None:
            obs["hfield"] = self._height_patch()
        self.task.observe(obs)
        return {k: obs[k] for k in self._keys}

    def _height_patch(self) -> np.ndarray:
        x, y = float(self._qpos[0]), float(self._qpos[1])
        row, col = self.corridor.cell(x, y) if math.isfinite(x + y) else (0, 0)
        last_row, last_col = self._last_cell  # off the map: the nearest edge vertex
        row = (row if 0 <= row <= last_row else min(max(row, 0), last_row)) + self.map_pad
        col = (col if 0 <= col <= last_col else min(max(col, 0), last_col)) + self.map_pad
        xmat = self._head_xmat
        return self._patch(self._heights_flat, row, col, math.atan2(xmat[3], xmat[0]))

    # ------------------------------------------------------------------ render
    def _upload_terrain(self) -> None:
        if self._renderer is not None:
            # mujoco.Renderer keeps its GL context private; re-uploading the height field needs it.
            self._renderer._gl_context.make_current()
            mujoco.mjr_uploadHField(self.model, self._renderer._mjr_context, self._hfield.id)

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        if self._renderer is None:
            height, width = self._render_size
            self.model.vis.global_.offwidth = max(self.model.vis.global_.offwidth, width)
            self.model.vis.global_.offheight = max(self.model.vis.global_.offheight, height)
            self._renderer = mujoco.Renderer(self.model, height, width)
            if self._hfield is not None:
                self._upload_terrain()
        self._renderer.update_scene(self.data, camera="track")
        return self._renderer.render()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
