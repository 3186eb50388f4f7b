"""What a seed of the simulated cluster does: its cluster, its search and its faults, a pure function of the seed.

``plan(seed)`` draws N nodes x M workers on one folder, a small search, each node's clock offset and a
list of faults, each fired once that many morphologies are published (``Fault.at``). The fault kinds
(``KINDS``) are the catalogue of what a shared folder and its users do to a search: signals to workers
and coordinators at random points, files planted at the ends of their names' ranges or dated in the
future, published files damaged, a full disk. ``benchmarks.cluster`` carries a plan out.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Signals: the process is chosen by the fault's node (and ``index``: a worker of that node).
SIGNALS = ("sigkill-worker", "sigterm-worker", "sigkill-coordinator", "sigterm-coordinator")
# Files planted or damaged, as a user, a disk or another node leaves them (docs/design/run-folder.md).
PLANTS = ("future-heartbeat", "publication-at-end", "lease-at-end", "damaged-genome", "damaged-model",
          "damaged-curve")
KINDS = (*SIGNALS, *PLANTS, "full-disk")
# OUT_DIR names a user may give: most plain, some with characters YAML or the shell would read.
OUT_NAMES = ("run", "run", "run", "run", "run", "run #2", "run: 2", "[run]", "run 'a'", "run, 2")


@dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` (``KINDS``) on ``node`` once ``at`` morphologies are published; ``index`` picks a
    worker or a published morphology (modulo how many there are); ``seconds`` is how long a disk stays full."""

    kind: str
    at: int
    node: int
    index: int
    seconds: float = 0.0


@dataclass(frozen=True)
class Plan:
    """A simulated search: ``nodes`` x ``workers`` on OUT_DIR ``out_name``, ``search`` morphologies (``init``
    initial), ``lease`` seconds (``EVO.LEASE_SECONDS``), slots failing at attempt 0 every ``fail_every``
    (0: none), ``train_seconds`` per training, each node's clock offset in seconds, and the faults in order."""

    seed: int
    nodes: int
    workers: int
    search: int
    init: int
    lease: float
    fail_every: int
    train_seconds: float
    clock_offsets: tuple[float, ...]
    faults: tuple[Fault, ...]
    out_name: str

    def overrides(self, out_dir: str, node: int) -> list[str]:
        """The ``KEY VALUE`` pairs of node ``node``'s ``evo_single_proc.py`` on ``configs/evo/quick.yml``."""
        return [
            "OUT_DIR", out_dir, "NODE_ID", str(node), "NUM_NODES", str(self.nodes),
            "EVO.NUM_PROCESSES", str(self.workers), "EVO.SEARCH_SPACE_SIZE", str(self.search),
            "EVO.INIT_POPULATION_SIZE", str(self.init), "EVO.AGING_WINDOW_SIZE", str(self.init),
            "EVO.NUM_PARTICIPANTS", "2", "EVO.LEASE_SECONDS", f"{self.lease:g}", "EVO.VIDEOS_LAST_N", "0",
            "TENSORBOARD.ENABLED", "false", "RNG_SEED", str(self.seed % 100_000),
        ]


def plan(seed: int, max_processes: int = 4) -> Plan:
    """The simulated search of ``seed``, with at most ``max_processes`` workers in all."""
    rng = random.Random(seed)
    nodes = rng.randint(1, 3)
    workers = rng.randint(1, max(1, min(2, max_processes // nodes)))
    search = rng.randint(8, 20)
    init = rng.randint(2, min(6, search - 2))
    faults = sorted((_fault(rng, nodes, search) for _ in range(rng.randint(0, 4))), key=lambda f: f.at)
    offsets = tuple(rng.choice((0.0, 0.0, 3600.0, -3600.0, 86400.0 * 365)) if node else 0.0 for node in range(nodes))
    return Plan(seed=seed, nodes=nodes, workers=workers, search=search, init=init, lease=rng.choice((4.0, 6.0)),
                fail_every=rng.choice((0, 0, 5, 7)), train_seconds=rng.choice((0.0, 0.05, 0.2)),
                clock_offsets=offsets, faults=tuple(faults), out_name=rng.choice(OUT_NAMES))


def _fault(rng: random.Random, nodes: int, search: int) -> Fault:
    kind = rng.choice(KINDS)
    return Fault(kind=kind, at=rng.randint(1, search - 2), node=rng.randrange(nodes), index=rng.randrange(1000),
                 seconds=rng.choice((0.5, 2.0)) if kind == "full-disk" else 0.0)
