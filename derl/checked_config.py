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
from typing import Any, NamedTuple

from derl.config import (
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
from derl.envs.warp_log import quiet_warp
from derl.fileio.reads import read_yaml
from derl.morphology.mutations import OPERATORS, expand_range
from derl.paths import EVO_PRESETS

# MuJoCo and torch store these counts in C ints.
INT32_MAX = 2**31 - 1


class Range(NamedTuple):
    """The values a numeric key may take: ``low`` to ``high`` inclusive (``low`` excluded if ``low_open``).

    A list key (``MODEL.PRO_HIDDEN_DIMS``) holds the range in each element.
    """

    low: float
    high: float = math.inf
    low_open: bool = False

    def problem(self, value: float) -> str | None:
        """What is wrong with ``value`` in words (``must be positive``), or None if it lies in the range."""
        if value < self.low or (self.low_open and value == self.low):
            if self.low == 0:
                return "must be positive" if self.low_open else "must not be negative"
            return "must be positive" if self.low == 1 and isinstance(value, int) else f"must be at least {self.low}"
        if value > self.high:
            return f"must be at most {self.high}"
        return None


# Every integer key of derl.config and the numbers a float key may not leave, in one table:
# ``check_config`` holds a config to it before anything is created, so a value no process can use
# (``RNG_SEED -1``, ``PPO.NUM_ENVS 0``) stops a command in one line, not a worker after OUT_DIR
# exists. tests/test_config_check.py keeps every integer key in it. ``EVO.NUM_PROCESSES`` is held
# to the node's cores and memory by the coordinator too (``derl.evolution.coordinator.worker_count``).
POSITIVE = Range(0, low_open=True)
NON_NEGATIVE = Range(0)
UNIT_INTERVAL = Range(0, 1)
COUNT = Range(1, INT32_MAX)
AMOUNT = Range(0, INT32_MAX)
RANGES: dict[str, Range] = {
    "XML.NJMAX": COUNT, "XML.NCONMAX": COUNT,
    "XML.GEOM_CONDIM": Range(1, 6),  # and one of CONDIMS
    "LIMB.MAX_LIMBS": COUNT,
    "ENV.EPISODE_LENGTH": COUNT,
    "TERRAIN.START_FLAT": AMOUNT, "TERRAIN.NUM_STEPS": COUNT, "TERRAIN.BANK_SIZE": Range(0, 4096),
    "TERRAIN.INCLINE_ANGLE": Range(-89, 89),  # degrees: the plane's cosine scales the forward reward
    "OBJECT.PLACEMENT_BUFFER_LEN": AMOUNT, "OBJECT.PLACEMENT_BUFFER_WIDTH": AMOUNT,
    "OBJECT.CLOSE_PLACEMENT_DIST": AMOUNT, "OBJECT.NUM_OBSTACLES": AMOUNT,
    "HFIELD.PADDING": AMOUNT, "HFIELD.GAP_DEPTH": Range(-INT32_MAX, 0),
    # Cells per metre: 100 (1 cm) already makes the default 50 x 40 m corridor 20 million cells.
    "HFIELD.NUM_DIVS": Range(1, 100),
    "PPO.EPOCHS": COUNT, "PPO.BATCH_SIZE": COUNT, "PPO.TIMESTEPS": COUNT, "PPO.NUM_ENVS": COUNT,
    "PPO.MAX_STATE_ACTION_PAIRS": Range(1, 2**63 - 1), "PPO.VIDEO_LENGTH": COUNT,
    "MODEL.PRO_HIDDEN_DIMS": COUNT, "MODEL.OBS_FEAT_HIDDEN_DIMS": COUNT,
    "SIM.NCONMAX": COUNT, "SIM.NJMAX": COUNT,
    "VECENV.THREADS": COUNT,
    "EVO.NUM_PROCESSES": AMOUNT, "EVO.INIT_POPULATION_SIZE": COUNT, "EVO.SEARCH_SPACE_SIZE": COUNT,
    "EVO.INIT_WAIT_TIMEOUT": AMOUNT, "EVO.AGING_WINDOW_SIZE": COUNT, "EVO.NUM_PARTICIPANTS": COUNT,
    "EVO.PERCENT_PARTICIPANTS": Range(1, 100), "EVO.VIDEOS_LAST_N": AMOUNT,
    # Seeds: numpy, torch and gymnasium take it, and seed + env index + env steps stays below 2**32.
    "RNG_SEED": Range(0, INT32_MAX),
    "TORCH_THREADS": COUNT, "CHECKPOINT_PERIOD": AMOUNT, "NODE_ID": AMOUNT, "NUM_NODES": COUNT,
    "PPO.MAX_GRAD_NORM": POSITIVE, "PPO.BASE_LR": POSITIVE, "PPO.EPS": POSITIVE, "PPO.CLIP_EPS": POSITIVE,
    "PPO.KL_TARGET_COEF": POSITIVE, "EVO.LEASE_SECONDS": POSITIVE,
    "PPO.VALUE_COEF": NON_NEGATIVE, "PPO.ENTROPY_COEF": NON_NEGATIVE, "ENV.CTRL_COST_WEIGHT": NON_NEGATIVE,
    "ENV.RESET_NOISE_SCALE": NON_NEGATIVE,
    "PPO.GAMMA": UNIT_INTERVAL, "PPO.GAE_LAMBDA": UNIT_INTERVAL, "ENV.STAND_HEIGHT_RATIO": UNIT_INTERVAL,
}
# MuJoCo's contact dimensionalities (XML.GEOM_CONDIM).
CONDIMS = (1, 3, 4, 6)
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
            (``derl.fileio.reads.read_yaml``).

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
    path = EVO_PRESETS / f"{name}.yml"
    if not path.is_file():
        known = sorted(p.stem for p in EVO_PRESETS.glob("*.yml"))
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
        if cfg.SIM.BACKEND == "warp" and cfg.DEVICE.startswith("cuda"):
            check_warp_cuda_here(cfg.DEVICE)


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
    for key, allowed in RANGES.items():
        value = cfg.get_path(key)
        if isinstance(value, tuple) and not all(isinstance(n, int) and not isinstance(n, bool) for n in value):
            raise ConfigError(f"config key {key} must hold whole numbers, got {_show(value)}", key)
        for number in value if isinstance(value, tuple) else (value,):
            if (problem := allowed.problem(number)) is not None:
                raise ConfigError(f"config key {key} {problem}, got {_show(value)}", key)
    if cfg.XML.GEOM_CONDIM not in CONDIMS:
        raise ConfigError(f"config key XML.GEOM_CONDIM must be one of {', '.join(map(str, CONDIMS))} (MuJoCo's "
                          f"contact dimensions), got {cfg.XML.GEOM_CONDIM}", "XML.GEOM_CONDIM")
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
    _check_corridor_lengths(cfg)
    refusal = make_task(cfg, 1).shared_model_refusal() if cfg.SIM.BACKEND == "warp" else None
    if refusal is not None:
        raise ConfigError(f"config key SIM.BACKEND warp: {refusal}", "SIM.BACKEND", "ENV.TASK")
    limbs = expand_range(cfg.LIMB.NUM_LIMBS_RANGE, "LIMB.NUM_LIMBS_RANGE")
    if min(limbs) < 1 or max(limbs) > cfg.LIMB.MAX_LIMBS:
        raise ConfigError(f"config key LIMB.NUM_LIMBS_RANGE {list(cfg.LIMB.NUM_LIMBS_RANGE)} must lie within "
                          f"1..LIMB.MAX_LIMBS ({cfg.LIMB.MAX_LIMBS})", "LIMB.NUM_LIMBS_RANGE",
                          "LIMB.MAX_LIMBS")


def _check_corridor_lengths(cfg: CfgNode) -> None:
    """The corridor's stretches have no negative length, and some flat stretch covers a height-map column:
    the obstacle draw moves along the corridor by them until its end, and would loop forever without."""
    for key in ("TERRAIN.FLAT_LENGTH_RANGE", "TERRAIN.HFIELD_LENGTH_RANGE", "TERRAIN.STEP_LENGTH_RANGE"):
        if min(expand_range(cfg.get_path(key), key)) < 0:
            raise ConfigError(f"config key {key} {list(cfg.get_path(key))} holds a negative length", key)
    longest = max(expand_range(cfg.TERRAIN.FLAT_LENGTH_RANGE, "TERRAIN.FLAT_LENGTH_RANGE"))
    if round(2 * longest * cfg.HFIELD.NUM_DIVS) < 1:
        raise ConfigError(f"config key TERRAIN.FLAT_LENGTH_RANGE {list(cfg.TERRAIN.FLAT_LENGTH_RANGE)} needs a length "
                          f"of at least half a height-map cell (1 / (2 HFIELD.NUM_DIVS) m): the corridor's draw "
                          f"would never reach its end", "TERRAIN.FLAT_LENGTH_RANGE", "HFIELD.NUM_DIVS")


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


# CUDA graphs with conditional nodes (wp.capture_while: MuJoCo Warp's solver loop inside a captured step)
# need a driver and a toolkit of this version or newer.
CONDITIONAL_GRAPH_CUDA = (12, 4)


def _version(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def check_warp_cuda(device: str, toolkit: tuple[int, int] | None, driver: tuple[int, int] | None,
                    min_driver: tuple[int, int] | None, mempool: bool) -> None:
    """Raises ``ConfigError`` (one line, what to do) if warp cannot capture MuJoCo Warp's step on ``device``.

    Args:
        toolkit: the CUDA version warp's wheel was built with (``wp.get_cuda_toolkit_version()``);
            None: a CPU-only build of warp.
        driver: the CUDA version the NVIDIA driver supports (``wp.get_cuda_driver_version()``); None:
            no driver found. torch's CUDA says nothing about warp's: each wheel brings its own.
        min_driver: the oldest driver warp's build runs on (warp's runtime ``min_driver_version``).
        mempool: ``wp.is_mempool_supported(device)``: captured graphs allocate from warp's memory pool.
    """
    key = "SIM.BACKEND"
    if toolkit is None:
        raise ConfigError(f"config key SIM.BACKEND warp with DEVICE {device}: this warp-lang was built without "
                          f"CUDA; install the CUDA build with {GPU_INSTALL}", key)
    if driver is None:
        raise ConfigError(f"config key SIM.BACKEND warp with DEVICE {device}: warp finds no NVIDIA driver; install "
                          f"one for CUDA >= {_version(max(min_driver or toolkit, CONDITIONAL_GRAPH_CUDA))}", key)
    if min_driver is not None and driver < min_driver:
        raise ConfigError(f"config key SIM.BACKEND warp with DEVICE {device}: warp-lang was built with CUDA "
                          f"{_version(toolkit)} and needs a driver for CUDA >= {_version(min_driver)}, this node's "
                          f"supports CUDA {_version(driver)}: update the NVIDIA driver", key)
    if min(driver, toolkit) < CONDITIONAL_GRAPH_CUDA:
        older = f"the driver's CUDA {_version(driver)}" if driver < toolkit else f"warp's CUDA {_version(toolkit)}"
        raise ConfigError(f"config key SIM.BACKEND warp with DEVICE {device}: MuJoCo Warp's captured step needs "
                          f"conditional CUDA graphs (CUDA >= {_version(CONDITIONAL_GRAPH_CUDA)}), {older} is older: "
                          "update the NVIDIA driver or warp-lang", key)
    if not mempool:
        raise ConfigError(f"config key SIM.BACKEND warp with DEVICE {device}: the GPU or driver has no CUDA memory "
                          "pool, which warp's captured graphs allocate from: use a driver for CUDA >= 11.2 "
                          "without MIG/vGPU limits on pools, or DEVICE cpu", key)


def check_warp_cuda_here(device: str) -> None:
    """``check_warp_cuda`` on this node's warp, driver and ``device`` (imports warp: about a second)."""
    wp = quiet_warp()  # lazy: only SIM.BACKEND warp on a GPU needs it (requirements-gpu.txt)
    wp.init()
    runtime = wp._src.context.runtime
    driver = wp.get_cuda_driver_version()
    mempool = driver is not None and wp.is_cuda_available() and wp.is_mempool_supported(device)
    check_warp_cuda(device, wp.get_cuda_toolkit_version(), driver, runtime.min_driver_version, mempool)


def _one_of(key: str, value: Any, known: tuple[str, ...]) -> None:
    if value not in known:
        raise ConfigError(f"config key {key}: unknown value {value!r}; use one of {', '.join(known)}", key)


def _show(value: Any) -> str:
    return str(list(value)) if isinstance(value, tuple) else str(value)
