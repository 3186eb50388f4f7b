"""The whole config tree (``Config``) and its loader: the sections of every package, checked together.

Each package declares and checks its own sections (``derl.morphology.config``, ``derl.envs.config``,
``derl.ppo.config``); this module, the floor above them and below the programs that run a config
(training, evolution, analysis, evaluation, the tools), puts them together with the search's own
section (``EVO``: the worker that reads it loads the whole tree, so it is declared here, below
``derl.evolution``) and the run-wide keys, and holds what needs several sections at once.

``load_config`` checks every tree it loads, so a typo in a selection criterion, a tournament type,
a mutation op, a device name or a range (``GAMMA nan``, a negative learning rate) stops
``evo_single_proc.py``, ``tools/train_ppo.py`` and every worker at start-up in one line, instead of
after the initial population has trained.

``this_node=True`` adds what depends on the machine: ``DEVICE`` must exist here, and
``SIM.BACKEND warp`` needs the packages of ``requirements-gpu.txt``. Readers of a finished run
(reports, status) leave it off, so a GPU run's config still loads on a laptop.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from derl.config import (
    AMOUNT,
    INT32_MAX,
    RETIRED_KEYS,
    ConfigError,
    Range,
    Section,
    derived_keys,
    key,
    parse_config,
    section,
)
from derl.envs.array_sizes import check_patch, patch_values, world_arrays
from derl.envs.checks import check_world
from derl.envs.config import EnvCfg, HfieldCfg, ObjectCfg, SimCfg, TerrainCfg, VecenvCfg, WorldCfg
from derl.envs.warp_check import check_backend_here, check_warp_cuda_here
from derl.fileio.reads import parse_override, read_yaml
from derl.morphology.config import BodyCfg, LimbCfg, TorsoCfg, UnimalCfg, XmlCfg
from derl.morphology.mutations import OPERATORS
from derl.paths import EVO_PRESETS, evo_preset
from derl.ppo.config import ModelCfg, PpoCfg, TrainerCfg, gib, rollout_bytes

# The values EVO.TOURNAMENT_TYPE may take: derl.evolution.selection implements them.
TOURNAMENT_TYPES = ("aging_num", "aging_percent", "vanilla_num", "vanilla_percent")
DEVICE_PATTERN = re.compile(r"cpu|auto|cuda(:\d+)?")
# Upper bounds of the search, far above DERL's (4,000 morphologies, 16 nodes of 18 workers).
MORPHOLOGIES = Range(1, 10**6)
MAX_NODES = 10_000
DAY = 86_400
# A worker beats every min(30 s, EVO.LEASE_SECONDS / BEATS_PER_LEASE) (``derl.evolution.lease.heartbeat_interval``;
# a test keeps the two equal), so a lease spans at least that many beats. Beats closer than MIN_HEARTBEAT_SECONDS
# are within a loaded node's scheduling delays and coarse file times: an owner at work looks silent, and two
# workers take a slot from each other without end (EVO.LEASE_SECONDS 0.001 did, 80 times in 150 s).
BEATS_PER_LEASE = 4
MIN_HEARTBEAT_SECONDS = 0.5
LEASE = Range(BEATS_PER_LEASE * MIN_HEARTBEAT_SECONDS, 7 * DAY)


@dataclass(frozen=True)
class EvoCfg(Section):
    """The search: its size, tournament, mutations and selection criteria."""

    IS_EVO: bool = key(True, "false: random search, DERL's baseline (every slot drawn like the initial "
                             "population, no tournament)")
    NUM_PROCESSES: int = key(0, "workers on this node; 0 = as many as its cores and free memory hold",
                             Range(0, 1024))
    INIT_POPULATION_SIZE: int = key(576, "initial population (from 10x as many candidates, look-alikes removed)",
                                    MORPHOLOGIES)
    INIT_WAIT_TIMEOUT: int = key(86400, "seconds other nodes wait for node 0's initial population",
                                 Range(0, 30 * DAY))
    # Keep it well above NFS attribute caching (60 s).
    LEASE_SECONDS: float = key(600.0, "a slot whose owner's heartbeat is older than this is taken over; "
                                      "a node whose worker keeps failing this long stops",
                               LEASE)
    SEARCH_SPACE_SIZE: int = key(4000, "morphologies trained in all, initial population included", MORPHOLOGIES)
    TOURNAMENT_TYPE: str = key("aging_num", "`aging_num`, `aging_percent`, `vanilla_num` or `vanilla_percent`",
                               choices=TOURNAMENT_TYPES)
    AGING_WINDOW_SIZE: int = key(576, "the aging window: newest published morphologies a tournament draws from",
                                 MORPHOLOGIES)
    NUM_PARTICIPANTS: int = key(4, "morphologies per tournament (`*_num`)", MORPHOLOGIES)
    PERCENT_PARTICIPANTS: int = key(5, "morphologies per tournament, percent of the pool (`*_percent`)",
                                    Range(1, 100))
    MUTATION_OPS: tuple[str, ...] = key(["grow_limb", "joint_angle", "limb_params", "dof", "density", "gear",
                                         "delete_limb"], "mutation operators drawn from", choices=tuple(OPERATORS))
    SELECTION_CRITERIA: tuple[str, ...] = key(["__reward__forward", "__reward__stand"],
                                              "the selection criterion: published fields compared (Pareto front); "
                                              "the first is the fitness shown by status and report")
    SELECTION_CRITERIA_OBJ: tuple[int, ...] = key([-1, -1], "one per criterion: -1 maximise, +1 minimise",
                                                Range(-1, 1, whole=True))
    VIDEOS_LAST_N: int = key(0, "record a policy video of each of the last N slots into `videos/`",
                             Range(0, MORPHOLOGIES.high))

    def check(self) -> None:
        if self.IS_EVO and self.INIT_POPULATION_SIZE > self.SEARCH_SPACE_SIZE:
            raise ConfigError(f"config key EVO.INIT_POPULATION_SIZE ({self.INIT_POPULATION_SIZE}) must not exceed "
                              f"EVO.SEARCH_SPACE_SIZE ({self.SEARCH_SPACE_SIZE})", "EVO.INIT_POPULATION_SIZE",
                              "EVO.SEARCH_SPACE_SIZE")
        if not self.MUTATION_OPS:
            raise ConfigError("config key EVO.MUTATION_OPS is empty", "EVO.MUTATION_OPS")
        if "grow_limb" not in self.MUTATION_OPS:
            raise ConfigError("config key EVO.MUTATION_OPS must include grow_limb (random genomes grow from a "
                              "torso)", "EVO.MUTATION_OPS")
        criteria, objectives = self.SELECTION_CRITERIA, self.SELECTION_CRITERIA_OBJ
        if not criteria or len(set(criteria)) != len(criteria):
            raise ConfigError(f"config key EVO.SELECTION_CRITERIA must name distinct criteria, got {list(criteria)}",
                              "EVO.SELECTION_CRITERIA")
        if len(objectives) != len(criteria):
            raise ConfigError(f"config key EVO.SELECTION_CRITERIA_OBJ has {len(objectives)} values for "
                              f"{len(criteria)} EVO.SELECTION_CRITERIA; give one per criterion",
                              "EVO.SELECTION_CRITERIA_OBJ", "EVO.SELECTION_CRITERIA")
        if any(obj not in (-1, 1) for obj in objectives):
            raise ConfigError(f"config key EVO.SELECTION_CRITERIA_OBJ must hold -1 (maximise) or 1 (minimise), "
                              f"got {list(objectives)}", "EVO.SELECTION_CRITERIA_OBJ")


@dataclass(frozen=True)
class TensorboardCfg(Section):
    ENABLED: bool = key(True, "TensorBoard event files of trainings, evaluation cells and the search (node 0)")
    PER_MORPHOLOGY: bool = key(False, "evolution only: each morphology's training curves too "
                                      "(`OUT_DIR/tensorboard/morphologies/`)")


@dataclass(frozen=True)
class Config(Section):
    """The whole tree, in DERL's key names: what entry points load and hand on in sections."""

    XML: XmlCfg = section(XmlCfg)
    BODY: BodyCfg = section(BodyCfg)
    TORSO: TorsoCfg = section(TorsoCfg)
    LIMB: LimbCfg = section(LimbCfg)
    ENV: EnvCfg = section(EnvCfg)
    TERRAIN: TerrainCfg = section(TerrainCfg)
    OBJECT: ObjectCfg = section(ObjectCfg)
    HFIELD: HfieldCfg = section(HfieldCfg)
    PPO: PpoCfg = section(PpoCfg)
    MODEL: ModelCfg = section(ModelCfg)
    SIM: SimCfg = section(SimCfg)
    VECENV: VecenvCfg = section(VecenvCfg)
    EVO: EvoCfg = section(EvoCfg)
    TENSORBOARD: TensorboardCfg = section(TensorboardCfg)
    OUT_DIR: str = key("output/default", "the (shared) output folder")
    # Seeds: numpy, torch and gymnasium take it, and seed + env index + env steps stays below 2**32.
    RNG_SEED: int = key(1, "root of every random stream", Range(0, INT32_MAX))
    DEVICE: str = key("cpu", "learner (and `warp` envs) device: `cpu`, `cuda`, `cuda:N`, `auto`")
    TORCH_THREADS: int = key(1, "threads of torch and of every BLAS/OpenMP pool in a process", Range(1, 1024))
    CHECKPOINT_PERIOD: int = key(100, "PPO iterations between checkpoints (0: none)", AMOUNT)
    NODE_ID: int = key(0, "this node, 0 .. NUM_NODES - 1", Range(0, MAX_NODES - 1))
    NUM_NODES: int = key(1, "nodes sharing `OUT_DIR`", Range(1, MAX_NODES))

    def check(self) -> None:
        if not DEVICE_PATTERN.fullmatch(self.DEVICE):
            raise ConfigError(f"config key DEVICE must be cpu, cuda, cuda:N or auto, got {self.DEVICE!r}", "DEVICE")
        if not self.NODE_ID < self.NUM_NODES:
            raise ConfigError(f"config key NODE_ID {self.NODE_ID} is out of range for NUM_NODES {self.NUM_NODES}",
                              "NODE_ID", "NUM_NODES")

    @property
    def world(self) -> WorldCfg:
        """The sections the world (``derl.envs``) reads."""
        return WorldCfg(self.XML, self.BODY, self.ENV, self.TERRAIN, self.OBJECT, self.HFIELD, self.SIM, self.VECENV,
                        self.RNG_SEED)

    @property
    def unimal(self) -> UnimalCfg:
        """The sections a body (``derl.morphology``) is drawn from, mutated and built with."""
        return UnimalCfg(self.XML, self.BODY, self.TORSO, self.LIMB, self.EVO.MUTATION_OPS)

    @property
    def trainer(self) -> TrainerCfg:
        """What the learner (``derl.ppo.train``) reads."""
        return TrainerCfg(self.PPO, self.MODEL, self.DEVICE, self.TORCH_THREADS, self.CHECKPOINT_PERIOD)


