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

A genome from outside the process is held to the design space of a config's ``UnimalCfg`` before any
work (``Genome.from_json``/``from_dict`` with ``unimal``, ``genome_problem``): the checks, and the sites
and directions UNIMAL grows limbs in, are ``derl.morphology.genome_checks``'s.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from derl.fileio.reads import MAX_JSON_BYTES, JsonFileError, parse_json
from derl.morphology.config import UnimalCfg
from derl.morphology.genome_checks import (
    GenomeError,
    checked_number,
    checked_optional,
    checked_pair,
    checked_type,
    json_problem,
    max_genome_bytes,
    validate,
)

SCHEMA_VERSION = 1


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

    @cached_property
    def _groups_by_limb(self) -> dict[int, LimbGroup]:
        """Every limb id's group, built once: looking limbs up costs no walk of the groups."""
        return {limb_id: group for group in self.groups for limb_id in group.ids}

    def group_of(self, limb_id: int) -> LimbGroup:
        """The group holding ``limb_id`` (first or mirrored limb)."""
        try:
            return self._groups_by_limb[limb_id]
        except KeyError:
            raise KeyError(f"genome {self.id} has no limb {limb_id}") from None

    def body(self) -> tuple:
        """Everything but the identity fields: equal bodies mean identical morphologies."""
        return (self.head_radius, self.head_density, self.limb_density, self.groups)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2) + "\n"

    @staticmethod
    def from_json(text: str | bytes, unimal: UnimalCfg | None = None, source: str = "genome") -> Genome:
        """Parses and validates a genome written by ``to_json`` (held to ``unimal``'s design space if given:
        ``from_dict``). The text is bounded before it is parsed: ``max_genome_bytes(unimal)``, else the
        16 MiB of ``derl.fileio.reads.parse_json``.

        Raises:
            GenomeError: too large, not JSON, wrong schema version, missing or malformed field, outside the
                design space (one line; a parse error names ``source``).
        """
        try:
            data = parse_json(text, source, MAX_JSON_BYTES if unimal is None else max_genome_bytes(unimal))
        except JsonFileError as err:
            raise GenomeError(json_problem(err, unimal)) from None
        return Genome.from_dict(data, unimal)

    @staticmethod
    def from_dict(data: Any, unimal: UnimalCfg | None = None) -> Genome:
        """Validates a parsed genome (``from_json`` without the parsing: a genome read once is not
        written back to text to be read again); with ``unimal``, holds it to that design space
        (``validate``), its limb count first, before any group is read.

        Raises:
            GenomeError: not an object, wrong schema version, missing or malformed field, outside the
                design space.
        """
        if not isinstance(data, dict):
            raise GenomeError("genome JSON must be an object")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise GenomeError(f"unsupported genome schema_version {version!r} (expected {SCHEMA_VERSION})")
        groups_data = data.get("groups")
        if unimal is not None and isinstance(groups_data, list) and len(groups_data) > unimal.LIMB.MAX_LIMBS:
            raise GenomeError(f"genome {str(data.get('id'))[:40]}: {len(groups_data)} limb groups, more than "
                              f"LIMB.MAX_LIMBS ({unimal.LIMB.MAX_LIMBS}) limbs")
        try:
            groups = tuple(_group_from_dict(g) for g in data["groups"])
            genome = Genome(
                id=checked_type(data["id"], str, "id"),
                head_radius=checked_number(data["head_radius"], "head_radius"),
                head_density=checked_number(data["head_density"], "head_density"),
                limb_density=checked_number(data["limb_density"], "limb_density"),
                groups=groups,
                next_limb_id=checked_type(data["next_limb_id"], int, "next_limb_id"),
                parent_id=checked_optional(data["parent_id"], str, "parent_id"),
                mutation=checked_optional(data["mutation"], str, "mutation"),
            )
        except KeyError as err:
            raise GenomeError(f"genome is missing field {err.args[0]!r}") from None
        except (TypeError, AttributeError):
            raise GenomeError("genome has a malformed limb group or joint") from None
        validate(genome, unimal)
        return genome


def genome_problem(data: Any, unimal: UnimalCfg) -> str | None:
    """Why the parsed JSON ``data`` is not a genome of ``unimal``'s design space (``Genome.from_dict``'s
    one-line message), or None. Pure; linear in the size of ``data``, refused at once past
    ``LIMB.MAX_LIMBS`` limb groups."""
    try:
        Genome.from_dict(data, unimal)
    except GenomeError as err:
        return str(err)
    return None


def _group_from_dict(data: Any) -> LimbGroup:
    """The limb group of one parsed entry of ``groups``, any JSON value: one that is not a group's object raises
    ``KeyError``, ``TypeError`` or ``AttributeError``, which ``Genome.from_dict`` turns into its one line."""
    if len(data["ids"]) > 2 or len(data["joints"]) > 2:  # before either is walked
        raise GenomeError(f"genome limb group with {len(data['ids'])} limb ids and {len(data['joints'])} joints: "
                          "a group holds one or two limbs with one or two joints")
    joints = tuple(
        Joint(
            axis=checked_type(j["axis"], str, "joint axis"),
            range=checked_pair(j["range"]),
            gear=checked_number(j["gear"], "joint gear"),
        )
        for j in data["joints"]
    )
    return LimbGroup(
        ids=tuple(checked_type(i, int, "limb id") for i in data["ids"]),
        parent=checked_optional(data["parent"], int, "group parent"),
        site=checked_type(data["site"], str, "group site"),
        radius=checked_number(data["radius"], "limb radius"),
        length=checked_number(data["length"], "limb length"),
        theta=checked_number(data["theta"], "limb theta"),
        phi=checked_number(data["phi"], "limb phi"),
        joints=joints,
    )
