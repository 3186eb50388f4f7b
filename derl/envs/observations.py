"""Observation gatherers. MuJoCo ids and addresses are looked up once, when the env is built.

``proprioceptive`` (``ENV.OBS_TYPES`` in order, J hinges, L limbs):

==============  ======  =====================================================================
type            size    content
==============  ======  =====================================================================
position        J       hinge angles (the free joint is skipped: no absolute position/attitude)
velocity        6 + J   free-joint velocity (linear world, angular local), hinge velocities
imu_vel         9       accelerometer, gyro, velocimeter at the head site ``root``
touch           1 + L   touch sensors, head first, then limbs
extremities     2L      each ``limb/btm/i`` site minus the head, in the head frame, x and y
==============  ======  =====================================================================

Hinge angles and the agent's velocities are ``qpos`` and ``qvel`` after the step, as DERL reads
them. The rest comes from sensors (``derl.envs.world`` adds the ``obs/tip/*`` ones), which MuJoCo
evaluates at the start of the last substep of a step: DERL's IMU, touch and limb positions come
from that same point (its ``xpos`` is not refreshed after the last substep either).

``hfield``: heights around the agent minus the height under it, on a grid in the agent's
heading frame (see ``HeightPatch``), flattened row-major with rows along y from -y (the
agent's right) to +y, as MuJoCo orders height-field rows (the original mirrored them), and
columns along x from behind to ahead. The grid turns with the heading at reset too (the
original did not turn it at reset). Outside the corridor the map reads HFIELD.PADDING cells
of wall height (2 m, walls on) and then HFIELD.GAP_DEPTH.
"""

from __future__ import annotations

import math

import array_api_compat
import mujoco
import numpy as np

from derl.arrays import namespace, take
from derl.envs.scene import Array, Scene

OBS_TYPES = ("position", "velocity", "imu_vel", "touch", "extremities")
IMU_SENSORS = (mujoco.mjtSensor.mjSENS_ACCELEROMETER, mujoco.mjtSensor.mjSENS_GYRO,
               mujoco.mjtSensor.mjSENS_VELOCIMETER)


def names_with_prefix(model: mujoco.MjModel, obj: mujoco.mjtObj, count: int, prefix: str) -> list[int]:
    """Ids (in model order) of the objects of one type whose names start with ``prefix``."""
    return [i for i in range(count) if (mujoco.mj_id2name(model, obj, i) or "").startswith(prefix)]


def head_frame(vectors: Array, xmat: Array) -> Array:
    """Each env's world vectors ``[N, k, 3]`` in the frame of its flat rotation matrix ``xmat`` ``[N, 9]``."""
    return vectors @ array_api_compat.array_namespace(vectors, xmat).reshape(xmat, (-1, 3, 3))


def as_slice(indices: np.ndarray) -> slice | np.ndarray:
    """A slice for consecutive indices: a view where a gather would copy (the reset noise added to the
    agent's qpos in place; the hinge angles and the agent's velocities, a step's observation)."""
    if len(indices) and np.array_equal(indices, np.arange(indices[0], indices[0] + len(indices))):
        return slice(int(indices[0]), int(indices[0]) + len(indices))
    return indices


def _sensor_indices(model: mujoco.MjModel, sensors: list[int], components: int) -> np.ndarray:
    """sensordata addresses of the first ``components`` values of each sensor."""
    if not sensors:
        return np.zeros(0, dtype=np.intp)
    return np.concatenate([model.sensor_adr[i] + np.arange(components) for i in sensors]).astype(np.intp)


