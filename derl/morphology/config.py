"""The body's config sections: MJCF template options (``XML``), joints and motors (``BODY``), the head
(``TORSO``) and the limbs (``LIMB``). Values follow DERL."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from derl.config import ConfigError, Range, Section, expand_range, key

# MuJoCo's contact dimensionalities (XML.GEOM_CONDIM).
CONDIMS = (1, 3, 4, 6)


@dataclass(frozen=True)
class XmlCfg(Section):
    """MJCF template options."""

    NJMAX: int = key(1000, "MJCF `<size njmax>` of a world: constraint rows MuJoCo C allocates", Range(1, 100_000))
    NCONMAX: int = key(200, "MJCF `<size nconmax>` of a world: contacts MuJoCo C allocates", Range(1, 100_000))
    GEOM_CONDIM: int = key(3, "contact dimensionality of every geom (the head's too)", Range(1, 6))
    GEOM_FRICTION: tuple[float, ...] = key([0.7, 0.1, 0.1], "sliding, torsional and rolling friction of every geom")
    FILTER_PARENT: str = key("enable", "MuJoCo's `filterparent` flag: no contacts between a body and its parent")

    def check(self) -> None:
        if self.GEOM_CONDIM not in CONDIMS:
            raise ConfigError(f"config key XML.GEOM_CONDIM must be one of {', '.join(map(str, CONDIMS))} (MuJoCo's "
                              f"contact dimensions), got {self.GEOM_CONDIM}", "XML.GEOM_CONDIM")


@dataclass(frozen=True)
class BodyCfg(Section):
    FLOOR_OFFSET: float = key(0.2, "gap (m) between the lowest point of a unimal and the floor at the start")
    JOINT_ANGLE_LIST: tuple[tuple[int, int], ...] = key(
        [[-30, 0], [0, 30], [-30, 30], [-45, 45], [-45, 0], [0, 45],
         [-60, 0], [0, 60], [-60, 60], [-90, 0], [0, 90], [-60, 30], [-30, 60]],
        "hinge ranges in degrees, one pair drawn per joint")
    MOTOR_GEAR_RANGE: tuple[float, ...] = key([150, 300, 50], "motor gears drawn from `[start, stop, step]`, stop "
                                                              "included", span=True)
    JOINT_AXIS: tuple[str, ...] = key(["x", "y", "xy"], "joint axes in the limb geom's frame a limb may get: x, y "
                                                        "or both")


@dataclass(frozen=True)
class TorsoCfg(Section):
    HEAD_RADIUS_RANGE: tuple[float, ...] = key([0.10], "head radii (m) drawn from (`[value]` or `[start, stop, "
                                                       "step]`)", span=True)
    DENSITY_RANGE: tuple[float, ...] = key([500, 1000, 100], "head densities (kg/m^3) drawn from `[start, stop, "
                                                             "step]`", span=True)


@dataclass(frozen=True)
class LimbCfg(Section):
    RADIUS_RANGE: tuple[float, ...] = key([0.05], "limb radii (m) drawn from", span=True)
    HEIGHT_RANGE: tuple[float, ...] = key([0.2, 0.4, 0.1], "limb lengths (m) drawn from `[start, stop, step]`",
                                          span=True)
    DENSITY_RANGE: tuple[float, ...] = key([500, 1000, 100], "limb densities (kg/m^3) drawn from `[start, stop, "
                                                             "step]`", span=True)
    NUM_LIMBS_RANGE: tuple[int, ...] = key([2, 8, 1], "limb counts drawn for the initial population (inclusive "
                                                      "range)", span=True)
    MAX_LIMBS: int = key(10, "most limbs a body may have: `grow_limb` stops there", Range(1, 100))

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
