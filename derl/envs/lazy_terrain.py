"""Lazy terrain: an episode's terrain written only where something can touch or see it.

A terrain redrawn per episode (``TERRAIN.BANK_SIZE`` 0 on MuJoCo C: VT's and MVT's corridor, the
escape_bowl bowl, and the obstacle task's 50 boxes in its map: ``derl.envs.arenas.Overlay``) is a 1001 x
1001 grid, and writing all of it into the env's height map and its model's height-field data took 1.5-4.4
ms per reset, while an episode's bodies touch a few metres
around their start. The arena draws the episode's whole *plan* from the env's generator at the reset,
as before (the same draws in the same order, so everything drawn after it is unchanged), and
``LazyTerrain`` writes the plan's cells tile by tile (``TILE`` x ``TILE`` vertices), only the tiles
within reach of a free body (the agent's head, MVT's box or ball): after the reset and before every
step (so that a state written between steps is covered too), a vectorised check finds the envs where
a body came within its reach plus ``TRAVEL`` of its written rectangle's edge, and only those get the
missing tiles written; the step's physics and the observation after it (within ``TRAVEL`` of where
the step began) read written cells only. A host read elsewhere (placing a prop or a goal: ``HeightMap.max_under``,
``height_at``) reads the corridor's plan, or writes the bowl's tiles it reads first (``HeightMap.reveal``).
The next reset flattens only the tiles written. Every cell read or touched holds what the whole draw holds, bitwise.

A body's reach is bounded from the model, whatever its joints do: along the chain of bodies from the
free body to each of its geoms, the body offsets, twice each joint anchor's offset (a hinge turns a
point about its anchor), then the geom's offset, rbound and margin, plus one vertex (a contact reads
the cells under the geom's box); the head's reach is at least the height patch's (plus the vertex
the patch is centred on).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import mujoco
import numpy as np

from derl.envs.scene import HeightMap

TILE = 50  # vertices a side of the tiles written at once (5 m at 10 per metre)
# Metres a body may travel in one env step (4 substeps, 20 ms): 50 m/s, ten times what a walking
# unimal or a pushed ball reaches; a body thrown faster than that has blown up, and a step whose
# physics went wrong ends its episode (``unstable``).
TRAVEL = 1.0


def free_body_reaches(model: mujoco.MjModel) -> tuple[np.ndarray, np.ndarray]:
    """(qpos addresses ``[M]`` of the free joints, the reach ``[M]`` in metres of each free body's geoms
    from its origin, whatever its other joints do: the module docstring's bound)."""
    free = np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
    bodies = model.jnt_bodyid[free]
    own = np.zeros(model.nbody)  # each body's farthest origin from its parent's, over its joints' turns
    for body in range(1, model.nbody):
        joints = range(model.body_jntadr[body], model.body_jntadr[body] + model.body_jntnum[body])
        own[body] = np.linalg.norm(model.body_pos[body]) + sum(2 * np.linalg.norm(model.jnt_pos[j]) for j in joints)
    reaches = np.zeros(len(free))
    for k, root in enumerate(bodies.tolist()):
        for geom in range(model.ngeom):
            body = int(model.geom_bodyid[geom])
            if model.body_rootid[body] != root:
                continue
            reach = np.linalg.norm(model.geom_pos[geom]) + model.geom_rbound[geom] + model.geom_margin[geom]
            while body != root:
                reach += own[body]
                body = int(model.body_parentid[body])
            reaches[k] = max(reaches[k], reach)
    return model.jnt_qposadr[free].astype(np.intp), reaches


class LazyTerrain:
    """Which tiles of each env's map hold the episode's plan, and the writes that keep them ahead of the
    bodies (module docstring).

    Args:
        heights: the envs' height maps (one per env, NumPy).
        write: ``write(env, r0, r1, c0, c1)`` writes env ``env``'s plan into its map and height-field data
            over rows ``[r0, r1)`` and columns ``[c0, c1)`` (cells there hold 0 before).
        flatten: ``flatten(env, r0, r1, c0, c1)`` sets them back to 0 in both.
        patch_cells: the height-field observation's reach around the head's vertex (0 if not observed).
        highest: ``highest(env, r0, r1, c0, c1)``, the plan's highest height over those cells where it is not
            flat (-inf if nowhere), read from the plan without writing it; None: a host read writes the
            tiles it reads first.
    """

    def __init__(self, heights: HeightMap, write: Callable[[int, int, int, int, int], None],
                 flatten: Callable[[int, int, int, int, int], None], patch_cells: int,
                 highest: Callable[[int, int, int, int, int], float] | None = None):
        self._heights, self._write, self._flatten, self._highest = heights, write, flatten, highest
        self._extent = extent = heights.extent
        self._shape = extent.shape
        tiles = tuple(-(-n // TILE) for n in self._shape)
        self.written = np.zeros((len(heights.padded), *tiles), dtype=bool)
        self._padded = np.zeros_like(self.written)  # tiles whose padding beyond the grid is written: once, it stays
        self._cells_written: list[list[tuple[int, int, int, int]]] = [[] for _ in self.written]  # per env, per write
        self._patch = (patch_cells + 1) / extent.divs
        self.whole = False
        self._started: set[int] = set()  # drawn whole, the envs whose episode started since the last cover
        heights.reveal = self.reveal

    def bind(self, model: mujoco.MjModel, head_qpos: int) -> None:
        """Finds the free bodies and their reaches (the head's covers the height patch)."""
        adr, reaches = free_body_reaches(model)
        reaches += 1 / self._extent.divs
        reaches[adr == head_qpos] = np.maximum(reaches[adr == head_qpos], self._patch)
        self._xy: np.ndarray | slice = np.stack([adr, adr + 1], axis=1).ravel()
        self.adr = adr
        if len(adr) == 1:  # the agent alone: a view, no gather
            self._xy = slice(int(adr[0]), int(adr[0]) + 2)
        self._reach = reaches
        envs = len(self.written)
        # where each body (x, y) may stand without new tiles: its written rectangle shrunk by its reach and
        # TRAVEL (metres; empty until the episode's first cover)
        self._lo = np.full((envs, len(adr), 2), np.inf)
        self._hi = np.full((envs, len(adr), 2), -np.inf)

    def clear(self, env: int) -> None:
        """Env ``env``'s tiles written back to 0, nothing written (before its arena replaces the plan that
        ``flatten`` may read)."""
        done = self._cells_written[env]
        if done:
            for cells in done:
                self._flatten(env, *cells)
            done.clear()
            self.written[env].fill(False)

    def start(self, env: int) -> None:
        """A new episode in env ``env`` (its plan drawn): the last one's tiles back to 0 if not yet
        (``clear``), nothing written yet (the episode's first ``cover`` writes, after every draw of the reset:
        a task's own, ``overlay``'s, come after the arena's)."""
        self.clear(env)
        self._lo[env], self._hi[env] = np.inf, -np.inf
        if self.whole:
            self._started.add(env)

    def draw_whole(self) -> None:
        """Every env's whole plan written, now and at every episode's first ``cover`` (a renderer shows all of it;
        on a device, where the bodies' places stay there, ``derl.envs.arenas.Arena.bind_step`` sets it)."""
        self.whole = True
        self._started.update(range(len(self.written)))
        self.cover(None)

    def reveal(self, env: int, r0: int, r1: int, c0: int, c1: int) -> float | None:
        """Before a host read of env ``env``'s map over rows ``[r0, r1)`` and columns ``[c0, c1)`` (the grid's
        vertices; the padding beyond never changes): the plan's highest height there where the arena reads
        its plan (the cells not written hold 0 in the map), else None once those tiles are written (drawn
        whole, the map is read as it is)."""
        if self._highest is None or self.whole:
            self.ensure(env, r0, r1, c0, c1)
            return None
        rows, cols = self._shape
        return self._highest(env, max(r0, 0), min(r1, rows), max(c0, 0), min(c1, cols))

    def ensure(self, env: int, r0: int, r1: int, c0: int, c1: int) -> tuple[int, int, int, int]:
        """Writes the tiles of env ``env`` over rows ``[r0, r1)`` and columns ``[c0, c1)`` (clipped onto the
        grid) that are not yet; returns the tile range ``(tr0, tr1, tc0, tc1)``."""
        rows, cols = self._shape
        r0, r1, c0, c1 = max(r0, 0), min(r1, rows), max(c0, 0), min(c1, cols)
        tr0, tr1, tc0, tc1 = r0 // TILE, -(-r1 // TILE), c0 // TILE, -(-c1 // TILE)
        tiles = self.written[env, tr0:tr1, tc0:tc1]
        if not tiles.all():
            done = self._cells_written[env]
            for t0, t1, a, b in _rectangles(~tiles):
                cells = self._cells(tr0 + t0, tr0 + t1, tc0 + a, tc0 + b)
                self._write(env, *cells)
                if cells[0] == 0 or cells[2] == 0 or cells[1] == rows or cells[3] == cols:  # on the grid's edge
                    padded = self._padded[env, tr0 + t0:tr0 + t1, tc0 + a:tc0 + b]
                    if not padded.all():
                        self._heights.pad_beyond(env, *cells)  # the padding beyond those tiles
                        padded[:] = True
                done.append(cells)
            tiles[:] = True
        return tr0, tr1, tc0, tc1

    def cover(self, qpos: np.ndarray | None, envs: np.ndarray | None = None) -> None:
        """Writes the tiles that the free bodies of the envs ``envs`` (host indices; None: every env) can
        reach in the next step, where a body came within ``TRAVEL`` of its written rectangle's edge; drawn
        ``whole``, the whole plan of the episodes started since the last call (``qpos`` is not read)."""
        if self.whole:
            for env in sorted(self._started):
                self.ensure(env, 0, self._shape[0], 0, self._shape[1])
            self._started.clear()
            return
        assert qpos is not None  # None only drawn whole
        xy = qpos[:, self._xy].reshape(len(qpos), -1, 2)
        lo, hi = self._lo, self._hi
        if envs is not None:
            xy, lo, hi = xy[envs], lo[envs], hi[envs]
        near = (xy < lo) | (xy > hi)
        if not near.any():  # almost every step
            return
        moved = np.flatnonzero(near.any(axis=(1, 2)))
        for k in moved.tolist():  # rare: an episode's start, and a body every few metres
            self._extend(int(k if envs is None else envs[k]), xy[k], near[k].any(axis=1))

    def _extend(self, env: int, xy: np.ndarray, bodies: np.ndarray) -> None:
        """Writes the tiles around the ``bodies`` (a mask) of env ``env`` at ``xy`` ``[M, 2]`` and records the
        written rectangle (whole tiles) of each; a body at a non-finite place (an unstable step) is left."""
        extent, divs, (rows, cols) = self._extent, self._extent.divs, self._shape
        for body in np.flatnonzero(bodies).tolist():
            (x, y), need = xy[body], self._reach[body] + TRAVEL
            if not math.isfinite(x + y):
                continue
            # onto the grid: a body beyond its edge (a prop thrown off the map) keeps the edge's tiles
            c0, c1 = (min(max(c, 0), cols - 1) for c in (math.floor((x - need - extent.x_min) * divs),
                                                         math.ceil((x + need - extent.x_min) * divs)))
            r0, r1 = (min(max(r, 0), rows - 1) for r in (math.floor((y - need + extent.half_width) * divs),
                                                         math.ceil((y + need + extent.half_width) * divs)))
            tr0, tr1, tc0, tc1 = self.ensure(env, r0, r1 + 1, c0, c1 + 1)
            # between the first and last written vertex, less the reach; past the grid's edge the padding
            # never changes
            self._lo[env, body] = (extent.x_min + tc0 * TILE / divs + need if tc0 else -np.inf,
                                   -extent.half_width + tr0 * TILE / divs + need if tr0 else -np.inf)
            self._hi[env, body] = (extent.x_min + (tc1 * TILE - 1) / divs - need if tc1 * TILE < cols else np.inf,
                                   -extent.half_width + (tr1 * TILE - 1) / divs - need if tr1 * TILE < rows
                                   else np.inf)

    def _cells(self, tr0: int, tr1: int, tc0: int, tc1: int) -> tuple[int, int, int, int]:
        rows, cols = self._shape
        return tr0 * TILE, min(tr1 * TILE, rows), tc0 * TILE, min(tc1 * TILE, cols)


def _rectangles(mask: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Rectangles ``(first row, end row, first column, end column)`` covering the set cells of a small 2-D mask
    (the tiles of one write: a few): the runs of each row, a run merged with the one above where both span
    the same columns (a body's first write is a block of tiles: one write, not one per tile row). Plain
    Python costs less than NumPy's calls there."""
    rectangles: list[list[int]] = []
    above: dict[tuple[int, int], list[int]] = {}  # the rectangles ending on the row above, by their columns
    for row, cells in enumerate(mask.tolist()):
        ending: dict[tuple[int, int], list[int]] = {}
        end = -1
        for col, cell in enumerate(cells):
            if cell and col > end:
                end = col
                while end < len(cells) and cells[end]:
                    end += 1
                rectangle = above.get((col, end))
                if rectangle is None:
                    rectangle = [row, row + 1, col, end]
                    rectangles.append(rectangle)
                rectangle[1] = row + 1
                ending[col, end] = rectangle
        above = ending
    return [(r0, r1, c0, c1) for r0, r1, c0, c1 in rectangles]
