"""What a task sees of the envs: the compiled models, the batch's state and derived arrays, the ground.

``Scene`` is the handle every task hook receives (dm_control's ``physics``, for ``N`` simulations):
tasks never see the env. Arrays are ``[N, ...]``, live views bound to the ``mujoco.batch.Batch``:
``qpos`` and ``qvel`` are the state after the last step (writable: a write is that simulation's
state at its next call); ``xpos``, ``xmat``, ``site_xpos`` and ``sensordata`` are derived fields,
which MuJoCo computes at the start of a step's last substep (read-only). ``HeightMap`` is the
ground under each env on a vertex grid, padded so that a height-field observation around any cell of
the grid stays inside the array.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import array_api_compat
import mujoco
import numpy as np

from derl.arrays import namespace
from derl.envs.terrain import WALL_HEIGHT, Corridor

#: An array of a scene's namespace (``Scene.xp``): a NumPy array or a torch tensor.
Array = Any


class HeightMap:
    """Ground heights above ``extent.ground_z`` at the vertices of ``extent`` (metres), one map per env.

    Row ``r`` lies at ``y = -half_width + r / divs`` (row 0 is -y, as MuJoCo stores height-field
    rows), column ``c`` at ``x = x_min + c / divs``. ``padded[i]`` surrounds env i's grid with
    ``pad`` cells: ``wall_cells`` of wall height (when the extent has walls; else ``gap``), then
    ``gap``. ``interior[i]`` is map i's grid itself, a view that tasks and arenas fill in place;
    ``flat[i]`` is ``padded[i]`` raveled (a view). Env e reads map ``entry[e]``: its own map (``maps``
    None: one per env, ``entry[e] = e``), or one of ``maps`` shared maps (a terrain bank,
    ``derl.envs.terrain_bank``) chosen per episode (``set_entry``). The maps are NumPy arrays until
    ``bind`` moves them into the scene's namespace (where step hooks read them: ``grid_cells``,
    ``under``, ``flat``, ``entry``); the per-env lookups (``height_at``, ``max_under``) serve episode
    draws on the host: they first ``reveal`` what they read (an episode's terrain written lazily,
    ``derl.envs.lazy_terrain``, writes those cells then).
    """

    def __init__(self, extent: Corridor, pad: int, wall_cells: int, gap: float, num_envs: int,
                 maps: int | None = None, lazy: bool = False):
        rows, cols = extent.shape
        self.extent = extent
        self.pad = pad
        self.shared = maps is not None
        self.host_entry = np.arange(num_envs) if maps is None else np.zeros(num_envs, dtype=np.int64)
        self.entry = self.host_entry
        # zeros: the operating system's zero pages, memory that costs nothing until written (a 1001 x 1001 map
        # padded for VT's patch is 5.2 MB, 166 MB for 32 envs, which filling took 0.3 s and kept resident)
        self.padded = np.zeros((num_envs if maps is None else maps, rows + 2 * pad, cols + 2 * pad), np.float32)
        self.width = self.padded.shape[2]
        self.last_cell = (rows - 1, cols - 1)
        self._last = np.array([[rows - 1], [cols - 1]], dtype=float)  # grid_cells' upper bounds, (row, col)
        self._set_views()
        # each padded row's and column's ring: 0 on the grid, 1 in the walls' cells, 2 in the gap beyond
        inner, wall = pad - wall_cells, WALL_HEIGHT if extent.walls else gap
        self._rings = _rings(rows, pad, inner), _rings(cols, pad, inner)
        self._ring_heights = np.array([0.0, wall, gap], np.float32)
        #: the padding is written only next to the cells a lazily drawn terrain writes (``pad_beyond``)
        self.lazy = lazy
        if not lazy:
            self._write_padding(slice(None), 0, rows + 2 * pad, 0, cols + 2 * pad)
        #: where the terrain is written lazily (else None), ``reveal(env, r0, r1, c0, c1)`` before a host read of
        #: env ``env``'s grid over rows ``[r0, r1)`` and columns ``[c0, c1)``: the highest height of the cells
        #: there that the map does not hold yet (read from the episode's plan), or None once they are written
        self.reveal: Callable[[int, int, int, int, int], float | None] | None = None

    def _set_views(self) -> None:
        rows, cols = self.extent.shape
        pad = self.pad
        self.interior = self.padded[:, pad:pad + rows, pad:pad + cols]
        self.flat = self.padded.reshape(len(self.padded), -1)  # a view: filled in place

    def bind(self, scene: Scene) -> None:
        """Moves the maps and the entries into the scene's namespace and device (once: NumPy stays the
        same array). On a device the padding is written whole first (a lazy one is written by NumPy)."""
        if self.lazy and not array_api_compat.is_numpy_namespace(scene.xp):
            rows, cols = self.padded.shape[1:]
            self._write_padding(slice(None), 0, rows, 0, cols)
            self.lazy = False
        self.padded = scene.asarray(self.padded, dtype=scene.xp.float32)
        self.entry = scene.asarray(self.host_entry, dtype=scene.xp.int64)
        self._last = scene.asarray(self._last)
        self._set_views()

    def set_entry(self, env: int, entry: int) -> None:
        """Env ``env`` reads the shared map ``entry`` from now on."""
        self.host_entry[env] = entry
        if self.entry is not self.host_entry:
            self.entry[env] = entry

    @contextmanager
    def editing(self, env: int) -> Iterator[np.ndarray]:
        """Env ``env``'s grid as a NumPy array that an episode's draw edits in place: the map itself
        on NumPy; on another namespace, a host copy written back to the map after the block. Only where
        each env has its own map (shared maps are drawn once)."""
        if self.shared:
            raise ValueError("shared height maps (a terrain bank) are not edited per episode")
        if isinstance(self.interior, np.ndarray):
            yield self.interior[env]
            return
        xp, device = array_api_compat.array_namespace(self.padded), array_api_compat.device(self.padded)
        grid = np.from_dlpack(array_api_compat.to_device(xp.asarray(self.interior[env], copy=True), "cpu"))
        yield grid
        self.interior[env] = xp.asarray(grid, device=device)

    def cell(self, x: float, y: float) -> tuple[int, int]:
        """The nearest vertex (row, col) of the grid; may lie outside it."""
        return self.extent.cell(x, y)

    def height_at(self, env: int, x: float, y: float) -> float:
        """Ground z under (x, y) in env ``env``, at the nearest vertex, clamped onto the grid."""
        row, col = self.cell(x, y)
        last_row, last_col = self.last_cell
        row, col = min(max(row, 0), last_row), min(max(col, 0), last_col)
        return self._highest(env, row, row + 1, col, col + 1)

    def max_under(self, env: int, x: float, y: float, half_x: float, half_y: float) -> float:
        """Highest ground z in env ``env`` under the rectangle of half-sizes (half_x, half_y) at (x, y)."""
        r0, c0 = self.cell(x - half_x, y - half_y)
        r1, c1 = self.cell(x + half_x, y + half_y)
        return self._highest(env, r0, r1 + 1, c0, c1 + 1)

    def _highest(self, env: int, r0: int, r1: int, c0: int, c1: int) -> float:
        """Highest ground z in env ``env`` over the vertices of rows ``[r0, r1)`` and columns ``[c0, c1)`` (the
        padding beyond the grid included); where the terrain is written lazily, what is not yet written is
        read from the episode's plan (``reveal``)."""
        plan = None if self.reveal is None else self.reveal(env, r0, r1, c0, c1)
        self.pad_beyond(int(self.host_entry[env]), r0, r1, c0, c1)
        pad = self.pad
        highest = float(self.padded[self.host_entry[env], pad + r0:pad + r1, pad + c0:pad + c1].max())
        return self.extent.ground_z + (highest if plan is None else max(highest, plan))

    def pad_beyond(self, entry: int, r0: int, r1: int, c0: int, c1: int) -> None:
        """Where the padding is written lazily: map ``entry``'s padding next to its grid's rows ``[r0, r1)``
        and columns ``[c0, c1)`` (clipped onto the padded map), ``pad`` cells deep beyond each edge they
        reach (a lazily drawn terrain's tiles, ``derl.envs.lazy_terrain``; a host read's rectangle).
        The padding never changes: writing it again writes the same values."""
        rows, cols = self.extent.shape
        if not self.lazy or (r0 > 0 and c0 > 0 and r1 < rows and c1 < cols):
            return
        pad = self.pad
        self._write_padding(entry, 0 if r0 <= 0 else pad + r0, rows + 2 * pad if r1 >= rows else pad + r1,
                            0 if c0 <= 0 else pad + c0, cols + 2 * pad if c1 >= cols else pad + c1)

    def _write_padding(self, maps: int | slice, r0: int, r1: int, c0: int, c1: int) -> None:
        """The padding's heights (walls, then the gap) over rows ``[r0, r1)`` and columns ``[c0, c1)`` of the
        padded maps ``maps``; the grid's cells there are left as they are."""
        ring = np.maximum(self._rings[0][r0:r1, None], self._rings[1][None, c0:c1])
        np.copyto(self.padded[maps, r0:r1, c0:c1], self._ring_heights[ring], where=ring > 0)

    def grid_cells(self, x: Array, y: Array) -> tuple[Array, Array]:
        """The vertices (rows, cols) nearest the points, clamped onto the grid (a non-finite point: its corner)."""
        xp = namespace(x)
        extent = self.extent
        # rows and cols stacked: each operation once for both (13 array calls, 20 apart: after a physics step
        # each costs 2-4 us on cold caches, and a step asks twice, for the clearance and the height patch)
        cells = xp.stack((y + extent.half_width, x - extent.x_min)) * extent.divs
        cells = xp.round(xp.where(xp.isfinite(x + y), cells, 0.0))
        cells = xp.astype(_clamp(xp, cells, self._last), xp.int64)  # bounds of integer value: exact in any float type
        return cells[0], cells[1]

    def under(self, rows: Array, cols: Array, envs: Array | None = None) -> Array:
        """Each env's height at its own (row, col) of its map's grid (the envs ``envs`` only, where given)."""
        return self.interior[self.entry if envs is None else self.entry[envs], rows, cols]


