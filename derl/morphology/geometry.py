"""Limb placement at the reference pose (all joints at zero), without MuJoCo.

Bodies are never rotated, so every frame is parallel to the world frame and a
limb's world position is the sum of the offsets along its chain. Mirrored limbs
are computed by negating y, so a pair is an exact mirror image in floating point.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from derl.morphology.genome import Genome, LimbGroup
from derl.morphology.genome_checks import HEAD_SITE, direction


class PlacedJoint(NamedTuple):
    name: str  # "limbx/3"
    axis: np.ndarray  # unit vector in the (world-parallel) body frame
    range: tuple[float, float]
    gear: float


class PlacedLimb(NamedTuple):
    id: int
    parent: int | None  # limb id, None for the head
    pos: np.ndarray  # body origin relative to the parent body
    origin: np.ndarray  # body origin in the frame of the head centre
    direction: np.ndarray  # unit vector along the capsule
    radius: float
    length: float
    joints: tuple[PlacedJoint, ...]

    @property
    def segment_end(self) -> np.ndarray:
        """End of the capsule's segment, relative to the body origin."""
        return (self.radius + self.length) * self.direction

    def site(self, name: str) -> np.ndarray:
        """Growth and tip sites relative to the body origin ("mid", "btm", "btm_pos")."""
        offsets = {"mid": self.radius + self.length / 2, "btm": self.radius + self.length,
                   "btm_pos": 2 * self.radius + self.length}
        return offsets[name] * self.direction


def mirror(vector: np.ndarray) -> np.ndarray:
    """Reflection through the xz plane."""
    return vector * np.array([1.0, -1.0, 1.0])


def mirror_axis(axis: np.ndarray) -> np.ndarray:
    """The hinge axis whose rotation is the mirror image of a rotation about ``axis``.

    A reflection M turns a rotation by q about a into a rotation by q about -M a
    (rotation axes are pseudo-vectors), so equal joint angles give mirrored poses.
    """
    return -mirror(axis)


def capsule_frame(u: np.ndarray) -> np.ndarray:
    """The rotation MuJoCo compiles for a capsule ``fromto`` 0 -> along ``u`` (columns x, y, z).

    Its z column is -u (MuJoCo points it from the end to the start) and it is the
    shortest turn from +z. DERL's hinge axes "x"/"y" are its first two columns, and
    its species signature is this matrix.
    """
    v = -u
    cos = float(v[2])
    if cos < -1 + 1e-12:
        return np.diag([1.0, -1.0, -1.0])
    k = np.array([[0, 0, v[0]], [0, 0, v[1]], [-v[0], -v[1], 0]])  # cross-product matrix of z x v
    return np.eye(3) + k + k @ k / (1 + cos)


def place_limbs(genome: Genome) -> list[PlacedLimb]:
    """Every limb of ``genome`` in group order (a mirrored limb right after its original)."""
    placed: dict[int | None, PlacedLimb] = {}  # get(None): the head's limbs have no parent limb
    for group in genome.groups:
        parents = _parents(genome, group)
        u = direction(group.theta, group.phi)
        for limb_id, parent, mirrored in zip(group.ids, parents, (False, True), strict=False):
            d = mirror(u) if mirrored else u
            placed[limb_id] = _place(genome, group, limb_id, placed.get(parent), d, mirrored)
    return list(placed.values())


def _parents(genome: Genome, group: LimbGroup) -> tuple[int | None, ...]:
    if group.parent is None:
        return (None,) * len(group.ids)
    parent_group = genome.group_of(group.parent)
    if group.is_pair and parent_group.is_pair:
        return parent_group.ids
    return (group.parent,) * len(group.ids)


def _place(genome: Genome, group: LimbGroup, limb_id: int, parent: PlacedLimb | None,
           u: np.ndarray, mirrored: bool) -> PlacedLimb:
    if parent is None:
        assert group.site == HEAD_SITE
        site, parent_radius, parent_origin = np.zeros(3), genome.head_radius, np.zeros(3)
    else:
        site, parent_radius, parent_origin = parent.site(group.site), parent.radius, parent.origin
    pos = site + parent_radius * u
    frame = capsule_frame(direction(group.theta, group.phi))
    joints = []
    for joint in group.joints:
        axis = frame[:, "xy".index(joint.axis)]
        joints.append(PlacedJoint(f"limb{joint.axis}/{limb_id}", mirror_axis(axis) if mirrored else axis,
                                  joint.range, joint.gear))
    return PlacedLimb(limb_id, None if parent is None else parent.id, pos, parent_origin + pos, u,
                      group.radius, group.length, tuple(joints))


def lowest_point(genome: Genome, limbs: list[PlacedLimb]) -> float:
    """Lowest z of any geom (head sphere, limb capsules) with the head centre at z = 0."""
    lowest = -genome.head_radius
    for limb in limbs:
        ends = (limb.origin[2], limb.origin[2] + limb.segment_end[2])
        lowest = min(lowest, min(ends) - limb.radius)
    return lowest


def head_height(genome: Genome, limbs: list[PlacedLimb], floor_offset: float) -> float:
    """Head-centre height that puts the lowest point ``floor_offset`` above z = 0."""
    return floor_offset - lowest_point(genome, limbs)


def rotation_signature(genome: Genome) -> np.ndarray:
    """Each limb's capsule rotation matrix, flattened: shape [num_limbs, 9]."""
    limbs = place_limbs(genome)
    if not limbs:
        return np.zeros((0, 9))
    return np.stack([capsule_frame(limb.direction).reshape(9) for limb in limbs])
