"""What a UNIMAL genome must be (``derl.morphology.genome``'s data, read from outside the process).

A genome's JSON values are read through ``checked_type``/``checked_number``/... (``Genome.from_dict``), and a
genome built from them is held to the schema and, with a config's ``UnimalCfg``, to its design space
(``validate``): at most ``max_genome_bytes`` of JSON, 1 to ``LIMB.MAX_LIMBS`` limbs, every value inside its
config range and every direction, joint and pair as UNIMAL grows them (the sites and directions below).

Below ``derl.morphology.genome``, which imports it: the checks read a genome through ``GenomeShape``, what
they need of one, so the import goes one way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from derl.config import expand_range
from derl.fileio.reads import JsonFileError
from derl.morphology.config import ANGLE, AXES, DENSITY, GEAR, SIZE, UnimalCfg

HEAD_SITE = "center"
LIMB_SITES = ("mid", "btm")
# The directions UNIMAL grows limbs in (degrees; ``mutations.grow_limb``): theta around z, phi from +z,
# horizontal or downward.
THETAS = (0, 45, 90, 135, 180, 225, 270, 315)
PHIS = (90, 135, 180)
# The JSON a genome of LIMB.MAX_LIMBS limbs may take: ``to_json`` writes about 300 bytes a limb (a pair
# with two joints, 600 for both limbs) and 300 for the rest; a file of more is refused unread.
BYTES_PER_LIMB = 4096
BYTES_PER_GENOME = 4096


def max_genome_bytes(unimal: UnimalCfg) -> int:
    """The most bytes a genome's JSON may have under ``unimal`` (``LIMB.MAX_LIMBS`` limbs)."""
    return BYTES_PER_GENOME + BYTES_PER_LIMB * unimal.LIMB.MAX_LIMBS


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


def json_problem(err: JsonFileError, unimal: UnimalCfg | None) -> str:
    """The one line of a genome's JSON refused by ``derl.fileio.reads`` (its size limit explained)."""
    if unimal is not None and "larger than" in err.reason:
        return (f"{err} (a genome has at most LIMB.MAX_LIMBS = {unimal.LIMB.MAX_LIMBS} limbs, "
                f"{BYTES_PER_LIMB} bytes each)")
    return str(err)


