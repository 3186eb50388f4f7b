"""The terrain bank: K terrains drawn once, when the env is built, from DERL's distribution; each
episode picks one of them (``TERRAIN.BANK_SIZE``).

Why: a VT corridor or an escape_bowl bowl is a 1001 x 1001 height field. Drawing one per episode
cost 3-5 ms, more than the physics of all the steps between two episodes of a batch (issue 33; drawn
lazily, only where the bodies reach, a reset costs 0.16 (VT) to 0.35 ms (escape_bowl) since:
``derl.envs.lazy_terrain``), and a GPU, where every world steps one model, cannot hold a height field
per world. The bank puts K height-field assets ``terrain/k`` of one size in the one model, and a single
terrain geom whose height field (``geom_dataid``) each simulation sets at its episode's start: a
per-simulation model field in ``mujoco.batch`` (``Batch.expand``) and in MuJoCo Warp (a batched model
field), written by ``Physics.set_model_rows``. The env's height maps (clearance, the ``hfield`` observation) are the
same K maps: ``HeightMap`` with an entry index per env, no map copied per env. One design for both
simulation backends.

Each entry is drawn by the arena's own drawing code (``derl.envs.terrain.draw_heights``,
``BowlShape.draw``) from a generator seeded by ``RNG_SEED``, and an episode picks an entry uniformly
with its env's generator (one draw, before the reset noise), so that the terrain of one episode has
DERL's distribution; what differs is that a training sees K terrains, not a new one per episode
(docs/design/differences.md). On a device (``SIM.BACKEND warp``), the episodes after the first
(``UnimalBatch.restart``) pick theirs from the simulator's generator instead, as their reset noise:
``choose_on_device`` writes the ended worlds' entries and ``geom_dataid`` rows with masked writes, so
that a restart never waits for the device.
"""

from __future__ import annotations

from collections.abc import Callable

import mujoco
import numpy as np
from lxml import etree

from derl.arrays import namespace
from derl.envs.config import WorldCfg
from derl.envs.mjcf import child, sub
from derl.envs.scene import HeightMap

GEOM = "terrain"
# Mixed into RNG_SEED so that the bank's stream is not any other stream of the same seed.
BANK_STREAM = 0x7E44A1


# The bank of SIM.BACKEND warp when TERRAIN.BANK_SIZE is 0: one model serves every world there, so a
# terrain cannot be redrawn per episode (DERL's way, MuJoCo C's default).
WARP_BANK_SIZE = 32


def bank_size(world: WorldCfg) -> int:
    """``TERRAIN.BANK_SIZE``: the bank's K, or 0 for a terrain drawn per episode (DERL's way), which
    ``SIM.BACKEND warp`` cannot do: there 0 means ``WARP_BANK_SIZE``."""
    size = int(world.TERRAIN.BANK_SIZE)
    return WARP_BANK_SIZE if size == 0 and world.SIM.BACKEND == "warp" else size


def asset(k: int) -> str:
    """The name of entry ``k``'s height-field asset."""
    return f"{GEOM}/{k}"


class TerrainBank:
    """K terrains in ``heights`` (its maps are the entries) and in the model's height fields.

    Args:
        heights: the arena's height maps, one per entry (``HeightMap(..., maps=K)``).
        elevation: the height-field data of a drawn map (metres to MuJoCo's [0, 1] elevations).
        draw: draws one map (metres, the grid's shape) from a generator.
        seed: ``RNG_SEED``.
    """

    def __init__(self, heights: HeightMap, elevation: Callable[[np.ndarray], np.ndarray],
                 draw: Callable[[np.random.Generator], np.ndarray], seed: int):
        self.heights = heights
        self.size = len(heights.padded)
        self._elevation, self._draw, self._seed = elevation, draw, int(seed)

    def build(self, root: etree._Element, worldbody: etree._Element, size: str, **geom: str) -> None:
        """The K assets (``size`` as MJCF's hfield size) and the terrain geom (on entry 0 until set)."""
        rows, cols = self.heights.extent.shape
        assets = child(root, "asset")
        for k in range(self.size):
            sub(assets, "hfield", name=asset(k), nrow=str(rows), ncol=str(cols), size=size)
        sub(worldbody, "geom", name=GEOM, type="hfield", hfield=asset(0), **geom)

    def fill_model(self, model: mujoco.MjModel) -> None:
        """Draws the entries into the height maps and the compiled model's height fields (before a
        simulator copies the model; not before: a task made to check a config or write MJCF draws nothing)."""
        rng = np.random.default_rng([BANK_STREAM, self._seed])
        for k in range(self.size):
            drawn = self._draw(rng)
            self.heights.interior[k] = drawn
            adr = int(model.hfield(asset(k)).adr[0])
            model.hfield_data[adr:adr + drawn.size] = self._elevation(drawn).ravel()
        # the model's ids, as tuples: looked up in the model, not episode state
        self._geom = model.geom(GEOM).id
        self._ids = tuple(model.hfield(asset(k)).id for k in range(self.size))
        self._dataid = tuple(model.geom_dataid.tolist())
        if self._ids != tuple(range(self._ids[0], self._ids[0] + self.size)):  # build declares them together
            raise ValueError(f"terrain bank: the height fields {asset(0)}..{asset(self.size - 1)} are not consecutive")

    def choose(self, env: int, rng: np.random.Generator) -> None:
        """Env ``env``'s episode takes an entry drawn uniformly from its generator."""
        self.heights.set_entry(env, int(rng.integers(self.size)))

    def choose_on_device(self, physics, ended) -> None:
        """The envs of the mask ``ended`` (``[N]`` bool, on the device) take entries drawn uniformly from
        the simulator's generator (``physics.integers``: every env draws, the ended ones take their draw), in
        the height maps' ``entry`` and the terrain geom's ``geom_dataid`` column of their worlds; masked
        writes, nothing read on the host. ``heights.host_entry`` keeps the host's last picks (``choose``),
        which only host draws read (tasks that draw per episode restart on the host)."""
        entry = self.heights.entry
        picks = physics.integers(self.size, entry.shape)
        entry[:] = namespace(entry).where(ended, picks, entry)
        # the assets' ids are consecutive (fill_model): an entry's id without a table on the device
        physics.set_model_column_where("geom_dataid", self._geom, ended, entry + self._ids[0])

    def set_model_rows(self, physics, envs: np.ndarray) -> None:
        """Points the terrain geom of the simulations ``envs`` (host indices) at their entries."""
        rows = np.repeat(np.asarray(self._dataid)[None], len(envs), axis=0)
        rows[:, self._geom] = np.asarray(self._ids)[self.heights.host_entry[envs]]
        physics.set_model_rows("geom_dataid", envs, rows)
