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
- ``BowlArena``: DERL's Bowl, a bumpy ring-shaped rise around the origin, ground at z = 0.
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
from derl.envs.lazy_terrain import TILE, LazyTerrain
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
# DERL's bowl: bumps drawn on a grid of BOWL_BUMP_SCALE metres, values U(BOWL_SMOOTHNESS, 1).
BOWL_BUMP_SCALE = 2.0
BOWL_SMOOTHNESS = 0.15
BOWL_MIN_RADIUS = 0.04


def patch_cells(cfg, observe_hfield: bool) -> int:
    """The cells the height-field observation reads around the head's vertex (0 when not observed)."""
    return HeightPatch.reach_for(cfg.HFIELD.OBS_SIZE, cfg.HFIELD.NUM_DIVS) if observe_hfield else 0


def height_map(extent: Corridor, cfg, observe_hfield: bool, num_envs: int, maps: int | None = None,
               lazy: bool = False) -> HeightMap:
    """Height maps over ``extent``, padded enough for the height-field observation if observed (one per
    env, or ``maps`` shared ones: a terrain bank); ``lazy``: the terrain is drawn lazily, and so is the
    padding (``HeightMap.pad_beyond``)."""
    walls = int(cfg.HFIELD.PADDING)
    return HeightMap(extent, walls + 1 + patch_cells(cfg, observe_hfield), walls, float(cfg.HFIELD.GAP_DEPTH),
                     num_envs, maps, lazy)


def _hfield_views(models: list[mujoco.MjModel], name: str) -> list[np.ndarray]:
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

    def __init__(self, cfg, num_envs: int, observe_hfield: bool = False):
        self._size = tuple(float(v) for v in cfg.TERRAIN.SIZE)
        self.extent = Corridor.floor(cfg)
        self.heights = height_map(self.extent, cfg, observe_hfield, num_envs) if observe_hfield else None

    def build(self, root: etree._Element, worldbody: etree._Element) -> None:
        sub(worldbody, "geom", name="floor", type="box", pos="0 0 0", size=fmt(*self._size), material="ground")


class CorridorArena(Arena):
    """DERL's Terrain module: a corridor of obstacles or a flat arena, with walls (see the module doc).

    Args:
        cfg: the config (TERRAIN, HFIELD).
        num_envs: the envs that share the arena's layout (each draws its own terrain).
        layout: ``corridor`` or ``arena``.
        overlay: what the task adds to the map each episode (the obstacle task's boxes: ``Overlay``), written
            with the terrain as far as the bodies reach (``derl.envs.lazy_terrain``); the map is kept for it.
        observe_hfield: the height-field observation is kept (the map is padded for it).
        bank: obstacles come from a terrain bank of ``TERRAIN.BANK_SIZE`` (when > 0), for tasks whose
            model is otherwise static (``derl.envs.terrain_bank``); else each episode draws its own.
    """

    def __init__(self, cfg, num_envs: int, layout: str = "corridor", overlay: Overlay | None = None,
                 observe_hfield: bool = False, bank: bool = False):
        if layout not in ("corridor", "arena"):
            raise ValueError(f"unknown arena layout {layout!r}")
        self._cfg = cfg
        self.extent = Corridor.terrain(cfg) if layout == "corridor" else Corridor.arena(cfg)
        self.incline = float(cfg.TERRAIN.INCLINE_ANGLE) if layout == "corridor" else 0.0
        self._obstacles = layout == "corridor" and obstacles_fit(cfg)
        if self.incline and self._obstacles:
            raise ValueError("TERRAIN.INCLINE_ANGLE needs a corridor without obstacles "
                             "(START_FLAT = SIZE[0], as DERL's incline tasks)")
        keep = self._obstacles or bool(self.incline) or overlay is not None or observe_hfield
        banked = bank_size(cfg) if self._obstacles and bank else 0
        self._overlay = overlay
        self._redrawn = (self._obstacles and not banked) or overlay is not None  # each episode, lazily (bind)
        self.heights = (height_map(self.extent, cfg, observe_hfield, num_envs, banked or None, lazy=self._redrawn)
                        if keep else None)
        self._hfields: list[np.ndarray] = []
        self._draws = CorridorObstacles(cfg, self.extent)
        self._plans: list[list[_Planned]] = [[] for _ in range(num_envs)]  # each env's episode plan
        self._ends: list[list[int]] = [[] for _ in range(num_envs)]  # its blocks' end columns (_overlapping)
        self._patch_cells = patch_cells(cfg, observe_hfield)
        if self.incline and self.heights is not None:
            self.heights.interior[:] = self._incline_heights()[None, None, :]
        if banked:
            self.bank = TerrainBank(self.heights, self._elevation,
                                    lambda rng: draw_heights(cfg, self.extent, rng), cfg.RNG_SEED)

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
            self._hfields = _hfield_views(models, "terrain")
            self._scale = 1.0 / models[0].hfield("terrain").size[2]
        # a host read reads the plan where there is no overlay; under one it writes what it reads, then reads it
        highest = self._highest if self._overlay is None else None
        self.lazy = _lazy(self.heights, models[0], self._write, self._flatten, self._patch_cells, highest)

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


