"""Reach an object, then push it to a goal: ``manipulation`` (MVT, manipulation_ball), ``push_box_incline``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

import mujoco
import numpy as np
from lxml import etree

from derl.envs.arenas import Arena, FloorArena
from derl.envs.config import WorldCfg
from derl.envs.corridor_arena import CorridorArena
from derl.envs.observations import head_frame, names_with_prefix
from derl.envs.props import Ball, Box, GoalMarker
from derl.envs.scene import Array, Scene
from derl.envs.tasks.base import Task, camera_above
from derl.envs.tasks.locomotion import incline_start
from derl.envs.tasks.registry import register

AGENT_SITE_PREFIXES = ("torso/", "limb/btm/", "limb/mid/")
GOAL_HALF_SIDE = 0.5  # DERL's goal footprint (placement) and marker height above the ground
GOAL_LIFT = 0.11


# OBJECT.TYPE -> the prop it builds.
OBJECTS: dict[str, Callable[[WorldCfg], Box | Ball]] = {
    "box": lambda world: Box(world.OBJECT.BOX_SIDE, world.OBJECT.BOX_MASS),
    "ball": lambda world: Ball(world.OBJECT.BALL_RADIUS),
}


def make_object(world: WorldCfg) -> Box | Ball:
    """The OBJECT.TYPE prop: a box (BOX_SIDE, BOX_MASS) or a ball (BALL_RADIUS); checked at config load."""
    return OBJECTS[world.OBJECT.TYPE](world)


@register("manipulation")
class Manipulation(Task):
    """Push an object to a goal (MVT; manipulation_ball with ``OBJECT.TYPE ball``), as DERL's task.

    d = least distance between the agent's sites (``torso/*``, ``limb/btm/*``, ``limb/mid/*``)
    and the object's points (a box's face centres, a ball's centre); with (w, _, bonus) =
    ENV.REACH_REWARD_PARAMS and m = OBJECT.SUCCESS_MARGIN, on every step:

    - ``__reward__reach`` = w * (d_before - d_after), + bonus the first time d <= m (walking
      away from the object after reaching it costs reward);
    - ``__reward__push`` = 0 until that first reach; from that step on,
      w * (decrease of the object-goal xy distance), + bonus on each step the object is within m
      of the goal;
    - ``__reward__manipulation`` = reach + push, an aggregate (``aggregates``): DERL's
      selection criterion, not a third term of the reward.

    Placement: the object ``FORWARD_PLACEMENT_DIST`` = [lo, hi) metres ahead of the start, in
    whole metres as DERL draws them, the goal as far again beyond it, both kept
    ``2 * PLACEMENT_BUFFER_LEN`` m from the ends (the object at least ``CLOSE_PLACEMENT_DIST`` m
    before the far end) and ``2 * PLACEMENT_BUFFER_WIDTH`` m from the sides.

    Metric (DERL's ``ManipulationMetric``, as if the episode ended at this step): before the first
    reach, 1 - d / (start-goal distance); after it, 1 + a + b + f with a = 1 once the head has been
    within m of the goal, else 1 - (head-goal distance) / g0, b = 1 once the object has been within
    m of the goal, else 1 - (object-goal distance) / g0, g0 the object-goal distance at the start,
    and f = (steps before this one with both done) / EPISODE_LENGTH once both are done.
    """

    reward_terms = ("__reward__reach", "__reward__push")
    aggregates = {"__reward__manipulation": ("__reward__reach", "__reward__push")}
    observables: ClassVar[tuple[str, ...]] = ("obj", "goal", "hfield")
    grounds: ClassVar[tuple[str, ...]] = ("Floor", "Terrain")
    needs: ClassVar[tuple[str, ...]] = ("Objects",)
    camera = camera_above(2.5, 5.0)

    def __init__(self, world: WorldCfg, num_envs: int = 1):
        super().__init__(world, num_envs)
        self.object = make_object(world)
        self.goal = GoalMarker()
        self._weight, _, self._bonus = (float(v) for v in world.ENV.REACH_REWARD_PARAMS)
        self._margin = float(world.OBJECT.SUCCESS_MARGIN)
        self._check_space()
        self._length = int(world.ENV.EPISODE_LENGTH)

    def make_arena(self) -> Arena:
        if "Floor" in self.world.ENV.MODULES:
            return FloorArena(self.world, self.num_envs, self.observe_hfield)
        return CorridorArena(self.world, self.num_envs, observe_hfield=self.observe_hfield, bank=True)

    def _check_space(self) -> None:
        world, extent = self.world, self.arena.extent
        low, high = world.OBJECT.FORWARD_PLACEMENT_DIST
        self._ahead = (int(low), int(high))
        self._x_span = (extent.x_min + 2 * world.OBJECT.PLACEMENT_BUFFER_LEN,
                        extent.x_max - 2 * world.OBJECT.PLACEMENT_BUFFER_LEN)
        self._min_gap = float(world.OBJECT.CLOSE_PLACEMENT_DIST)
        self._y_half = max(0.0, extent.half_width - 2 * world.OBJECT.PLACEMENT_BUFFER_WIDTH)
        if self._x_span[1] - self._min_gap < self._x_span[0]:
            raise ValueError("TERRAIN.SIZE is too short to place the object and its goal "
                             "(see OBJECT.PLACEMENT_BUFFER_LEN, CLOSE_PLACEMENT_DIST)")

    def build(self, root: etree._Element, worldbody: etree._Element) -> None:
        super().build(root, worldbody)
        self.object.build(worldbody)
        self.goal.build(worldbody)

    def bind(self, scene: Scene) -> None:
        super().bind(scene)
        model = scene.model
        self.object.bind(scene)
        self.goal.bind(scene)
        agent = sum((names_with_prefix(model, mujoco.mjtObj.mjOBJ_SITE, model.nsite, p)
                     for p in AGENT_SITE_PREFIXES), [])
        self._num_agent_sites = len(agent)
        sites = np.concatenate([np.array(agent, dtype=np.intp), self.object.points])  # agent, then object
        self._sites = scene.asarray(sites, dtype=scene.xp.int64)
        n, xp = self.num_envs, scene.xp
        self._reached, self._object_at_goal, self._head_at_goal = (scene.zeros(n, dtype=xp.bool) for _ in range(3))
        self._agent_dist, self._goal_dist, self._start_goal_dist, self._head_goal_dist = (
            scene.zeros(n) for _ in range(4))
        self._start_to_goal = xp.ones(n, dtype=scene.float_dtype, device=scene.device)
        self._success_steps = scene.zeros(n, dtype=xp.int64)
        self._world = scene.zeros(n, 4, 3)  # object and goal, relative to the head, world frame

    def _ground(self, scene: Scene, env: int, x: float, y: float, half: float) -> float:
        """Highest ground under a square of half-side ``half`` centred at (x, y) in env ``env``."""
        heights = scene.heights
        return scene.ground_z if heights is None else heights.max_under(env, x, y, half, half)

    def place(self, scene: Scene, env: int, rng: np.random.Generator) -> None:
        """Puts env ``env``'s object and goal for the episode."""
        x_lo, x_hi = self._x_span
        ahead = self._ahead  # whole metres, high excluded, as DERL's forward placement
        obj_x = float(min(max(int(rng.integers(*ahead)), x_lo), x_hi - self._min_gap))  # np.clip's, 5 us less
        goal_x = min(obj_x + float(rng.integers(*ahead)), x_hi)
        obj_y, goal_y = rng.uniform(-self._y_half, self._y_half, size=2)
        half = self.object.half_height
        self.object.place(env, obj_x, obj_y, self._ground(scene, env, obj_x, obj_y, half) + half + 0.1)
        self.goal.place(env, goal_x, goal_y, self._ground(scene, env, goal_x, goal_y, 0.0))

    def initialize_episode(self, scene: Scene, env: int, rng: np.random.Generator) -> None:
        super().initialize_episode(scene, env, rng)
        self.place(scene, env, rng)
        obj = [float(v) for v in scene.qpos[env, self.object.qpos:self.object.qpos + 2]]
        goal = [float(v) for v in self.goal.position[env]]
        self._reached[env] = self._object_at_goal[env] = self._head_at_goal[env] = False
        self._success_steps[env] = 0
        self._goal_dist[env] = self._start_goal_dist[env] = math.hypot(goal[0] - obj[0], goal[1] - obj[1])
        start = self.start_pose(0.0)[0]
        self._start_to_goal[env] = math.hypot(goal[0] - start[0], goal[1] - start[1]) or 1.0

    def start(self, scene: Scene, envs: np.ndarray) -> None:
        envs = scene.asarray(envs, dtype=scene.xp.int64)
        self._agent_dist[envs] = self._object_distance(scene, envs)

    def _object_distance(self, scene: Scene, envs: Array | None = None) -> Array:
        """The least distance between the agent's sites and the object's points, per env (of the rows
        ``envs`` only, where given: a restart's, not the whole batch's 20 x 8 pairs per env)."""
        xp = scene.xp
        site_xpos = scene.site_xpos if envs is None else scene.site_xpos[envs]
        points = site_xpos[:, self._sites]  # indexing: NumPy's take along axis 1 is 30% slower here
        split = self._num_agent_sites
        gaps = points[:, :split, None, :] - points[:, None, split:, :]
        return xp.sqrt(xp.min(xp.sum(gaps * gaps, axis=3), axis=(1, 2)))

    def reward(self, scene: Scene) -> tuple[Array, dict[str, Array]]:
        xp = scene.xp
        self._success_steps += xp.astype(self._object_at_goal & self._head_at_goal, xp.int64)  # the previous step's
        agent_dist = self._object_distance(scene)
        reach = self._weight * (self._agent_dist - agent_dist)
        self._agent_dist = agent_dist
        first = ~self._reached & (agent_dist <= self._margin)
        self._reached |= first
        reach = xp.where(first, reach + self._bonus, reach)
        # The object body's position as MuJoCo last computed it, like the agent's sites (and as DERL).
        obj = scene.xpos[:, self.object.body]
        goal = self.goal.position
        goal_dist = xp.hypot(goal[:, 0] - obj[:, 0], goal[:, 1] - obj[:, 1])
        reached = self._reached
        push = self._weight * (self._goal_dist - goal_dist)
        at_goal = goal_dist <= self._margin
        push = xp.where(reached, xp.where(at_goal, push + self._bonus, push), 0.0)
        self._object_at_goal |= reached & at_goal
        head = scene.xpos[:, scene.head]
        head_goal_dist = xp.hypot(goal[:, 0] - head[:, 0], goal[:, 1] - head[:, 1])
        self._head_goal_dist = xp.where(reached, head_goal_dist, self._head_goal_dist)
        self._head_at_goal |= reached & (head_goal_dist <= self._margin)
        self._goal_dist = goal_dist
        return reach + push, {"__reward__reach": reach, "__reward__push": push,
                              "__reward__manipulation": reach + push}

    def observe(self, scene: Scene, obs: dict[str, Array], envs: np.ndarray | None = None) -> None:
        super().observe(scene, obs, envs)
        xp = scene.xp
        head = scene.head
        head_pos = scene.xpos[:, head]
        pos, vel, spin = self.object.state(scene)
        world = self._world
        world[:, 0] = pos - head_pos
        world[:, 1] = vel - scene.qvel[:, 0:3]
        world[:, 2] = spin
        world[:, 3] = self.goal.position - head_pos
        local = head_frame(world, scene.xmat[:, head])
        if envs is not None:  # 4 vectors per env: all of them cost less than picking rows first
            local = local[envs]
        obs["obj"] = xp.reshape(local, (local.shape[0], 12))
        obs["goal"] = xp.asarray(local[:, 3], copy=True)

    def obs_sizes(self) -> dict[str, int]:
        return {**super().obs_sizes(), "obj": 12, "goal": 3}

    def metric(self, scene: Scene) -> Array:
        xp = scene.xp
        g0 = xp.where(self._start_goal_dist != 0, self._start_goal_dist, 1.0)
        head = xp.where(self._head_at_goal, 1.0, 1.0 - self._head_goal_dist / g0)
        obj = xp.where(self._object_at_goal, 1.0, 1.0 - self._goal_dist / g0)
        both = self._head_at_goal & self._object_at_goal
        done = xp.where(both, xp.astype(self._success_steps, scene.float_dtype) / self._length, 0.0)
        return xp.where(self._reached, 1.0 + head + obj + done, 1.0 - self._agent_dist / self._start_to_goal)


@register("push_box_incline")
class PushBoxIncline(Manipulation):
    """DERL's push_box_incline: push a box up a tilted plane from ``OBJECT.BOX_POS`` to ``GOAL_POS``.

    The plane and start are the incline task's (``TERRAIN.INCLINE_ANGLE``); reach and push as
    ``manipulation``; no side-edge termination. Metric: the box's distance from where it started,
    along the slope (xy distance / cos(angle)).
    """

    grounds = ("Terrain",)
    observables = ("obj", "goal")

    def __init__(self, world: WorldCfg, num_envs: int = 1):
        for key, pos in (("BOX_POS", world.OBJECT.BOX_POS), ("GOAL_POS", world.OBJECT.GOAL_POS)):
            if len(pos) != 2:
                raise ValueError(f"OBJECT.{key} must be [x, y] for push_box_incline, got {list(pos)}")
        super().__init__(world, num_envs)
        self._cos = math.cos(math.radians(float(world.TERRAIN.INCLINE_ANGLE)))

    def make_arena(self) -> Arena:
        return CorridorArena(self.world, self.num_envs)

    def _check_space(self) -> None:
        extent = self.arena.extent
        for key in ("BOX_POS", "GOAL_POS"):
            x, y = getattr(self.world.OBJECT, key)
            if not (extent.x_min <= x <= extent.x_max and abs(y) <= extent.half_width):
                raise ValueError(f"OBJECT.{key} {[x, y]} lies outside the incline")

    def start_pose(self, head_height: float) -> tuple[tuple[float, float, float], str | None]:
        return incline_start(self.world, head_height)

    def bind(self, scene: Scene) -> None:
        super().bind(scene)
        self._box_start = scene.asarray(list(self.world.OBJECT.BOX_POS))

    def place(self, scene: Scene, env: int, rng: np.random.Generator) -> None:
        (box_x, box_y), (goal_x, goal_y) = self.world.OBJECT.BOX_POS, self.world.OBJECT.GOAL_POS
        half = self.object.half_height
        self.object.place(env, box_x, box_y, self._ground(scene, env, box_x, box_y, half) + half + 0.1)
        self.goal.place(env, goal_x, goal_y, self._ground(scene, env, goal_x, goal_y, GOAL_HALF_SIDE) + GOAL_LIFT)

    def metric(self, scene: Scene) -> Array:
        xp = scene.xp
        gap = scene.xpos[:, self.object.body, :2] - self._box_start
        return xp.sqrt(xp.sum(gap * gap, axis=1)) / self._cos  # np.linalg.norm's sum, for the same rounding
