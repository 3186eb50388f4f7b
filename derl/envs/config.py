"""The world's config sections: the env and its task (``ENV``), the terrain corridor (``TERRAIN``), the
objects of the evaluation tasks (``OBJECT``), the height-map observation (``HFIELD``), the simulator
(``SIM``) and its threads (``VECENV``). Values follow DERL. What the keys must satisfy with the tasks,
obstacles and observations that exist is checked by ``derl.envs.checks``."""

from __future__ import annotations

from dataclasses import dataclass

from derl.config import UNIT_INTERVAL, Range, Section, key
from derl.morphology.config import BodyCfg, XmlCfg

# The values SIM.BACKEND may take (docs/guides/gpus.md#simulating-on-a-gpu).
SIM_BACKENDS = ("mujoco", "warp")
# Upper bounds of lengths in metres and of counts of things in the world, far above any task's.
METRES = Range(0, 10_000)
# Positions (m) in the world, heights (m) of its ground, half-extents (m) of its corridor or arena (the largest
# preset's: 75 m; the arrays sized by them must also fit the node's memory: derl.checked_config), the observed
# height-map patch (m; DERL's: 4 m ahead).
COORDINATE = Range(-10_000, 10_000)
HEIGHT = Range(-1_000, 1_000)
HALF_EXTENT = Range(0, 1_000, low_open=True)
PATCH = Range(0, 100)
# Reward weights and parameters: a weight past a million is a typo, whose rewards would overflow float32
# returns (ENV.FORWARD_REWARD_WEIGHT 1e308 made every loss NaN).
WEIGHT = Range(-1e6, 1e6)


@dataclass(frozen=True)
class EnvCfg(Section):
    FORWARD_REWARD_WEIGHT: float = key(1.0, "weight of the `forward` reward term (velocity along the task's axis)",
                                       WEIGHT)
    CTRL_COST_WEIGHT: float = key(1e-3, "`__reward__ctrl` = -weight x sum(a^2)", Range(0, WEIGHT.high))
    STAND_REWARD_WEIGHT: float = key(0.0, "weight of the `stand` term (0: logged only, as DERL)", WEIGHT)
    REACH_REWARD_PARAMS: tuple[float, ...] = key(
        [100.0, 0.0, 10.0], "reach reward: [distance-gain weight, unused, bonus per step at the goal]", WEIGHT)
    RESET_NOISE_SCALE: float = key(5e-3, "scale of the uniform noise on the initial joint positions and velocities",
                                   Range(0, 10))
    EPISODE_LENGTH: int = key(1000, "env steps before an episode is truncated (time limit; 20 s)",
                              Range(1, 100_000))
    STAND_HEIGHT_RATIO: float = key(0.5, "a fall: the head below this fraction of its standing height", UNIT_INTERVAL)
    MODULES: tuple[str, ...] = key(
        ["Floor", "Agent"], "modules that build the world, in order (`Floor` or `Terrain`; `Agent`)")
    OBS_TYPES: tuple[str, ...] = key(["position", "velocity", "imu_vel", "touch", "extremities"],
                                     "parts of the proprioceptive observation, in order")
    KEYS_TO_KEEP: tuple[str, ...] = key(
        ["proprioceptive"], "observation keys the policy sees (`proprioceptive`, `hfield`, `obj`, `goal`)")
    TASK: str = key("locomotion", "the task (a registered name: locomotion, manipulation, patrol, ...)")


# Sizes are half-extents (MuJoCo box convention); x length, y width, z height.
@dataclass(frozen=True)
class TerrainCfg(Section):
    SIZE: tuple[float, ...] = key([25, 20, 1], "half-extents (m) of the terrain corridor: length, width, height",
                                    HALF_EXTENT)
    START_FLAT: int = key(2, "flat stretch (m) at the start of the corridor", METRES)
    TYPES: tuple[str, ...] = key(["curve_slope"], "obstacle types of the terrain (`curve_slope`, `steps`, "
                                                  "`rugged_square`)")
    FLAT_LENGTH_RANGE: tuple[float, ...] = key([1, 3, 1], "lengths (m) of the flat stretches between obstacles",
                                               Range(0, 2 * HALF_EXTENT.high), span=True)
    HFIELD_LENGTH_RANGE: tuple[float, ...] = key([4, 8, 4], "lengths (m) of a `curve_slope` or `rugged_square` "
                                                            "stretch", Range(0, 2 * HALF_EXTENT.high), span=True)
    CURVE_HEIGHT_RANGE: tuple[float, ...] = key([0.6, 1.2, 0.1], "heights (m) of `curve_slope` hills", HEIGHT,
                                               span=True)
    BOUNDARY_WALLS: bool = key(True, "walls along the sides of the corridor")
    STEP_HEIGHT: float = key(0.2, "height (m) of one stair of `steps`", HEIGHT)
    STEP_LENGTH_RANGE: tuple[float, ...] = key([12, 16, 4], "lengths (m) of a `steps` stretch",
                                               Range(0, 2 * HALF_EXTENT.high), span=True)
    NUM_STEPS: int = key(8, "stairs of a `steps` stretch (up, then down)", Range(1, 1000))
    RUGGED_SQUARE_CLIP_RANGE: tuple[float, ...] = key([0.2, 0.3, 0.1], "heights (m) at which `rugged_square` "
                                                                       "rubble is clipped", HEIGHT, span=True)
    BOWL_MAX_Z: float = key(3.0, "height (m) of the escape_bowl task's bumps before clipping", HEIGHT)
    BANK_SIZE: int = key(0, "K > 0: K terrains drawn at build (from RNG_SEED) that the episodes of the "
                            "corridor (VT, MVT) and escape_bowl's bowl pick from; 0: a new terrain per "
                            "episode, as DERL, on SIM.BACKEND mujoco, and a bank of 32 on warp (one model "
                            "for every world)", Range(0, 4096))
    PATROL_HALF_LEN: float = key(3.0, "patrol: the goals sit at (+L, 0) and (-L, 0)", METRES)
    # Degrees: the plane's cosine scales the forward reward.
    INCLINE_ANGLE: int = key(0, "incline: the plane's tilt in degrees (-10: rising along +x)", Range(-89, 89))


