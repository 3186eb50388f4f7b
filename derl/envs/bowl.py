"""DERL's Bowl (escape_bowl): a bumpy ring-shaped rise around the origin, drawn per episode where the
bodies reach (``derl.envs.lazy_terrain``) or picked from a terrain bank."""

from __future__ import annotations

import mujoco
import numpy as np
from lxml import etree

from derl.envs.arenas import HFIELD_BASE_THICKNESS, Arena, height_map, hfield_views, lazy_terrain, patch_cells
from derl.envs.config import WorldCfg
from derl.envs.lazy_terrain import TILE
from derl.envs.mjcf import child, fmt, sub
from derl.envs.scene import HeightMap
from derl.envs.terrain import Corridor
from derl.envs.terrain_bank import TerrainBank, bank_size

# DERL's bowl: bumps drawn on a grid of BOWL_BUMP_SCALE metres, values U(BOWL_SMOOTHNESS, 1).
BOWL_BUMP_SCALE = 2.0
BOWL_SMOOTHNESS = 0.15
BOWL_MIN_RADIUS = 0.04


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

    heights: HeightMap  # always kept: the bowl is a height field

    def __init__(self, world: WorldCfg, num_envs: int, observe_hfield: bool = False):
        side = float(world.TERRAIN.SIZE[0])
        self.extent = Corridor(-side, side, side, 0.0, int(world.HFIELD.NUM_DIVS), False)
        banked = bank_size(world)
        self.heights = height_map(self.extent, world, observe_hfield, num_envs, banked or None, lazy=not banked)
        self._max_z = float(world.TERRAIN.BOWL_MAX_Z)
        if self._max_z <= 0:
            raise ValueError(f"TERRAIN.BOWL_MAX_Z must be > 0, got {self._max_z}")
        self._shape = BowlShape(side, self.extent.divs, self._max_z)
        self._plans: list[np.ndarray | None] = [None] * num_envs  # each env's bump grid
        # the envs whose past episodes wrote runs of tiles not yet set back to 0 (``_flatten``), and those runs
        self._stale: dict[int, list[tuple[int, int, int, int]]] = {}
        self._patch_cells = patch_cells(world, observe_hfield)
        if banked:
            self.bank = TerrainBank(self.heights, lambda heights: heights / self._max_z, self._shape.draw,
                                    world.RNG_SEED)

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
            self._hfields = hfield_views(models, "terrain")
            self.lazy = lazy_terrain(self.heights, models[0], self._write, self._flatten, self._patch_cells)

    def initialize_episode(self, env: int, rng: np.random.Generator) -> None:
        if self.bank is not None:
            self.bank.choose(env, rng)
            return
        self._plans[env] = self._shape.bumps(rng)  # written as far as the bodies reach (LazyTerrain)
        assert self.lazy is not None  # bound without a bank
        self.lazy.start(env)

    def cover(self, qpos: np.ndarray, envs: np.ndarray | None = None) -> None:
        super().cover(qpos, envs)
        if self._stale:  # after a reset: the last episode's tiles that the new one has not written again
            for env in sorted(self._stale) if envs is None else envs.tolist():
                self._settle(env)

    def _flatten(self, env: int, r0: int, r1: int, c0: int, c1: int) -> None:
        """``LazyTerrain``'s flatten at a new episode, deferred to the end of its first ``cover``: every episode
        starts at the centre, and the tiles there, written again by that cover, are not set to 0 first (nothing
        reads the map before it). Escape_bowl's reset writes 16 tiles per env: flattening them first cost 70 us
        of 440."""
        self._stale.setdefault(env, []).append((r0, r1, c0, c1))

    def _settle(self, env: int) -> None:
        """Sets back to 0 the runs that env ``env``'s past episodes wrote (``_flatten``) over the tiles that the
        current one has not written since its start (the tiles it has hold its own heights)."""
        runs = self._stale.pop(env, None)
        if runs is None:
            return
        assert self.lazy is not None  # bound without a bank
        written = self.lazy.written[env]
        tiles = [(row, min(row + TILE, r1), tile * TILE, min(tile * TILE + TILE, c1))
                 for r0, r1, c0, c1 in runs for row in range(r0, r1, TILE)
                 for tile in range(c0 // TILE, -(-c1 // TILE)) if not written[row // TILE, tile]]
        if tiles:
            with self.heights.editing(env) as interior:
                for r0, r1, a, b in tiles:
                    interior[r0:r1, a:b] = 0.0
                    self._hfields[env][r0:r1, a:b] = 0.0

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
