"""MuJoCo Warp's overflow bits by type: buffers that ran out grow, solver non-convergence is counted.

``mujoco_warp`` sets bits of ``Data.overflow`` (``mujoco_warp.OverflowType``, one int per world) when a
preallocated buffer runs out (contacts: ``SIM.NCONMAX``; constraint rows: ``SIM.NJMAX``) or when the
solver stops at its iteration limit, or when a geom pair's height-field contacts reach the cap that
MuJoCo C shares (mjMAXCONPAIR). None of them ends an episode: the broadphase and narrowphase bits
are set in every world at once (one overflow would end all of them), and a solver at its limit still
returns a usable step (MuJoCo C only warns). A world whose state turns non-finite ends its own episode
(``derl.envs.batch``). The bits are counted per type on the device, without a host read, and reported
once per morphology (``OverflowTally.report``) with the buffer sizes the next model build uses
(``grown``). No warp import: the logic is tested without it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

# mujoco_warp.OverflowType (4.0.0), checked against it in tests/envs/test_envs_warp.py.
BITS = {"NEFC": 1 << 0, "NJMAX_NNZ": 1 << 1, "BROADPHASE": 1 << 2, "NARROWPHASE": 1 << 3, "CCD": 1 << 4,
        "HFIELD": 1 << 5, "CONTACT_MATCH": 1 << 6, "NVMAX": 1 << 7, "EPA_HORIZON": 1 << 8,
        "ITERATIONS": 1 << 9, "LS_ITERATIONS": 1 << 10, "TACTILE": 1 << 11}
# Which buffer a bit says ran out: SIM.NJMAX (constraint rows), SIM.NCONMAX (contacts).
NJMAX_BITS = ("NEFC", "NJMAX_NNZ")
NCONMAX_BITS = ("BROADPHASE", "NARROWPHASE", "CCD", "EPA_HORIZON")
SOLVER_BITS = ("ITERATIONS", "LS_ITERATIONS")
# A limit both simulators share, not a buffer: a geom pair's height-field contacts beyond mjMAXCONPAIR (50)
# are dropped, by MuJoCo C silently; a larger SIM.NCONMAX would not change it.
CAPPED_BITS = ("HFIELD",)
COUNTED_BITS = SOLVER_BITS + CAPPED_BITS  # counted and reported; nothing grows
GROWTH = 2  # a buffer that ran out is this many times larger at the next model build


class Buffers(NamedTuple):
    """Preallocated contacts and constraint rows per world (``SIM.NCONMAX``, ``SIM.NJMAX``)."""

    nconmax: int
    njmax: int


def grown(buffers: Buffers, counts: dict[str, int]) -> Buffers:
    """The buffer sizes after ``counts`` (world-steps per bit name): each one that ran out, ``GROWTH`` x."""
    ran_out = {name for name, count in counts.items() if count}
    return Buffers(buffers.nconmax * (GROWTH if ran_out & set(NCONMAX_BITS) else 1),
                   buffers.njmax * (GROWTH if ran_out & set(NJMAX_BITS) else 1))


def describe(counts: dict[str, int], steps: int, buffers: Buffers) -> str | None:
    """One line on what ``counts`` (world-steps per bit name, over ``steps`` steps) say, or None if nothing."""
    buffer = [f"{name} {counts[name]}" for name in BITS if name not in COUNTED_BITS and counts.get(name)]
    solver = [f"{name} {counts[name]}" for name in SOLVER_BITS if counts.get(name)]
    capped = [f"{name} {counts[name]}" for name in CAPPED_BITS if counts.get(name)]
    if not buffer and not solver and not capped:
        return None
    parts = []
    if buffer:
        bigger = grown(buffers, counts)
        parts.append(f"buffers ran out ({', '.join(buffer)} world-steps): the next model build uses SIM.NCONMAX "
                     f"{bigger.nconmax} and SIM.NJMAX {bigger.njmax} (now {buffers.nconmax}, {buffers.njmax}); "
                     "set them in the config to keep them")
    if solver:
        parts.append(f"the solver stopped at its iteration limit ({', '.join(solver)} world-steps; not an "
                     "episode end)")
    if capped:
        parts.append(f"height-field contacts capped at 50 per geom pair ({', '.join(capped)} world-steps; "
                     "MuJoCo C caps them alike, without a warning)")
    return f"MuJoCo Warp over {steps} steps: " + "; ".join(parts)


class OverflowTally:
    """Counts, on the device, the world-steps in which each bit of ``overflow`` (``[N]`` int32) was set.

    ``add`` (after each step) counts and clears the bits, so that each step's are its own; nothing
    waits for the device until ``counts``.
    """

    def __init__(self, overflow: torch.Tensor):
        self.overflow = overflow
        self._bits = torch.tensor(list(BITS.values()), dtype=overflow.dtype, device=overflow.device)
        self._counts = torch.zeros(len(BITS), dtype=torch.int64, device=overflow.device)
        self.steps = 0

    def add(self) -> None:
        self._counts += ((self.overflow[:, None] & self._bits) != 0).sum(dim=0)
        self.overflow.zero_()
        self.steps += 1

    def counts(self) -> dict[str, int]:
        """World-steps per bit name so far (reads the device)."""
        return dict(zip(BITS, self._counts.tolist(), strict=True))
