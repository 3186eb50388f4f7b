"""The UNIMAL env: one simulation of ``UnimalBatch``, as a Gymnasium env.

The loop, observations, rewards and flags are ``derl.envs.batch``'s (its docstring says what they
are); this is its single-env view, for users, ``check_env``, replays and rendering, a batch of one
that steps one ``MjData`` (``derl.envs.physics.MujocoDataPhysics``). ``info`` holds
the reward terms, ``energy``, ``x_pos`` and ``metric`` as floats, and ``out_of_map`` or ``unstable``
(True) when the episode ended for that reason. ``qpos`` and ``qvel`` are the simulation's state
(writable views); ``data`` is its whole ``MjData`` as the last step or reset left it.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import mujoco
import numpy as np

from derl.envs.batch import UnimalBatch, unimal_mjcf
from derl.envs.config import WorldCfg
from derl.envs.vector_env import observation_space

FLAGS = ("out_of_map", "unstable")
THE_ENV = np.zeros(1, np.intp)  # the batch's one simulation, as the index array reset takes


class UnimalEnv(gym.Env):
    """A UNIMAL morphology doing ``ENV.TASK`` in the task's world.

    Args:
        xml_path: the unimal's MJCF file (``derl.morphology.to_mjcf`` output), or None with ``mjcf``.
        world: the config (ENV, TERRAIN, OBJECT, HFIELD, XML keys are read).
        mjcf: the unimal's MJCF text instead of a file.
        seed: seeds the env's generator now, so that ``reset()`` without a seed is reproducible.
        render_mode: None or "rgb_array" (the task's camera, ``track``).
        width, height: size of rendered frames.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, xml_path: str | Path | None, world: WorldCfg, seed: int | None = None,
                 render_mode: str | None = None, width: int = 640, height: int = 480, *,
                 mjcf: str | None = None):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        mjcf = unimal_mjcf(xml_path, mjcf)
        self.world = world
        self.render_mode = render_mode
        self.sim = sim = UnimalBatch(mjcf, world, 1, persistent=True)
        self.model, self.task, self.arena, self.scene = sim.models[0], sim.task, sim.arena, sim.scene
        self.dt, self.fall_height, self.head_body = sim.dt, sim.fall_height, sim.head_body
        self.qpos, self.qvel = sim.scene.qpos[0], sim.scene.qvel[0]
        self.observation_space = observation_space(sim.obs_sizes)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.model.nu,), np.float32)
        self._data = mujoco.MjData(self.model)
        self._renderer: mujoco.Renderer | None = None
        self._render_size = (height, width)
        if render_mode is not None:
            self.arena.draw_whole()  # a terrain drawn lazily (only where bodies reach) is drawn whole
        if seed is not None:
            self._np_random, self._np_random_seed = gym.utils.seeding.np_random(seed)
            self.action_space.seed(seed)

    @property
    def data(self) -> mujoco.MjData:
        """The simulation's ``MjData`` after the last step or reset (a copy: write ``qpos``/``qvel``)."""
        return self.sim.data(0, self._data)

    @property
    def torso_height(self) -> float:
        """The head's height above the ground under it, after the last step or reset."""
        return float(self.scene.torso_height[0])

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self.sim.rngs[0] = self.np_random
        self.sim.reset(THE_ENV)
        self._upload_terrain()
        return self._observe(), {}

    def step(self, action) -> tuple[dict, float, bool, bool, dict[str, float]]:
        obs, reward, terminated, truncated, infos = self.sim.step(np.asarray(action)[None])
        info = {key: values.item() for key, values in infos.items()}  # .item(): float(values[0]) at 2/3 the cost
        for flag in FLAGS:  # a flag is in info only where it ended the episode (True)
            if not info[flag]:
                del info[flag]
        return ({k: v[0] for k, v in obs.items()}, reward.item(), terminated.item(), truncated.item(), info)

    def _observe(self) -> dict[str, np.ndarray]:
        return {k: v[0] for k, v in self.sim.observe().items()}

    # ------------------------------------------------------------------ render
    def _upload_terrain(self, created: bool = False) -> None:
        """Sends the height fields, re-drawn in place, to the renderer (if any). With a terrain bank the
        rendered model's terrain geom holds the episode's entry (the simulator's row: one simulation steps
        this very model, ``MujocoDataPhysics``) and the fields,
        which never change, are sent once, when the renderer is ``created``."""
        if self._renderer is not None and self.model.nhfield and (created or self.arena.bank is None):
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
            self._upload_terrain(created=True)
        self._renderer.update_scene(self.data, camera="track")
        return self._renderer.render()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
