"""The body's config sections: MJCF template options (``XML``), joints and motors (``BODY``), the head
(``TORSO``) and the limbs (``LIMB``). Values follow DERL."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from derl.config import ConfigError, Range, Section, expand_range, key

# MuJoCo's contact dimensionalities (XML.GEOM_CONDIM).
CONDIMS = (1, 3, 4, 6)
# What a body may hold: the bounds of the design space's keys below and of the genome reader
# (``derl.morphology.genome``), one declaration for both, so that every body a config lets the search draw
# is one the reader accepts back. Far outside what DERL's configs draw (radii 0.05-0.1 m, lengths 0.2-0.4 m,
# densities 500-1000 kg/m^3, gears 150-300) and inside what MuJoCo compiles and simulates (a head radius
# of 1e300 is a mujoco.FatalError).
SIZE = Range(1e-3, 10.0)  # m: head and limb radii, limb lengths
DENSITY = Range(1.0, 1e5)  # kg/m^3
GEAR = Range(1e-3, 1e4)
ANGLE = Range(-360.0, 360.0)  # degrees: limb directions and joint ranges
# Limbs of a body (LIMB.MAX_LIMBS, LIMB.NUM_LIMBS_RANGE).
LIMBS = Range(1, 100, whole=True)
# A joint's axis in the limb geom's frame, and a limb's one or two joints (BODY.JOINT_AXIS).
AXES = ("x", "y")
JOINT_AXES = (*AXES, *(a + b for i, a in enumerate(AXES) for b in AXES[i + 1:]))  # x, y, xy: no axis twice


@dataclass(frozen=True)
class XmlCfg(Section):
    """MJCF template options."""

    NJMAX: int = key(1000, "MJCF `<size njmax>` of a world: constraint rows MuJoCo C allocates", Range(1, 100_000))
    NCONMAX: int = key(200, "MJCF `<size nconmax>` of a world: contacts MuJoCo C allocates", Range(1, 100_000))
    GEOM_CONDIM: int = key(3, "contact dimensionality of every geom (the head's too)", Range(1, 6))
    GEOM_FRICTION: tuple[float, ...] = key([0.7, 0.1, 0.1], "sliding, torsional and rolling friction of every geom",
                                           Range(0, 100))
    FILTER_PARENT: str = key("enable", "MuJoCo's `filterparent` flag: no contacts between a body and its parent")

    def check(self) -> None:
        if self.GEOM_CONDIM not in CONDIMS:
            raise ConfigError(f"config key XML.GEOM_CONDIM must be one of {', '.join(map(str, CONDIMS))} (MuJoCo's "
                              f"contact dimensions), got {self.GEOM_CONDIM}", "XML.GEOM_CONDIM")


@dataclass(frozen=True)
class BodyCfg(Section):
    FLOOR_OFFSET: float = key(0.2, "gap (m) between the lowest point of a unimal and the floor at the start",
                              Range(0, 100))
    JOINT_ANGLE_LIST: tuple[tuple[int, int], ...] = key(
        [[-30, 0], [0, 30], [-30, 30], [-45, 45], [-45, 0], [0, 45],
         [-60, 0], [0, 60], [-60, 60], [-90, 0], [0, 90], [-60, 30], [-30, 60]],
        "hinge ranges in degrees, one pair drawn per joint", ANGLE)
    MOTOR_GEAR_RANGE: tuple[float, ...] = key([150, 300, 50], "motor gears drawn from `[start, stop, step]`, stop "
                                                              "included", GEAR, span=True)
    JOINT_AXIS: tuple[str, ...] = key(["x", "y", "xy"], "joint axes in the limb geom's frame a limb may get: x, y "
                                                        "or both", choices=JOINT_AXES)

    def check(self) -> None:
        pairs = self.JOINT_ANGLE_LIST
        if not pairs or any(len(pair) != 2 or pair[0] >= pair[1] for pair in pairs):  # as the genome reader
            raise ConfigError(f"config key BODY.JOINT_ANGLE_LIST must hold [low, high] pairs in degrees, low below "
                              f"high, got {[list(pair) for pair in pairs]}", "BODY.JOINT_ANGLE_LIST")
        if not self.JOINT_AXIS:
            raise ConfigError("config key BODY.JOINT_AXIS is empty", "BODY.JOINT_AXIS")


@dataclass(frozen=True)
class TorsoCfg(Section):
    HEAD_RADIUS_RANGE: tuple[float, ...] = key([0.10], "head radii (m) drawn from (`[value]` or `[start, stop, "
                                                       "step]`)", SIZE, span=True)
    DENSITY_RANGE: tuple[float, ...] = key([500, 1000, 100], "head densities (kg/m^3) drawn from `[start, stop, "
                                                             "step]`", DENSITY, span=True)


@dataclass(frozen=True)
class LimbCfg(Section):
    RADIUS_RANGE: tuple[float, ...] = key([0.05], "limb radii (m) drawn from", SIZE, span=True)
    HEIGHT_RANGE: tuple[float, ...] = key([0.2, 0.4, 0.1], "limb lengths (m) drawn from `[start, stop, step]`",
                                          SIZE, span=True)
    DENSITY_RANGE: tuple[float, ...] = key([500, 1000, 100], "limb densities (kg/m^3) drawn from `[start, stop, "
                                                             "step]`", DENSITY, span=True)
    NUM_LIMBS_RANGE: tuple[int, ...] = key([2, 8, 1], "limb counts drawn for the initial population (inclusive "
                                                      "range)", LIMBS, span=True)
    MAX_LIMBS: int = key(10, "most limbs a body may have: `grow_limb` stops there", LIMBS)

    def check(self) -> None:
        limbs = expand_range(self.NUM_LIMBS_RANGE, "LIMB.NUM_LIMBS_RANGE")
        if min(limbs) < 1 or max(limbs) > self.MAX_LIMBS:
            raise ConfigError(f"config key LIMB.NUM_LIMBS_RANGE {list(self.NUM_LIMBS_RANGE)} must lie within "
                              f"1..LIMB.MAX_LIMBS ({self.MAX_LIMBS})", "LIMB.NUM_LIMBS_RANGE", "LIMB.MAX_LIMBS")


@dataclass(frozen=True)
class UnimalCfg:
    """What a unimal is drawn from, mutated and built with: the body's four sections and ``EVO.MUTATION_OPS``
    (``derl.checked_config.Config.unimal``)."""

    XML: XmlCfg
    BODY: BodyCfg
    TORSO: TorsoCfg
    LIMB: LimbCfg
    MUTATION_OPS: tuple[str, ...]


class MjcfOptions(Protocol):
    """What the MJCF builder reads: the template options and the start gap (a ``UnimalCfg`` or the world's
    ``derl.envs.config.WorldCfg``)."""

    @property
    def XML(self) -> XmlCfg: ...

    @property
    def BODY(self) -> BodyCfg: ...