# Keys computed from others; setting them by hand is an error.
DERIVED_KEYS = derived_keys(Config)

# Keys that say how one node runs, not what the search is: they may differ between the nodes of a
# search and between runs of one node. Every other key of a node must equal OUT_DIR/config.yaml
# (derl.evolution.search_config); a node's workers run its config, config.yaml plus these.
NODE_LOCAL_KEYS = (
    "NODE_ID", "OUT_DIR", "DEVICE", "TORCH_THREADS", "EVO.NUM_PROCESSES", "EVO.INIT_WAIT_TIMEOUT",
    "VECENV.THREADS", "CHECKPOINT_PERIOD", "TENSORBOARD.ENABLED", "TENSORBOARD.PER_MORPHOLOGY",
)


def load_config(
    cfg_file: str | Path | Sequence[str | Path] | None = None,
    overrides: Sequence[str] | Mapping[str, Any] = (),
    this_node: bool = False,
    retired: frozenset[str] = frozenset(),
    read_back: bool = False,
) -> Config:
    """Loads the defaults, then ``cfg_file``, then ``overrides``; returns the frozen, checked tree.

    Args:
        cfg_file: optional YAML file with a (partial) tree of keys, or several applied in order
            (a task preset, then ``configs/gpu_server.yml``).
        overrides: ``["KEY", "VALUE", ...]`` strings from the command line (values parsed
            as YAML), or a mapping of keys to already-typed values.
        this_node: the config will train here: also check that ``DEVICE`` exists on this machine.
        retired: keys skipped where a file sets them (``load_run_config``).
        read_back: ``cfg_file`` is a file derl wrote and reads back (``load_run_config``): refused if
            it is a symbolic link. Every file (a user's may be a link) and every override value is read
            by ``derl.fileio.reads`` (``read_yaml``, ``parse_override``): a regular file, bounded in size,
            depth and values, without aliases (docs/guides/configuration.md#limits-of-a-config).

    Raises:
        ConfigError: unknown or ambiguous key, wrong type, derived key set, missing file, or any
            value ``check_config`` rejects (named with the file that set it).
    """
    return parse_config(Config, cfg_file, overrides, retired, check=lambda cfg: check_config(cfg, this_node),
                        read=read_yaml if read_back else _read_users_yaml, parse_value=parse_override)


