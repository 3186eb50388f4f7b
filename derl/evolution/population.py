"""Slot arithmetic: morphology ids, seed streams and the split of the initial population.

The search is a sequence of ``SEARCH_SPACE_SIZE`` *slots*. Slot ``n`` is owned by
the one worker that created its claim file (exclusive creation), so everything
derived from ``(slot, attempt)`` is unique across nodes and workers without
clocks: the id, the random stream of the tournament and mutation, the PPO seed.
Slots ``0 .. INIT_POPULATION_SIZE-1`` hold the initial population (slot ``i`` is
initial genome ``i``); later slots hold tournament children. In random search
(``EVO.IS_EVO false``, DERL's baseline) every slot holds a member of one initial
population of ``SEARCH_SPACE_SIZE``. ``attempt`` counts the replacements of a
morphology that failed in that slot.
"""

from __future__ import annotations

import math
import re

import numpy as np

from derl.checked_config import EvoCfg

# A morphology id: the slot (6 digits or more), then ``-attempt`` for a replacement; nothing else.
ID_PATTERN = re.compile(r"(\d{6,})(?:-(\d+))?")


def slot_id(slot: int, attempt: int = 0) -> str:
    """The morphology id of ``(slot, attempt)``: ``000042`` or ``000042-1`` for a replacement."""
    if slot < 0 or attempt < 0:
        raise ValueError(f"slot and attempt must be non-negative, got {slot}, {attempt}")
    return f"{slot:06d}" if attempt == 0 else f"{slot:06d}-{attempt}"


def parse_id(morphology_id: str) -> tuple[int, int]:
    """Inverse of ``slot_id``: ``(slot, attempt)``."""
    match = ID_PATTERN.fullmatch(morphology_id) if isinstance(morphology_id, str) else None
    if match is None:
        raise ValueError(f"not a morphology id: {morphology_id!r}")
    return int(match.group(1)), int(match.group(2) or 0)


def num_initial_slots(evo: EvoCfg) -> int:
    """Slots filled from the initial population: ``INIT_POPULATION_SIZE``, or every slot in random search.

    Random search (``EVO.IS_EVO false``) draws all ``SEARCH_SPACE_SIZE`` morphologies like the
    initial population (10x random candidates through the species filter) and runs no tournament.
    """
    return evo.INIT_POPULATION_SIZE if evo.IS_EVO else evo.SEARCH_SPACE_SIZE


# What a search is, as ``summary.json`` names it (``search_kind``): ``EVO.IS_EVO`` true, false.
SEARCH_KINDS = ("evolution", "random search")


def search_kind(evo: EvoCfg) -> str:
    """``evolution``, or ``random search`` with ``EVO.IS_EVO false`` (DERL's baseline)."""
    return SEARCH_KINDS[0] if evo.IS_EVO else SEARCH_KINDS[1]


def search_text(evo: EvoCfg) -> str:
    """The search in one line, as ``tools/status.py``, the report and the coordinator's log show it.

    Random search has no tournament, window or mutation: its line names none of them, so a baseline
    is never read as an evolution.
    """
    criteria = ", ".join(evo.SELECTION_CRITERIA)
    if not evo.IS_EVO:
        return (f"random search (EVO.IS_EVO false): {evo.SEARCH_SPACE_SIZE} morphologies drawn like an initial "
                f"population, no tournament, no mutation; ranked on {criteria}")
    window = f"window {evo.AGING_WINDOW_SIZE}, " if evo.TOURNAMENT_TYPE.startswith("aging") else ""
    return (f"evolution: {evo.TOURNAMENT_TYPE} tournaments on {criteria} "
            f"({window}initial population {evo.INIT_POPULATION_SIZE})")


def slot_rng(rng_seed: int, slot: int, attempt: int) -> np.random.Generator:
    """The generator of tournament and mutation draws for ``(slot, attempt)``.

    One independent stream per slot: workers and nodes never share a stream, a
    restarted worker never replays the draws of an earlier slot, and a slot's
    draws are reproducible from ``RNG_SEED``.
    """
    return np.random.default_rng(np.random.SeedSequence(rng_seed, spawn_key=(slot, attempt, 0)))


def ppo_seed(rng_seed: int, slot: int, attempt: int) -> int:
    """The PPO (and env) seed of ``(slot, attempt)``: distinct per morphology
    (docs/design/differences.md: one PPO seed per morphology)."""
    state = np.random.SeedSequence(rng_seed, spawn_key=(slot, attempt, 1)).generate_state(1)
    return int(state[0] >> 1)  # < 2**31: fits every seed API, leaves room for seed + env index


def init_share(size: int, num_nodes: int, node: int, num_workers: int, worker: int) -> range:
    """The initial-population slots worker ``worker`` of node ``node`` trains first.

    The population is cut into ``num_nodes`` contiguous chunks (sizes rounded
    up), each chunk into ``num_workers`` pieces. Exclusive claims, not this
    split, guarantee that nobody trains a slot twice; the split only spreads
    the work so that claims rarely contend.
    """
    if not 0 <= node < num_nodes or not 0 <= worker < num_workers:
        raise ValueError(f"node {node}/{num_nodes} or worker {worker}/{num_workers} out of range")
    per_node = math.ceil(size / num_nodes)
    node_start = min(size, node * per_node)
    node_stop = min(size, node_start + per_node)
    per_worker = math.ceil((node_stop - node_start) / num_workers)
    start = min(node_stop, node_start + worker * per_worker)
    return range(start, min(node_stop, start + per_worker))


def init_claim_order(size: int, num_nodes: int, node: int, num_workers: int, worker: int) -> list[int]:
    """Own share first, then every other initial slot (to finish what others have not claimed)."""
    own = init_share(size, num_nodes, node, num_workers, worker)
    return list(own) + [slot for slot in range(size) if slot not in own]
