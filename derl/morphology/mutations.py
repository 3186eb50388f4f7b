"""Random genomes and the seven mutation operators, as pure functions of an rng.

Each operator takes ``(genome, unimal, rng)`` and returns the changed genome, or
None when its attempt failed; identity fields are set by ``mutate``. Only
``grow_limb`` and ``limb_params`` change the geometry; both reject a genome in
which limbs overlap other than a pair grown on one site (checked in MuJoCo).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from derl.config import ConfigError, expand_range
from derl.morphology.config import UnimalCfg
from derl.morphology.genome import Genome, Joint, LimbGroup
from derl.morphology.genome_checks import (  # THETAS, PHIS: the grown directions (the design space's)
    HEAD_SITE,
    LIMB_SITES,
    PHIS,
    THETAS,
    direction,
    on_plane,
)
from derl.morphology.mjcf import contact_pairs, unexcluded_xml

GROW_ATTEMPTS = 50
MUTATION_REDRAWS = 100
INIT_STEPS = 10_000
INIT_FAILED_GROWS = 20
GEOMETRY_KEYS = ("LIMB.RADIUS_RANGE", "LIMB.HEIGHT_RANGE", "TORSO.HEAD_RADIUS_RANGE", "LIMB.NUM_LIMBS_RANGE")


def _choice(rng: np.random.Generator, options: Sequence[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


def _draw_range(unimal: UnimalCfg, rng: np.random.Generator) -> tuple[float, float]:
    return tuple(_choice(rng, unimal.BODY.JOINT_ANGLE_LIST))


def _draw_gear(unimal: UnimalCfg, rng: np.random.Generator) -> float:
    return _choice(rng, expand_range(unimal.BODY.MOTOR_GEAR_RANGE, "BODY.MOTOR_GEAR_RANGE"))


def _draw_joints(unimal: UnimalCfg, rng: np.random.Generator) -> tuple[Joint, ...]:
    axes = _choice(rng, unimal.BODY.JOINT_AXIS)
    return tuple(Joint(axis, _draw_range(unimal, rng), _draw_gear(unimal, rng)) for axis in axes)


# ---------------------------------------------------------------- grow_limb


def growth_sites(genome: Genome) -> list[tuple[int | None, str, bool]]:
    """(parent limb id, site, is mirror site) for the head centre and every limb's mid/btm.

    As in DERL, every limb carries its own two growth sites and ``grow_limb`` draws
    uniformly among all of them, so a mirrored pair offers each of its sites twice
    (once per limb). Both entries name the group's first limb: a pair grown on
    either limb of a pair is the same pair (the second limb hangs from the mirror site).
    """
    sites: list[tuple[int | None, str, bool]] = [(None, HEAD_SITE, False)]
    for group in genome.groups:
        sites += [(group.ids[0], site, group.is_pair) for _limb in group.ids for site in LIMB_SITES]
    return sites


def has_forbidden_contact(genome: Genome, unimal: UnimalCfg) -> bool:
    """True if any limbs overlap other than the two limbs of a pair grown on one site."""
    allowed = set()
    for group in genome.groups:
        if group.is_pair and (group.parent is None or not genome.group_of(group.parent).is_pair):
            allowed.add(frozenset(f"limb/{i}" for i in group.ids))
    contacts = contact_pairs(unexcluded_xml(genome, unimal))
    return any(frozenset(pair) not in allowed for pair in contacts)


def grow_limb(genome: Genome, unimal: UnimalCfg, rng: np.random.Generator) -> Genome | None:
    """Grows one limb, or a mirrored pair, at a random growth site (up to 50 attempts).

    A plane site (head, plane limb) takes one limb on the plane or a pair leaving it
    (theta > 180 folded to 360 - theta); a mirror site (a pair) takes a pair whose
    second limb mirrors the first. A limb on a parent's mid site may not continue the
    parent's direction; limb count stays within LIMB.MAX_LIMBS; no new overlaps.
    """
    sites = growth_sites(genome)
    lengths = expand_range(unimal.LIMB.HEIGHT_RANGE, "LIMB.HEIGHT_RANGE")
    radii = expand_range(unimal.LIMB.RADIUS_RANGE, "LIMB.RADIUS_RANGE")
    for _ in range(GROW_ATTEMPTS):
        parent, site, mirror_site = _choice(rng, sites)
        count = 2 if mirror_site else int(rng.integers(1, 3))
        theta, phi = _choice(rng, THETAS), _choice(rng, PHIS)
        length, radius, joints = _choice(rng, lengths), _choice(rng, radii), _draw_joints(unimal, rng)
        if genome.num_limbs + count > unimal.LIMB.MAX_LIMBS:
            continue
        if count == 2 and not mirror_site:
            theta = 360 - theta if theta > 180 else theta
            if theta in (0, 180) or phi == 180:
                continue
        u = direction(theta, phi)
        if count == 1 and not on_plane(u):
            continue
        if parent is not None and site == "mid":
            parent_group = genome.group_of(parent)
            if np.array_equal(u, direction(parent_group.theta, parent_group.phi)):
                continue
        ids = tuple(range(genome.next_limb_id, genome.next_limb_id + count))
        group = LimbGroup(ids, parent, site, radius, length, theta, phi, joints)
        child = dataclasses.replace(genome, groups=genome.groups + (group,), next_limb_id=ids[-1] + 1)
        if not has_forbidden_contact(child, unimal):
            return child
    return None


# ---------------------------------------------------------------- other operators


def _edit_groups(genome: Genome, rng: np.random.Generator,
                 edit: Callable[[LimbGroup], LimbGroup]) -> Genome:
    """Coin flip: ``edit`` every group, or one random group."""
    if rng.random() < 0.5:
        targets = set(range(len(genome.groups)))
    else:
        targets = {int(rng.integers(len(genome.groups)))}
    groups = tuple(edit(g) if k in targets else g for k, g in enumerate(genome.groups))
    return dataclasses.replace(genome, groups=groups)


def joint_angle(genome: Genome, unimal: UnimalCfg, rng: np.random.Generator) -> Genome:
    """New hinge ranges (a pair's limbs share them)."""
    return _edit_groups(genome, rng, lambda g: dataclasses.replace(
        g, joints=tuple(dataclasses.replace(j, range=_draw_range(unimal, rng)) for j in g.joints)))


def gear(genome: Genome, unimal: UnimalCfg, rng: np.random.Generator) -> Genome:
    """New motor gears."""
    return _edit_groups(genome, rng, lambda g: dataclasses.replace(
        g, joints=tuple(dataclasses.replace(j, gear=_draw_gear(unimal, rng)) for j in g.joints)))


def dof(genome: Genome, unimal: UnimalCfg, rng: np.random.Generator) -> Genome:
    """A new axis set (may repeat) with new ranges and gears."""
    return _edit_groups(genome, rng, lambda g: dataclasses.replace(g, joints=_draw_joints(unimal, rng)))


def limb_params(genome: Genome, unimal: UnimalCfg, rng: np.random.Generator) -> Genome | None:
    """A new radius and length for one group, as DERL's (the radius is fixed by the default
    LIMB.RADIUS_RANGE); children move with the new tip. Rejected on overlap."""
    index = int(rng.integers(len(genome.groups)))
    radius = _choice(rng, expand_range(unimal.LIMB.RADIUS_RANGE, "LIMB.RADIUS_RANGE"))
    length = _choice(rng, expand_range(unimal.LIMB.HEIGHT_RANGE, "LIMB.HEIGHT_RANGE"))
    groups = list(genome.groups)
    groups[index] = dataclasses.replace(groups[index], radius=radius, length=length)
    child = dataclasses.replace(genome, groups=tuple(groups))
    return None if has_forbidden_contact(child, unimal) else child


def density(genome: Genome, unimal: UnimalCfg, rng: np.random.Generator) -> Genome:
    """New head density and shared limb density."""
    return dataclasses.replace(
        genome,
        head_density=_choice(rng, expand_range(unimal.TORSO.DENSITY_RANGE, "TORSO.DENSITY_RANGE")),
        limb_density=_choice(rng, expand_range(unimal.LIMB.DENSITY_RANGE, "LIMB.DENSITY_RANGE")),
    )


def delete_limb(genome: Genome, unimal: UnimalCfg, rng: np.random.Generator) -> Genome:
    """Removes a random leaf group (no limb hangs from it)."""
    parents = {g.parent for g in genome.groups}
    leaves = [k for k, g in enumerate(genome.groups) if g.ids[0] not in parents]
    index = _choice(rng, leaves)
    return dataclasses.replace(genome, groups=genome.groups[:index] + genome.groups[index + 1:])


OPERATORS: dict[str, Callable[[Genome, UnimalCfg, np.random.Generator], Genome | None]] = {
    "grow_limb": grow_limb,
    "joint_angle": joint_angle,
    "limb_params": limb_params,
    "dof": dof,
    "density": density,
    "gear": gear,
    "delete_limb": delete_limb,
}


def applicable_ops(genome: Genome, unimal: UnimalCfg) -> list[str]:
    """EVO.MUTATION_OPS allowed on ``genome``: only grow_limb without limbs, no grow_limb
    at LIMB.MAX_LIMBS, no delete_limb with two limbs or fewer."""
    ops = list(unimal.MUTATION_OPS)
    unknown = [op for op in ops if op not in OPERATORS]
    if unknown:
        raise ValueError(f"unknown mutation op {unknown[0]!r} in EVO.MUTATION_OPS (known: {', '.join(OPERATORS)})")
    if genome.num_limbs == 0:
        return [op for op in ops if op == "grow_limb"]
    if genome.num_limbs >= unimal.LIMB.MAX_LIMBS:
        ops = [op for op in ops if op != "grow_limb"]
    if genome.num_limbs <= 2:
        ops = [op for op in ops if op != "delete_limb"]
    return ops


def mutate(genome: Genome, unimal: UnimalCfg, rng: np.random.Generator, child_id: str) -> Genome:
    """One uniformly chosen applicable operator; redrawn until the child differs.

    Raises:
        ValueError: no operator applies to ``genome``.
        RuntimeError: 100 draws left the genome unchanged.
    """
    for _ in range(MUTATION_REDRAWS):
        child, op = _random_op(genome, unimal, rng)
        if child is not None and child.body() != genome.body():
            return dataclasses.replace(child, id=child_id, parent_id=genome.id, mutation=op)
    raise RuntimeError(f"genome {genome.id}: {MUTATION_REDRAWS} mutation draws left it unchanged")


def _random_op(genome: Genome, unimal: UnimalCfg, rng: np.random.Generator) -> tuple[Genome | None, str]:
    ops = applicable_ops(genome, unimal)
    if not ops:
        raise ValueError(f"genome {genome.id}: no op of EVO.MUTATION_OPS applies to {genome.num_limbs} limbs")
    op = _choice(rng, ops)
    return OPERATORS[op](genome, unimal, rng), op


def random_genome(unimal: UnimalCfg, rng: np.random.Generator, genome_id: str) -> Genome:
    """DERL's limb-count initialisation: draw a target from LIMB.NUM_LIMBS_RANGE, then
    apply random operators (grow_limb first) until the genome has that many limbs.

    Raises:
        ConfigError: the design space cannot grow its bodies: ``grow_limb`` failed
            ``INIT_FAILED_GROWS`` times in a row (each ``GROW_ATTEMPTS`` placements that overlapped),
            or ``INIT_STEPS`` operators did not reach the target. Under DERL's design space a body
            grows in tens of operators; a space whose limbs overlap (``LIMB.RADIUS_RANGE '[10]'``)
            would otherwise spend minutes per body before failing, in every slot of a search.
    """
    targets = expand_range(unimal.LIMB.NUM_LIMBS_RANGE, "LIMB.NUM_LIMBS_RANGE")
    if max(targets) > unimal.LIMB.MAX_LIMBS or min(targets) < 1:
        raise ConfigError(f"LIMB.NUM_LIMBS_RANGE {list(targets)} must lie within 1..LIMB.MAX_LIMBS",
                          "LIMB.NUM_LIMBS_RANGE", "LIMB.MAX_LIMBS")
    if "grow_limb" not in unimal.MUTATION_OPS:
        raise ConfigError("EVO.MUTATION_OPS must include grow_limb to build a random genome", "EVO.MUTATION_OPS")
    genome = Genome(
        id=genome_id,
        head_radius=_choice(rng, expand_range(unimal.TORSO.HEAD_RADIUS_RANGE, "TORSO.HEAD_RADIUS_RANGE")),
        head_density=_choice(rng, expand_range(unimal.TORSO.DENSITY_RANGE, "TORSO.DENSITY_RANGE")),
        limb_density=_choice(rng, expand_range(unimal.LIMB.DENSITY_RANGE, "LIMB.DENSITY_RANGE")),
    )
    target = _choice(rng, targets)
    failed_grows = steps = 0
    while genome.num_limbs < target:
        if steps == INIT_STEPS or failed_grows == INIT_FAILED_GROWS:
            raise ConfigError(
                f"the design space cannot grow a body of {target} limbs: genome {genome_id} stopped at "
                f"{genome.num_limbs} after {steps} operators (the last {failed_grows} grow_limb found no "
                f"free place in {GROW_ATTEMPTS} draws each); widen LIMB.HEIGHT_RANGE, "
                f"narrow LIMB.RADIUS_RANGE or TORSO.HEAD_RADIUS_RANGE, or lower LIMB.NUM_LIMBS_RANGE",
                *GEOMETRY_KEYS)
        child, op = _random_op(genome, unimal, rng)
        if op == "grow_limb":
            failed_grows = failed_grows + 1 if child is None else 0
        genome = child or genome
        steps += 1
    return genome
