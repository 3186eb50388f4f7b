"""Going places: ``patrol``, ``point_nav``, ``exploration`` and ``escape_bowl`` (DERL's evaluation tasks)."""

from __future__ import annotations

import math

import numpy as np
from lxml import etree

from derl.envs.arenas import Arena, FloorArena
from derl.envs.bowl import BowlArena
from derl.envs.config import WorldCfg
from derl.envs.corridor_arena import CorridorArena
from derl.envs.mjcf import fmt
from derl.envs.placement import PlacementGrid
from derl.envs.props import GoalMarker
from derl.envs.scene import Array, Scene
from derl.envs.tasks.base import Camera, Task, camera_above
from derl.envs.tasks.registry import register

GOAL_HALF_SIDE = 0.5  # DERL's goal footprint when placing it
GOAL_LIFT = 0.11  # DERL's goal marker: 0.01 half-height + 0.1 above the ground
ESCAPE_MARGIN = 8.0  # escape_bowl ends this far inside the bowl's edge
ESCAPE_BONUS = 100.0


class _ReachGoal(Task):
    """DERL's ReachReward towards one goal point: ``__reward__reach`` = w * (d_before - d_after) + c,
    + bonus on each step with d_after <= OBJECT.SUCCESS_MARGIN ((w, c, bonus) = ENV.REACH_REWARD_PARAMS),
    d being the head's xy distance to the goal."""

    reward_terms = ("__reward__reach",)

    def __init__(self, world: WorldCfg, num_envs: int = 1):
        super().__init__(world, num_envs)
        self.goal = GoalMarker()
        self._scale, self._step_reward, self._bonus = (float(v) for v in world.ENV.REACH_REWARD_PARAMS)
        self._margin = float(world.OBJECT.SUCCESS_MARGIN)

    def build(self, root: etree._Element, worldbody: etree._Element) -> None:
        super().build(root, worldbody)
        self.goal.build(worldbody)

    def bind(self, scene: Scene) -> None:
        super().bind(scene)
        self.goal.bind(scene)
        self._xy_before = scene.zeros(2, self.num_envs)
        self.distance = scene.zeros(self.num_envs)  # head-goal xy distance after the last step
        self.success = scene.zeros(self.num_envs, dtype=scene.xp.bool)  # the last step ended within the margin

    def before_step(self, scene: Scene) -> None:
        self._xy_before[0], self._xy_before[1] = scene.head_xy()

    def reward(self, scene: Scene) -> tuple[Array, dict[str, Array]]:
        xp = scene.xp
        goal_x, goal_y = self.goal.position[:, 0], self.goal.position[:, 1]
        (x0, y0), (x, y) = self._xy_before, scene.head_xy()
        before = xp.hypot(goal_x - x0, goal_y - y0)
        self.distance = xp.hypot(goal_x - x, goal_y - y)
        reach = (before - self.distance) * self._scale + self._step_reward
        self.success = self.distance <= self._margin
        reach = xp.where(self.success, reach + self._bonus, reach)
        return reach, {"__reward__reach": reach}

    def observe(self, scene: Scene, obs: dict[str, Array], envs: np.ndarray | None = None) -> None:
        super().observe(scene, obs, envs)
        goal = self.goal_in_head_frame(scene, self.goal.position)
        obs["goal"] = goal if envs is None else goal[envs]

    def obs_sizes(self) -> dict[str, int]:
        return {**super().obs_sizes(), "goal": 3}


@register("patrol")
class Patrol(_ReachGoal):
    """DERL's patrol: run back and forth between (+L, 0) and (-L, 0), L = TERRAIN.PATROL_HALF_LEN.

    Floor world; the agent starts at (-L, 0), the first goal is (+L, 0) and the goal flips to the
    other end on each step that ends within the margin of it (the reward of that step counts towards
    the goal reached). Metric: 1 - (final distance to the goal) / 2L + the number of flips before
    the last step.
    """

    observables = ("goal",)
    grounds = ("Floor",)
    needs = ("PatrolGoals",)
    camera = Camera(pos="0 -16 9", xyaxes=fmt(1, 0, 0, 0, 9 / math.hypot(9, 16), 16 / math.hypot(9, 16)),
                    mode="fixed", on_head=False)

    def __init__(self, world: WorldCfg, num_envs: int = 1):
        super().__init__(world, num_envs)
        self._half_len = float(world.TERRAIN.PATROL_HALF_LEN)
        if not 0 < self._half_len < float(world.TERRAIN.SIZE[0]):
            raise ValueError(f"TERRAIN.PATROL_HALF_LEN {self._half_len} must lie in (0, SIZE[0])")

    def make_arena(self) -> Arena:
        return FloorArena(self.world, self.num_envs)

    def start_pose(self, head_height: float) -> tuple[tuple[float, float, float], str | None]:
        return (-self._half_len, 0.0, head_height + self.arena.extent.ground_z), None

    def bind(self, scene: Scene) -> None:
        super().bind(scene)
        self.flips = scene.zeros(self.num_envs, dtype=scene.xp.int64)

    def _set_goal(self, env: int, sign: float) -> None:
        self.goal.place(env, sign * self._half_len, 0.0, self.arena.extent.ground_z + 0.1)

    def initialize_episode(self, scene: Scene, env: int, rng: np.random.Generator) -> None:
        super().initialize_episode(scene, env, rng)
        self._set_goal(env, 1.0)
        self.flips[env] = 0
        self.success[env] = False

    def reward(self, scene: Scene) -> tuple[Array, dict[str, Array]]:
        xp = scene.xp
        reward, terms = super().reward(scene)
        for env in xp.nonzero(self.success)[0].tolist():  # a goal reached: rare, one env at a time
            self._set_goal(env, -math.copysign(1.0, float(self.goal.position[env, 0])))
        self.flips += xp.astype(self.success, xp.int64)
        return reward, terms

    def metric(self, scene: Scene) -> Array:
        xp = scene.xp
        return 1.0 - self.distance / (2 * self._half_len) + (self.flips - xp.astype(self.success, xp.int64))


