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

    def place_uniform(self, half: tuple[float, float], rng: np.random.Generator) -> tuple[float, float] | None:
        """A free centre (x, y) for a footprint of half-sizes ``half``, marked taken; None after 10 tries."""
        sx, sy = (math.ceil(round(h * self.divs, 6)) for h in half)
        row_lo, row_hi = sy + self.buffer_width, self.rows - sy - self.buffer_width
        col_lo, col_hi = sx + self.buffer_len, self.cols - sx - self.buffer_len
        if row_lo >= row_hi or col_lo >= col_hi:
            raise ValueError(f"TERRAIN.SIZE {self.cols / self.divs / 2:g} x {self.rows / self.divs / 2:g} is too "
                             f"small to place a {2 * half[0]:g} x {2 * half[1]:g} m object with the "
                             "OBJECT.PLACEMENT_BUFFER_LEN/WIDTH margins")
        for _ in range(TRIES):
            row, col = int(rng.integers(row_lo, row_hi)), int(rng.integers(col_lo, col_hi))
            window = self.taken[row - sy:row + sy, col - sx:col + sx]
            if window.any():
                continue
            window[:] = True
            return self.extent.x_min + col / self.divs, -self.extent.half_width + row / self.divs
        return None