class Proprioception:
    """Builds the proprioceptive vectors ``[N, size]`` of ``ENV.OBS_TYPES``: one ``take`` per source
    (``qpos``, ``qvel``, ``sensordata``, bound ``[N, ...]`` arrays) for each run of consecutive types
    that read the same one, or a slice where its columns are consecutive (the hinge angles, the agent's
    velocities: a view, which the concatenation copies, for a gather that costs 0.3-0.8 us a call)."""

    def __init__(self, model: mujoco.MjModel, sources: dict[str, Array], obs_types,
                 hinge_qpos: np.ndarray, agent_dofs: np.ndarray):
        """``sources``: the bound ``qpos``, ``qvel`` and ``sensordata`` (NumPy arrays or tensors of one
        namespace: ``derl.envs.scene.Scene.xp``); ``hinge_qpos``: the qpos addresses of the agent's
        hinges; ``agent_dofs``: its dofs, the head's free joint first."""
        unknown = sorted(set(obs_types) - set(OBS_TYPES))
        if unknown:
            raise ValueError(f"unknown ENV.OBS_TYPES {unknown}; known: {list(OBS_TYPES)}")
        imu = [next(i for i in range(model.nsensor) if model.sensor_type[i] == kind) for kind in IMU_SENSORS]
        touch = [i for i in range(model.nsensor) if model.sensor_type[i] == mujoco.mjtSensor.mjSENS_TOUCH]
        tips = names_with_prefix(model, mujoco.mjtObj.mjOBJ_SENSOR, model.nsensor, "obs/tip/")
        qpos, qvel, sensordata = sources["qpos"], sources["qvel"], sources["sensordata"]
        parts = {  # (source, indices)
            "position": (qpos, hinge_qpos),
            "velocity": (qvel, agent_dofs),
            "imu_vel": (sensordata, _sensor_indices(model, imu, 3)),
            "touch": (sensordata, _sensor_indices(model, touch, 1)),
            "extremities": (sensordata, _sensor_indices(model, tips, 2)),
        }
        takes: list[tuple[Array, np.ndarray]] = []
        for kind in obs_types:
            source, index = parts[kind]
            if takes and takes[-1][0] is source:  # extend the previous take
                index = np.concatenate([takes.pop()[1], index])
            takes.append((source, index))
        self.size = sum(len(index) for _, index in takes)
        self._xp = namespace(qpos)
        device = array_api_compat.device(qpos)
        self._takes = [(source, columns if isinstance(columns := as_slice(index), slice)
                        else self._xp.asarray(index, dtype=self._xp.int64, device=device))
                       for source, index in takes]

    def __call__(self, envs: np.ndarray | None = None) -> Array:
        """Every env's vector, or the rows ``envs`` (host indices) only."""
        parts = []
        for source, columns in self._takes:
            rows = source if envs is None else source[envs]
            parts.append(rows[:, columns] if isinstance(columns, slice) else take(rows, columns, 1))
        return self._xp.concat(parts, axis=1)


def _log_offsets(extent: int) -> np.ndarray:
    """Cell offsets 0..extent, denser near 0: -ln(1 - k/extent) rescaled to end at extent."""
    p = np.arange(extent) / extent
    v = -np.log(1.0 - p)
    return np.unique((v * extent / v[-1]).astype(int))


def patch_axes(obs_size, divs: int) -> tuple[np.ndarray, np.ndarray]:
    """Cell offsets along x (ahead) and along y (left) of the observed grid: its axes, without the grid
    (``derl.envs.array_sizes`` sizes the grid from them before anything is allocated)."""
    behind, ahead, right, left = (round(m * divs) for m in obs_size)
    ahead_x = np.unique(np.concatenate([-_log_offsets(behind), _log_offsets(ahead)]))
    left_y = np.unique(np.concatenate([-_log_offsets(right), _log_offsets(left)]))
    return ahead_x, left_y


def _grid(obs_size, divs: int) -> tuple[np.ndarray, np.ndarray]:
    """Cell offsets (x ahead, y left) of the observed grid, shape (rows along y, cols along x)."""
    ahead_x, left_y = patch_axes(obs_size, divs)
    grid_y, grid_x = np.meshgrid(left_y, ahead_x, indexing="ij")
    return grid_x, grid_y