def _rings(cells: int, pad: int, inner: int) -> np.ndarray:
    """The ring of each of the ``cells + 2 * pad`` padded rows (or columns): 0 on the grid, 1 beyond it but at
    least ``inner`` from the map's edge (the walls' cells), 2 nearer the edge (the gap)."""
    k = np.arange(cells + 2 * pad)
    return np.select([(k >= pad) & (k < pad + cells), (k >= inner) & (k < cells + 2 * pad - inner)], [0, 1], 2)


def _clamp(xp, values: Array, high: Array | float) -> Array:
    """``values`` clamped onto [0, high] by comparisons and ``where``: array_api_compat's ``maximum`` and
    ``minimum`` copy a Python bound to the device (a host sync on CUDA, seen on an H200) and its ``clip``
    is 5x slower on NumPy."""
    return xp.where(values < 0.0, 0.0, xp.where(values > high, high, values))


@dataclass
class Scene:
    """The handle task hooks receive.

    Attributes:
        model: the compiled model (the layout every env shares).
        models: env i's model (the same object for all when episodes leave the model unchanged).
        dt: seconds per env step.
        head: body id of the agent's head (``torso/0``).
        heights: the ground height maps, or None where the ground is a flat box.
        ground_z: height of the flat ground (the top of the floor box).
        qpos, qvel: ``[N, nq]``, ``[N, nv]`` state after the last step.
        xpos, xmat, site_xpos, sensordata: ``[N, ...]`` derived fields (see the module docstring).
        torso_height: ``[N]`` the head's height above the ground under it, after the last step.
        xp: the arrays' namespace (NumPy itself, or ``array_api_compat``'s torch): step hooks compute with
            it, so that one task runs on both simulation backends (docs/guides/gpus.md#simulating-on-a-gpu).
        device: where the arrays live (``"cpu"`` for NumPy, a ``torch.device`` for tensors).
    """

    model: mujoco.MjModel
    models: list[mujoco.MjModel]
    dt: float
    head: int
    heights: HeightMap | None
    ground_z: float
    qpos: np.ndarray
    qvel: np.ndarray
    xpos: np.ndarray
    xmat: np.ndarray
    site_xpos: np.ndarray
    sensordata: np.ndarray
    torso_height: np.ndarray
    xp: ModuleType = field(init=False)
    device: Any = field(init=False)

    def __post_init__(self):
        self.xp = namespace(self.qpos)
        self.device = array_api_compat.device(self.qpos)  # looked up once: zeros() runs every step

    @property
    def num_envs(self) -> int:
        return len(self.models)

    @property
    def float_dtype(self) -> Any:
        """The simulator's float type (float64 in MuJoCo C, float32 in MuJoCo Warp)."""
        return self.qpos.dtype

    def zeros(self, *shape: int, dtype: Any = None) -> Any:
        """A zero array in the scene's namespace and device; floats of the simulator's type by default."""
        return self.xp.zeros(shape, dtype=self.float_dtype if dtype is None else dtype, device=self.device)

    def asarray(self, values: Any, dtype: Any = None) -> Any:
        """``values`` (host data: NumPy, lists) as an array of the scene's namespace and device."""
        return self.xp.asarray(values, dtype=self.float_dtype if dtype is None else dtype, device=self.device)

    def height_at(self, env: int, x: float, y: float) -> float:
        """Ground z under (x, y) in env ``env``."""
        return self.ground_z if self.heights is None else self.heights.height_at(env, x, y)

    def head_xy(self) -> tuple[Array, Array]:
        """The heads' x and y ``[N]`` as MuJoCo last computed them."""
        head = self.xpos[:, self.head]
        return head[:, 0], head[:, 1]
