"""The arrays of the world whose size the config sets, counted before any is allocated.

``derl.checked_config`` holds them to the node's memory at load, with the rollout buffers, so that a
``TERRAIN.SIZE`` of 100 km or an ``HFIELD.OBS_SIZE`` of a kilometre is one line naming its keys, not a
58 TiB allocation in the middle of building the envs. The figures are the least the world allocates (the
grids themselves, 4 bytes a cell; not MuJoCo's copies or temporaries), so a config that fits is never
refused.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from derl.config import ConfigError
from derl.envs.config import WorldCfg
from derl.envs.observations import HeightPatch, patch_axes
from derl.envs.terrain_bank import bank_size

CELL_BYTES = 4  # float32 heights
# The patch's offsets per heading and cell are computed from int64 rows and columns and their product with the
# map's width, three arrays alive at once (``HeightPatch.__init__``), before they are kept as int32.
TABLE_BYTES_PER_CELL = 3 * 8
# The least cells per side of the observed patch: 0 or 1 makes its log-spaced offsets 0 / 0.
MIN_PATCH_CELLS = 2


class WorldArray(NamedTuple):
    """Arrays the config sizes: what they are, in words with their shape, their keys and their bytes."""

    what: str
    keys: tuple[str, ...]
    bytes: int


def observes_patch(world: WorldCfg) -> bool:
    """The policy sees the height-field patch (``hfield`` in ``ENV.KEYS_TO_KEEP``)."""
    return "hfield" in world.ENV.KEYS_TO_KEEP


def check_patch(world: WorldCfg) -> None:
    """Raises ``ConfigError`` if the observed patch has a side shorter than ``MIN_PATCH_CELLS`` cells."""
    if not observes_patch(world):
        return
    divs = world.HFIELD.NUM_DIVS
    if min(round(metres * divs) for metres in world.HFIELD.OBS_SIZE) < MIN_PATCH_CELLS:
        raise ConfigError(f"config key HFIELD.OBS_SIZE {list(world.HFIELD.OBS_SIZE)} must reach at least "
                          f"{MIN_PATCH_CELLS} height-map cells each way at HFIELD.NUM_DIVS {divs} (at least "
                          f"{MIN_PATCH_CELLS / divs:g} m)", "HFIELD.OBS_SIZE", "HFIELD.NUM_DIVS")


def patch_values(world: WorldCfg) -> int:
    """Values of the height-field observation per env step (0 when it is not observed)."""
    if not observes_patch(world):
        return 0
    ahead_x, left_y = patch_axes(world.HFIELD.OBS_SIZE, world.HFIELD.NUM_DIVS)
    return len(ahead_x) * len(left_y)


def world_arrays(world: WorldCfg, num_envs: int) -> list[WorldArray]:
    """The world's arrays that ``num_envs`` envs of ``world`` hold at least, largest first (``check_patch``
    passed): one height map per env (or per entry of a terrain bank) where the ground is a height field or
    the patch is observed, padded for the patch, and the patch's table of offsets per heading."""
    arrays = []
    divs = world.HFIELD.NUM_DIVS
    cells = patch_values(world)
    reach = 0
    if cells:
        ahead_x, left_y = patch_axes(world.HFIELD.OBS_SIZE, divs)
        reach = math.ceil(math.hypot(abs(ahead_x).max(), abs(left_y).max()))
        table = HeightPatch.YAW_BINS * cells * TABLE_BYTES_PER_CELL
        arrays.append(WorldArray(f"height-field patch offsets ({HeightPatch.YAW_BINS} headings x {cells} cells)",
                                 ("HFIELD.OBS_SIZE", "HFIELD.NUM_DIVS"), table))
    modules = world.ENV.MODULES
    if cells or "Bowl" in modules or "Terrain" in modules:
        half_x, half_y = float(world.TERRAIN.SIZE[0]), float(world.TERRAIN.SIZE[1])
        rows = round(2 * (half_x if "Bowl" in modules else half_y) * divs) + 1
        cols = round(2 * half_x * divs) + 1
        pad = world.HFIELD.PADDING + 1 + reach
        banked = bank_size(world)
        maps = min(num_envs, banked) if banked else num_envs
        count = "PPO.NUM_ENVS" if maps == num_envs else "TERRAIN.BANK_SIZE"
        keys = ("TERRAIN.SIZE", "HFIELD.NUM_DIVS", count, *(("HFIELD.OBS_SIZE",) if reach else ()))
        arrays.append(WorldArray(f"height maps ({maps} of {rows + 2 * pad} x {cols + 2 * pad} cells)", keys,
                                 maps * (rows + 2 * pad) * (cols + 2 * pad) * CELL_BYTES))
    return sorted(arrays, key=lambda array: -array.bytes)
