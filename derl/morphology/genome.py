"""The UNIMAL genome: plain, versioned, JSON-serialisable data.

A genome is a head plus limb *groups*. A group is one limb on the plane of
symmetry (xz) or a mirrored pair stored once: the first limb is drawn, the
second is its mirror image (y -> -y), so symmetry holds by construction.

A group hangs from a parent: the head (``parent=None``, site ``"center"``) or
the first limb of a parent group (site ``"mid"`` or ``"btm"``). For a pair on a
plane parent both limbs share that parent; for a pair on a pair parent the
second limb hangs from the parent's second limb (its mirror site).

Limb ids are never reused; ``next_limb_id`` is the next free one. Groups are
stored in growth order, so a parent group always precedes its children.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

SCHEMA_VERSION = 1
HEAD_SITE = "center"
LIMB_SITES = ("mid", "btm")
AXES = ("x", "y")


def direction(theta: float, phi: float) -> np.ndarray:
    """Unit vector u(theta, phi) = (sin phi cos theta, sin phi sin theta, cos phi), in degrees.

    Rounded to 2 decimals first (as DERL) so on-plane directions (theta in {0, 180} or
    phi = 180) have y exactly 0, then normalised so limb lengths are exact.
    """
    t, p = math.radians(theta), math.radians(phi)
    raw = (math.sin(p) * math.cos(t), math.sin(p) * math.sin(t), math.cos(p))
    rounded = np.array([round(v, 2) + 0.0 for v in raw])
    return rounded / np.linalg.norm(rounded)


def on_plane(u: np.ndarray) -> bool:
    return u[1] == 0.0


class GenomeError(ValueError):
    """A genome file or value that does not follow the schema (one-line message)."""


@dataclass(frozen=True)
class Joint:
    """A hinge about the limb frame's ``axis`` with a range in degrees and a motor gear."""

    axis: str
    range: tuple[float, float]
    gear: float


@dataclass(frozen=True)
class LimbGroup:
    """One limb on the symmetry plane (``ids=(i,)``) or a mirrored pair (``ids=(i, i+1)``).

    ``theta``/``phi`` (degrees) give the direction of the first limb; the second
    limb of a pair points along its mirror image. ``length`` is the capsule's
    cylinder length; joints apply to every limb of the group.
    """

    ids: tuple[int, ...]
    parent: int | None
    site: str
    radius: float
    length: float
    theta: float
    phi: float
    joints: tuple[Joint, ...]

    @property
    def is_pair(self) -> bool:
        return len(self.ids) == 2


@dataclass(frozen=True)
class Genome:
    """A UNIMAL morphology. ``parent_id``/``mutation`` record how it was made."""

    id: str
    head_radius: float
    head_density: float
    limb_density: float
    groups: tuple[LimbGroup, ...] = ()
    next_limb_id: int = 0
    parent_id: str | None = None
    mutation: str | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def num_limbs(self) -> int:
        return sum(len(g.ids) for g in self.groups)

    @property
    def dof(self) -> int:
        return sum(len(g.ids) * len(g.joints) for g in self.groups)

    def group_of(self, limb_id: int) -> LimbGroup:
        """The group holding ``limb_id`` (first or mirrored limb)."""
        for group in self.groups:
            if limb_id in group.ids:
                return group
        raise KeyError(f"genome {self.id} has no limb {limb_id}")

    def body(self) -> tuple:
        """Everything but the identity fields: equal bodies mean identical morphologies."""
        return (self.head_radius, self.head_density, self.limb_density, self.groups)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2) + "\n"

    @staticmethod
    def from_json(text: str) -> Genome:
        """Parses and validates a genome written by ``to_json``.

        Raises:
            GenomeError: not JSON, wrong schema version, missing or malformed field.
        """
        try:
            data = json.loads(text)
        except ValueError as err:  # JSONDecodeError, or an integer of more digits than Python converts
            raise GenomeError(f"genome is not valid JSON: {err}") from None
        except RecursionError:  # a crafted file nesting thousands of levels
            raise GenomeError("genome is not valid JSON: nested too deep") from None
        return Genome.from_dict(data)

    @staticmethod
    def from_dict(data: Any) -> Genome:
        """Validates a parsed genome (``from_json`` without the parsing: a genome read once is not
        written back to text to be read again).

        Raises:
            GenomeError: not an object, wrong schema version, missing or malformed field.
        """
        if not isinstance(data, dict):
            raise GenomeError("genome JSON must be an object")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise GenomeError(f"unsupported genome schema_version {version!r} (expected {SCHEMA_VERSION})")
        try:
            groups = tuple(_group_from_dict(g) for g in data["groups"])
            genome = Genome(
                id=_typed(data["id"], str, "id"),
                head_radius=_number(data["head_radius"], "head_radius"),
                head_density=_number(data["head_density"], "head_density"),
                limb_density=_number(data["limb_density"], "limb_density"),
                groups=groups,
                next_limb_id=_typed(data["next_limb_id"], int, "next_limb_id"),
                parent_id=_optional(data["parent_id"], str, "parent_id"),
                mutation=_optional(data["mutation"], str, "mutation"),
            )
        except KeyError as err:
            raise GenomeError(f"genome is missing field {err.args[0]!r}") from None
        except (TypeError, AttributeError):
            raise GenomeError("genome has a malformed limb group or joint") from None
        validate(genome)
        return genome