class HeightPatch:
    """Samples padded height maps around the agents on a log-spaced grid turned with their headings.

    ``HFIELD.OBS_SIZE`` = [behind, ahead, right, left] in metres, ``NUM_DIVS`` cells per
    metre; DERL's [1, 4, 4, 4] at 10 cells/m gives 47 rows x 30 columns = 1410 values. The
    grid is turned by the heading rounded to ``YAW_BINS`` steps (at most 0.25 cell of
    displacement at the grid's far corner) and rounded to cells; the flat map offsets of every
    heading bin are computed once (20 ms), so a step costs one gather, with no look-up on the host
    (``bind`` moves the table to the scene's device).
    """

    YAW_BINS = 720

    def __init__(self, obs_size, divs: int, map_width: int):
        grid_x, grid_y = _grid(obs_size, divs)
        self._x = grid_x.ravel().astype(float)
        self._y = grid_y.ravel().astype(float)
        self.shape = grid_x.shape
        self.size = grid_x.size
        self.reach = self.reach_for(obs_size, divs)
        self._width = map_width
        yaws = [2 * math.pi * yaw_bin / self.YAW_BINS for yaw_bin in range(self.YAW_BINS)]
        c = np.array([math.cos(yaw) for yaw in yaws])[:, None]
        s = np.array([math.sin(yaw) for yaw in yaws])[:, None]
        cols = np.rint(c * self._x - s * self._y).astype(np.intp)
        rows = np.rint(s * self._x + c * self._y).astype(np.intp)
        # [YAW_BINS, size], int32: half the bytes a step reads from the table (the gather is bound by cache misses)
        self._offsets = (rows * self._width + cols).astype(np.int32)
        # NumPy's gather buffers, "index" and "samples", [at least N, size] (_relative_numpy): scratch, not state
        self._scratch: dict[str, np.ndarray] = {}

    @staticmethod
    def reach_for(obs_size, divs: int) -> int:
        """How many cells around the agent the grid can reach, whatever the heading."""
        grid_x, grid_y = _grid(obs_size, divs)
        return int(math.ceil(np.hypot(grid_x, grid_y).max()))

    def bind(self, scene: Scene) -> None:
        """Moves the offsets table into the scene's namespace and device."""
        self._offsets = scene.asarray(self._offsets, dtype=scene.xp.int32)

    def __call__(self, heights: Array, rows: Array, cols: Array, yaw: Array, maps: Array | None = None) -> Array:
        """Heights ``[N, size]`` at each env's grid turned by its ``yaw`` around its vertex (row, col)
        of its map, minus the height there, in ``yaw``'s float type.

        ``heights`` is ``[M, H * map_width]``, each map raveled (``map_width`` columns) and padded
        by at least ``reach`` cells around (row, col); env i reads map ``maps[i]`` (default: map i;
        a terrain bank shares M maps among the envs); every argument of one namespace (NumPy's
        unless bound to a scene of tensors). The padding is a precondition that NumPy does not check
        (an index past the maps is clipped, not refused); ``HeightMap`` pads by ``reach``.
        """
        xp = array_api_compat.array_namespace(heights, rows, cols, yaw)
        yaw = xp.where(xp.isfinite(yaw), yaw, 0.0)  # an unstable step's heading: any bin will do
        yaw_bins = xp.astype(xp.round(yaw * self.YAW_BINS / (2 * math.pi)), xp.int64) % self.YAW_BINS
        # One take from the maps raveled whole: the fastest gather NumPy has.
        if maps is None:
            maps = xp.arange(rows.shape[0], device=array_api_compat.device(rows))
        centre = rows * self._width + cols + maps * heights.shape[1]
        everything = xp.reshape(heights, (-1,))
        ground = xp.take(everything, centre)[:, None]
        if array_api_compat.is_numpy_namespace(xp):
            return self._relative_numpy(everything, centre, yaw_bins, ground, yaw.dtype)
        index = xp.take(self._offsets, yaw_bins, axis=0) + centre[:, None]
        samples = xp.reshape(xp.take(everything, xp.reshape(index, (-1,))), index.shape)
        relative = xp.astype(samples, yaw.dtype)  # one copy, subtracted from in place
        relative -= xp.astype(ground, yaw.dtype)
        return relative

    def _relative_numpy(self, everything: np.ndarray, centre: np.ndarray, yaw_bins: np.ndarray, ground: np.ndarray,
                        dtype) -> np.ndarray:
        """The same gather on NumPy, into buffers kept between calls and with the float type's conversion fused
        into the subtraction: after a physics step the memory of fresh temporaries is as cold as the maps (1.1 MB
        of them per 32-env call, against the 0.56 MB of map lines the patches read), 20% of the call."""
        n, scratch = centre.shape[0], self._scratch
        if "index" not in scratch or len(scratch["index"]) < n or scratch["samples"].dtype != everything.dtype:
            scratch.update(index=np.empty((n, self.size), np.int64), samples=np.empty((n, self.size), everything.dtype))
        index = np.add(np.take(self._offsets, yaw_bins, axis=0), centre[:, None], out=scratch["index"][:n])
        # mode "clip" changes nothing (the cells are clamped onto the grid, the padding covers the reach) and
        # spares the copy that mode "raise" makes of an out= buffer
        samples = np.take(everything, index, out=scratch["samples"][:n], mode="clip")
        return np.subtract(samples, ground, dtype=dtype)  # float32 converted exactly, then subtracted: one pass
