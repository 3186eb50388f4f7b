"""The task interface: a task owns its world (arena, props), observations, reward, termination, metric.

dm_control's composer is the model. One task serves the ``N`` envs of a batch: the env calls these
hooks, each with a ``Scene`` (models, the batch's ``[N, ...]`` arrays, dt, head id, height maps),
never with the env. Step hooks work over arrays, for every env at once; episode hooks take the envs
that reset:

- ``__init__(world, num_envs)``: reads the config and makes the arena (``make_arena``) and props;
- ``start_pose(head_height)`` and ``build(root, worldbody)``: the head's start pose and the MJCF the
  task adds (arena, props), before compiling;
- ``bind(scene)``: looks up ids in the compiled model and allocates the per-env state, ``[N, ...]``
  arrays in the scene's namespace (``scene.zeros``);
- ``initialize_episode(scene, env, rng)``: draws env ``env``'s episode (terrain, props, goals) with
  its generator, before the reset noise; ``start(scene, envs)``: reads the start state of the envs
  ``envs`` (an index array) after it;
- ``before_step(scene)``, ``reward(scene) -> (reward, terms)``, ``terminate(scene)``,
  ``observe(scene, obs)``, ``metric(scene)``: each step, in that order, each returning ``[N]``
  arrays (``observe`` adds ``[N, size]`` arrays to ``obs``).

Step hooks and ``start`` compute with ``scene.xp`` (the Python array API over NumPy or torch), never
with ``np``, so that one task runs on both simulation backends (docs/guides/gpus.md#simulating-on-a-gpu);
episode draws run on the host with NumPy generators and write their results into the scene's arrays.

A task declares, as class attributes, its ``reward_terms`` (``__reward__*`` names; the env's reward
is their sum plus ``__reward__ctrl``), its ``aggregates`` (logged sums of terms, not added again)
and its ``observables`` (observation keys besides ``proprioceptive``). Tasks register by name
with ``@register("name")``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from lxml import etree

from derl.envs.arenas import Arena
from derl.envs.config import WorldCfg
from derl.envs.mjcf import fmt
from derl.envs.observations import HeightPatch, head_frame
from derl.envs.scene import Array, Scene

GROUND_MODULES = ("Floor", "Terrain", "Bowl")
KNOWN_MODULES = ("Agent", *GROUND_MODULES, "Objects", "PatrolGoals")
EDGE_MARGIN = 1.0
#: model fields MuJoCo Warp holds once for every world (not ``array("*", ...)`` in its Model)
SHARED_MODEL_FIELDS = ("hfield_data",)


@dataclass(frozen=True)
class Camera:
    """The ``track`` camera: on the head (``trackcom``: follows the agent) or fixed in the world.

    The default sits 2.2 m behind and 0.8 m above the head, looking down at it: a unimal of a few
    limbs (about a metre across) fills a third of a 320 x 240 video."""

    pos: str = "0 -2.2 0.8"
    xyaxes: str = "1 0 0 0 0.35 1"
    mode: str = "trackcom"
    on_head: bool = True


class Task:
    """Hooks with neutral defaults; subclasses override what they need (see the module docstring)."""

    name: ClassVar[str] = ""  # set by @register
    reward_terms: ClassVar[tuple[str, ...]] = ()
    aggregates: ClassVar[dict[str, tuple[str, ...]]] = {}
    observables: ClassVar[tuple[str, ...]] = ()
    #: ground modules the task accepts in ENV.MODULES, and the other modules it needs
    grounds: ClassVar[tuple[str, ...]] = ("Terrain",)
    needs: ClassVar[tuple[str, ...]] = ()
    #: end the episode when the head nears a side edge (SIZE[1] - |y| <= 1)
    edge_termination: ClassVar[bool] = False
    camera: ClassVar[Camera] = Camera()

    def __init__(self, world: WorldCfg, num_envs: int = 1):
        self.world = world
        self.num_envs = num_envs
        check_modules(type(self), world.ENV.MODULES)
        self.observe_hfield = "hfield" in self.observables and "hfield" in world.ENV.KEYS_TO_KEEP
        self.arena = self.make_arena()
        self._patch: HeightPatch | None = None
        if self.observe_hfield:
            assert self.arena.heights is not None  # an observed height field keeps the arena's map
            width = self.arena.heights.width
            self._patch = HeightPatch(world.HFIELD.OBS_SIZE, world.HFIELD.NUM_DIVS, width)

    # ------------------------------------------------------------------ world
    def make_arena(self) -> Arena:
        """The task's ground (``derl.envs.arenas``)."""
        raise NotImplementedError

    def start_pose(self, head_height: float) -> tuple[tuple[float, float, float], str | None]:
        """The head's start position and quaternion (None: as the unimal file has it)."""
        return (0.0, 0.0, head_height + self.arena.extent.ground_z), None

    def build(self, root: etree._Element, worldbody: etree._Element) -> None:
        """Adds the arena's and the props' MJCF."""
        self.arena.build(root, worldbody)

    def obs_sizes(self) -> dict[str, int]:
        """Sizes of the observation keys the task produces (besides ``proprioceptive``)."""
        return {"hfield": self._patch.size} if self._patch is not None else {}

    def bind(self, scene: Scene) -> None:
        """Looks up ids in the compiled model; moves the height maps into the scene's namespace.

        The constants step hooks combine with ``[N]`` arrays are made here as 0-d arrays of the scene
        (``scene.asarray``): NumPy takes 0.45 us to combine an array with a Python float, 0.28 with a
        0-d array of its type (the same value, so the same result), and a step of one env is dozens
        of such calls."""
        self.arena.bind(scene.models)
        self.arena.bind_step(scene)
        if self.edge_termination:
            self._edge = scene.asarray(self.arena.extent.half_width), scene.asarray(EDGE_MARGIN)
        if self.arena.heights is not None:
            self.arena.heights.bind(scene)
        if self._patch is not None:
            self._patch.bind(scene)

    def static_model(self) -> bool:
        """Whether episodes leave the compiled model as built: no terrain re-drawn, no prop or goal
        moved in the model (``data`` may change freely). Envs of one body then share one model.
        False unless a task knows better."""
        return False

    def model_rows(self) -> tuple[str, ...]:
        """The model fields (MjModel names) whose rows episodes change per env and the physics reads:
        a simulator of one model for every world holds these per world (``derl.envs.warp_physics``).
        A redrawn terrain changes ``hfield_data``; what only a renderer reads (a goal marker) is left out."""
        return () if self.arena.model_is_static else ("hfield_data",)

    def shared_model_refusal(self) -> str | None:
        """Why the task cannot run where one model serves every world (``SIM.BACKEND warp``: MuJoCo Warp
        holds height fields once for all worlds), or None."""
        shared = [name for name in self.model_rows() if name in SHARED_MODEL_FIELDS]
        if not shared:
            return None
        return (f"task {self.name} with ENV.MODULES {list(self.world.ENV.MODULES)} redraws its terrain each episode "
                f"({', '.join(shared)}), which SIM.BACKEND warp shares between all worlds, and this task takes "
                "no terrain bank (derl.envs.terrain_bank): use SIM.BACKEND mujoco")

    # ------------------------------------------------------------------ episode
    def initialize_episode(self, scene: Scene, env: int, rng: np.random.Generator) -> None:
        """Draws env ``env``'s terrain (and, in subclasses, props and goals)."""
        self.arena.initialize_episode(env, rng)

    def start(self, scene: Scene, envs: np.ndarray) -> None:
        """Reads the start state of ``envs`` (host indices; positions forwarded, noise included) before
        their first step."""

    def before_step(self, scene: Scene) -> None:
        """Records what the reward compares against, before the physics steps."""

    def reward(self, scene: Scene) -> tuple[Array, dict[str, Array]]:
        """The task's rewards ``[N]`` (control cost excluded) and its ``__reward__*`` terms."""
        raise NotImplementedError

    def terminate(self, scene: Scene) -> Array | bool:
        """Task-specific ends of the episodes, ``[N]`` (falls and leaving the map are the env's)."""
        if not self.edge_termination:
            return False
        half_width, margin = self._edge
        return half_width - scene.xp.abs(scene.qpos[:, 1]) <= margin

    def observe(self, scene: Scene, obs: dict[str, Array], envs: np.ndarray | None = None) -> None:
        """Adds the task's observation keys to ``obs``, ``[N, size]`` each, or only the rows ``envs`` (host
        indices: the envs an autoreset restarted, ``[len(envs), size]``)."""
        if self._patch is not None:
            obs["hfield"] = self._height_patch(scene, envs)

    def metric(self, scene: Scene) -> Array:
        """The task's human-readable scores ``[N]``, reported in ``info["metric"]`` after every step."""
        return scene.xp.asarray(scene.qpos[:, 0], copy=True)

    # ------------------------------------------------------------------ helpers
    def _height_patch(self, scene: Scene, envs: np.ndarray | None) -> Array:
        """The height patch of every env, or of the rows ``envs`` only (the gather is the dear part)."""
        heights = self.arena.heights
        assert heights is not None and self._patch is not None  # only when the height field is observed
        qpos, xmat, entry = scene.qpos, scene.xmat[:, scene.head], heights.entry
        if envs is not None:
            qpos, xmat, entry = qpos[envs], xmat[envs], entry[envs]
        rows, cols = heights.grid_cells(qpos[:, 0], qpos[:, 1])
        yaw = scene.xp.atan2(xmat[:, 3], xmat[:, 0])
        return self._patch(heights.flat, rows + heights.pad, cols + heights.pad, yaw, entry)

    def goal_in_head_frame(self, scene: Scene, goal: Array) -> Array:
        """``goal - head`` in each head's frame, ``[N, 3]``."""
        local = head_frame((goal - scene.xpos[:, scene.head])[:, None, :], scene.xmat[:, scene.head])
        return local[:, 0]


def check_modules(task: type[Task], modules) -> tuple[str, ...]:
    """Validates ENV.MODULES for a task; returns them as a tuple."""
    modules = tuple(modules)
    unknown = sorted(set(modules) - set(KNOWN_MODULES))
    if unknown:
        raise ValueError(f"unknown ENV.MODULES {unknown}; known: {list(KNOWN_MODULES)}")
    if "Agent" not in modules:
        raise ValueError("ENV.MODULES must include Agent")
    grounds = [m for m in modules if m in GROUND_MODULES]
    if len(grounds) != 1 or grounds[0] not in task.grounds:
        raise ValueError(f"ENV.MODULES needs exactly one of {' and '.join(task.grounds)}")
    missing = [m for m in task.needs if m not in modules]
    if missing:
        raise ValueError(f"ENV.MODULES needs {' and '.join(missing)} for this task")
    return modules


def camera_above(height: float, back: float) -> Camera:
    """A tracking camera ``back`` metres behind and ``height`` above the agent, looking down at it."""
    return Camera(pos=fmt(0, -back, height), xyaxes=fmt(1, 0, 0, 0, height / math.hypot(height, back),
                                                        back / math.hypot(height, back)))
