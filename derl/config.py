"""Configuration: one tree of typed defaults with DERL's key names.

A config is loaded from an optional YAML file, then overridden by ``KEY VALUE``
pairs from the command line, then frozen. Keys are either full dotted names
(``EVO.NUM_PROCESSES``) or unambiguous leaf names (``NUM_PROCESSES``). The type
of each key is the type of its default; ``1e6`` is accepted for an integer key
when it is a whole number. Derived keys (``PPO.MAX_ITERS``) are computed, never
set by hand.

This module is the ground floor: it imports no other part of derl. Whether a value can work
(a task that exists, a tournament type, a device on this machine) is checked one floor up, by
``derl.checked_config``, whose ``load_config`` is what programs call::

    cfg = load_config("configs/evo/ft.yml", ["NUM_PROCESSES", "8"])
    cfg.EVO.NUM_PROCESSES  # -> 8
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml


class ConfigError(ValueError):
    """A bad config file, key or value. The message is one line for the user.

    ``keys`` are the dotted keys at fault (``key`` the first): ``parse_config`` adds where the first
    of them that was set came from (a file, the command line), else that it is a default value.
    """

    def __init__(self, message: str, *keys: str):
        super().__init__(message)
        self.keys = keys
        self.key = keys[0] if keys else None


def _defaults() -> dict[str, Any]:
    """The default tree. Comments give the meaning; values follow DERL."""
    return {
        # MJCF template options.
        "XML": {
            "NJMAX": 1000,
            "NCONMAX": 200,
            "GEOM_CONDIM": 3,
            "GEOM_FRICTION": [0.7, 0.1, 0.1],
            "FILTER_PARENT": "enable",
        },
        "BODY": {
            # Vertical gap between the lowest point of the unimal and the floor.
            "FLOOR_OFFSET": 0.2,
            # Hinge ranges in degrees, one pair drawn per joint.
            "JOINT_ANGLE_LIST": [
                [-30, 0], [0, 30], [-30, 30], [-45, 45], [-45, 0], [0, 45],
                [-60, 0], [0, 60], [-60, 60], [-90, 0], [0, 90], [-60, 30], [-30, 60],
            ],
            # [start, stop, step], stop included.
            "MOTOR_GEAR_RANGE": [150, 300, 50],
            # Joint axes in the limb geom frame: x, y or both.
            "JOINT_AXIS": ["x", "y", "xy"],
        },
        "TORSO": {
            "HEAD_RADIUS_RANGE": [0.10],
            "DENSITY_RANGE": [500, 1000, 100],
        },
        "LIMB": {
            "RADIUS_RANGE": [0.05],
            "HEIGHT_RANGE": [0.2, 0.4, 0.1],
            "DENSITY_RANGE": [500, 1000, 100],
            # Limb count drawn for the initial population (inclusive range).
            "NUM_LIMBS_RANGE": [2, 8, 1],
            "MAX_LIMBS": 10,
        },
        "ENV": {
            "FORWARD_REWARD_WEIGHT": 1.0,
            "CTRL_COST_WEIGHT": 1e-3,
            "STAND_REWARD_WEIGHT": 0.0,
            # ReachReward: [distance-gain weight, unused, bonus per step at the goal].
            "REACH_REWARD_PARAMS": [100.0, 0.0, 10.0],
            "RESET_NOISE_SCALE": 5e-3,
            "EPISODE_LENGTH": 1000,  # env steps before an episode is truncated (time limit)
            # Falling: head height below this fraction of its starting height.
            "STAND_HEIGHT_RATIO": 0.5,
            # Modules that build the world, in order.
            "MODULES": ["Floor", "Agent"],
            "OBS_TYPES": ["position", "velocity", "imu_vel", "touch", "extremities"],
            "KEYS_TO_KEEP": ["proprioceptive"],
            "TASK": "locomotion",
        },
        # Sizes are half-extents (MuJoCo box convention); x length, y width, z height.
        "TERRAIN": {
            "SIZE": [25, 20, 1],
            "START_FLAT": 2,
            "TYPES": ["curve_slope"],
            "FLAT_LENGTH_RANGE": [1, 3, 1],
            "HFIELD_LENGTH_RANGE": [4, 8, 4],
            "CURVE_HEIGHT_RANGE": [0.6, 1.2, 0.1],
            "BOUNDARY_WALLS": True,
            "STEP_HEIGHT": 0.2,
            "STEP_LENGTH_RANGE": [12, 16, 4],
            "NUM_STEPS": 8,
            "RUGGED_SQUARE_CLIP_RANGE": [0.2, 0.3, 0.1],
            "BOWL_MAX_Z": 3.0,
            "PATROL_HALF_LEN": 3.0,
            "INCLINE_ANGLE": 0,
        },
        "OBJECT": {
            "GOAL_POS": [],
            "BOX_POS": [],
            "PLACEMENT_BUFFER_LEN": 3,
            "PLACEMENT_BUFFER_WIDTH": 5,
            "CLOSE_PLACEMENT_DIST": 10,
            "SUCCESS_MARGIN": 0.5,
            "BOX_SIDE": 0.5,
            "NUM_OBSTACLES": 20,
            "OBSTACLE_LEN_RANGE": [0.5, 3, 0.5],
            "OBSTACLE_WIDTH_RANGE": [0.5, 3, 0.5],
            "FORWARD_PLACEMENT_DIST": [15, 25],
            "TYPE": "box",
            "BALL_RADIUS": 0.15,
            "BOX_MASS": 1.0,
        },
        "HFIELD": {
            # Observed patch in metres: [behind, front, right, left].
            "OBS_SIZE": [1, 4, 4, 4],
            "PADDING": 10,
            "GAP_DEPTH": -10,
            # Cells per metre.
            "NUM_DIVS": 10,
        },
        "PPO": {
            "GAMMA": 0.99,
            "GAE_LAMBDA": 0.95,
            "CLIP_EPS": 0.2,
            "EPOCHS": 4,
            "BATCH_SIZE": 512,
            "VALUE_COEF": 0.5,
            # Stop an epoch when approx. KL exceeds KL_TARGET_COEF * 0.01.
            "KL_TARGET_COEF": 20.0,
            "USE_CLIP_VALUE_FUNC": True,
            "ENTROPY_COEF": 0.01,
            "TIMESTEPS": 128,
            "NUM_ENVS": 32,
            "BASE_LR": 3e-4,
            "EPS": 1e-5,
            "LINEAR_LR_DECAY": True,
            "MAX_GRAD_NORM": 0.5,
            # Env steps per morphology (all envs together).
            "MAX_STATE_ACTION_PAIRS": 5_000_000,
            # Derived: MAX_STATE_ACTION_PAIRS // (TIMESTEPS * NUM_ENVS); N data-parallel ranks run
            # MAX_ITERS // N iterations (MAX_STATE_ACTION_PAIRS is the total over all ranks).
            "MAX_ITERS": -1,
            # Data-parallel runs (torchrun): the learning rate times 1, sqrt(N) or N for N ranks
            # (none | sqrt | linear). AMP: bf16 autocast for the learner on CUDA (ignored on the CPU).
            "LR_SCALING": "none",
            "AMP": False,
            "VIDEO_LENGTH": 1000,  # frames of an EVO.VIDEOS_LAST_N video
        },
        "MODEL": {
            "PRO_HIDDEN_DIMS": [64, 64],
            "OBS_FEAT_HIDDEN_DIMS": [64],
        },
        "SIM": {
            # The simulator of a training's envs: mujoco (MuJoCo's C engine on the CPU, DERL's physics)
            # or warp (MuJoCo Warp on DEVICE: an NVIDIA GPU, or warp's CPU device for tests); README,
            # "Simulating on a GPU". Single envs (replay, videos, evaluation rollouts) always use mujoco.
            "BACKEND": "mujoco",
            # warp only: contacts and constraint rows allocated per world (MuJoCo Warp preallocates
            # them; a step that needs more drops the excess and derl ends those episodes as unstable).
            "NCONMAX": 64,
            "NJMAX": 256,
        },
        "VECENV": {
            # Threads that step one pool's simulations (mujoco.batch.Batch nthread).
            "THREADS": 1,
        },
        "EVO": {
            # False: random search, DERL's baseline: SEARCH_SPACE_SIZE morphologies drawn like the
            # initial population (10x candidates through the species filter), no tournament.
            "IS_EVO": True,
            # Workers on this node; 0 = as many as the node can hold.
            "NUM_PROCESSES": 0,
            "INIT_POPULATION_SIZE": 576,
            # Seconds other nodes wait for node 0 to write the initial population.
            "INIT_WAIT_TIMEOUT": 86400,
            # Dead nodes: a slot whose owner's heartbeat (a file mtime on the shared folder) is older
            # than this is taken over by another worker. Keep it well above NFS attribute caching (60 s).
            "LEASE_SECONDS": 600.0,
            # Morphologies trained in all, initial population included.
            "SEARCH_SPACE_SIZE": 4000,
            # aging_num | aging_percent | vanilla_num | vanilla_percent
            "TOURNAMENT_TYPE": "aging_num",
            "AGING_WINDOW_SIZE": 576,
            "NUM_PARTICIPANTS": 4,
            "PERCENT_PARTICIPANTS": 5,
            "MUTATION_OPS": [
                "grow_limb", "joint_angle", "limb_params", "dof", "density", "gear", "delete_limb",
            ],
            "SELECTION_CRITERIA": ["__reward__forward", "__reward__stand"],
            # -1 maximise, +1 minimise, one per criterion.
            "SELECTION_CRITERIA_OBJ": [-1, -1],
            # Record a policy video (PPO.VIDEO_LENGTH frames) of each of the last N slots into videos/.
            "VIDEOS_LAST_N": 0,
        },
        "TENSORBOARD": {
            # Event files for `tensorboard --logdir OUT`: a training's curves (OUT/tensorboard/), an
            # evolution's search curves (OUT_DIR/tensorboard/search/, node 0) and evaluation cells'.
            "ENABLED": True,
            # Evolution only: each morphology's training curves too (OUT_DIR/tensorboard/morphologies/).
            "PER_MORPHOLOGY": False,
        },
        "OUT_DIR": "output/default",
        "RNG_SEED": 1,
        # cpu | cuda | cuda:N | auto: the learner's device, and the envs' with SIM.BACKEND warp.
        "DEVICE": "cpu",
        "TORCH_THREADS": 1,
        "CHECKPOINT_PERIOD": 100,
        "NODE_ID": 0,
        "NUM_NODES": 1,
    }


# Keys computed from others; setting them by hand is an error.
DERIVED_KEYS = ("PPO.MAX_ITERS",)

# The values EVO.TOURNAMENT_TYPE may take: derl.evolution.selection implements them and
# derl.checked_config checks the key against them, both from this one definition.
TOURNAMENT_TYPES = ("aging_num", "aging_percent", "vanilla_num", "vanilla_percent")

# The values SIM.BACKEND may take, checked by derl.checked_config (README, "Simulating on a GPU").
SIM_BACKENDS = ("mujoco", "warp")

# Keys that say how one node runs, not what the search is: they may differ between the nodes of a
# search and between runs of one node. Every other key of a node must equal OUT_DIR/config.yaml
# (derl.evolution.search_config); a node's workers run its config, config.yaml plus these.
NODE_LOCAL_KEYS = (
    "NODE_ID", "OUT_DIR", "DEVICE", "TORCH_THREADS", "EVO.NUM_PROCESSES", "EVO.INIT_WAIT_TIMEOUT",
    "VECENV.THREADS", "CHECKPOINT_PERIOD", "TENSORBOARD.ENABLED", "TENSORBOARD.PER_MORPHOLOGY",
)

def _derive(tree: dict[str, Any]) -> None:
    ppo = tree["PPO"]
    per_iter = ppo["TIMESTEPS"] * ppo["NUM_ENVS"]
    ppo["MAX_ITERS"] = max(1, int(ppo["MAX_STATE_ACTION_PAIRS"]) // per_iter)


class CfgNode(Mapping):
    """A frozen config node: attribute and item access, JSON-able via ``to_dict``."""

    def __init__(self, tree: Mapping[str, Any]):
        items = {k: CfgNode(v) if isinstance(v, Mapping) else _freeze(v) for k, v in tree.items()}
        object.__setattr__(self, "_items", items)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._items[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError(f"config is frozen: cannot set {name}")

    def __getitem__(self, name: str) -> Any:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"CfgNode({self.to_dict()!r})"

    def __reduce__(self):  # picklable for multiprocessing (never written to disk)
        return (CfgNode, (self.to_dict(),))

    def to_dict(self) -> dict[str, Any]:
        return {k: v.to_dict() if isinstance(v, CfgNode) else _thaw(v) for k, v in self._items.items()}

    def get_path(self, dotted: str) -> Any:
        node: Any = self
        for part in dotted.split("."):
            node = node[part]
        return node


def _freeze(value: Any) -> Any:
    return tuple(_freeze(v) for v in value) if isinstance(value, list | tuple) else value


def _thaw(value: Any) -> Any:
    return [_thaw(v) for v in value] if isinstance(value, tuple) else value


def _resolve_key(key: str, leaves: list[str]) -> str:
    """Maps a full dotted key or an unambiguous leaf name to its full path."""
    if key in leaves:
        return key
    matches = [p for p in leaves if p.rsplit(".", 1)[-1] == key]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise ConfigError(f"ambiguous config key {key!r}: use one of {', '.join(matches)}")
    replaced = [path for path in REPLACED_KEYS if key in (path, path.rsplit(".", 1)[-1])]
    if replaced:
        raise ConfigError(f"unknown config key {key!r}: removed, {REPLACED_KEYS[replaced[0]]}")
    names = leaves + sorted({p.rsplit(".", 1)[-1] for p in leaves})
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise ConfigError(f"unknown config key {key!r}{hint}")


def _coerce(key: str, value: Any, default: Any) -> Any:
    """Returns ``value`` converted to the type of ``default``, or raises ConfigError."""

    def bad() -> ConfigError:
        return ConfigError(
            f"config key {key} expects {type(default).__name__}, got {value!r}"
        )

    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise bad()
    if isinstance(default, int):
        if isinstance(value, bool):
            raise bad()
        if isinstance(value, str):
            value = _parse_number(value, bad)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, int):
            return value
        raise bad()
    if isinstance(default, float):
        if isinstance(value, bool):
            raise bad()
        if isinstance(value, str):
            value = _parse_number(value, bad)
        if isinstance(value, int | float):
            return float(value)
        raise bad()
    if isinstance(default, str):
        if isinstance(value, str):
            return value
        raise bad()
    if isinstance(default, list):
        if isinstance(value, list | tuple):
            return list(value)
        raise bad()
    raise bad()


def _parse_number(text: str, bad) -> int | float:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise bad() from None


def _parse_override_value(text: str) -> Any:
    """Parses a command-line value as YAML (lists, bools, numbers), else a string."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = tree
    for part in parents:
        node = node[part]
    node[leaf] = _coerce(path, value, node[leaf])


