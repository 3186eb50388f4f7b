"""Moving along +x: ``locomotion`` (FT, VT), ``obstacle`` and ``incline``."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from lxml import etree

from derl.envs.arenas import Arena, FloorArena
from derl.envs.config import WorldCfg
from derl.envs.corridor_arena import CorridorArena
from derl.envs.mjcf import y_rotation_quat
from derl.envs.placement import PlacementGrid
from derl.envs.props import StaticBoxes
from derl.envs.scene import Array, Scene
from derl.envs.tasks.base import Task
from derl.envs.tasks.registry import register
from derl.envs.terrain import value_range

OBSTACLE_HALF_HEIGHT = 2.0  # DERL's obstacle boxes: half-height 2 (2 m above the ground, as the walls)


@register("locomotion")
class Locomotion(Task):
    """Move along +x: ``FORWARD_REWARD_WEIGHT * dx/dt`` (+ stand term, weight 0 in DERL).

    The world is the Floor box or the Terrain corridor (``ENV.MODULES``); the metric is the head's x.
    """

    reward_terms = ("__reward__forward", "__reward__stand")
    observables: ClassVar[tuple[str, ...]] = ("hfield",)
    grounds: ClassVar[tuple[str, ...]] = ("Floor", "Terrain")
    edge_termination = True

    def __init__(self, world: WorldCfg, num_envs: int = 1):
        super().__init__(world, num_envs)
        self._forward_weight = float(world.ENV.FORWARD_REWARD_WEIGHT)
        self._stand_weight = float(world.ENV.STAND_REWARD_WEIGHT)

    def make_arena(self) -> Arena:
        if "Floor" in self.world.ENV.MODULES:
            return FloorArena(self.world, self.num_envs, self.observe_hfield)
        return CorridorArena(self.world, self.num_envs, observe_hfield=self.observe_hfield, bank=True)

    def static_model(self) -> bool:
        return self.arena.model_is_static

    def bind(self, scene: Scene) -> None:
        super().bind(scene)
        self._x_before = scene.zeros(self.num_envs)
        # the weight and dt as 0-d arrays of the scene (Task.bind says why), the same values
        self._forward_scale = scene.asarray(self._forward_weight), scene.asarray(scene.dt)

    def before_step(self, scene: Scene) -> None:
        self._x_before[:] = scene.qpos[:, 0]

    def _forward(self, scene: Scene) -> Array:
        weight, dt = self._forward_scale
        return weight * (scene.qpos[:, 0] - self._x_before) / dt

    def reward(self, scene: Scene) -> tuple[Array, dict[str, Array]]:
        forward = self._forward(scene)
        stand = self._stand_weight * scene.torso_height if self._stand_weight else scene.zeros(self.num_envs)
        return forward + stand, {"__reward__forward": forward, "__reward__stand": stand}


@register("obstacle")
class Obstacle(Locomotion):
    """DERL's obstacle task: a flat corridor with ``OBJECT.NUM_OBSTACLES`` fixed boxes, move along +x.

    Each episode places the boxes (half-extents from OBJECT.OBSTACLE_LEN_RANGE x OBSTACLE_WIDTH_RANGE,
    half-height 2, standing on the ground) uniformly on a 10 cells/m grid without overlap, at least
    ``2 * PLACEMENT_BUFFER_LEN`` m from both ends of the corridor (DERL: 10 m) and
    ``2 * PLACEMENT_BUFFER_WIDTH`` m from the sides; a box that finds no free spot in 10 tries is
    left out. The boxes are written into the height map (2 m high), which the ``hfield``
    observation reads, as the arena's overlay (``CorridorArena``): only in the tiles the agent reaches
    (``derl.envs.lazy_terrain``), where writing and clearing all 50 boxes took 0.2 of a reset's 0.55 ms.
    """

    grounds = ("Terrain",)
    needs = ("Objects",)

    def __init__(self, world: WorldCfg, num_envs: int = 1):
        super().__init__(world, num_envs)
        self._boxes = StaticBoxes(int(world.OBJECT.NUM_OBSTACLES))
        self._lengths = value_range(world.OBJECT.OBSTACLE_LEN_RANGE)
        self._widths = value_range(world.OBJECT.OBSTACLE_WIDTH_RANGE)
        # per env, the boxes placed: (x, y, half-length, half-width)
        self.placed: list[list[tuple[float, float, float, float]]] = [[] for _ in range(num_envs)]
        self._grid = PlacementGrid(self.arena.extent, world)  # one grid, cleared per episode (no 1500 x 600 per reset)
        self._rects = [np.zeros((0, 4), np.intp)] * num_envs  # their map cells: [r0, r1, c0, c1] per box

    def make_arena(self) -> Arena:
        return CorridorArena(self.world, self.num_envs, overlay=self, observe_hfield=self.observe_hfield)

    def static_model(self) -> bool:
        return False  # the boxes move in the model every episode

    def model_rows(self) -> tuple[str, ...]:
        return (*super().model_rows(), *StaticBoxes.MODEL_ROWS)

    def build(self, root: etree._Element, worldbody: etree._Element) -> None:
        super().build(root, worldbody)
        self._boxes.build(worldbody)

    def bind(self, scene: Scene) -> None:
        super().bind(scene)
        self._boxes.bind(scene)

    def initialize_episode(self, scene: Scene, env: int, rng: np.random.Generator) -> None:
        super().initialize_episode(scene, env, rng)
        placed = self._grid.place_boxes(self._lengths, self._widths, self._boxes.count, rng)
        boxes = np.array(placed, dtype=float).reshape(-1, 5)  # k, x, y, half-length, half-width
        self._rects[env] = self._map_rects(boxes[:, 1:])  # written into the map as the agent reaches them
        centres, half_sizes = self._boxes.hidden()
        shown = boxes[:, 0].astype(np.intp)
        centres[shown, :2], centres[shown, 2] = boxes[:, 1:3], self.arena.extent.ground_z
        half_sizes[shown, :2], half_sizes[shown, 2] = boxes[:, 3:5], OBSTACLE_HALF_HEIGHT
        self._boxes.set_all(env, centres, half_sizes)
        self.placed[env] = [box[1:] for box in placed]

    def write_over(self, env: int, interior: np.ndarray, r0: int, r1: int, c0: int, c1: int) -> None:
        """The boxes' cells in rows ``[r0, r1)`` and columns ``[c0, c1)`` of env ``env``'s map (``Overlay``)."""
        rects = self._rects[env]
        over = (rects[:, 0] < r1) & (rects[:, 1] > r0) & (rects[:, 2] < c1) & (rects[:, 3] > c0)
        for a0, a1, b0, b1 in rects[over].tolist():
            interior[max(a0, r0):min(a1, r1), max(b0, c0):min(b1, c1)] = OBSTACLE_HALF_HEIGHT

    def _map_rects(self, boxes: np.ndarray) -> np.ndarray:
        """The height map's cells of boxes ``(x, y, half-length, half-width)``: rows ``[r0, r1)`` and columns
        ``[c0, c1)`` from the nearest vertices of their corners (``Corridor.cell``'s arithmetic on the
        whole episode at once: 23 us an episode of 50 boxes where a call per corner took 39)."""
        x, y, half_len, half_width = boxes.T
        (r0, r1), (c0, c1) = self.arena.extent.cells(np.stack([x - half_len, x + half_len]),
                                                     np.stack([y - half_width, y + half_width]))
        return np.stack([np.maximum(r0, 0), r1 + 1, np.maximum(c0, 0), c1 + 1], axis=1)


@register("incline")
class Incline(Locomotion):
    """DERL's incline: a plane tilted by ``TERRAIN.INCLINE_ANGLE`` (-10: rising along +x), no walls.

    The agent starts 2 m from the low end, tilted with the plane; reward ``(dx/dt) / cos(angle)``
    (the speed along the slope); metric: distance travelled up the slope.
    """

    grounds = ("Terrain",)

    def __init__(self, world: WorldCfg, num_envs: int = 1):
        super().__init__(world, num_envs)
        self._cos = math.cos(math.radians(float(world.TERRAIN.INCLINE_ANGLE)))
        self._start_x = incline_start(world, 0.0)[0][0]

    def make_arena(self) -> Arena:
        return CorridorArena(self.world, self.num_envs, observe_hfield=self.observe_hfield)

    def start_pose(self, head_height: float) -> tuple[tuple[float, float, float], str | None]:
        return incline_start(self.world, head_height)

    def _forward(self, scene: Scene) -> Array:
        return super()._forward(scene) / self._cos

    def metric(self, scene: Scene) -> Array:
        return (scene.qpos[:, 0] - self._start_x) / self._cos


def incline_start(world: WorldCfg, head_height: float) -> tuple[tuple[float, float, float], str | None]:
    """DERL's start on an incline: 2 m from the corridor's start end, on the plane, tilted with it."""
    angle = float(world.TERRAIN.INCLINE_ANGLE)
    half_len, ground = float(world.TERRAIN.SIZE[0]), float(world.TERRAIN.SIZE[2])
    alpha = math.radians(abs(angle))
    rise = math.sin(alpha) * (half_len - 2.0)
    z = head_height + ground + (rise if angle > 0 else -rise)
    return (math.cos(alpha) * (2.0 - half_len), 0.0, z), y_rotation_quat(angle)
