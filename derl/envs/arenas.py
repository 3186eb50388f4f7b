"""Arenas: the ground a task puts the agent on, as MJCF plus the ground's height map.

An arena builds its MJCF (floor box, height field, walls), binds to the compiled models (one
per env where the terrain is re-drawn), draws an env's terrain in place at its reset (nothing is
recompiled) and says how high each head is above the ground under it. Tasks choose their arena (``Task.make_arena``):

- ``FloorArena``: one box, half-sizes ``TERRAIN.SIZE``, top at ``SIZE[2]`` (DERL's Floor).
- ``CorridorArena`` (``derl.envs.corridor_arena``): DERL's Terrain. Layout ``corridor``: ``x`` from ``-START_FLAT`` to
  ``2*SIZE[0] - START_FLAT``, obstacles of ``derl.envs.terrain`` in one height field, optionally
  tilted by ``TERRAIN.INCLINE_ANGLE`` (a plane rising along +x for a negative angle, as DERL's
  incline tasks); layout ``arena``: a flat square ``x`` in ``[0, 2*SIZE[0]]`` (DERL's eval arenas).
  Walls when ``TERRAIN.BOUNDARY_WALLS``.
- ``BowlArena`` (``derl.envs.bowl``): DERL's Bowl, a bumpy ring-shaped rise around the origin, ground at z = 0.
"""

from __future__ import annotations

from typing import Protocol

import array_api_compat
import mujoco
import numpy as np
from lxml import etree

from derl.arrays import namespace
from derl.envs.config import WorldCfg
from derl.envs.lazy_terrain import LazyTerrain
from derl.envs.mjcf import fmt, sub
from derl.envs.observations import HeightPatch
from derl.envs.scene import Array, HeightMap, Scene
from derl.envs.terrain import (
    Corridor,
)
from derl.envs.terrain_bank import TerrainBank

HFIELD_BASE_THICKNESS = 0.1
# The corridor's height field lies this far below the floor box where the terrain is flat, so that
# bodies on flat ground touch only the box (cheap contacts); obstacle vertices are raised by as much.
HFIELD_SINK = 0.05


def patch_cells(world: WorldCfg, observe_hfield: bool) -> int:
    """The cells the height-field observation reads around the head's vertex (0 when not observed)."""
    return HeightPatch.reach_for(world.HFIELD.OBS_SIZE, world.HFIELD.NUM_DIVS) if observe_hfield else 0


def height_map(extent: Corridor, world: WorldCfg, observe_hfield: bool, num_envs: int, maps: int | None = None,
               lazy: bool = False) -> HeightMap:
    """Height maps over ``extent``, padded enough for the height-field observation if observed (one per
    env, or ``maps`` shared ones: a terrain bank); ``lazy``: the terrain is drawn lazily, and so is the
    padding (``HeightMap.pad_beyond``)."""
    walls = int(world.HFIELD.PADDING)
    return HeightMap(extent, walls + 1 + patch_cells(world, observe_hfield), walls, float(world.HFIELD.GAP_DEPTH),
                     num_envs, maps, lazy)


def hfield_views(models: list[mujoco.MjModel], name: str) -> list[np.ndarray]:
    """Each model's data of the height field ``name``, as ``(rows, cols)`` views."""
    hfield = models[0].hfield(name)
    rows, cols, adr = hfield.nrow[0], hfield.ncol[0], hfield.adr[0]
    return [model.hfield_data[adr:adr + rows * cols].reshape(rows, cols) for model in models]


class Overlay(Protocol):
    """What a task adds to a corridor's height map each episode (the obstacle task's boxes), written with the
    terrain, tile by tile, where the bodies reach (``CorridorArena``, ``derl.envs.lazy_terrain``)."""

    def write_over(self, env: int, interior: np.ndarray, r0: int, r1: int, c0: int, c1: int) -> None:
        """Writes env ``env``'s episode into its map's grid ``interior`` over rows ``[r0, r1)`` and columns
        ``[c0, c1)`` (over the terrain written there)."""


