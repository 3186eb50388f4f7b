"""Loading a config: ``derl.config`` parses it, this module checks it against every domain.

This is the floor above the domains a config names (``derl.envs``, ``derl.morphology``,
``derl.ppo``) and below the programs that run one (training, evolution, analysis, evaluation,
the tools): ``derl.config`` imports none of them.

``load_config`` calls ``check_config`` on every tree it loads, so a typo in a
selection criterion, a tournament type, a mutation op, a device name or a range
(``GAMMA nan``, a negative learning rate) stops ``evo_single_proc.py``,
``tools/train_ppo.py`` and every worker at start-up in one line, instead of after
the initial population has trained. The rules live next to what they protect: the
task registry names the reward terms, ``derl.morphology.mutations`` the operators,
``derl.config.TOURNAMENT_TYPES`` the tournaments, ``derl.envs.terrain`` the obstacles.

``this_node=True`` adds what depends on the machine: ``DEVICE`` must exist here, and
``SIM.BACKEND warp`` needs the packages of ``requirements-gpu.txt``.
Readers of a finished run (reports, status) leave it off, so a GPU run's config
still loads on a laptop.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from derl.config import (
    PRESET_DIR,
    RETIRED_KEYS,
    SIM_BACKENDS,
    TOURNAMENT_TYPES,
    CfgNode,
    ConfigError,
    parse_config,
)
from derl.envs.observations import OBS_TYPES
from derl.envs.tasks import check_task_config, make_task
from derl.envs.tasks.manipulation import OBJECTS
from derl.envs.terrain import OBSTACLES
from derl.fileio import read_yaml
from derl.morphology.mutations import OPERATORS, expand_range

# Counts that must be at least 1.
POSITIVE_KEYS = (
    "PPO.NUM_ENVS", "PPO.TIMESTEPS", "PPO.EPOCHS", "PPO.BATCH_SIZE", "PPO.MAX_STATE_ACTION_PAIRS", "PPO.VIDEO_LENGTH",
    "ENV.EPISODE_LENGTH", "EVO.INIT_POPULATION_SIZE", "EVO.SEARCH_SPACE_SIZE", "EVO.AGING_WINDOW_SIZE",
    "EVO.NUM_PARTICIPANTS", "LIMB.MAX_LIMBS", "VECENV.THREADS", "HFIELD.NUM_DIVS", "NUM_NODES", "TORCH_THREADS",
    "PPO.MAX_GRAD_NORM", "PPO.BASE_LR", "PPO.EPS", "PPO.CLIP_EPS", "PPO.KL_TARGET_COEF", "EVO.LEASE_SECONDS",
    "SIM.NCONMAX", "SIM.NJMAX",
)
# Values that may be 0 but not negative.
NON_NEGATIVE_KEYS = (
    "NODE_ID", "EVO.NUM_PROCESSES", "EVO.INIT_WAIT_TIMEOUT", "EVO.VIDEOS_LAST_N", "CHECKPOINT_PERIOD",
    "PPO.VALUE_COEF", "PPO.ENTROPY_COEF", "ENV.CTRL_COST_WEIGHT", "ENV.RESET_NOISE_SCALE",
)
# Probabilities and fractions.
UNIT_INTERVAL_KEYS = ("PPO.GAMMA", "PPO.GAE_LAMBDA", "ENV.STAND_HEIGHT_RATIO")
# Choices whose implementation lives in torch modules (derl.ppo imports torch); tests keep them equal.
LR_SCALING_NAMES = ("none", "sqrt", "linear")
DEVICE_PATTERN = re.compile(r"cpu|auto|cuda(:\d+)?")
# The modules SIM.BACKEND warp imports, and how to install them (requirements-gpu.txt).
WARP_MODULES = ("warp", "mujoco_warp")
GPU_INSTALL = "`.venv/bin/pip install -r requirements-gpu.txt` (or `make setup-gpu`)"
# [value] or [start, stop, step] ranges expanded by the morphology and terrain code.
RANGE_KEYS = (
    "BODY.MOTOR_GEAR_RANGE", "TORSO.HEAD_RADIUS_RANGE", "TORSO.DENSITY_RANGE", "LIMB.RADIUS_RANGE",
    "LIMB.HEIGHT_RANGE", "LIMB.DENSITY_RANGE", "LIMB.NUM_LIMBS_RANGE", "TERRAIN.FLAT_LENGTH_RANGE",
    "TERRAIN.HFIELD_LENGTH_RANGE", "TERRAIN.CURVE_HEIGHT_RANGE", "TERRAIN.STEP_LENGTH_RANGE",
    "TERRAIN.RUGGED_SQUARE_CLIP_RANGE", "OBJECT.OBSTACLE_LEN_RANGE", "OBJECT.OBSTACLE_WIDTH_RANGE",
)


def load_config(
    cfg_file: str | Path | Sequence[str | Path] | None = None,
    overrides: Sequence[str] | Mapping[str, Any] = (),
    this_node: bool = False,
    retired: frozenset[str] = frozenset(),
    read_back: bool = False,
) -> CfgNode:
    """Loads the defaults, then ``cfg_file``, then ``overrides``; returns the frozen, checked tree.

    Args:
        cfg_file: optional YAML file with a (partial) tree of keys, or several applied in order
            (a task preset, then ``configs/gpu_server.yml``).
        overrides: ``["KEY", "VALUE", ...]`` strings from the command line (values parsed
            as YAML), or a mapping of keys to already-typed values.
        this_node: the config will train here: also check that ``DEVICE`` exists on this machine.
        retired: keys skipped where a file sets them (``load_run_config``).
        read_back: ``cfg_file`` is a file derl wrote and reads back (``load_run_config``): refused if
            it is a symbolic link or not a regular file, bounded in size and depth, without aliases
            (``derl.fileio.read_yaml``).

    Raises:
        ConfigError: unknown or ambiguous key, wrong type, derived key set, missing file, or any
            value ``check_config`` rejects (named with the file that set it).
    """
    return parse_config(cfg_file, overrides, retired, check=lambda cfg: check_config(cfg, this_node),
                        read=read_yaml if read_back else None)


def load_run_config(config_yaml: str | Path) -> CfgNode:
    """``load_config`` of a ``config.yaml`` that derl wrote (a run's or a training's), old ones included.

    The ``RETIRED_KEYS`` an older derl dumped are dropped, so its finished runs stay readable by the
    report, status, evaluation and ``train_ppo.py --eval``; a user's own config files and the command
    line get no such leniency. The file is read back from a folder other processes write: a link or
    a FIFO there, or a file too large, too deep or with aliases, is a ``ConfigError`` naming it.
    """
    return load_config(config_yaml, retired=RETIRED_KEYS, read_back=True)


def load_preset(name: str, overrides: Sequence[str] | Mapping[str, Any] = ()) -> CfgNode:
    """``configs/evo/<name>.yml`` (``ft``, ``vt``, ``mvt``, ``quick``), then ``overrides``."""
    path = PRESET_DIR / f"{name}.yml"
    if not path.is_file():
        known = sorted(p.stem for p in PRESET_DIR.glob("*.yml"))
        raise ConfigError(f"unknown preset {name!r}; known: {', '.join(known)}")
    return load_config(path, overrides)


def load_config_or_exit(cfg_file: str | Path | Sequence[str | Path] | None, overrides: Sequence[str],
                        this_node: bool = False, retired: frozenset[str] = frozenset(),
                        read_back: bool = False) -> CfgNode:
    """``load_config`` for scripts: a bad config prints one line and exits with code 2."""
    try:
        return load_config(cfg_file, overrides, this_node, retired, read_back)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def check_config(cfg: CfgNode, this_node: bool = False) -> None:
    """Raises ``ConfigError`` (with ``key`` set) for the first value that cannot work.

    Args:
        this_node: also check what depends on this machine (``DEVICE`` is available, the
            ``SIM.BACKEND``'s packages are installed).
    """
    _check_numbers(cfg)
    _check_evolution(cfg)
    _check_choices(cfg)
    _check_world(cfg)
    if this_node:
        check_backend_here(cfg.SIM.BACKEND)
        check_device_here(cfg.DEVICE)


def _leaves(node: CfgNode, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in node.items():
        if isinstance(value, CfgNode):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _numbers(value: Any) -> Iterator[float]:
    if isinstance(value, tuple):
        for item in value:
            yield from _numbers(item)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield value


def _check_numbers(cfg: CfgNode) -> None:
    for key, value in _leaves(cfg):
        if not all(math.isfinite(v) for v in _numbers(value)):
            raise ConfigError(f"config key {key} must be finite, got {_show(value)}", key)
    for key in POSITIVE_KEYS:
        if not cfg.get_path(key) > 0:
            raise ConfigError(f"config key {key} must be positive, got {cfg.get_path(key)}", key)
    for key in NON_NEGATIVE_KEYS:
        if cfg.get_path(key) < 0:
            raise ConfigError(f"config key {key} must not be negative, got {cfg.get_path(key)}", key)
    for key in UNIT_INTERVAL_KEYS:
        if not 0 <= cfg.get_path(key) <= 1:
            raise ConfigError(f"config key {key} must lie in [0, 1], got {cfg.get_path(key)}", key)
    if not 0 < cfg.EVO.PERCENT_PARTICIPANTS <= 100:
        raise ConfigError(f"config key EVO.PERCENT_PARTICIPANTS must lie in (0, 100], "
                          f"got {cfg.EVO.PERCENT_PARTICIPANTS}", "EVO.PERCENT_PARTICIPANTS")
    if not cfg.NODE_ID < cfg.NUM_NODES:
        raise ConfigError(f"config key NODE_ID {cfg.NODE_ID} is out of range for NUM_NODES {cfg.NUM_NODES}",
                          "NODE_ID", "NUM_NODES")


def _check_evolution(cfg: CfgNode) -> None:
    evo = cfg.EVO
    if evo.IS_EVO and evo.INIT_POPULATION_SIZE > evo.SEARCH_SPACE_SIZE:
        raise ConfigError(f"config key EVO.INIT_POPULATION_SIZE ({evo.INIT_POPULATION_SIZE}) must not exceed "
                          f"EVO.SEARCH_SPACE_SIZE ({evo.SEARCH_SPACE_SIZE})", "EVO.INIT_POPULATION_SIZE",
                          "EVO.SEARCH_SPACE_SIZE")
    _one_of("EVO.TOURNAMENT_TYPE", evo.TOURNAMENT_TYPE, TOURNAMENT_TYPES)
    if not evo.MUTATION_OPS:
        raise ConfigError("config key EVO.MUTATION_OPS is empty", "EVO.MUTATION_OPS")
    for op in evo.MUTATION_OPS:
        _one_of("EVO.MUTATION_OPS", op, tuple(OPERATORS))
    if "grow_limb" not in evo.MUTATION_OPS:
        raise ConfigError("config key EVO.MUTATION_OPS must include grow_limb (random genomes grow from a torso)",
                          "EVO.MUTATION_OPS")
    criteria, objectives = evo.SELECTION_CRITERIA, evo.SELECTION_CRITERIA_OBJ
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


def _check_choices(cfg: CfgNode) -> None:
    _one_of("PPO.LR_SCALING", cfg.PPO.LR_SCALING, LR_SCALING_NAMES)
    _one_of("SIM.BACKEND", cfg.SIM.BACKEND, SIM_BACKENDS)
    if not DEVICE_PATTERN.fullmatch(cfg.DEVICE):
        raise ConfigError(f"config key DEVICE must be cpu, cuda, cuda:N or auto, got {cfg.DEVICE!r}", "DEVICE")


def _check_world(cfg: CfgNode) -> None:
    """The task (criteria and observations against its reward terms), terrain, objects and ranges."""
    check_task_config(cfg)  # ENV.TASK, and the criteria and observations against its declarations
    if not cfg.ENV.OBS_TYPES:
        raise ConfigError(f"config key ENV.OBS_TYPES is empty; use some of {', '.join(OBS_TYPES)}", "ENV.OBS_TYPES")
    for obs_type in cfg.ENV.OBS_TYPES:
        _one_of("ENV.OBS_TYPES", obs_type, OBS_TYPES)
    for terrain_type in cfg.TERRAIN.TYPES:
        _one_of("TERRAIN.TYPES", terrain_type, (*OBSTACLES, "flat"))
    _one_of("OBJECT.TYPE", cfg.OBJECT.TYPE, tuple(OBJECTS))
    for key in RANGE_KEYS:
        try:
            expand_range(cfg.get_path(key), key)
        except ValueError as err:
            raise ConfigError(str(err), key) from None
    if cfg.SIM.BACKEND == "warp" and not make_task(cfg, 1).static_model():
        raise ConfigError(f"config key SIM.BACKEND warp steps one model in every world, but task {cfg.ENV.TASK} "
                          f"with ENV.MODULES {list(cfg.ENV.MODULES)} edits its model each episode (terrain, props "
                          "or goals); use SIM.BACKEND mujoco", "SIM.BACKEND", "ENV.TASK")
    limbs = expand_range(cfg.LIMB.NUM_LIMBS_RANGE, "LIMB.NUM_LIMBS_RANGE")
    if min(limbs) < 1 or max(limbs) > cfg.LIMB.MAX_LIMBS:
        raise ConfigError(f"config key LIMB.NUM_LIMBS_RANGE {list(cfg.LIMB.NUM_LIMBS_RANGE)} must lie within "
                          f"1..LIMB.MAX_LIMBS ({cfg.LIMB.MAX_LIMBS})", "LIMB.NUM_LIMBS_RANGE",
                          "LIMB.MAX_LIMBS")


def check_backend_here(backend: str) -> None:
    """``SIM.BACKEND``'s packages are installed here: ``warp`` needs ``requirements-gpu.txt``.

    Finds the modules without importing them (``import mujoco_warp`` takes over a second and
    100 MB, which the coordinator would pay for nothing); a broken install shows where a worker
    imports them.
    """
    if backend != "warp":
        return
    missing = [name for name in WARP_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"config key SIM.BACKEND warp needs the Python module(s) {', '.join(missing)}, not "
                          f"installed here; install them with {GPU_INSTALL}", "SIM.BACKEND")


def check_device_here(device: str) -> None:
    """``DEVICE`` exists on this machine: ``cuda`` without a visible GPU is an error (torch only for CUDA)."""
    if device in ("cpu", "auto"):
        return
    from derl.ppo.device import visible_gpu_count  # lazy: torch takes seconds, and only a GPU device needs it

    gpus = visible_gpu_count()
    index = int(device.partition(":")[2] or 0)
    if index >= gpus:
        found = f"only {gpus} CUDA device(s) are visible" if gpus else "no CUDA device is visible on this node"
        raise ConfigError(f"config key DEVICE {device}: {found} (use DEVICE cpu or auto)", "DEVICE")


def _one_of(key: str, value: Any, known: tuple[str, ...]) -> None:
    if value not in known:
        raise ConfigError(f"config key {key}: unknown value {value!r}; use one of {', '.join(known)}", key)


def _show(value: Any) -> str:
    return str(list(value)) if isinstance(value, tuple) else str(value)
