"""DERL's object placement: a grid of ``HFIELD.NUM_DIVS`` cells per metre marking taken footprints."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from derl.envs.config import WorldCfg
from derl.envs.terrain import Corridor

TRIES = 10


class PlacementGrid:
    """Places rectangles uniformly over an extent, away from its ends and sides, without overlap.

    As DERL's ``uniform_placement``: a footprint of half-sizes (hx, hy) takes ``ceil(h * divs)``
    cells each side of its centre cell; centres keep ``2 * OBJECT.PLACEMENT_BUFFER_LEN`` metres
    (plus the footprint) from both ends along x and ``2 * PLACEMENT_BUFFER_WIDTH`` from both sides;
    a spot that overlaps an earlier footprint is redrawn, up to 10 times.
    """

    def __init__(self, extent: Corridor, world: WorldCfg):
        self.extent = extent
        self.divs = extent.divs
        self.rows = round(2 * extent.half_width * self.divs)
        self.cols = round((extent.x_max - extent.x_min) * self.divs)
        self._footprints = Footprints(self.cols)
        self._taken: np.ndarray | None = None  # ``taken`` as last rendered
        self.buffer_len = round(2 * float(world.OBJECT.PLACEMENT_BUFFER_LEN) * self.divs)
        self.buffer_width = round(2 * float(world.OBJECT.PLACEMENT_BUFFER_WIDTH) * self.divs)
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
        cell = self._place(self.bounds(half), rng.integers)
        return None if cell is None else self.centre(*cell)

    def centre(self, row: int, col: int) -> tuple[float, float]:
        """(x, y) of the cell (row, col)."""
        return self.extent.x_min + col / self.divs, -self.extent.half_width + row / self.divs

    @property
    def taken(self) -> np.ndarray:
        """The cells taken, as DERL's bool grid ``(rows, cols)``: rendered from the footprints when read (for
        tests and inspection; placement reads the footprints, and writing this array places nothing)."""
        if self._taken is None:
            self._taken = np.zeros((self.rows, self.cols), dtype=bool)
            for r0, r1, c0, c1 in self._footprints.all():
                self._taken[r0:r1, c0:c1] = True
        return self._taken

    def _place(self, bounds: tuple[int, int, int, int, int, int],
               integers: Callable[[int, int], int]) -> tuple[int, int] | None:
        """A free centre cell (row, col) for a footprint of ``bounds`` (``bounds``), marked taken; None after
        10 tries. Each try draws the row, then the column (DERL's order) with ``integers(low, high)``."""
        sx, sy, row_lo, row_hi, col_lo, col_hi = bounds
        footprints = self._footprints
        for _ in range(TRIES):
            row, col = int(integers(row_lo, row_hi)), int(integers(col_lo, col_hi))
            if sx <= 0 or sy <= 0:  # an empty footprint: always free, takes nothing (as an empty window)
                return row, col
            window = (row - sy, row + sy, col - sx, col + sx)
            if footprints.overlaps(*window):
                continue
            footprints.add(*window)
            self._taken = None
            return row, col
        return None

    def place_boxes(self, lengths: np.ndarray | list[float], widths: np.ndarray | list[float], count: int,
                    rng: np.random.Generator) -> list[tuple[int, float, float, float, float]]:
        """``count`` boxes, each of half-length and half-width drawn from ``lengths`` and ``widths`` (one
        ``integers`` draw each, as ``rng.choice``) then placed as ``place_uniform``: (k, x, y, half-length,
        half-width) of those placed, on a cleared grid (DERL's obstacle task: the same draws in the same
        order as ``place_uniform`` box by box, read from the generator's raw outputs: ``RawIntegers``).
        """
        self._footprints.clear()
        self._taken = None
        draws = RawIntegers(rng)
        integers, nl, nw = draws.integers, len(lengths), len(widths)
        lengths, widths = [float(v) for v in lengths], [float(v) for v in widths]  # no NumPy scalar per draw
        placed = []
        try:
            for k in range(count):
                half = (lengths[integers(0, nl)], widths[integers(0, nw)])
                bounds = self._box_bounds.get(half)
                if bounds is None:
                    bounds = self._box_bounds[half] = self.bounds(half)
                cell = self._place(bounds, integers)
                if cell is not None:
                    placed.append((k, *self.centre(*cell), *half))
        finally:
            draws.close()
        return placed


class Footprints:
    """Rectangles of cells ``[r0, r1) x [c0, c1)`` (none empty), indexed by strips of ``STRIP`` columns: whether
    a window overlaps one is asked of the few footprints in the strips it spans, in Python (0.4 us a
    window for the obstacle task's 50 boxes, where NumPy's ``taken[window].any()`` on a grid took 1.4-2.4 us,
    plus 0.5 us a box to mark the grid and 10 us an episode to clear it)."""

    STRIP = 64  # columns per strip: a box of the obstacle task (at most 60 cells long) spans one or two

    def __init__(self, cols: int):
        self._strips: list[list[tuple[int, int, int, int]]] = [[] for _ in range(cols // self.STRIP + 1)]

    def clear(self) -> None:
        """No footprint."""
        for strip in self._strips:
            strip.clear()

    def overlaps(self, r0: int, r1: int, c0: int, c1: int) -> bool:
        """Whether the (non-empty) window ``[r0, r1) x [c0, c1)`` shares a cell with a footprint."""
        for strip in self._strips[c0 // self.STRIP:(c1 - 1) // self.STRIP + 1]:
            for a0, a1, b0, b1 in strip:
                if a0 < r1 and r0 < a1 and b0 < c1 and c0 < b1:
                    return True
        return False

    def add(self, r0: int, r1: int, c0: int, c1: int) -> None:
        """The (non-empty) footprint ``[r0, r1) x [c0, c1)``."""
        rect = (r0, r1, c0, c1)
        for strip in self._strips[c0 // self.STRIP:(c1 - 1) // self.STRIP + 1]:
            strip.append(rect)

    def all(self) -> set[tuple[int, int, int, int]]:
        """Every footprint."""
        return {rect for strip in self._strips for rect in strip}


class RawIntegers:
    """``rng.integers(low, high)`` (ranges up to 2**32) read from blocks of the generator's 32-bit outputs,
    mapped as NumPy's ``Generator.integers`` maps them (Lemire's multiply-shift and its rare rejection; a
    range of one draws nothing): the same values from the same stream at a tenth of a call's cost
    (0.1 instead of 1.1 us; the obstacle task draws 200 per episode). ``close`` leaves the generator
    where those scalar calls would have (it consumes only the outputs used); tests pin both against
    ``rng.integers``, so a NumPy that mapped them otherwise would be seen.
    """

    BLOCK = 512  # outputs drawn at once (an obstacle episode uses about 200)

    def __init__(self, rng: np.random.Generator):
        self._rng = rng
        self._start = rng.bit_generator.state
        self._block: list[int] = []
        self._next = 0
        self._used = 0  # outputs of the blocks before this one

    def _output(self) -> int:
        if self._next == len(self._block):
            self._refill()
        self._next += 1
        return self._block[self._next - 1]

    def _refill(self) -> None:
        self._used += len(self._block)
        self._block = self._rng.integers(0, 1 << 32, size=self.BLOCK, dtype=np.uint64).tolist()
        self._next = 0

    def integers(self, low: int, high: int) -> int:
        """A uniform integer in [low, high), as ``rng.integers(low, high)`` would draw it."""
        span = high - low
        if not 1 < span < 1 << 32:
            if not 0 < span <= 1 << 32:
                raise ValueError(f"RawIntegers draws ranges of 1 to 2**32 integers, not [{low}, {high})")
            return low if span == 1 else low + self._output()
        # the common case reads the block inline (no _output call: 0.24 instead of 0.30 us a draw)
        if self._next == len(self._block):
            self._refill()
        product = self._block[self._next] * span
        self._next += 1
        if product & 0xFFFFFFFF < span:
            threshold = ((1 << 32) - span) % span
            while product & 0xFFFFFFFF < threshold:
                product = self._output() * span
        return low + (product >> 32)

    def close(self) -> None:
        """Rewinds the generator to where it stands after the outputs used (the rest of the block is unused)."""
        self._rng.bit_generator.state = self._start
        used = self._used + self._next
        if used:
            self._rng.integers(0, 1 << 32, size=used, dtype=np.uint64)