def _lazy(heights: HeightMap, model: mujoco.MjModel, write, flatten, patch: int, highest=None) -> LazyTerrain:
    """The lazy writes of an arena that draws its terrain per episode: ``write(env, r0, r1, c0, c1)`` its
    plan, ``flatten`` back to 0; ``highest``: reads its plan (``LazyTerrain``)."""
    lazy = LazyTerrain(heights, write, flatten, patch, highest)
    lazy.bind(model, int(model.joint("root").qposadr[0]))
    return lazy


def spline_zoom_matrix(size: int, zoomed: int) -> np.ndarray:
    """The ``(zoomed, size)`` matrix of scipy's cubic spline ``ndimage.zoom`` from ``size`` to ``zoomed``
    samples along one axis: the zoom is linear and separable, so a square map zooms as ``Z @ map @ Z.T``
    (equal to ``ndimage.zoom`` of the map to 1e-14, in milliseconds where the 2-D zoom takes 0.1 s)."""
    from scipy import ndimage  # lazy: only the bowl needs it

    return np.stack([ndimage.zoom(unit, zoomed / size) for unit in np.eye(size)], axis=1)[:zoomed]


class BowlShape:
    """DERL's bowl on a square vertex grid of half-side ``side``: (1/2 - cos(2 pi rho)/2) x bumps x max_z.

    rho is the distance from the centre over ``side``, clipped to [0.04, 1] (the rise peaks at half
    the radius and falls back to 0 at the edge); the bumps are U(0.15, 1) on a 2 m grid, smoothed by
    cubic spline zoom (clipped to [0, 1] so the map stays within the height field's scale). The rise
    and the zoom are the same every episode and computed once. A map is computed in tiles of
    ``TILE`` x ``TILE`` vertices (``derl.envs.lazy_terrain``): a tile row's rows of the zoom's first
    product, then each tile's columns (the zoom's columns zero-padded to whole tiles), products of the
    same shapes whatever part of the map is asked, so that a tile holds the same values, bitwise, drawn
    alone or with the whole map. Tiles where the rise is 0 (outside the circle) are 0 in every map and
    never computed.
    """

    def __init__(self, side: float, divs: int, max_z: float):
        n = round(2 * side * divs) + 1
        axis = np.linspace(-1.0, 1.0, n)
        rho = np.clip(np.hypot(axis[:, None], axis[None, :]), BOWL_MIN_RADIUS, 1.0)
        self._rise = 0.5 - np.cos(2 * np.pi * rho) / 2
        self._bump_cells = int(2 * side / BOWL_BUMP_SCALE)
        self._zoom = spline_zoom_matrix(self._bump_cells, n)
        self._max_z = max_z
        self.shape = (n, n)
        tiles = -(-n // TILE)
        # the zoom's columns tile by tile, [tiles, bump cells, TILE] (the last tile's columns beyond the grid
        # 0): one stacked product computes a tile row's tiles, each its own (TILE, cells) x (cells, TILE)
        zoom_t = np.zeros((self._bump_cells, tiles * TILE))
        zoom_t[:, :n] = self._zoom.T
        self._zoom_tiles = np.ascontiguousarray(zoom_t.reshape(self._bump_cells, tiles, TILE).transpose(1, 0, 2))
        # each tile row's rising tiles [first, end) (the rise's disc is convex: one run per row)
        rising = [[c for c in range(tiles) if (self._rise[r * TILE:(r + 1) * TILE, c * TILE:(c + 1) * TILE] > 0).any()]
                  for r in range(tiles)]
        self._rising = [(row[0], row[-1] + 1) if row else (0, 0) for row in rising]
        self._buffer = np.empty(TILE * tiles * TILE)

    def bumps(self, rng: np.random.Generator) -> np.ndarray:
        """One episode's bump grid (its only draw)."""
        return rng.uniform(BOWL_SMOOTHNESS, 1.0, (self._bump_cells, self._bump_cells))

    def tile_row(self, bumps: np.ndarray, r0: int, c0: int, c1: int) -> tuple[int, int, np.ndarray] | None:
        """The map of ``bumps`` over the rising tiles of the tile row from row ``r0`` within columns ``[c0, c1)``
        (tile edges): (first column, end column, heights in metres ``[rows, end - first]``; valid until the
        next call: one buffer), or None where no tile there rises. One stacked product, clip and multiply for
        the whole run: escape_bowl's reset (16 tiles per env, 4 runs) spent 260 us in a loop over the tiles,
        180 us so."""
        n = self.shape[0]
        first, end = self._rising[r0 // TILE]
        t0, t1 = max(c0 // TILE, first), min(-(-c1 // TILE), end)
        if t0 >= t1:
            return None
        r1 = min(r0 + TILE, n)
        rows = self._zoom[r0:r1] @ bumps
        products = self._buffer[:(r1 - r0) * (t1 - t0) * TILE].reshape(r1 - r0, t1 - t0, TILE)
        np.matmul(rows, self._zoom_tiles[t0:t1], out=products.transpose(1, 0, 2))  # tile by tile, side by side
        a, b = t0 * TILE, min(t1 * TILE, n)
        block = products.reshape(r1 - r0, -1)[:, :b - a]
        np.clip(block, 0.0, 1.0, out=block)
        block *= self._rise[r0:r1, a:b]
        block *= self._max_z
        return a, b, block

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """One episode's height map, ``(n, n)`` metres."""
        heights = np.zeros(self.shape)
        bumps = self.bumps(rng)
        for r0 in range(0, self.shape[0], TILE):
            row = self.tile_row(bumps, r0, 0, self.shape[1])
            if row is not None:
                a, b, block = row
                heights[r0:r0 + len(block), a:b] = block
        return heights


class BowlArena(Arena):
    """DERL's Bowl: a height field of half-side ``SIZE[0]`` around the origin, re-drawn each episode, or
    picked from a terrain bank (``TERRAIN.BANK_SIZE`` > 0)."""

    def __init__(self, cfg, num_envs: int, observe_hfield: bool = False):
        side = float(cfg.TERRAIN.SIZE[0])
        self.extent = Corridor(-side, side, side, 0.0, int(cfg.HFIELD.NUM_DIVS), False)
        banked = bank_size(cfg)
        self.heights = height_map(self.extent, cfg, observe_hfield, num_envs, banked or None, lazy=not banked)
        self._max_z = float(cfg.TERRAIN.BOWL_MAX_Z)
        if self._max_z <= 0:
            raise ValueError(f"TERRAIN.BOWL_MAX_Z must be > 0, got {self._max_z}")
        self._shape = BowlShape(side, self.extent.divs, self._max_z)
        self._plans: list[np.ndarray | None] = [None] * num_envs  # each env's bump grid
        # per env, the runs of tiles its past episodes wrote, not yet set back to 0 (``_flatten``)
        self._stale: list[list[tuple[int, int, int, int]]] = [[] for _ in range(num_envs)]
        self._unsettled: set[int] = set()  # the envs whose ``_stale`` holds runs
        self._patch_cells = patch_cells(cfg, observe_hfield)
        if banked:
            self.bank = TerrainBank(self.heights, lambda heights: heights / self._max_z, self._shape.draw,
                                    cfg.RNG_SEED)

    def build(self, root: etree._Element, worldbody: etree._Element) -> None:
        extent = self.extent
        rows, cols = extent.shape
        size = fmt(extent.x_max, extent.half_width, self._max_z, HFIELD_BASE_THICKNESS)
        if self.bank is not None:
            self.bank.build(root, worldbody, size, pos="0 0 0", material="ground")
            return
        sub(child(root, "asset"), "hfield", name="terrain", nrow=str(rows), ncol=str(cols), size=size)
        sub(worldbody, "geom", name="terrain", type="hfield", hfield="terrain", pos="0 0 0", material="ground")

    @property
    def model_is_static(self) -> bool:
        return self.bank is not None

    def bind(self, models: list[mujoco.MjModel]) -> None:
        if self.bank is None:
            self._hfields = _hfield_views(models, "terrain")
            self.lazy = _lazy(self.heights, models[0], self._write, self._flatten, self._patch_cells)

    def initialize_episode(self, env: int, rng: np.random.Generator) -> None:
        if self.bank is not None:
            self.bank.choose(env, rng)
            return
        self._plans[env] = self._shape.bumps(rng)  # written as far as the bodies reach (LazyTerrain)
        self.lazy.start(env)

    def cover(self, qpos: np.ndarray, envs: np.ndarray | None = None) -> None:
        super().cover(qpos, envs)
        if self._unsettled:  # after a reset: the last episode's tiles that the new one has not written again
            for env in sorted(self._unsettled) if envs is None else envs.tolist():
                self._settle(env)

    def _flatten(self, env: int, r0: int, r1: int, c0: int, c1: int) -> None:
        """``LazyTerrain``'s flatten at a new episode, deferred to the end of its first ``cover``: every episode
        starts at the centre, and the tiles there, written again by that cover, are not set to 0 first (nothing
        reads the map before it). Escape_bowl's reset writes 16 tiles per env: flattening them first cost 70 us
        of 440."""
        self._stale[env].append((r0, r1, c0, c1))
        self._unsettled.add(env)

    def _settle(self, env: int) -> None:
        """Sets back to 0 the runs that env ``env``'s past episodes wrote (``_flatten``) over the tiles that the
        current one has not written since its start (the tiles it has hold its own heights)."""
        if env not in self._unsettled:
            return
        written = self.lazy.written[env]
        tiles = [(row, min(row + TILE, r1), tile * TILE, min(tile * TILE + TILE, c1))
                 for r0, r1, c0, c1 in self._stale[env] for row in range(r0, r1, TILE)
                 for tile in range(c0 // TILE, -(-c1 // TILE)) if not written[row // TILE, tile]]
        if tiles:
            with self.heights.editing(env) as interior:
                for r0, r1, a, b in tiles:
                    interior[r0:r1, a:b] = 0.0
                    self._hfields[env][r0:r1, a:b] = 0.0
        self._stale[env].clear()
        self._unsettled.discard(env)

    def _write(self, env: int, r0: int, r1: int, c0: int, c1: int) -> None:
        """Env ``env``'s bowl over the tiles of rows ``[r0, r1)`` and columns ``[c0, c1)`` (tile edges)."""
        bumps, hfield = self._plans[env], self._hfields[env]
        if bumps is None:  # no episode yet: the map is flat
            return
        with self.heights.editing(env) as interior:
            for first in range(r0, r1, TILE):
                row = self._shape.tile_row(bumps, first, c0, c1)
                if row is None:  # outside the circle: flat
                    continue
                a, b, block = row
                end = first + len(block)
                interior[first:end, a:b] = block
                np.divide(block, self._max_z, out=hfield[first:end, a:b], casting="same_kind")
