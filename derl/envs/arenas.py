"""Arenas: the ground a task puts the agent on, as MJCF plus the ground's height map.

An arena builds its MJCF (floor box, height field, walls), binds to the compiled models (one
per env where the terrain is re-drawn), draws an env's terrain in place at its reset (nothing is
recompiled) and says how high each head is above the ground under it. Tasks choose their arena (``Task.make_arena``):

- ``FloorArena``: one box, half-sizes ``TERRAIN.SIZE``, top at ``SIZE[2]`` (DERL's Floor).
- ``CorridorArena``: DERL's Terrain. Layout ``corridor``: ``x`` from ``-START_FLAT`` to
  ``2*SIZE[0] - START_FLAT``, obstacles of ``derl.envs.terrain`` in one height field, optionally
  tilted by ``TERRAIN.INCLINE_ANGLE`` (a plane rising along +x for a negative angle, as DERL's
  incline tasks); layout ``arena``: a flat square ``x`` in ``[0, 2*SIZE[0]]`` (DERL's eval arenas).
  Walls when ``TERRAIN.BOUNDARY_WALLS``.
- ``BowlArena`` (``derl.envs.bowl``): DERL's Bowl, a bumpy ring-shaped rise around the origin, ground at z = 0.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import array_api_compat
import mujoco
import numpy as np
from lxml import etree

from derl.arrays import namespace
from derl.envs.config import WorldCfg
from derl.envs.lazy_terrain import LazyTerrain
from derl.envs.mjcf import child, fmt, sub, y_rotation_quat
from derl.envs.observations import HeightPatch
from derl.envs.scene import Array, HeightMap, Scene
from derl.envs.terrain import (
    WALL_HALF_THICKNESS,
    WALL_HEIGHT,
    Block,
    Corridor,
    CorridorObstacles,
    draw_heights,
    max_height,
    obstacles_fit,
)
from derl.envs.terrain_bank import TerrainBank, asset, bank_size

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


class CorridorArena(Arena):
    """DERL's Terrain module: a corridor of obstacles or a flat arena, with walls (see the module doc).

    Args:
        world: the config (TERRAIN, HFIELD).
        num_envs: the envs that share the arena's layout (each draws its own terrain).
        layout: ``corridor`` or ``arena``.
        overlay: what the task adds to the map each episode (the obstacle task's boxes: ``Overlay``), written
            with the terrain as far as the bodies reach (``derl.envs.lazy_terrain``); the map is kept for it.
        observe_hfield: the height-field observation is kept (the map is padded for it).
        bank: obstacles come from a terrain bank of ``TERRAIN.BANK_SIZE`` (when > 0), for tasks whose
            model is otherwise static (``derl.envs.terrain_bank``); else each episode draws its own.
    """

    def __init__(self, world: WorldCfg, num_envs: int, layout: str = "corridor", overlay: Overlay | None = None,
                 observe_hfield: bool = False, bank: bool = False):
        if layout not in ("corridor", "arena"):
            raise ValueError(f"unknown arena layout {layout!r}")
        self._cfg = world
        self.extent = Corridor.terrain(world) if layout == "corridor" else Corridor.arena(world)
        self.incline = float(world.TERRAIN.INCLINE_ANGLE) if layout == "corridor" else 0.0
        self._obstacles = layout == "corridor" and obstacles_fit(world)
        if self.incline and self._obstacles:
            raise ValueError("TERRAIN.INCLINE_ANGLE needs a corridor without obstacles "
                             "(START_FLAT = SIZE[0], as DERL's incline tasks)")
        keep = self._obstacles or bool(self.incline) or overlay is not None or observe_hfield
        banked = bank_size(world) if self._obstacles and bank else 0
        self._overlay = overlay
        self._redrawn = (self._obstacles and not banked) or overlay is not None  # each episode, lazily (bind)
        self.heights = (height_map(self.extent, world, observe_hfield, num_envs, banked or None, lazy=self._redrawn)
                        if keep else None)
        self._hfields: list[np.ndarray] = []
        self._draws = CorridorObstacles(world, self.extent)
        self._plans: list[list[_Planned]] = [[] for _ in range(num_envs)]  # each env's episode plan
        self._ends: list[list[int]] = [[] for _ in range(num_envs)]  # its blocks' end columns (_overlapping)
        self._patch_cells = patch_cells(world, observe_hfield)
        if self.incline and self.heights is not None:
            self.heights.interior[:] = self._incline_heights()[None, None, :]
        if banked:
            assert self.heights is not None  # a bank needs obstacles, which keep the map
            self.bank = TerrainBank(self.heights, self._elevation,
                                    lambda rng: draw_heights(world, self.extent, rng), world.RNG_SEED)

    def _elevation(self, heights: np.ndarray) -> np.ndarray:
        """The height-field data of a map (or of a block's row profiles: each vertex on its own): flat
        vertices sunk below the floor box (0), obstacle vertices raised to their height, over the model's z
        scale (heights stay within [0, max_height], so the data stays in [0, 1])."""
        heights = heights.astype(np.float32, copy=False)
        out = heights + HFIELD_SINK
        out *= heights > 0
        out *= self._scale
        return out

    def _incline_heights(self) -> np.ndarray:
        """Height above ``ground_z`` of the tilted floor box's top at each column."""
        extent = self.extent
        x = extent.x_min + np.arange(extent.shape[1]) / extent.divs
        theta = math.radians(self.incline)  # about +y: x tilts towards -z by theta
        return (extent.ground_z - math.sin(theta) * x) / math.cos(theta) - extent.ground_z

    def build(self, root: etree._Element, worldbody: etree._Element) -> None:
        extent = self.extent
        half_len = (extent.x_max - extent.x_min) / 2
        centre = (extent.x_max + extent.x_min) / 2
        floor = sub(worldbody, "geom", name="floor", type="box", pos=fmt(centre, 0, 0),
                    size=fmt(half_len, extent.half_width, extent.ground_z), material="ground")
        if self.incline:
            floor.set("quat", y_rotation_quat(self.incline))
        size = fmt(half_len, extent.half_width, max_height(self._cfg) + HFIELD_SINK, HFIELD_BASE_THICKNESS)
        pos = fmt(centre, 0, extent.ground_z - HFIELD_SINK)
        if self.bank is not None:
            self.bank.build(root, worldbody, size, pos=pos, material="ground")
        elif self._obstacles:
            rows, cols = extent.shape
            sub(child(root, "asset"), "hfield", name="terrain", nrow=str(rows), ncol=str(cols), size=size)
            sub(worldbody, "geom", name="terrain", type="hfield", hfield="terrain", pos=pos, material="ground")
        if extent.walls:
            t, h, z = WALL_HALF_THICKNESS, WALL_HEIGHT, extent.ground_z
            width = extent.half_width
            walls = {
                "wall/back": (fmt(extent.x_min - t, 0, z), fmt(t, width + 2 * t, h)),
                "wall/front": (fmt(extent.x_max + t, 0, z), fmt(t, width + 2 * t, h)),
                "wall/left": (fmt(centre, width + t, z), fmt(half_len, t, h)),
                "wall/right": (fmt(centre, -width - t, z), fmt(half_len, t, h)),
            }
            for name, (pos, half_sizes) in walls.items():
                sub(worldbody, "geom", name=name, type="box", pos=pos, size=half_sizes, rgba=".5 .5 .5 .3")

    @property
    def model_is_static(self) -> bool:
        return not self._obstacles or self.bank is not None

    def fill_model(self, model: mujoco.MjModel) -> None:
        if self.bank is not None:
            self._scale = 1.0 / model.hfield(asset(0)).size[2]
        super().fill_model(model)

    def bind(self, models: list[mujoco.MjModel]) -> None:
        if not self._redrawn:
            return
        if self._obstacles:
            self._hfields = hfield_views(models, "terrain")
            self._scale = 1.0 / models[0].hfield("terrain").size[2]
        # a host read reads the plan where there is no overlay; under one it writes what it reads, then reads it
        highest = self._highest if self._overlay is None else None
        assert self.heights is not None  # redrawn: the map is kept
        self.lazy = lazy_terrain(self.heights, models[0], self._write, self._flatten, self._patch_cells, highest)

    def initialize_episode(self, env: int, rng: np.random.Generator) -> None:
        if self.bank is not None:
            self.bank.choose(env, rng)
            return
        if self.lazy is None:
            return
        # The whole plan drawn (every draw as before), written as far as the bodies reach (LazyTerrain); the
        # overlay's draws come after (the task's).
        blocks = self._draws.blocks(rng) if self._obstacles else ()
        plan = [_Planned(first, first + block.columns, block) for first, block in blocks]
        for planned, after in itertools.pairwise(plan):  # a column two blocks share is the later one's
            planned.end = min(planned.end, after.first)
        self.lazy.clear(env)  # the last episode's blocks back to 0 while its plan says where they are
        self._plans[env] = plan
        self._ends[env] = [planned.end for planned in plan]
        self.lazy.start(env)

    def _overlapping(self, env: int, c0: int, c1: int) -> Iterator[tuple[_Planned, int, int]]:
        """The blocks of env ``env``'s plan over columns ``[c0, c1)``, each with its columns ``[a, b)`` there (a
        bisection to the first: a write covers a tile's 50 columns, the plan has ~15 blocks)."""
        plan = self._plans[env]
        for k in range(bisect.bisect_right(self._ends[env], c0), len(plan)):
            planned = plan[k]
            if planned.first >= c1:
                return
            yield planned, max(planned.first, c0), min(planned.end, c1)

    def _maps(self, planned: _Planned) -> tuple[np.ndarray, np.ndarray]:
        """A block's row profiles as the map holds them and their height-field data (computed once, when
        first written or read: most blocks of an episode never are)."""
        if planned.maps is None:
            profiles = planned.block.profiles.astype(np.float32)
            planned.maps = profiles, self._elevation(profiles)
        return planned.maps

    def _write(self, env: int, r0: int, r1: int, c0: int, c1: int) -> None:
        """Env ``env``'s plan over rows ``[r0, r1)`` and columns ``[c0, c1)`` into its map and height-field data,
        then the overlay into the map."""
        assert self.heights is not None  # kept (__init__'s ``keep``) whenever this runs
        with self.heights.editing(env) as interior:
            for planned, a, b in self._overlapping(env, c0, c1):
                first, row_of, hfield = planned.first, planned.block.row_of, self._hfields[env]
                if a >= b:
                    continue
                profiles, elevations = self._maps(planned)
                if len(profiles) == 1:
                    interior[r0:r1, a:b] = profiles[0, a - first:b - first]
                    hfield[r0:r1, a:b] = elevations[0, a - first:b - first]
                else:
                    rows = row_of[r0:r1]
                    interior[r0:r1, a:b] = profiles[rows, a - first:b - first]
                    hfield[r0:r1, a:b] = elevations[rows, a - first:b - first]
            if self._overlay is not None:
                self._overlay.write_over(env, interior, r0, r1, c0, c1)

    def _flatten(self, env: int, r0: int, r1: int, c0: int, c1: int) -> None:
        """Env ``env``'s plan back to 0 over rows ``[r0, r1)`` and columns ``[c0, c1)``: only the columns of the
        blocks written there (the rest is flat already; a block never written or read has no ``maps``), and
        the whole map there under an overlay."""
        assert self.heights is not None  # kept (__init__'s ``keep``) whenever this runs
        with self.heights.editing(env) as interior:
            if self._overlay is not None:
                interior[r0:r1, c0:c1] = 0.0
            for planned, a, b in self._overlapping(env, c0, c1):
                if a < b and planned.maps is not None:
                    interior[r0:r1, a:b] = 0.0
                    self._hfields[env][r0:r1, a:b] = 0.0

    def _highest(self, env: int, r0: int, r1: int, c0: int, c1: int) -> float:
        """The highest height of env ``env``'s plan over its obstacles' vertices in rows ``[r0, r1)`` and columns
        ``[c0, c1)`` (-inf if none; the rest is flat: 0), read from the plan, nothing written (a goal's
        placement reads a spot that nothing may ever touch)."""
        highest = -math.inf
        for planned, a, b in self._overlapping(env, c0, c1):
            first = planned.first
            if a < b:
                profiles = self._maps(planned)[0]
                part = profiles if len(profiles) == 1 else profiles[planned.block.row_of[r0:r1]]
                highest = max(highest, float(part[:, a - first:b - first].max()))
        return highest


@dataclass
class _Planned:
    """A block of an episode's plan: its columns ``[first, end)`` (the next block's first column if that
    starts on this one's last), its heights, and ``maps`` (``CorridorArena._maps``) once computed."""

    first: int
    end: int
    block: Block
    maps: tuple[np.ndarray, np.ndarray] | None = None


def lazy_terrain(heights: HeightMap, model: mujoco.MjModel, write, flatten, patch: int, highest=None) -> LazyTerrain:
    """The lazy writes of an arena that draws its terrain per episode: ``write(env, r0, r1, c0, c1)`` its
    plan, ``flatten`` back to 0; ``highest``: reads its plan (``LazyTerrain``)."""
    lazy = LazyTerrain(heights, write, flatten, patch, highest)
    lazy.bind(model, int(model.joint("root").qposadr[0]))
    return lazy