@register("point_nav")
class PointNav(_ReachGoal):
    """DERL's point_nav: reach a goal drawn uniformly in a flat walled arena, starting at its centre.

    The arena spans x in [0, 2 SIZE[0]], |y| <= SIZE[1]; the goal is drawn as DERL's placement
    (a 1 m footprint on the 10 cells/m grid, ``2 * PLACEMENT_BUFFER_LEN`` m from the x ends and
    ``2 * PLACEMENT_BUFFER_WIDTH`` m from the sides: x in [6.5, 93.5), y in [-39.5, 39.5) for DERL's
    100 x 100 m arena). Metric: 1 - (final distance) / (start distance) + (steps within the margin
    before the last) / EPISODE_LENGTH; the start distance is at least ``SUCCESS_MARGIN``.
    """

    observables = ("goal", "hfield")
    needs = ("Objects",)
    camera = camera_above(3.0, 5.0)

    def __init__(self, world: WorldCfg, num_envs: int = 1):
        super().__init__(world, num_envs)
        self._length = int(world.ENV.EPISODE_LENGTH)

    def make_arena(self) -> Arena:
        return CorridorArena(self.world, self.num_envs, layout="arena", observe_hfield=self.observe_hfield)

    def start_pose(self, head_height: float) -> tuple[tuple[float, float, float], str | None]:
        extent = self.arena.extent
        return ((extent.x_min + extent.x_max) / 2, 0.0, head_height + extent.ground_z), None

    def bind(self, scene: Scene) -> None:
        super().bind(scene)
        self._start_dist = scene.xp.ones(self.num_envs, dtype=scene.float_dtype, device=scene.device)
        self._success_steps = scene.zeros(self.num_envs, dtype=scene.xp.int64)

    def initialize_episode(self, scene: Scene, env: int, rng: np.random.Generator) -> None:
        super().initialize_episode(scene, env, rng)
        spot = PlacementGrid(self.arena.extent, self.world).place_uniform((GOAL_HALF_SIDE, GOAL_HALF_SIDE), rng)
        assert spot is not None  # the first try never overlaps: the grid is empty
        x, y = spot
        heights = scene.heights
        ground = (heights.max_under(env, x, y, GOAL_HALF_SIDE, GOAL_HALF_SIDE) if heights is not None
                  else scene.ground_z)
        self.goal.place(env, x, y, ground + GOAL_LIFT)
        start = self.start_pose(0.0)[0]
        # A goal drawn on the start (possible on the placement grid) would divide by zero in the metric.
        self._start_dist[env] = max(math.hypot(x - start[0], y - start[1]), self._margin)
        self._success_steps[env] = 0
        self.success[env] = False

    def reward(self, scene: Scene) -> tuple[Array, dict[str, Array]]:
        xp = scene.xp
        self._success_steps += xp.astype(self.success, xp.int64)  # the previous step's: the last step is not counted
        return super().reward(scene)

    def metric(self, scene: Scene) -> Array:
        steps = scene.xp.astype(self._success_steps, scene.float_dtype)
        return 1.0 - self.distance / self._start_dist + steps / self._length