@dataclass(frozen=True)
class ObjectCfg(Section):
    GOAL_POS: tuple[float, ...] = key([], "push_box_incline: the goal's (x, y); empty elsewhere", COORDINATE)
    BOX_POS: tuple[float, ...] = key([], "push_box_incline: the box's starting (x, y); empty elsewhere",
                                       COORDINATE)
    PLACEMENT_BUFFER_LEN: int = key(3, "object and goal placement: margin (m) kept from the ends of the arena", METRES)
    PLACEMENT_BUFFER_WIDTH: int = key(5, "object and goal placement: margin (m) kept from the sides of the arena",
                                      METRES)
    CLOSE_PLACEMENT_DIST: int = key(10, "least gap (m) between the object and the far margin", METRES)
    SUCCESS_MARGIN: float = key(0.5, "distance (m) at which the agent reached the object, or the object the goal",
                                 METRES)
    BOX_SIDE: float = key(0.5, "half side (m) of the pushed box", METRES)
    NUM_OBSTACLES: int = key(20, "obstacle task: fixed boxes in the corridor", Range(0, 10_000))
    OBSTACLE_LEN_RANGE: tuple[float, ...] = key([0.5, 3, 0.5], "obstacle task: half-lengths (m) of the boxes",
                                                METRES, span=True)
    OBSTACLE_WIDTH_RANGE: tuple[float, ...] = key([0.5, 3, 0.5], "obstacle task: half-widths (m) of the boxes",
                                                  METRES, span=True)
    FORWARD_PLACEMENT_DIST: tuple[float, ...] = key([15, 25], "range (m) ahead of the agent where the object is "
                                                              "placed", METRES)
    TYPE: str = key("box", "the manipulated object: `box` or `ball`")
    BALL_RADIUS: float = key(0.15, "radius (m) of the ball (`OBJECT.TYPE ball`)", METRES)
    BOX_MASS: float = key(1.0, "mass (kg) of the box", Range(0, 1e6))


@dataclass(frozen=True)
class HfieldCfg(Section):
    OBS_SIZE: tuple[float, ...] = key([1, 4, 4, 4], "observed height-map patch in metres: behind, front, right, "
                                                    "left", PATCH)
    PADDING: int = key(10, "cells of wall height read outside the corridor before the gap", Range(0, 10_000))
    GAP_DEPTH: int = key(-10, "height (m) read for the region beyond the walls", Range(-10_000, 0))
    # Cells per metre: 100 (1 cm) already makes the default 50 x 40 m corridor 20 million cells.
    NUM_DIVS: int = key(10, "height-map cells per metre", Range(1, 100))


@dataclass(frozen=True)
class SimCfg(Section):
    # Single envs (replay, videos, evaluation rollouts) always use mujoco.
    BACKEND: str = key("mujoco", "simulator of a training's envs: `mujoco` (MuJoCo C on the CPU, DERL's) or "
                                 "`warp` (MuJoCo Warp on `DEVICE`)", choices=SIM_BACKENDS)
    # MuJoCo Warp preallocates them; a step that needs more drops the excess, which derl counts by type and
    # reports once per morphology (the next model build doubles the buffer).
    NCONMAX: int = key(64, "`warp` only: contacts allocated per world", Range(1, 2**16))
    NJMAX: int = key(256, "`warp` only: constraint rows allocated per world", Range(1, 2**16))


@dataclass(frozen=True)
class VecenvCfg(Section):
    THREADS: int = key(1, "threads that step one training's simulations (`mujoco.batch.Batch` nthread)",
                       Range(1, 1024))


@dataclass(frozen=True)
class WorldCfg:
    """What the world reads: its sections, the body's MJCF options and start gap, and the seed of its draws.

    ``derl.checked_config.Config.world`` makes it; tasks, arenas, terrain and the batched env take it.
    """

    XML: XmlCfg
    BODY: BodyCfg
    ENV: EnvCfg
    TERRAIN: TerrainCfg
    OBJECT: ObjectCfg
    HFIELD: HfieldCfg
    SIM: SimCfg
    VECENV: VecenvCfg
    RNG_SEED: int