def _group_from_dict(data: dict[str, Any]) -> LimbGroup:
    joints = tuple(
        Joint(
            axis=_typed(j["axis"], str, "joint axis"),
            range=_pair(j["range"]),
            gear=_number(j["gear"], "joint gear"),
        )
        for j in data["joints"]
    )
    return LimbGroup(
        ids=tuple(_typed(i, int, "limb id") for i in data["ids"]),
        parent=_optional(data["parent"], int, "group parent"),
        site=_typed(data["site"], str, "group site"),
        radius=_number(data["radius"], "limb radius"),
        length=_number(data["length"], "limb length"),
        theta=_number(data["theta"], "limb theta"),
        phi=_number(data["phi"], "limb phi"),
        joints=joints,
    )


def _typed(value: Any, kind: type, name: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise GenomeError(f"genome field {name} must be {kind.__name__}, got {value!r}")
    return value


def _optional(value: Any, kind: type, name: str) -> Any:
    return None if value is None else _typed(value, kind, name)


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise GenomeError(f"genome field {name} must be a number, got {value!r}")
    return value


def _pair(value: Sequence[Any]) -> tuple[float, float]:
    if len(value) != 2:
        raise GenomeError(f"joint range must have two values, got {value!r}")
    return (_number(value[0], "joint range"), _number(value[1], "joint range"))


def validate(genome: Genome) -> None:
    """Checks the structural rules of the schema.

    Raises:
        GenomeError: naming the first broken rule.
    """
    _check_values(genome)
    plane_parents: set[int | None] = {None}
    pair_parents: set[int] = set()
    seen: set[int] = set()
    for group in genome.groups:
        name = f"genome {genome.id}: limb group {list(group.ids)}"
        if len(group.ids) not in (1, 2) or seen & set(group.ids):
            raise GenomeError(f"{name} must hold one or two new limb ids")
        if group.is_pair and group.ids[1] != group.ids[0] + 1:
            raise GenomeError(f"{name}: a pair's ids must be consecutive")
        if max(group.ids) >= genome.next_limb_id:
            raise GenomeError(f"{name}: ids must be below next_limb_id {genome.next_limb_id}")
        expected_sites = (HEAD_SITE,) if group.parent is None else LIMB_SITES
        if group.site not in expected_sites:
            raise GenomeError(f"{name}: site {group.site!r} must be one of {expected_sites}")
        if group.parent not in plane_parents and group.parent not in pair_parents:
            raise GenomeError(f"{name}: parent {group.parent} is not the first limb of an earlier group")
        if not group.is_pair and group.parent in pair_parents:
            raise GenomeError(f"{name}: a single limb cannot hang from a mirrored pair")
        planar = on_plane(direction(group.theta, group.phi))
        if not group.is_pair and not planar:
            raise GenomeError(f"{name}: a single limb must lie on the symmetry plane")
        if group.is_pair and group.parent not in pair_parents and planar:
            raise GenomeError(f"{name}: a pair on a plane site must leave the symmetry plane")
        if not 1 <= len(group.joints) <= 2 or any(j.axis not in AXES for j in group.joints):
            raise GenomeError(f"{name}: needs one or two joints with axes among {AXES}")
        seen.update(group.ids)
        (pair_parents if group.is_pair else plane_parents).add(group.ids[0])


# A genome id names files (``<id>.json``, ``<id>.xml``): letters, digits, ``.``, ``_`` and ``-``, not
# starting with a dot, so no id is a path outside the folder it is written to.
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_id(value: str, name: str = "id") -> str:
    """``value`` if it is a valid genome id (``ID_PATTERN``); raises ``GenomeError`` otherwise."""
    if not ID_PATTERN.fullmatch(value):
        raise GenomeError(f"genome {name} {value!r} is not a valid id (letters, digits, '.', '_', '-'; "
                          "no leading dot, at most 128 characters)")
    return value


# Physical bounds of every value the MJCF builder uses, far outside what mutations draw (configs:
# radii 0.05-0.1 m, lengths 0.2-0.4 m, densities 500-1000 kg/m^3, gears 150-300, angles in degrees)
# and inside what MuJoCo compiles and simulates (a head_radius of 1e300 is a mujoco.FatalError).
SIZE_BOUNDS = (1e-3, 10.0)  # m: head and limb radii, limb lengths
DENSITY_BOUNDS = (1.0, 1e5)  # kg/m^3
GEAR_BOUNDS = (1e-3, 1e4)
ANGLE_BOUNDS = (-360.0, 360.0)  # degrees: directions and joint ranges


def _check_values(genome: Genome) -> None:
    """Ids usable as file names; every number finite and inside its physical bounds (above)."""
    check_id(genome.id)
    if genome.parent_id is not None:
        check_id(genome.parent_id, "parent_id")
    bounded = [("head_radius", genome.head_radius, SIZE_BOUNDS), ("head_density", genome.head_density, DENSITY_BOUNDS),
               ("limb_density", genome.limb_density, DENSITY_BOUNDS)]
    for group in genome.groups:
        name = f"limb group {list(group.ids)}"
        bounded += [(f"{name} radius", group.radius, SIZE_BOUNDS), (f"{name} length", group.length, SIZE_BOUNDS),
                    (f"{name} theta", group.theta, ANGLE_BOUNDS), (f"{name} phi", group.phi, ANGLE_BOUNDS)]
        for joint in group.joints:
            bounded.append((f"{name} joint gear", joint.gear, GEAR_BOUNDS))
            bounded += [(f"{name} joint range", value, ANGLE_BOUNDS) for value in joint.range]
            if joint.range[0] > joint.range[1]:
                raise GenomeError(f"genome {genome.id}: {name} joint range {list(joint.range)} is reversed")
    for name, value, (low, high) in bounded:
        if not (math.isfinite(value) and low <= value <= high):
            raise GenomeError(f"genome {genome.id}: {name} must be a number in [{low:g}, {high:g}], got {value!r}")