# The readers of a genome's JSON values (``Genome.from_dict``): each returns its value, or raises ``GenomeError``
# naming the field.
def checked_type(value: Any, kind: type, name: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise GenomeError(f"genome field {name} must be {kind.__name__}, got {value!r}")
    return value


def checked_optional(value: Any, kind: type, name: str) -> Any:
    return None if value is None else checked_type(value, kind, name)


def checked_number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise GenomeError(f"genome field {name} must be a number, got {value!r}")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:  # float() of it overflows
        raise GenomeError(f"genome field {name} must be a number in float range, got an integer of "
                          f"{value.bit_length()} bits")
    return value


def checked_pair(value: Sequence[Any]) -> tuple[float, float]:
    if len(value) != 2:
        raise GenomeError(f"joint range must have two values, got {value!r}")
    return (checked_number(value[0], "joint range"), checked_number(value[1], "joint range"))


class JointShape(Protocol):
    """What the checks read of a ``derl.morphology.genome.Joint``."""

    @property
    def axis(self) -> str: ...
    @property
    def range(self) -> tuple[float, float]: ...
    @property
    def gear(self) -> float: ...


class GroupShape(Protocol):
    """What the checks read of a ``derl.morphology.genome.LimbGroup``."""

    @property
    def ids(self) -> tuple[int, ...]: ...
    @property
    def parent(self) -> int | None: ...
    @property
    def site(self) -> str: ...
    @property
    def radius(self) -> float: ...
    @property
    def length(self) -> float: ...
    @property
    def theta(self) -> float: ...
    @property
    def phi(self) -> float: ...
    @property
    def joints(self) -> Sequence[JointShape]: ...
    @property
    def is_pair(self) -> bool: ...


class GenomeShape(Protocol):
    """What the checks read of a ``derl.morphology.genome.Genome``."""

    @property
    def id(self) -> str: ...
    @property
    def parent_id(self) -> str | None: ...
    @property
    def head_radius(self) -> float: ...
    @property
    def head_density(self) -> float: ...
    @property
    def limb_density(self) -> float: ...
    @property
    def groups(self) -> Sequence[GroupShape]: ...
    @property
    def next_limb_id(self) -> int: ...
    @property
    def num_limbs(self) -> int: ...


def validate(genome: GenomeShape, unimal: UnimalCfg | None = None) -> None:
    """Checks the structural rules of the schema: a tree (every parent the first limb of an earlier
    group, so no cycle and the head the one root), pairs mirrored as UNIMAL grows them, values
    finite and within physical bounds; with ``unimal``, the design space too (``_check_design_space``).
    Linear in the limbs.

    Raises:
        GenomeError: naming the first broken rule.
    """
    _check_values(genome)  # the id first: every message below names it
    if unimal is not None and not 1 <= genome.num_limbs <= unimal.LIMB.MAX_LIMBS:
        raise GenomeError(f"genome {genome.id}: {genome.num_limbs} limbs, outside 1..LIMB.MAX_LIMBS "
                          f"({unimal.LIMB.MAX_LIMBS})")
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
    if unimal is not None:
        _check_design_space(genome, unimal)


# A genome id names files (``<id>.json``, ``<id>.xml``): letters, digits, ``.``, ``_`` and ``-``, not
# starting with a dot, so no id is a path outside the folder it is written to.
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_id(value: str, name: str = "id") -> str:
    """``value`` if it is a valid genome id (``ID_PATTERN``); raises ``GenomeError`` otherwise."""
    if not ID_PATTERN.fullmatch(value):
        raise GenomeError(f"genome {name} {value!r} is not a valid id (letters, digits, '.', '_', '-'; "
                          "no leading dot, at most 128 characters)")
    return value


# The physical bounds of every value the MJCF builder uses are the design space keys' own (``SIZE``,
# ``DENSITY``, ``GEAR``, ``ANGLE`` of ``derl.morphology.config``): a config can only draw bodies they accept.
# An integer of more bits has no float (float(2**1024) overflows): a JSON number such as 10**400 is refused.
MAX_INT_BITS = 1000
MAX_LIMB_ID = 2**31 - 1  # ids are never reused, so next_limb_id grows along a lineage, 2 at most a mutation


def _check_values(genome: GenomeShape) -> None:
    """Ids usable as file names; every number finite and inside its physical bounds (above)."""
    check_id(genome.id)
    if genome.parent_id is not None:
        check_id(genome.parent_id, "parent_id")
    if not 0 < genome.next_limb_id <= MAX_LIMB_ID or any(i < 0 for group in genome.groups for i in group.ids):
        raise GenomeError(f"genome {genome.id}: limb ids must lie in 0..next_limb_id - 1 and next_limb_id in "
                          f"1..{MAX_LIMB_ID}, got next_limb_id {genome.next_limb_id}")
    bounded = [("head_radius", genome.head_radius, SIZE), ("head_density", genome.head_density, DENSITY),
               ("limb_density", genome.limb_density, DENSITY)]
    for group in genome.groups:
        name = f"limb group {list(group.ids)}"
        bounded += [(f"{name} radius", group.radius, SIZE), (f"{name} length", group.length, SIZE),
                    (f"{name} theta", group.theta, ANGLE), (f"{name} phi", group.phi, ANGLE)]
        for joint in group.joints:
            bounded.append((f"{name} joint gear", joint.gear, GEAR))
            bounded += [(f"{name} joint range", value, ANGLE) for value in joint.range]
    for name, value, bound in bounded:
        if not (math.isfinite(value) and bound.low <= value <= bound.high):
            raise GenomeError(f"genome {genome.id}: {name} must be a number in [{bound.low:g}, {bound.high:g}], got "
                              f"{value!r}")
    for group in genome.groups:
        for joint in group.joints:
            if joint.range[0] >= joint.range[1]:  # MuJoCo refuses an empty range
                raise GenomeError(f"genome {genome.id}: limb group {list(group.ids)} joint range "
                                  f"{list(joint.range)} must have its low end below its high end")


def _in_span(value: float, values: Sequence[float]) -> bool:
    """``value`` within ``[min(values), max(values)]``, give or take a float's rounding."""
    low, high = min(values), max(values)
    slack = 1e-9 * max(1.0, abs(low), abs(high))
    return math.isfinite(value) and low - slack <= value <= high + slack


def _check_design_space(genome: GenomeShape, unimal: UnimalCfg) -> None:
    """What a genome of ``unimal`` may hold, as its mutations and initial population draw it (the limb
    count, 1 to ``LIMB.MAX_LIMBS`` and so at most that deep, is ``validate``'s first check): head radius
    and density, limb density, radii, lengths and gears within their config spans; directions among
    ``THETAS`` x ``PHIS``; a pair on a plane site with theta below 180 (its first limb on +y); no limb
    on a ``mid`` site continuing its parent's direction; joint ranges among ``BODY.JOINT_ANGLE_LIST``,
    axis sets among ``BODY.JOINT_AXIS``.
    """
    spans = {
        "head_radius": ("TORSO.HEAD_RADIUS_RANGE", unimal.TORSO.HEAD_RADIUS_RANGE),
        "head_density": ("TORSO.DENSITY_RANGE", unimal.TORSO.DENSITY_RANGE),
        "limb_density": ("LIMB.DENSITY_RANGE", unimal.LIMB.DENSITY_RANGE),
        "radius": ("LIMB.RADIUS_RANGE", unimal.LIMB.RADIUS_RANGE),
        "length": ("LIMB.HEIGHT_RANGE", unimal.LIMB.HEIGHT_RANGE),
        "gear": ("BODY.MOTOR_GEAR_RANGE", unimal.BODY.MOTOR_GEAR_RANGE),
    }
    allowed = {name: expand_range(values, key) for name, (key, values) in spans.items()}

    def check(name: str, field: str, value: float) -> None:
        if not _in_span(value, allowed[field]):
            raise GenomeError(f"genome {genome.id}: {name} {value!r} is outside {spans[field][0]} "
                              f"[{min(allowed[field]):g}, {max(allowed[field]):g}]")

    for field in ("head_radius", "head_density", "limb_density"):
        check(field, field, getattr(genome, field))
    ranges = {tuple(pair) for pair in unimal.BODY.JOINT_ANGLE_LIST}
    by_limb: dict[int, GroupShape] = {}
    for group in genome.groups:
        name = f"limb group {list(group.ids)}"
        check(f"{name} radius", "radius", group.radius)
        check(f"{name} length", "length", group.length)
        if group.theta not in THETAS or group.phi not in PHIS:
            raise GenomeError(f"genome {genome.id}: {name} direction (theta {group.theta!r}, phi {group.phi!r}) "
                              f"is not one UNIMAL grows (theta in {THETAS}, phi in {PHIS})")
        parent = by_limb.get(group.parent) if group.parent is not None else None
        if group.is_pair and (parent is None or not parent.is_pair) and not group.theta < 180:
            raise GenomeError(f"genome {genome.id}: {name}: a pair on a plane site has theta below 180 "
                              f"(its first limb on +y), got {group.theta!r}")
        if (parent is not None and group.site == "mid"
                and np.array_equal(direction(group.theta, group.phi), direction(parent.theta, parent.phi))):
            raise GenomeError(f"genome {genome.id}: {name} continues its parent's direction from its mid site")
        axes = "".join(joint.axis for joint in group.joints)
        if axes not in unimal.BODY.JOINT_AXIS:
            raise GenomeError(f"genome {genome.id}: {name} joint axes {axes!r} are not one of BODY.JOINT_AXIS "
                              f"{list(unimal.BODY.JOINT_AXIS)}")
        for joint in group.joints:
            check(f"{name} joint gear", "gear", joint.gear)
            if tuple(joint.range) not in ranges:
                raise GenomeError(f"genome {genome.id}: {name} joint range {list(joint.range)} is not one of "
                                  "BODY.JOINT_ANGLE_LIST")
        by_limb.update((limb_id, group) for limb_id in group.ids)
