"""Terrain: the corridor's geometry and the height maps drawn for each episode.

A corridor runs along +x from ``x_min = -START_FLAT`` to ``x_max = 2*SIZE[0] - START_FLAT``
with ``|y| <= SIZE[1]``; its ground top is at ``z = SIZE[2]``. Heights are sampled on
MuJoCo's height-field vertex grid: ``NUM_DIVS`` vertices per metre, row ``r`` at
``y = -SIZE[1] + r / NUM_DIVS`` (row 0 is -y, as MuJoCo stores it) and column ``c`` at
``x = x_min + c / NUM_DIVS``. Obstacle types register by name in ``OBSTACLES`` (each with its
length key, builder and height bound).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from derl.envs.config import WorldCfg

# Wall boxes: half-thickness, and height above the ground (half-height 2, centred on it).
WALL_HALF_THICKNESS = 0.5
WALL_HEIGHT = 2.0


def value_range(spec: Sequence[float]) -> np.ndarray:
    """DERL's ``[start, stop, step]`` (stop included) or one-element constant, as an array."""
    if len(spec) == 1:
        return np.asarray(spec, dtype=float)
    if len(spec) != 3 or spec[2] <= 0:
        raise ValueError(f"a range must be [value] or [start, stop, step], got {list(spec)}")
    start, stop, step = spec
    return np.arange(start, stop + step / 2, step, dtype=float)