def _read_users_yaml(path: Path) -> Any:
    """A user's config file: as a file derl reads back, but through a symbolic link too."""
    return read_yaml(path, follow_links=True)


def load_run_config(config_yaml: str | Path) -> Config:
    """``load_config`` of a ``config.yaml`` that derl wrote (a run's or a training's), old ones included.

    The ``RETIRED_KEYS`` an older derl dumped are dropped, so its finished runs stay readable by the
    report, status, evaluation and ``train_ppo.py --eval``; a user's own config files and the command
    line get no such leniency. The file is read back from a folder other processes write: a link or
    a FIFO there, or a file too large, too deep or with aliases, is a ``ConfigError`` naming it.
    """
    return load_config(config_yaml, retired=RETIRED_KEYS, read_back=True)


def load_preset(name: str, overrides: Sequence[str] | Mapping[str, Any] = ()) -> Config:
    """``configs/evo/<name>.yml`` (``ft``, ``vt``, ``mvt``, ``quick``, ``ft_gpu``, ``ft_warp``), then ``overrides``."""
    path = evo_preset(name)
    if not path.is_file():
        known = sorted(p.stem for p in EVO_PRESETS.glob("*.yml"))
        raise ConfigError(f"unknown preset {name!r}; known: {', '.join(known)}")
    return load_config(path, overrides)


