"""What a task sees of the env: the compiled model, its data, the step length and the ground.

``Scene`` is the small handle every task hook receives (dm_control's ``physics``): tasks never
see the env. ``HeightMap`` is the ground under the agent on a vertex grid, padded so that a
height-field observation around any cell of the grid stays inside the array.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import mujoco
import numpy as np

from derl.envs.terrain import WALL_HEIGHT, Corridor


class HeightMap:
    """Ground heights above ``extent.ground_z`` at the vertices of ``extent`` (metres).

    Row ``r`` lies at ``y = -half_width + r / divs`` (row 0 is -y, as MuJoCo stores height-field
    rows), column ``c`` at ``x = x_min + c / divs``. ``padded`` surrounds the grid with ``pad``
    cells: ``wall_cells`` of wall height (when the extent has walls; else ``gap``), then ``gap``.
    ``interior`` is the grid itself, a view that tasks and arenas fill in place each episode.
    """

    def __init__(self, extent: Corridor, pad: int, wall_cells: int, gap: float):
        rows, cols = extent.shape
        self.extent = extent
        self.pad = pad
        self.padded = np.full((rows + 2 * pad, cols + 2 * pad), gap, np.float32)
        inner = pad - wall_cells
        self.padded[inner:rows + 2 * pad - inner, inner:cols + 2 * pad - inner] = WALL_HEIGHT if extent.walls else gap
        self.interior = self.padded[pad:pad + rows, pad:pad + cols]
        self.interior[:] = 0.0
        self.flat = self.padded.ravel()  # a view: filled in place
        self.last_cell = (rows - 1, cols - 1)

    def cell(self, x: float, y: float) -> tuple[int, int]:
        """The nearest vertex (row, col) of the grid; may lie outside it."""
        return self.extent.cell(x, y)

    def height_at(self, x: float, y: float) -> float:
        """Ground z under (x, y) at the nearest vertex, clamped onto the grid."""
        row, col = self.cell(x, y)
        last_row, last_col = self.last_cell
        row, col = min(max(row, 0), last_row), min(max(col, 0), last_col)
        return self.extent.ground_z + float(self.interior[row, col])

    def max_under(self, x: float, y: float, half_x: float, half_y: float) -> float:
        """Highest ground z under the rectangle of half-sizes (half_x, half_y) centred at (x, y)."""
        r0, c0 = self.cell(x - half_x, y - half_y)
        r1, c1 = self.cell(x + half_x, y + half_y)
        pad = self.pad
        return self.extent.ground_z + float(self.padded[pad + r0:pad + r1 + 1, pad + c0:pad + c1 + 1].max())

    def padded_cell(self, x: float, y: float) -> tuple[int, int]:
        """The cell of ``padded`` nearest (x, y), clamped onto the grid (a non-finite point: its corner)."""
        row, col = self.cell(x, y) if math.isfinite(x + y) else (0, 0)
        last_row, last_col = self.last_cell
        row = row if 0 <= row <= last_row else min(max(row, 0), last_row)
        col = col if 0 <= col <= last_col else min(max(col, 0), last_col)
        return row + self.pad, col + self.pad


@dataclass
class Scene:
    """The handle task hooks receive.

    Attributes:
        model, data: the compiled model and its data.
        dt: seconds per env step.
        head: body id of the agent's head (``torso/0``).
        heights: the ground height map, or None where the ground is a flat box.
        ground_z: height of the flat ground (the top of the floor box).
        torso_height: the head's height above the ground under it, after the last step.
    """

    model: mujoco.MjModel
    data: mujoco.MjData
    dt: float
    head: int
    heights: HeightMap | None
    ground_z: float
    torso_height: float = field(default=0.0)

    def height_at(self, x: float, y: float) -> float:
        """Ground z under (x, y)."""
        return self.ground_z if self.heights is None else self.heights.height_at(x, y)

    def head_xy(self) -> tuple[float, float]:
        """The head's (x, y) as MuJoCo last computed it."""
        x, y, _ = self.data.xpos[self.head].tolist()
        return x, y