@register("exploration")
class Exploration(Task):
    """DERL's exploration: +1 for each new 1 m x 1 m cell of a flat walled arena the head enters.

    Starts at the centre of the arena (x in [0, 2 SIZE[0]], |y| <= SIZE[1]); ``__reward__forward`` =
    FORWARD_REWARD_WEIGHT x the head's xy speed (0 in DERL's config). Metric: cells visited.
    """

    reward_terms = ("__reward__explore", "__reward__forward")
    needs = ("Objects",)
    camera = camera_above(3.0, 5.0)

    def __init__(self, world: WorldCfg, num_envs: int = 1):
        super().__init__(world, num_envs)
        self._forward_weight = float(world.ENV.FORWARD_REWARD_WEIGHT)

    def make_arena(self) -> Arena:
        return CorridorArena(self.world, self.num_envs, layout="arena")

    def start_pose(self, head_height: float) -> tuple[tuple[float, float, float], str | None]:
        extent = self.arena.extent
        return ((extent.x_min + extent.x_max) / 2, 0.0, head_height + extent.ground_z), None

    def bind(self, scene: Scene) -> None:
        super().bind(scene)
        extent, n, xp = self.arena.extent, self.num_envs, scene.xp
        self._visited = scene.zeros(n, int(2 * extent.half_width), int(extent.x_max - extent.x_min), dtype=xp.bool)
        self._xy_before = scene.zeros(2, n)
        self.count = scene.zeros(n, dtype=xp.int64)
        self._envs = scene.asarray(np.arange(n), dtype=xp.int64)

    def initialize_episode(self, scene: Scene, env: int, rng: np.random.Generator) -> None:
        super().initialize_episode(scene, env, rng)
        self._visited[env] = False
        self.count[env] = 0

    def before_step(self, scene: Scene) -> None:
        self._xy_before[0], self._xy_before[1] = scene.head_xy()

    def reward(self, scene: Scene) -> tuple[Array, dict[str, Array]]:
        xp = scene.xp
        (x0, y0), (x, y) = self._xy_before, scene.head_xy()
        forward = self._forward_weight * xp.hypot(x - x0, y - y0) / scene.dt
        extent = self.arena.extent
        _, rows, cols = self._visited.shape
        row, col = xp.floor(y + extent.half_width), xp.floor(x - extent.x_min)
        inside = (0 <= row) & (row < rows) & (0 <= col) & (col < cols)  # False for a non-finite head
        row, col = xp.astype(xp.where(inside, row, 0.0), xp.int64), xp.astype(xp.where(inside, col, 0.0), xp.int64)
        seen = self._visited[self._envs, row, col]
        new = inside & ~seen
        self._visited[self._envs, row, col] = seen | inside  # no mask: no host sync on a GPU
        self.count += xp.astype(new, xp.int64)
        explore = xp.astype(new, scene.float_dtype)
        return explore + forward, {"__reward__explore": explore, "__reward__forward": forward}

    def metric(self, scene: Scene) -> Array:
        return scene.xp.astype(self.count, scene.float_dtype)


@register("escape_bowl")
class EscapeBowl(Task):
    """DERL's escape_bowl: climb out of a bumpy bowl (``BowlArena``), starting at its centre.

    ``__reward__forward`` = FORWARD_REWARD_WEIGHT x the increase of the head's distance from the
    centre (metres, not per second); reaching radius ``SIZE[0] - 8`` ends the episode with
    ``__reward__escape`` = +100. Metric: the head's distance from the centre.
    """

    reward_terms = ("__reward__forward", "__reward__escape")
    observables = ("hfield",)
    grounds = ("Bowl",)
    camera = camera_above(3.0, 5.0)

    def __init__(self, world: WorldCfg, num_envs: int = 1):
        super().__init__(world, num_envs)
        self._forward_weight = float(world.ENV.FORWARD_REWARD_WEIGHT)
        self._escape_radius = float(world.TERRAIN.SIZE[0]) - ESCAPE_MARGIN
        if self._escape_radius <= 0:
            raise ValueError(f"TERRAIN.SIZE[0] must exceed {ESCAPE_MARGIN} for escape_bowl")

    def make_arena(self) -> Arena:
        return BowlArena(self.world, self.num_envs, self.observe_hfield)

    def static_model(self) -> bool:
        return self.arena.model_is_static  # a terrain bank: the bowls are in the model, chosen per simulation

    def bind(self, scene: Scene) -> None:
        super().bind(scene)
        self._radius_before = scene.zeros(self.num_envs)
        self.radius = scene.zeros(self.num_envs)

    def before_step(self, scene: Scene) -> None:
        self._radius_before[:] = scene.xp.hypot(*scene.head_xy())

    def reward(self, scene: Scene) -> tuple[Array, dict[str, Array]]:
        xp = scene.xp
        self.radius = xp.hypot(*scene.head_xy())
        forward = self._forward_weight * (self.radius - self._radius_before)
        escape = ESCAPE_BONUS * xp.astype(self.radius >= self._escape_radius, scene.float_dtype)
        return forward + escape, {"__reward__forward": forward, "__reward__escape": escape}

    def terminate(self, scene: Scene) -> Array:
        return self.radius >= self._escape_radius

    def metric(self, scene: Scene) -> Array:
        return scene.xp.asarray(self.radius, copy=True)