def load_config_or_exit(cfg_file: str | Path | Sequence[str | Path] | None, overrides: Sequence[str],
                        this_node: bool = False, retired: frozenset[str] = frozenset(),
                        read_back: bool = False) -> Config:
    """``load_config`` for scripts: a bad config prints one line and exits with code 2."""
    try:
        return load_config(cfg_file, overrides, this_node, retired, read_back)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def check_config(cfg: Config, this_node: bool = False) -> None:
    """Raises ``ConfigError`` (with ``key`` set) for the first value that cannot work across sections (each
    key and section was held to its own declaration by ``derl.config.check_keys`` before).

    Args:
        this_node: also check what depends on this machine (``DEVICE`` is available, the
            ``SIM.BACKEND``'s packages are installed).
    """
    check_world(cfg.world, cfg.EVO.SELECTION_CRITERIA)
    check_patch(cfg.world)
    if this_node:
        check_arrays_fit_here(cfg)
        check_backend_here(cfg.SIM.BACKEND)
        if cfg.DEVICE not in ("cpu", "auto"):  # only a CUDA device is looked for (auto falls back to the CPU)
            from derl.ppo.device import check_device_here  # lazy: torch takes seconds; a CPU run never loads it

            check_device_here(cfg.DEVICE)
        if cfg.SIM.BACKEND == "warp" and cfg.DEVICE.startswith("cuda"):
            check_warp_cuda_here(cfg.DEVICE)


def check_arrays_fit_here(cfg: Config) -> None:
    """Raises ``ConfigError`` naming the keys if the arrays whose size ``cfg`` sets exceed this node's memory:
    the world's (``derl.envs.array_sizes``: height maps, the height-field patch's table) and, for a rollout
    on the host (``SIM.BACKEND mujoco``), even the smallest rollout (one action value and one observation
    value, plus the height-field patch's, per env step: ``ROLLOUT_LEAST_BYTES_PER_STEP`` bytes without it). A
    device's rollout is checked by ``derl.ppo.rollout.Rollout.allocate``."""
    import psutil  # lazy: as the device checks, only a config that will train here asks

    total, ppo = psutil.virtual_memory().total, cfg.PPO
    patch = patch_values(cfg.world)
    if cfg.SIM.BACKEND == "mujoco" and (need := rollout_bytes(ppo.TIMESTEPS, ppo.NUM_ENVS, 1 + patch, 1)) > total:
        per_step, patch_keys = need // (ppo.TIMESTEPS * ppo.NUM_ENVS), ""
        keys: tuple[str, ...] = ("PPO.NUM_ENVS", "PPO.TIMESTEPS")
        if patch:
            keys = ("HFIELD.OBS_SIZE", "HFIELD.NUM_DIVS", *keys)
            patch_keys = (f" with HFIELD.OBS_SIZE {list(cfg.HFIELD.OBS_SIZE)} at HFIELD.NUM_DIVS {cfg.HFIELD.NUM_DIVS} "
                          f"({patch} height-field values per env step)")
        raise ConfigError(f"config keys PPO.TIMESTEPS x PPO.NUM_ENVS ({ppo.TIMESTEPS} x {ppo.NUM_ENVS}){patch_keys} "
                          f"need at least {gib(need)} of rollout buffers ({per_step} bytes per env step); this node "
                          f"has {gib(total)} of memory", *keys)
    arrays = world_arrays(cfg.world, ppo.NUM_ENVS)
    if (need := sum(array.bytes for array in arrays)) > total:
        keys = tuple(dict.fromkeys(key for array in arrays for key in array.keys))
        parts = "; ".join(f"{array.what}: {gib(array.bytes)}" for array in arrays)
        raise ConfigError(f"config keys {', '.join(keys)} size arrays of at least {gib(need)} ({parts}); this node "
                          f"has {gib(total)} of memory", *keys)
