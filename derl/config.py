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
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Key:
    """One config key, declared once: ``default`` (whose type is the key's type) and ``meaning``,
    one line for the reference table of the docs."""

    default: Any
    meaning: str


def _declared() -> dict[str, Any]:
    """The default tree, each leaf a ``Key``: its default (which gives its type) and its meaning.

    Values follow DERL. This is the one declaration of the keys: ``_defaults`` takes the values,
    ``declared_keys`` the reference table of the docs (``docs/reference/config.md``).
    """
    return {
        "XML": {  # MJCF template options.
            "NJMAX": Key(1000, "MJCF `<size njmax>` of a world: constraint rows MuJoCo C allocates"),
            "NCONMAX": Key(200, "MJCF `<size nconmax>` of a world: contacts MuJoCo C allocates"),
            "GEOM_CONDIM": Key(3, "contact dimensionality of every geom (the head's too)"),
            "GEOM_FRICTION": Key([0.7, 0.1, 0.1], "sliding, torsional and rolling friction of every geom"),
            "FILTER_PARENT": Key("enable", "MuJoCo's `filterparent` flag: no contacts between a body and its parent"),
        },
        "BODY": {
            "FLOOR_OFFSET": Key(0.2, "gap (m) between the lowest point of a unimal and the floor at the start"),
            "JOINT_ANGLE_LIST": Key(
                [[-30, 0], [0, 30], [-30, 30], [-45, 45], [-45, 0], [0, 45],
                 [-60, 0], [0, 60], [-60, 60], [-90, 0], [0, 90], [-60, 30], [-30, 60]],
                "hinge ranges in degrees, one pair drawn per joint"),
            "MOTOR_GEAR_RANGE": Key([150, 300, 50], "motor gears drawn from `[start, stop, step]`, stop included"),
            "JOINT_AXIS": Key(["x", "y", "xy"], "joint axes in the limb geom's frame a limb may get: x, y or both"),
        },
        "TORSO": {
            "HEAD_RADIUS_RANGE": Key([0.10], "head radii (m) drawn from (`[value]` or `[start, stop, step]`)"),
            "DENSITY_RANGE": Key([500, 1000, 100], "head densities (kg/m^3) drawn from `[start, stop, step]`"),
        },
        "LIMB": {
            "RADIUS_RANGE": Key([0.05], "limb radii (m) drawn from"),
            "HEIGHT_RANGE": Key([0.2, 0.4, 0.1], "limb lengths (m) drawn from `[start, stop, step]`"),
            "DENSITY_RANGE": Key([500, 1000, 100], "limb densities (kg/m^3) drawn from `[start, stop, step]`"),
            "NUM_LIMBS_RANGE": Key([2, 8, 1], "limb counts drawn for the initial population (inclusive range)"),
            "MAX_LIMBS": Key(10, "most limbs a body may have: `grow_limb` stops there"),
        },
        "ENV": {
            "FORWARD_REWARD_WEIGHT": Key(1.0, "weight of the `forward` reward term (velocity along the task's axis)"),
            "CTRL_COST_WEIGHT": Key(1e-3, "`__reward__ctrl` = -weight x sum(a^2)"),
            "STAND_REWARD_WEIGHT": Key(0.0, "weight of the `stand` term (0: logged only, as DERL)"),
            "REACH_REWARD_PARAMS": Key([100.0, 0.0, 10.0],
                                      "reach reward: [distance-gain weight, unused, bonus per step at the goal]"),
            "RESET_NOISE_SCALE": Key(5e-3, "scale of the uniform noise on the initial joint positions and velocities"),
            "EPISODE_LENGTH": Key(1000, "env steps before an episode is truncated (time limit; 20 s)"),
            "STAND_HEIGHT_RATIO": Key(0.5, "a fall: the head below this fraction of its standing height"),
            "MODULES": Key(
                ["Floor", "Agent"], "modules that build the world, in order (`Floor` or `Terrain`; `Agent`)"),
            "OBS_TYPES": Key(["position", "velocity", "imu_vel", "touch", "extremities"],
                            "parts of the proprioceptive observation, in order"),
            "KEYS_TO_KEEP": Key(["proprioceptive"],
                                "observation keys the policy sees (`proprioceptive`, `hfield`, `obj`, `goal`)"),
            "TASK": Key("locomotion", "the task (a registered name: locomotion, manipulation, patrol, ...)"),
        },
        # Sizes are half-extents (MuJoCo box convention); x length, y width, z height.
        "TERRAIN": {
            "SIZE": Key([25, 20, 1], "half-extents (m) of the terrain corridor: length, width, height"),
            "START_FLAT": Key(2, "flat stretch (m) at the start of the corridor"),
            "TYPES": Key(["curve_slope"], "obstacle types of the terrain (`curve_slope`, `steps`, `rugged_square`)"),
            "FLAT_LENGTH_RANGE": Key([1, 3, 1], "lengths (m) of the flat stretches between obstacles"),
            "HFIELD_LENGTH_RANGE": Key([4, 8, 4], "lengths (m) of a `curve_slope` or `rugged_square` stretch"),
            "CURVE_HEIGHT_RANGE": Key([0.6, 1.2, 0.1], "heights (m) of `curve_slope` hills"),
            "BOUNDARY_WALLS": Key(True, "walls along the sides of the corridor"),
            "STEP_HEIGHT": Key(0.2, "height (m) of one stair of `steps`"),
            "STEP_LENGTH_RANGE": Key([12, 16, 4], "lengths (m) of a `steps` stretch"),
            "NUM_STEPS": Key(8, "stairs of a `steps` stretch (up, then down)"),
            "RUGGED_SQUARE_CLIP_RANGE": Key([0.2, 0.3, 0.1], "heights (m) at which `rugged_square` rubble is clipped"),
            "BOWL_MAX_Z": Key(3.0, "height (m) of the escape_bowl task's bumps before clipping"),
            "BANK_SIZE": Key(0, "K > 0: K terrains drawn at build (from RNG_SEED) that the episodes of the "
                                "corridor (VT, MVT) and escape_bowl's bowl pick from; 0: a new terrain per "
                                "episode, as DERL, on SIM.BACKEND mujoco, and a bank of 32 on warp (one model "
                                "for every world)"),
            "PATROL_HALF_LEN": Key(3.0, "patrol: the goals sit at (+L, 0) and (-L, 0)"),
            "INCLINE_ANGLE": Key(0, "incline: the plane's tilt in degrees (-10: rising along +x)"),
        },
        "OBJECT": {
            "GOAL_POS": Key([], "push_box_incline: the goal's (x, y); empty elsewhere"),
            "BOX_POS": Key([], "push_box_incline: the box's starting (x, y); empty elsewhere"),
            "PLACEMENT_BUFFER_LEN": Key(3, "object and goal placement: margin (m) kept from the ends of the arena"),
            "PLACEMENT_BUFFER_WIDTH": Key(5, "object and goal placement: margin (m) kept from the sides of the arena"),
            "CLOSE_PLACEMENT_DIST": Key(10, "least gap (m) between the object and the far margin"),
            "SUCCESS_MARGIN": Key(0.5, "distance (m) at which the agent reached the object, or the object the goal"),
            "BOX_SIDE": Key(0.5, "half side (m) of the pushed box"),
            "NUM_OBSTACLES": Key(20, "obstacle task: fixed boxes in the corridor"),
            "OBSTACLE_LEN_RANGE": Key([0.5, 3, 0.5], "obstacle task: half-lengths (m) of the boxes"),
            "OBSTACLE_WIDTH_RANGE": Key([0.5, 3, 0.5], "obstacle task: half-widths (m) of the boxes"),
            "FORWARD_PLACEMENT_DIST": Key([15, 25], "range (m) ahead of the agent where the object is placed"),
            "TYPE": Key("box", "the manipulated object: `box` or `ball`"),
            "BALL_RADIUS": Key(0.15, "radius (m) of the ball (`OBJECT.TYPE ball`)"),
            "BOX_MASS": Key(1.0, "mass (kg) of the box"),
        },
        "HFIELD": {
            "OBS_SIZE": Key([1, 4, 4, 4], "observed height-map patch in metres: behind, front, right, left"),
            "PADDING": Key(10, "cells of wall height read outside the corridor before the gap"),
            "GAP_DEPTH": Key(-10, "height (m) read for the region beyond the walls"),
            "NUM_DIVS": Key(10, "height-map cells per metre"),
        },
        "PPO": {
            "GAMMA": Key(0.99, "discount factor"),
            "GAE_LAMBDA": Key(0.95, "GAE lambda"),
            "CLIP_EPS": Key(0.2, "clip range of the surrogate and value losses"),
            "EPOCHS": Key(4, "passes over a rollout per iteration"),
            "BATCH_SIZE": Key(512, "minibatch size (rows of a rollout per optimiser step)"),
            "VALUE_COEF": Key(0.5, "weight of the value loss"),
            "KL_TARGET_COEF": Key(20.0, "stop an epoch when the approximate KL exceeds this times 0.01"),
            "USE_CLIP_VALUE_FUNC": Key(True, "clip the value loss as the surrogate"),
            "ENTROPY_COEF": Key(0.01, "weight of the entropy bonus"),
            "TIMESTEPS": Key(128, "steps per env per PPO iteration"),
            "NUM_ENVS": Key(32, "envs of one training (per rank), stepped in lockstep"),
            "BASE_LR": Key(3e-4, "Adam learning rate at the start"),
            "EPS": Key(1e-5, "Adam epsilon"),
            "LINEAR_LR_DECAY": Key(True, "decay the learning rate linearly to 0 over the budget"),
            "MAX_GRAD_NORM": Key(0.5, "gradient clipping norm"),
            "MAX_STATE_ACTION_PAIRS": Key(5_000_000, "env steps per morphology (all envs and ranks together)"),
            "MAX_ITERS": Key(-1, "derived, cannot be set: `MAX_STATE_ACTION_PAIRS // (TIMESTEPS * NUM_ENVS)`; "
                                 "N data-parallel ranks run `MAX_ITERS // N`"),
            "LR_SCALING": Key("none", "data-parallel runs: learning rate times 1, sqrt(N) or N for N ranks "
                                      "(`none`, `sqrt`, `linear`)"),
            "AMP": Key(False, "bf16 autocast of the learner on CUDA (ignored on the CPU)"),
            "VIDEO_LENGTH": Key(1000, "frames of an `EVO.VIDEOS_LAST_N` video"),
        },
        "MODEL": {
            "PRO_HIDDEN_DIMS": Key([64, 64], "hidden layers of the actor and critic MLPs"),
            "OBS_FEAT_HIDDEN_DIMS": Key([64], "hidden layers of the encoder of each other observation key"),
        },
        "SIM": {
            # Single envs (replay, videos, evaluation rollouts) always use mujoco.
            "BACKEND": Key("mujoco", "simulator of a training's envs: `mujoco` (MuJoCo C on the CPU, DERL's) "
                                     "or `warp` (MuJoCo Warp on `DEVICE`)"),
            # MuJoCo Warp preallocates them; a step that needs more drops the excess, which derl counts
            # by type and reports once per morphology (the next model build doubles the buffer).
            "NCONMAX": Key(64, "`warp` only: contacts allocated per world"),
            "NJMAX": Key(256, "`warp` only: constraint rows allocated per world"),
        },
        "VECENV": {
            "THREADS": Key(1, "threads that step one training's simulations (`mujoco.batch.Batch` nthread)"),
        },
        "EVO": {
            "IS_EVO": Key(True, "false: random search, DERL's baseline (every slot drawn like the initial "
                                "population, no tournament)"),
            "NUM_PROCESSES": Key(0, "workers on this node; 0 = as many as its cores and free memory hold"),
            "INIT_POPULATION_SIZE": Key(576, "initial population (from 10x as many candidates, look-alikes removed)"),
            "INIT_WAIT_TIMEOUT": Key(86400, "seconds other nodes wait for node 0's initial population"),
            # Keep it well above NFS attribute caching (60 s).
            "LEASE_SECONDS": Key(600.0, "a slot whose owner's heartbeat is older than this is taken over; "
                                        "a node whose worker keeps failing this long stops"),
            "SEARCH_SPACE_SIZE": Key(4000, "morphologies trained in all, initial population included"),
            "TOURNAMENT_TYPE": Key("aging_num", "`aging_num`, `aging_percent`, `vanilla_num` or `vanilla_percent`"),
            "AGING_WINDOW_SIZE": Key(576, "the aging window: newest published morphologies a tournament draws from"),
            "NUM_PARTICIPANTS": Key(4, "morphologies per tournament (`*_num`)"),
            "PERCENT_PARTICIPANTS": Key(5, "morphologies per tournament, percent of the pool (`*_percent`)"),
            "MUTATION_OPS": Key(["grow_limb", "joint_angle", "limb_params", "dof", "density", "gear", "delete_limb"],
                                "mutation operators drawn from"),
            "SELECTION_CRITERIA": Key(["__reward__forward", "__reward__stand"],
                                      "the selection criterion: published fields compared (Pareto front); "
                                      "the first is the fitness shown by status and report"),
            "SELECTION_CRITERIA_OBJ": Key([-1, -1], "one per criterion: -1 maximise, +1 minimise"),
            "VIDEOS_LAST_N": Key(0, "record a policy video of each of the last N slots into `videos/`"),
        },
        "TENSORBOARD": {
            "ENABLED": Key(True, "TensorBoard event files of trainings, evaluation cells and the search (node 0)"),
            "PER_MORPHOLOGY": Key(False, "evolution only: each morphology's training curves too "
                                         "(`OUT_DIR/tensorboard/morphologies/`)"),
        },
        "OUT_DIR": Key("output/default", "the (shared) output folder"),
        "RNG_SEED": Key(1, "root of every random stream"),
        "DEVICE": Key("cpu", "learner (and `warp` envs) device: `cpu`, `cuda`, `cuda:N`, `auto`"),
        "TORCH_THREADS": Key(1, "threads of torch and of every BLAS/OpenMP pool in a process"),
        "CHECKPOINT_PERIOD": Key(100, "PPO iterations between checkpoints"),
        "NODE_ID": Key(0, "this node, 0 .. NUM_NODES - 1"),
        "NUM_NODES": Key(1, "nodes sharing `OUT_DIR`"),
    }