def flatten(tree: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, value) of every leaf of a nested mapping."""
    pairs = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            pairs.extend(flatten(value, path + "."))
        else:
            pairs.append((path, value))
    return pairs


def _read_yaml(cfg_file: str | Path, read: Callable[[Path], Any] | None = None) -> Mapping[str, Any]:
    """The mapping in ``cfg_file``; ``read``: how to read and parse it (``parse_config``)."""
    path = Path(cfg_file)
    if read is not None:
        try:
            data = read(path)
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except ValueError as err:  # derl.fileio.YamlFileError: a link, a FIFO, too large or deep, aliases
            raise ConfigError(f"config file {err}") from None
    elif not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    else:
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as err:
            first = str(err).splitlines()[0] if str(err) else "invalid YAML"
            raise ConfigError(f"config file {path} is not valid YAML: {first}") from None
        except RecursionError:  # a crafted file nesting thousands of levels
            raise ConfigError(f"config file {path} nests too deep to be a config") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"config file {path} must hold a mapping of keys, not {type(data).__name__}")
    return data


def _pairs_from_overrides(overrides: Sequence[str] | Mapping[str, Any]) -> list[tuple[str, Any]]:
    if isinstance(overrides, Mapping):
        return list(overrides.items())
    if len(overrides) % 2:
        raise ConfigError(f"config overrides come in KEY VALUE pairs; {overrides[-1]!r} has no value")
    return [
        (overrides[i], _parse_override_value(overrides[i + 1])) for i in range(0, len(overrides), 2)
    ]


# Keys that something else replaced, and what: setting one is an error that says so.
REPLACED_KEYS = {
    "VECENV.TYPE": "a worker's envs are one Gymnasium vector env in its own process; VECENV.THREADS sets "
                   "its threads",
    "VECENV.IN_SERIES": "a worker's envs are one Gymnasium vector env in its own process; VECENV.THREADS "
                        "sets its threads",
}
# Keys that derl wrote into every dumped ``config.yaml`` until nothing was left to read them: a run
# folder from then still holds them. ``derl.checked_config.load_run_config`` drops them there; anywhere else they are
# unknown keys, as any key that does nothing.
RETIRED_KEYS = frozenset({
    "BODY.SYMMETRY_PLANE", "CFG_DEST", "CUDNN.BENCHMARK", "CUDNN.DETERMINISTIC", "ENV.AVOID_REWARD_WEIGHT",
    "ENV.HEALTHY_REWARD", "ENV.SKIP_SELF_POS", "ENV.STATE_RANGE", "ENV.WALKER", "ENV.WRAPPERS", "ENV.Z_RANGE",
    "ENV_NAME", "EVAL_PERIOD", "EVO.INIT_METHOD", "HFIELD.ADAPTIVE_OBS", "HFIELD.ADAPTIVE_OBS_SIZE", "HFIELD.DIM",
    "HFIELD.VIZ", "IMAGE.CAMERA", "IMAGE.HEIGHT", "IMAGE.SAVE", "IMAGE.WIDTH", "LOG_DEST", "LOG_PERIOD",
    "MODEL.EX_HIDDEN_DIMS", "PPO.CHECKPOINT_PATH", "PPO.XML_PATH", "TERRAIN.CENTER_FLAT", "TERRAIN.WALL_LENGTH",
    "TORSO.CONDIM", "TORSO.HEIGHT_RANGE", "TORSO.NUM_TORSO_RANGE", "TORSO.RADIUS_RANGE", "XML.SHADOWCLIP",
    *REPLACED_KEYS,
})


def parse_config(
    cfg_file: str | Path | Sequence[str | Path] | None = None,
    overrides: Sequence[str] | Mapping[str, Any] = (),
    retired: frozenset[str] = frozenset(),
    check: Callable[[CfgNode], None] | None = None,
    read: Callable[[Path], Any] | None = None,
) -> CfgNode:
    """The defaults, then ``cfg_file``, then ``overrides``: the frozen tree, typed but not checked.

    Programs load a config with ``derl.checked_config.load_config``, which passes the checks of
    every domain (tasks, terrain, mutations, devices) as ``check``; this module knows none of them.

    Args:
        cfg_file: optional YAML file with a (partial) tree of keys, or several applied in order
            (a task preset, then ``configs/gpu_server.yml``).
        overrides: ``["KEY", "VALUE", ...]`` strings from the command line (values parsed
            as YAML), or a mapping of keys to already-typed values.
        retired: keys skipped where a file sets them (``RETIRED_KEYS`` for a run's own config.yaml).
        check: called with the tree before the derived keys are computed; a ``ConfigError`` it
            raises gets where its key was set (a file, the command line) or that it is a default.
        read: reads and parses a file (``derl.fileio.read_yaml`` for a file derl reads back: never
            through a link or from a FIFO, bounded, no aliases); None: a user's file, read as given.

    Raises:
        ConfigError: unknown or ambiguous key, wrong type, derived key set, missing file, or any
            value ``check`` rejects (named with the file that set it).
    """
    tree = _defaults()
    leaves = [path for path, _ in flatten(tree)]
    files = [] if cfg_file is None else [cfg_file] if isinstance(cfg_file, str | Path) else list(cfg_file)
    file_pairs = [(key, value, str(path)) for path in files for key, value in flatten(_read_yaml(path, read))
                  if key not in retired]
    origins: dict[str, str] = {}
    for key, value, origin in file_pairs + [(k, v, "command line") for k, v in _pairs_from_overrides(overrides)]:
        try:
            path = _resolve_key(str(key), leaves)
            if path in DERIVED_KEYS:
                if origin != "command line":
                    continue  # a dumped config carries the derived value; it is recomputed
                raise ConfigError(f"config key {path} is derived and cannot be set")
            _set(tree, path, value)
        except ConfigError as err:
            raise ConfigError(f"{err} (set in {origin})" if origin != "command line" else str(err)) from None
        origins[path] = origin
    if check is not None:
        try:
            check(CfgNode(tree))  # before deriving: derived keys divide by checked counts
        except ConfigError as err:
            raise ConfigError(f"{err} ({_origin(err.keys, origins)})", *err.keys) from None
    _derive(tree)
    return CfgNode(tree)


def with_values(cfg: CfgNode, values: Mapping[str, Any]) -> CfgNode:
    """``cfg`` with some keys set to values a program computed (an absolute ``OUT_DIR``, a worker count).

    No file is read: a node that loaded and checked its config once passes it on this way. Values
    take their key's type, derived keys are recomputed; the values are the caller's to keep valid.
    """
    tree = cfg.to_dict()
    for key, value in values.items():
        if key in DERIVED_KEYS:
            raise ConfigError(f"config key {key} is derived and cannot be set")
        _set(tree, key, value)
    _derive(tree)
    return CfgNode(tree)


def _origin(keys: Sequence[str], origins: Mapping[str, str]) -> str:
    set_keys = [key for key in keys if key in origins]
    return _origin_text(origins[set_keys[0]]) if set_keys else "default value"


def _origin_text(origin: str) -> str:
    return "set on the command line" if origin == "command line" else f"set in {origin}"


PRESET_DIR = Path(__file__).resolve().parents[1] / "configs" / "evo"


def dump_config(cfg: CfgNode) -> str:
    """The resolved config as YAML text; loading it gives ``cfg`` back."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=None)

