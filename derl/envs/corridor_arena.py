"""``CorridorArena``: DERL's Terrain module, a corridor of obstacles or a flat arena with walls, on the
``Arena`` of ``derl.envs.arenas`` (whose module docstring describes both layouts)."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import mujoco
import numpy as np
from lxml import etree

from derl.envs.arenas import (
    HFIELD_BASE_THICKNESS,
    HFIELD_SINK,
    Arena,
    Overlay,
    height_map,
    hfield_views,
    lazy_terrain,
    patch_cells,
)
from derl.envs.config import WorldCfg
from derl.envs.mjcf import child, fmt, sub, y_rotation_quat
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


@dataclass
class _Planned:
    """A block of an episode's plan: its columns ``[first, end)`` (the next block's first column if that
    starts on this one's last), its heights, and ``maps`` (``CorridorArena._maps``) once computed."""

    first: int
    end: int
    block: Block
    maps: tuple[np.ndarray, np.ndarray] | None = None


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