def _values(tree: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _values(v) if isinstance(v, Mapping) else v.default for k, v in tree.items()}


def _defaults() -> dict[str, Any]:
    """The default tree (a fresh copy: every call builds it anew)."""
    return _values(_declared())


@dataclass(frozen=True)
class KeyDoc:
    """A flattened key as the reference documents it."""

    key: str
    default: Any
    type: str
    meaning: str


def declared_keys() -> list[KeyDoc]:
    """Every flattened key with its default, type and meaning, in declaration order."""
    return [KeyDoc(path, key.default, type(key.default).__name__, key.meaning)
            for path, key in flatten(_declared())]


# Keys computed from others; setting them by hand is an error.
DERIVED_KEYS = ("PPO.MAX_ITERS",)

# The values EVO.TOURNAMENT_TYPE may take: derl.evolution.selection implements them and
# derl.checked_config checks the key against them, both from this one definition.
TOURNAMENT_TYPES = ("aging_num", "aging_percent", "vanilla_num", "vanilla_percent")

# The values SIM.BACKEND may take, checked by derl.checked_config (docs/guides/gpus.md#simulating-on-a-gpu).
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
        except ValueError as err:  # derl.fileio.reads.YamlFileError: a link, a FIFO, too large or deep, aliases
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
        read: reads and parses a file (``derl.fileio.reads.read_yaml`` for a file derl reads back: never
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


def dump_config(cfg: CfgNode) -> str:
    """The resolved config as YAML text; loading it gives ``cfg`` back."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=None)

