"""Preparing a search's ``OUT_DIR`` before its workers start: node 0 draws the initial population
(``EVO.INIT_POPULATION_SIZE`` genomes and their MJCF, marked done in ``init_population.json``); the
other nodes wait for it. Each node beats ``nodes/<node>-<token>.preparing`` meanwhile (``preparing``),
so that ``tools/status.py`` can tell a node at work from a run nobody runs."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from derl.checked_config import EvoCfg
from derl.evolution.backend import Backend
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.lease import Heartbeat, heartbeat_interval
from derl.evolution.node_size import usable_cores
from derl.evolution.population import num_initial_slots, slot_id
from derl.evolution.process import log
from derl.morphology.config import UnimalCfg

INIT_POLL_SECONDS = 1.0


def prepare_run(evo: EvoCfg, unimal: UnimalCfg, run: RunDir, backend: Backend, *, node: int, rng_seed: int) -> None:
    """Node 0 writes the initial population (drawn from ``unimal`` with seed ``rng_seed``, the run's
    ``RNG_SEED``); other nodes wait for it."""
    if node != 0:
        _wait_for_initial_population(evo, node, run)
        return
    if run.init_population_ids() is not None:
        return
    ids = [slot_id(slot) for slot in range(num_initial_slots(evo))]
    log(f"building the initial population ({len(ids)} morphologies, {10 * len(ids)} candidates)")
    genomes = backend.initial_population(unimal, rng_seed, ids, num_workers=usable_cores())
    for morphology_id, files in zip(ids, genomes, strict=True):
        if not run.genomes.has_genome(morphology_id):  # init_population.json lost, genomes kept: never rewrite one
            run.genomes.write_genome(morphology_id, files.genome_json, files.mjcf)
    run.mark_init_population(ids)


@contextlib.contextmanager
def preparing(run: RunDir, node: int, lease_seconds: float) -> Iterator[None]:
    """Beats ``nodes/<node>-<token>.preparing`` while the body prepares the run, and removes it after.

    ``tools/status.py`` then tells a node drawing (or waiting for) the initial population from a run
    nobody runs; a beat older than ``lease_seconds`` (a node killed meanwhile) counts for nothing.
    """
    heartbeat = Heartbeat(lambda: run.workers.beat_preparing(node), heartbeat_interval(lease_seconds)).start()
    try:
        yield
    finally:
        heartbeat.stop()
        with contextlib.suppress(OSError):  # left behind, it goes stale: never worth the node's error
            run.workers.end_preparing(node)


def _wait_for_initial_population(evo: EvoCfg, node: int, run: RunDir) -> None:
    deadline = time.monotonic() + evo.INIT_WAIT_TIMEOUT
    if run.init_population_ids() is None:
        log(f"node {node}: waiting for node 0 to write the initial population in {run.root} "
            f"(timeout EVO.INIT_WAIT_TIMEOUT={evo.INIT_WAIT_TIMEOUT} s)")
    while run.init_population_ids() is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no initial population from node 0 in {run.root} after "
                               f"{evo.INIT_WAIT_TIMEOUT} s; is node 0 running with the same OUT_DIR?")
        time.sleep(INIT_POLL_SECONDS)