class Arena:
    """The ground: ``extent`` (where it lies), ``heights`` (its map, or None for a flat box), ``bank``
    (the terrains episodes pick from, or None: ``derl.envs.terrain_bank``)."""

    extent: Corridor
    heights: HeightMap | None = None
    bank: TerrainBank | None = None
    lazy: LazyTerrain | None = None  # where each episode's terrain is written as far as it is reached

    @property
    def model_is_static(self) -> bool:
        """Whether episodes leave the compiled model as built (no terrain re-drawn into it)."""
        return True

    def build(self, root: etree._Element, worldbody: etree._Element) -> None:
        """Adds the arena's MJCF."""

    def fill_model(self, model: mujoco.MjModel) -> None:
        """Writes the bank's terrains into the compiled model, before a simulator copies it."""
        if self.bank is not None:
            self.bank.fill_model(model)

    def bind(self, models: list[mujoco.MjModel]) -> None:
        """Looks up what the arena changes per episode in each env's compiled model."""

    def initialize_episode(self, env: int, rng: np.random.Generator) -> None:
        """Draws env ``env``'s terrain: picks a bank entry, or draws in place (height map and height-field data)."""

    def cover(self, qpos: np.ndarray, envs: np.ndarray | None = None) -> None:
        """Writes the terrain the free bodies of the envs ``envs`` (host indices; None: every env) can reach
        in their next step, where an episode's terrain is drawn lazily (``derl.envs.lazy_terrain``); after
        a reset's draws and before each step, before anything reads the map or steps on it."""
        if self.lazy is not None:
            self.lazy.cover(qpos, envs)

    def draw_whole(self) -> None:
        """Every episode's terrain written whole from now on, the current ones too (a renderer shows it)."""
        if self.lazy is not None:
            self.lazy.draw_whole()

    def set_model_rows(self, physics, envs: np.ndarray) -> None:
        """Writes the per-simulation model fields of the envs ``envs`` (host indices) that their episodes
        drew (the bank entry of the terrain geom) into ``physics``."""
        if self.bank is not None:
            self.bank.set_model_rows(physics, envs)

    def bind_step(self, scene: Scene) -> None:
        """``clearance``'s bounds as 0-d arrays of the scene (``derl.envs.tasks.base.Task.bind`` says why). On a
        device, what a static model's arena draws lazily (the obstacle task's boxes, in the map only) is drawn
        whole at each episode: the check of the bodies' places before each step would read them back to the
        host (a terrain redrawn in the model does not run there: ``Task.shared_model_refusal``)."""
        if self.lazy is not None and self.model_is_static and not array_api_compat.is_numpy_namespace(scene.xp):
            self.lazy.whole = True
        extent = self.extent
        self._bounds = tuple(scene.asarray(bound) for bound in (extent.ground_z, extent.x_min, extent.x_max,
                                                                 -extent.half_width, extent.half_width))

    def clearance(self, x: Array, y: Array, z: Array, envs: Array | None = None) -> tuple[Array, Array]:
        """(height of z above the ground under (x, y), whether (x, y) is off the map), ``[N]`` each, in
        the scene's namespace (NumPy or torch: ``derl.envs.scene.Scene.xp``; ``bind_step`` first); or of
        the rows ``envs`` (indices in that namespace) only, given their points."""
        ground_z, x_min, x_max, y_min, y_max = self._bounds
        height = z - ground_z
        off = ~((x_min <= x) & (x <= x_max) & (y_min <= y) & (y <= y_max))
        if self.heights is None:
            return height, off
        under = self.heights.under(*self.heights.grid_cells(x, y), envs)
        return namespace(x).where(off, height, height - under), off


class FloorArena(Arena):
    """DERL's Floor: one box of half-sizes ``TERRAIN.SIZE`` centred at the origin."""

    def __init__(self, world: WorldCfg, num_envs: int, observe_hfield: bool = False):
        self._size = tuple(float(v) for v in world.TERRAIN.SIZE)
        self.extent = Corridor.floor(world)
        self.heights = height_map(self.extent, world, observe_hfield, num_envs) if observe_hfield else None

    def build(self, root: etree._Element, worldbody: etree._Element) -> None:
        sub(worldbody, "geom", name="floor", type="box", pos="0 0 0", size=fmt(*self._size), material="ground")


def lazy_terrain(heights: HeightMap, model: mujoco.MjModel, write, flatten, patch: int, highest=None) -> LazyTerrain:
    """The lazy writes of an arena that draws its terrain per episode: ``write(env, r0, r1, c0, c1)`` its
    plan, ``flatten`` back to 0; ``highest``: reads its plan (``LazyTerrain``)."""
    lazy = LazyTerrain(heights, write, flatten, patch, highest)
    lazy.bind(model, int(model.joint("root").qposadr[0]))
    return lazy
