"""DERL's object placement: a grid of ``HFIELD.NUM_DIVS`` cells per metre marking taken footprints."""

from __future__ import annotations

import math

import numpy as np

from derl.envs.terrain import Corridor

TRIES = 10


class PlacementGrid:
    """Places rectangles uniformly over an extent, away from its ends and sides, without overlap.

    As DERL's ``uniform_placement``: a footprint of half-sizes (hx, hy) takes ``ceil(h * divs)``
    cells each side of its centre cell; centres keep ``2 * OBJECT.PLACEMENT_BUFFER_LEN`` metres
    (plus the footprint) from both ends along x and ``2 * PLACEMENT_BUFFER_WIDTH`` from both sides;
    a spot that overlaps an earlier footprint is redrawn, up to 10 times.
    """

    def __init__(self, extent: Corridor, cfg):
        self.extent = extent
        self.divs = extent.divs
        self.rows = round(2 * extent.half_width * self.divs)
        self.cols = round((extent.x_max - extent.x_min) * self.divs)
        self.taken = np.zeros((self.rows, self.cols), dtype=bool)
        self.buffer_len = round(2 * float(cfg.OBJECT.PLACEMENT_BUFFER_LEN) * self.divs)
        self.buffer_width = round(2 * float(cfg.OBJECT.PLACEMENT_BUFFER_WIDTH) * self.divs)
        self._box_bounds: dict[tuple[float, float], tuple[int, int, int, int, int, int]] = {}  # by half-sizes

    def bounds(self, half: tuple[float, float]) -> tuple[int, int, int, int, int, int]:
        """(sx, sy, row_lo, row_hi, col_lo, col_hi): a footprint's cells each side of its centre and the
        centre's draw ranges (high excluded), for half-sizes ``half``."""
        sx, sy = (math.ceil(round(h * self.divs, 6)) for h in half)
        row_lo, row_hi = sy + self.buffer_width, self.rows - sy - self.buffer_width
        col_lo, col_hi = sx + self.buffer_len, self.cols - sx - self.buffer_len
        if row_lo >= row_hi or col_lo >= col_hi:
            raise ValueError(f"TERRAIN.SIZE {self.cols / self.divs / 2:g} x {self.rows / self.divs / 2:g} is too "
                             f"small to place a {2 * half[0]:g} x {2 * half[1]:g} m object with the "
                             "OBJECT.PLACEMENT_BUFFER_LEN/WIDTH margins")
        return sx, sy, row_lo, row_hi, col_lo, col_hi

    def place_uniform(self, half: tuple[float, float], rng: np.random.Generator) -> tuple[float, float] | None:
        """A free centre (x, y) for a footprint of half-sizes ``half``, marked taken; None after 10 tries."""
        cell = self._place(self.bounds(half), rng)
        return None if cell is None else self.centre(*cell)

    def centre(self, row: int, col: int) -> tuple[float, float]:
        """(x, y) of the cell (row, col)."""
        return self.extent.x_min + col / self.divs, -self.extent.half_width + row / self.divs

    def _place(self, bounds: tuple[int, int, int, int, int, int], rng: np.random.Generator) -> tuple[int, int] | None:
        """A free centre cell (row, col) for a footprint of ``bounds`` (``bounds``), marked taken; None after
        10 tries. Each try draws the row, then the column (DERL's order)."""
        sx, sy, row_lo, row_hi, col_lo, col_hi = bounds
        taken, integers = self.taken, rng.integers
        for _ in range(TRIES):
            row, col = int(integers(row_lo, row_hi)), int(integers(col_lo, col_hi))
            window = taken[row - sy:row + sy, col - sx:col + sx]
            if window.any():
                continue
            window[:] = True
            return row, col
        return None

    def place_boxes(self, lengths: np.ndarray, widths: np.ndarray, count: int,
                    rng: np.random.Generator) -> list[tuple[int, float, float, float, float]]:
        """``count`` boxes, each of half-length and half-width drawn from ``lengths`` and ``widths`` (one
        ``integers`` draw each, as ``rng.choice``) then placed as ``place_uniform``: (k, x, y, half-length,
        half-width) of those placed, on a cleared grid (DERL's obstacle task: the same draws in the same
        order as ``place_uniform`` box by box, at a third of its cost per box).
        """
        self.taken.fill(False)
        integers, nl, nw = rng.integers, len(lengths), len(widths)
        placed = []
        for k in range(count):
            half = (float(lengths[integers(nl)]), float(widths[integers(nw)]))
            bounds = self._box_bounds.get(half)
            if bounds is None:
                bounds = self._box_bounds[half] = self.bounds(half)
            cell = self._place(bounds, rng)
            if cell is not None:
                placed.append((k, *self.centre(*cell), *half))
        return placed
