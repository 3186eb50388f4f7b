"""What the benchmarks run on, chosen in one place: the tasks by bench name, the seeded bodies, the cases.

A task is named as ``bench env`` names it (``env_configs``: the evolution presets ft, vt, mvt of
``derl.paths.EVO_PRESETS`` and every ``configs/eval`` task) or by its config file (``task_config``).
A body is ``random_genome`` of a seed under the task's config (``seeded_genome``; ``FT_GENOME_SEED``
is the FT benchmark body of ``bench ppo``, ``ab``, ``learner`` and ``ddp``), a given MJCF, or genome
files: a folder's (``genome_files``) or sampled as ``tools/morphology.py sample`` samples them.
"""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np

from derl.checked_config import load_config
from derl.config import ConfigError
from derl.envs.config import WorldCfg
from derl.envs.tasks import make_task
from derl.envs.world import compile_world
from derl.morphology import Genome, random_genome, to_mjcf
from derl.morphology.config import UnimalCfg
from derl.morphology.files import sample
from derl.paths import EVAL_PRESETS, evo_preset

FT_GENOME_SEED = 0


def env_configs() -> dict[str, Path]:
    """Bench names: the evolution presets (ft, vt, mvt) and every ``configs/eval`` task."""
    names = {name: evo_preset(name) for name in ("ft", "vt", "mvt")}
    names.update({path.stem: path for path in sorted(EVAL_PRESETS.glob("*.yml"))})
    return names


def task_config(name: str) -> Path | None:
    """The config file of a unimal case ``name`` (a bench name or a .yml file), None for a Gymnasium id."""
    known = env_configs()
    if name in known:
        return known[name]
    if name.endswith((".yml", ".yaml")):
        path = Path(name)
        if not path.is_file():
            raise SystemExit(f"error: bench ppo: task config {name} not found")
        return path.resolve()
    return None


def seeded_genome(unimal: UnimalCfg, seed: int) -> Genome:
    """``random_genome`` of ``seed`` under ``unimal`` (id ``bench-<seed>``)."""
    return random_genome(unimal, np.random.default_rng(seed), f"bench-{seed}")


def seeded_body(unimal: UnimalCfg, seed: int, path: Path) -> Genome:
    """``seeded_genome`` with its MJCF written to ``path``."""
    genome = seeded_genome(unimal, seed)
    path.write_text(to_mjcf(genome, unimal))
    return genome


def unimal_case(config: Path, xml: Path | None, genome_seed: int, folder: Path) -> dict:
    """The task of ``config`` on the unimal ``xml``, or on the body of ``genome_seed`` under that config
    (its MJCF written to ``folder``)."""
    case = {"kind": "unimal", "config": str(config)}
    if xml is not None:
        return {**case, "xml": str(xml.resolve()), "genome": None}
    try:
        cfg = load_config(config)
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
    path = folder / f"{config.stem}-bench-{genome_seed}.xml"
    genome = seeded_body(cfg.unimal, genome_seed, path)
    return {**case, "xml": str(path), "genome": f"random_genome seed {genome_seed}", "num_limbs": genome.num_limbs}


def ft_xml(folder: Path) -> Path:
    """The MJCF of the FT benchmark body (``FT_GENOME_SEED`` under ``ft.yml``), written to ``folder``."""
    path = folder / f"bench-{FT_GENOME_SEED}.xml"
    seeded_body(load_config(evo_preset("ft")).unimal, FT_GENOME_SEED, path)
    return path


def world_model(genome: Genome, world: WorldCfg) -> mujoco.MjModel:
    """The compiled world of ``genome`` in ``world``'s task, as an env builds it."""
    return compile_world(to_mjcf(genome, world), world, make_task(world))


def ft_model(seed: int) -> tuple[mujoco.MjModel, dict]:
    """The FT world of the body of ``seed`` and a description of that body."""
    cfg = load_config(evo_preset("ft"))
    genome = seeded_genome(cfg.unimal, seed)
    model = world_model(genome, cfg.world)
    return model, {"seed": seed, "num_limbs": genome.num_limbs, "nv": model.nv, "nu": model.nu, "ngeom": model.ngeom}


def morphology_seeds(text: str | None, first: int, count: int) -> list[int]:
    """``--seeds`` (comma-separated), else ``count`` seeds from ``first``."""
    if text is None:
        return list(range(first, first + count))
    try:
        seeds = [int(seed) for seed in text.split(",") if seed.strip()]
    except ValueError:
        raise SystemExit(f"error: --seeds takes comma-separated integers, got {text!r}") from None
    if not seeds:
        raise SystemExit("error: --seeds names no seed")
    return seeds


def genome_files(folder: Path) -> list[Path]:
    """A folder's genome JSON files (a run's ``genomes/``), in the order of their names."""
    return sorted(folder.glob("*.json"))


def sampled_in_turns(unimal: UnimalCfg, num: int, seed: int, mutations: list[int], folder: Path) -> list[Path]:
    """``num`` sampled genomes taking the ``mutations`` counts in turn, one ``sample`` chain per count
    (seed ``seed + turn``), interleaved: small and large bodies alternate from the first."""
    chains = []
    for turn, count in enumerate(mutations):
        chain_length = len(range(turn, num, len(mutations)))
        if chain_length:
            chains.append(sample(unimal, chain_length, seed + turn, folder / f"m{count}", count))
    return [chain[index] for index in range(len(chains[0])) for chain in chains if index < len(chain)]