@dataclass(frozen=True)
class Corridor:
    """Where the terrain lies and how finely it is sampled."""

    x_min: float
    x_max: float
    half_width: float
    ground_z: float
    divs: int
    walls: bool

    @classmethod
    def of(cls, world: WorldCfg) -> Corridor:
        """The ground of ``ENV.MODULES``: the Floor module's box or the Terrain module's corridor."""
        return cls.floor(world) if "Floor" in world.ENV.MODULES else cls.terrain(world)

    @classmethod
    def floor(cls, world: WorldCfg) -> Corridor:
        """The Floor module's box: |x| <= SIZE[0], no walls."""
        x, y, z = (float(v) for v in world.TERRAIN.SIZE)
        return cls(-x, x, y, z, int(world.HFIELD.NUM_DIVS), False)

    @classmethod
    def terrain(cls, world: WorldCfg) -> Corridor:
        """The Terrain module's corridor: x from -START_FLAT to 2 SIZE[0] - START_FLAT."""
        size = world.TERRAIN.SIZE
        start_flat = float(world.TERRAIN.START_FLAT)
        if min(size) <= 0 or start_flat < 0 or 2 * size[0] <= start_flat:
            raise ValueError(f"TERRAIN.SIZE {list(size)} and START_FLAT {start_flat} give an empty corridor")
        return cls(-start_flat, 2.0 * size[0] - start_flat, float(size[1]), float(size[2]),
                   int(world.HFIELD.NUM_DIVS), bool(world.TERRAIN.BOUNDARY_WALLS))

    @classmethod
    def arena(cls, world: WorldCfg) -> Corridor:
        """DERL's flat arena of the evaluation tasks: x in [0, 2 SIZE[0]], |y| <= SIZE[1]."""
        size = world.TERRAIN.SIZE
        if min(size) <= 0:
            raise ValueError(f"TERRAIN.SIZE {list(size)} must be positive")
        return cls(0.0, 2.0 * size[0], float(size[1]), float(size[2]), int(world.HFIELD.NUM_DIVS),
                   bool(world.TERRAIN.BOUNDARY_WALLS))

    @property
    def shape(self) -> tuple[int, int]:
        """(rows along y, columns along x) of the vertex grid."""
        return (round(2 * self.half_width * self.divs) + 1, round((self.x_max - self.x_min) * self.divs) + 1)

    def cell(self, x: float, y: float) -> tuple[int, int]:
        """The nearest vertex (row, col); may lie outside the grid."""
        return round((y + self.half_width) * self.divs), round((x - self.x_min) * self.divs)

    def cells(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``cell`` of arrays of points at once: (rows, cols), integer arrays (the same arithmetic, rounded
        half to even as ``round``)."""
        return (np.rint((y + self.half_width) * self.divs).astype(np.intp),
                np.rint((x - self.x_min) * self.divs).astype(np.intp))


@dataclass(frozen=True)
class Block:
    """An obstacle's heights ``(rows, columns)`` as a few row profiles: row r is ``profiles[row_of[r]]``
    (an obstacle repeats one profile, or one per band of rows, over the corridor's rows: a reset computes
    each profile's height-field data once and spreads it, instead of passes over every vertex)."""

    profiles: np.ndarray  # (profiles, columns)
    row_of: np.ndarray  # (rows,) the profile of each row

    @property
    def columns(self) -> int:
        """The columns it spans."""
        return self.profiles.shape[1]

    def heights(self) -> np.ndarray:
        """The heights, ``(rows, columns)``."""
        return self.profiles[self.row_of]


def pick(rng: np.random.Generator, options: np.ndarray):
    """``rng.choice(options)`` of a 1-D array, drawn as NumPy's ``Generator.choice`` draws it without ``p``
    (``integers(0, len(options), dtype=int64)``, then indexing) at a tenth of its cost (1 instead of 10 us: a
    plan draws a few per obstacle at every reset); a test pins it against ``rng.choice``."""
    return options[rng.integers(0, len(options))]


@functools.lru_cache(maxsize=64)
def _hump(cols: int) -> np.ndarray:
    """``sin`` over ``cols`` points from 0 to pi (read-only: shared by every hump of that length)."""
    return _frozen(np.sin(np.linspace(0.0, np.pi, cols)))


@functools.lru_cache(maxsize=64)
def _stairs(top: int, step_height: float, cols: int) -> np.ndarray:
    """Levels 0,1,..,top,top,..,1,0 times ``step_height`` over ``cols`` columns (read-only)."""
    levels = np.concatenate([np.arange(top + 1), np.arange(top, -1, -1)])
    return _frozen(step_height * levels[np.arange(cols) * len(levels) // cols][None])


RUBBLE_PERIODS = np.array([10, 15])  # rugged_square's half-periods along x, drawn per band


@functools.lru_cache(maxsize=64)
def _rubble(clip_values: tuple[float, ...], cols: int) -> np.ndarray:
    """One 0..2 triangle wave per (half-period, clip) pair, clipped (read-only): ``(pairs, cols)``."""
    phase = (np.linspace(0.0, 1.0, cols) * np.repeat(RUBBLE_PERIODS, len(clip_values))[:, None] / 2) % 1.0
    clips = np.tile(np.asarray(clip_values), len(RUBBLE_PERIODS))[:, None]
    return _frozen(np.minimum(2.0 * (1.0 - np.abs(2.0 * phase - 1.0)), clips))


def _frozen(values: np.ndarray) -> np.ndarray:
    values.flags.writeable = False
    return values


def curve_slope(world: WorldCfg, rng: np.random.Generator, rows: int, cols: int) -> Block:
    """A smooth hump ``c * sin(0..pi)`` along x, c drawn from CURVE_HEIGHT_RANGE."""
    height = pick(rng, value_range(world.TERRAIN.CURVE_HEIGHT_RANGE))
    return Block((height * _hump(cols))[None], np.zeros(rows, dtype=np.intp))


def steps(world: WorldCfg, rng: np.random.Generator, rows: int, cols: int) -> Block:
    """Stairs up then down: levels 0,1,..,top,top,..,1,0 times STEP_HEIGHT (top twice as wide)."""
    return Block(_stairs(world.TERRAIN.NUM_STEPS // 2 - 1, float(world.TERRAIN.STEP_HEIGHT), cols),
                 np.zeros(rows, dtype=np.intp))


def rugged_square(world: WorldCfg, rng: np.random.Generator, rows: int, cols: int) -> Block:
    """Bands of 10-19 rows, each a 0..2 triangle wave along x with f/2 periods, clipped at its own c."""
    bands = rows // 10 + 1  # enough bands of >= 10 rows to cover all rows
    clip_values = value_range(world.TERRAIN.RUGGED_SQUARE_CLIP_RANGE)
    widths = rng.integers(10, 20, size=bands)
    # the draws of rng.choice(RUBBLE_PERIODS, bands) and rng.choice(clip_values, bands), kept as indices:
    # one profile per (half-period, clip) pair, not per band (the bands repeat a few of them)
    half_periods = rng.integers(0, len(RUBBLE_PERIODS), size=bands)
    clips = rng.integers(0, len(clip_values), size=bands)
    pair = half_periods * len(clip_values) + clips
    return Block(_rubble(tuple(clip_values.tolist()), cols), np.repeat(pair, widths)[:rows])


@dataclass(frozen=True)
class TerrainType:
    """An obstacle type: the TERRAIN key of its half-length range, its builder and its height bound."""

    length_key: str
    build: Callable[..., Block]  # (world, rng, rows, cols) -> heights
    height_bound: Callable[..., float]  # (world) -> the highest height it can draw


# Obstacle types of the corridor (TERRAIN.TYPES), by name.
OBSTACLES: dict[str, TerrainType] = {
    "curve_slope": TerrainType("HFIELD_LENGTH_RANGE", curve_slope,
                               lambda world: float(max(value_range(world.TERRAIN.CURVE_HEIGHT_RANGE)))),
    "steps": TerrainType("STEP_LENGTH_RANGE", steps,
                         lambda world: (world.TERRAIN.NUM_STEPS // 2 - 1) * world.TERRAIN.STEP_HEIGHT),
    "rugged_square": TerrainType("HFIELD_LENGTH_RANGE", rugged_square,
                                 lambda world: min(2.0, float(max(value_range(
                                     world.TERRAIN.RUGGED_SQUARE_CLIP_RANGE))))),
}


def obstacle_types(world: WorldCfg) -> tuple[str, ...]:
    """The obstacle types asked for by TERRAIN.TYPES ("flat" allowed, meaning none; names checked at load)."""
    return tuple(t for t in world.TERRAIN.TYPES if t != "flat")


def obstacles_fit(world: WorldCfg) -> bool:
    """Whether any obstacle can ever be placed: the shortest flat stretch plus the shortest
    obstacle fit in the corridor after the start area (else the terrain is always flat)."""
    types = obstacle_types(world)
    if not types or "Terrain" not in world.ENV.MODULES:
        return False
    corridor = Corridor.of(world)
    divs = corridor.divs
    start = round(2 * (0.0 - corridor.x_min) * divs)
    flat = round(2 * min(value_range(world.TERRAIN.FLAT_LENGTH_RANGE)) * divs)
    shortest = min(round(2 * min(value_range(getattr(world.TERRAIN, OBSTACLES[t].length_key))) * divs) for t in types)
    return start + flat + shortest <= corridor.shape[1] - 1


def max_height(world: WorldCfg) -> float:
    """An upper bound on any height map drawn for this config (the hfield's z scale)."""
    return max([OBSTACLES[t].height_bound(world) for t in obstacle_types(world)] + [1e-3])


class CorridorObstacles:
    """A corridor's obstacle draws for one config, its ranges turned into columns once (a reset draws an
    episode's plan from them, ``blocks``: no config read or float arithmetic per draw)."""

    def __init__(self, world: WorldCfg, corridor: Corridor):
        self._cfg = world
        self._rows, cols = corridor.shape
        self._last = cols - 1
        divs = corridor.divs
        self._start = round(2 * (0.0 - corridor.x_min) * divs)  # end of the start area (x = START_FLAT)
        self._flats = [round(2 * v * divs) for v in value_range(world.TERRAIN.FLAT_LENGTH_RANGE)]
        self._types = [(OBSTACLES[kind].build, [round(2 * v * divs) for v in
                                                value_range(getattr(world.TERRAIN, OBSTACLES[kind].length_key))])
                       for kind in obstacle_types(world)]

    def blocks(self, rng: np.random.Generator) -> Iterator[tuple[int, Block]]:
        """One episode's obstacles in corridor order: (first column, heights ``(rows, columns)``) each; the
        rest of the corridor is flat (height 0).

        The start area ``|x| <= START_FLAT`` is flat; then flat stretches (half-length from
        FLAT_LENGTH_RANGE, truncated to fit) alternate with one obstacle each, drawn uniformly
        from TERRAIN.TYPES; an obstacle that does not fit before the end is skipped and the next
        flat stretch and obstacle are tried, until the corridor is full (as DERL's). A block may start on
        the last column of the one before it (a zero-length flat stretch): write them in order. Each
        length is ``rng.choice`` of its range, drawn as ``pick`` draws it.
        """
        flats, types, last = self._flats, self._types, self._last
        if not types:
            return
        col = self._start
        while col < last:
            col += flats[rng.integers(0, len(flats))]
            build, lengths = types[rng.integers(0, len(types))]
            length = lengths[rng.integers(0, len(lengths))]
            if col + length > last:
                continue
            yield col, build(self._cfg, rng, self._rows, length + 1)
            col += length


def obstacle_blocks(world: WorldCfg, corridor: Corridor, rng: np.random.Generator) -> Iterator[tuple[int, Block]]:
    """One episode's obstacles in corridor order (``CorridorObstacles.blocks``)."""
    return CorridorObstacles(world, corridor).blocks(rng)


def draw_heights(world: WorldCfg, corridor: Corridor, rng: np.random.Generator) -> np.ndarray:
    """One episode's height map (metres above the ground), shape ``corridor.shape`` (``obstacle_blocks``
    on a flat corridor; an env's reset writes only the blocks' columns: ``CorridorArena``)."""
    heights = np.zeros(corridor.shape)
    for col, block in obstacle_blocks(world, corridor, rng):
        heights[:, col:col + block.columns] = block.heights()
    return heights
