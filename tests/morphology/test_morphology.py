"""Genome schema, geometry and the seven mutation operators (pure logic; MuJoCo only for overlaps)."""

import dataclasses
import json

import numpy as np
import pytest

from derl.checked_config import load_config
from derl.morphology import Genome, GenomeError, Joint, LimbGroup, mutate, random_genome
from derl.morphology import mutations as ops
from derl.morphology.config import UnimalCfg
from derl.morphology.genome_checks import direction, validate
from derl.morphology.geometry import capsule_frame, mirror, mirror_axis, place_limbs

CFG = load_config().unimal


def with_ops(*mutation_ops: str, **sections: dict) -> UnimalCfg:
    """CFG with only ``mutation_ops``: a tree load_config refuses for a search (no grow_limb, unknown ops)."""
    changed = {name: dataclasses.replace(getattr(CFG, name), **keys) for name, keys in sections.items()}
    return dataclasses.replace(CFG, MUTATION_OPS=tuple(mutation_ops), **changed)


def joints(axes="x", lo=-30, hi=30, gear=200):
    return tuple(Joint(a, (lo, hi), gear) for a in axes)


def group(ids, parent=None, site="center", theta=0, phi=180, length=0.3, axes="x"):
    return LimbGroup(tuple(ids), parent, site, 0.05, length, theta, phi, joints(axes))


def walker() -> Genome:
    """A pair of thighs (0, 1) leaving the head sideways-down, shins (2, 3) hanging from
    their tips, and a tail (4) on the plane."""
    return Genome(
        id="walker", head_radius=0.1, head_density=700, limb_density=600,
        groups=(
            group([0, 1], theta=90, phi=135),
            group([2, 3], parent=0, site="btm", theta=0, phi=180, axes="xy"),
            group([4], theta=180, phi=90),
        ),
        next_limb_id=5,
    )


def rng(seed=0):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------- schema


def test_json_round_trip_and_counts():
    genome = walker()
    assert Genome.from_json(genome.to_json()) == genome
    assert genome.num_limbs == 5 and genome.dof == 2 * 1 + 2 * 2 + 1
    assert '"schema_version": 1' in genome.to_json()


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(schema_version=2), "unsupported genome schema_version 2"),
    (lambda d: d.pop("groups"), "genome is missing field 'groups'"),
    (lambda d: d.update(id=3), "genome field id must be str, got 3"),
    (lambda d: d["groups"][2].update(theta=90), "a single limb must lie on the symmetry plane"),
    (lambda d: d["groups"][0].update(theta=0), "a pair on a plane site must leave the symmetry plane"),
    (lambda d: d["groups"][1].update(parent=7), "parent 7 is not the first limb of an earlier group"),
    (lambda d: d["groups"][1].update(site="top"), "site 'top' must be one of"),
    (lambda d: d.update(next_limb_id=4), "ids must be below next_limb_id 4"),
])
def test_bad_genome_json_gives_one_line(edit, message):
    data = dataclasses.asdict(walker())
    edit(data)
    with pytest.raises(GenomeError) as err:
        Genome.from_json(json.dumps(data))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_not_json():
    with pytest.raises(GenomeError, match="not valid JSON"):
        Genome.from_json("{oops")


# ---------------------------------------------------------------- geometry


def test_on_plane_directions_have_exact_zero_y():
    for theta in (0, 180):
        for phi in (90, 135, 180):
            assert direction(theta, phi)[1] == 0.0
    assert direction(45, 180)[1] == 0.0


def _rotation(axis, angle):
    axis = axis / np.linalg.norm(axis)
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * k @ k


def test_mirrored_hinge_turns_the_mirror_image():
    # M R(a, q) M = R(-M a, q): the same joint angle gives the mirrored pose.
    reflect = np.diag([1.0, -1.0, 1.0])
    for axis in (np.array([0.3, 0.5, 0.8]), np.array([1.0, 0, 0]), np.array([0, 1.0, 0])):
        assert np.allclose(reflect @ _rotation(axis, 0.7) @ reflect, _rotation(mirror_axis(axis), 0.7))


@pytest.mark.parametrize("theta, phi", [(0, 90), (45, 135), (270, 90), (0, 180), (135, 135)])
def test_capsule_frame_is_a_rotation_along_the_unit_direction(theta, phi):
    u = direction(theta, phi)
    frame = capsule_frame(u)
    assert np.allclose(frame.T @ frame, np.eye(3)) and np.isclose(np.linalg.det(frame), 1)
    assert np.isclose(np.linalg.norm(u), 1) and np.allclose(frame[:, 2], -u)


def test_pairs_are_exact_mirror_images():
    limbs = {limb.id: limb for limb in place_limbs(walker())}
    for a, b in ((0, 1), (2, 3)):
        assert np.array_equal(limbs[b].origin, mirror(limbs[a].origin))
        assert np.array_equal(limbs[b].direction, mirror(limbs[a].direction))
        for ja, jb in zip(limbs[a].joints, limbs[b].joints, strict=True):
            assert np.array_equal(jb.axis, mirror_axis(ja.axis)) and ja.range == jb.range
    assert limbs[2].parent == 0 and limbs[3].parent == 1
    assert limbs[4].origin[1] == 0.0


# ---------------------------------------------------------------- preconditions


def test_applicable_ops_follow_the_original_preconditions():
    everything = list(CFG.MUTATION_OPS)
    empty = Genome("e", 0.1, 500, 500)
    assert ops.applicable_ops(empty, CFG) == ["grow_limb"]
    two = dataclasses.replace(walker(), groups=walker().groups[:1])
    assert ops.applicable_ops(two, CFG) == [op for op in everything if op != "delete_limb"]
    assert ops.applicable_ops(walker(), CFG) == everything
    full = load_config(overrides={"LIMB.MAX_LIMBS": 5, "LIMB.NUM_LIMBS_RANGE": [2, 5, 1]}).unimal
    assert "grow_limb" not in ops.applicable_ops(walker(), full)
    with pytest.raises(ValueError, match="unknown mutation op 'shrink'"):
        ops.applicable_ops(walker(), with_ops("shrink"))


def test_growth_sites_weigh_each_limb_of_a_pair_as_in_derl():
    # DERL draws uniformly among every limb's mid/btm sites (plus the head's): a pair offers
    # each site twice. walker(): head 1 + pair 0/1: 2 x (mid, btm) + pair 2/3: 2 x (mid, btm)
    # + tail 4: mid, btm = 1 + 4 + 4 + 2 = 11 entries.
    sites = ops.growth_sites(walker())
    assert len(sites) == 11
    weights = {site: sites.count(site) for site in set(sites)}
    assert weights == {
        (None, "center", False): 1,
        (0, "mid", True): 2, (0, "btm", True): 2,
        (2, "mid", True): 2, (2, "btm", True): 2,
        (4, "mid", False): 1, (4, "btm", False): 1,
    }


def test_grow_limb_respects_max_limbs_and_symmetry_rules():
    six = load_config(overrides={"LIMB.MAX_LIMBS": 6, "LIMB.NUM_LIMBS_RANGE": [2, 6, 1]}).unimal
    for seed in range(30):
        child = ops.grow_limb(walker(), six, rng(seed))
        if child is None:
            continue
        new = child.groups[-1]
        validate(child)
        assert child.num_limbs == 6 and new.ids == (5,) and new.parent in (None, 4)
    five = load_config(overrides={"LIMB.MAX_LIMBS": 5, "LIMB.NUM_LIMBS_RANGE": [2, 5, 1]}).unimal
    assert ops.grow_limb(walker(), five, rng()) is None


def test_grow_limb_on_a_pair_grows_a_mirrored_pair():
    pairs = 0
    for seed in range(40):
        child = ops.grow_limb(walker(), CFG, rng(seed))
        assert child is not None
        new = child.groups[-1]
        assert new.ids[0] == 5 and child.next_limb_id == 5 + len(new.ids)
        if new.parent in (0, 2):
            pairs += 1
            assert new.is_pair
        parent_u = direction(*_orientation(child, new.parent)) if new.parent is not None else None
        if new.site == "mid":
            assert not np.array_equal(direction(new.theta, new.phi), parent_u)
        assert not ops.has_forbidden_contact(child, CFG)
    assert pairs > 0


def _orientation(genome, limb_id):
    g = genome.group_of(limb_id)
    return g.theta, g.phi


def test_grow_limb_rejects_overlaps():
    # A second downward limb on the head centre would overlap limb 0 entirely.
    down = Genome("d", 0.1, 500, 500, (group([0], theta=0, phi=180),), next_limb_id=1)
    overlapping = dataclasses.replace(down, groups=down.groups + (group([1], theta=0, phi=180),), next_limb_id=2)
    assert ops.has_forbidden_contact(overlapping, CFG)
    assert not ops.has_forbidden_contact(down, CFG)


# ---------------------------------------------------------------- operators


def _changed_groups(before, after):
    return [k for k, (a, b) in enumerate(zip(before.groups, after.groups, strict=False)) if a != b]


@pytest.mark.parametrize("op, field", [("joint_angle", "range"), ("gear", "gear")])
def test_joint_operators_change_only_their_field(op, field):
    genome = walker()
    seen_all = seen_one = False
    for seed in range(20):
        child = ops.OPERATORS[op](genome, CFG, rng(seed))
        for a, b in zip(genome.groups, child.groups, strict=True):
            assert dataclasses.replace(a, joints=()) == dataclasses.replace(b, joints=())
            for ja, jb in zip(a.joints, b.joints, strict=True):
                assert dataclasses.replace(ja, **{field: getattr(jb, field)}) == jb
        changed = len(_changed_groups(genome, child))
        seen_all |= changed == 3
        seen_one |= changed == 1
    assert seen_all and seen_one  # coin flip between all groups and one group


def test_dof_redraws_axes_ranges_and_gears_only():
    genome = walker()
    axes = set()
    for seed in range(20):
        child = ops.dof(genome, CFG, rng(seed))
        for a, b in zip(genome.groups, child.groups, strict=True):
            assert dataclasses.replace(a, joints=()) == dataclasses.replace(b, joints=())
            axes.add("".join(j.axis for j in b.joints))
    assert axes == {"x", "y", "xy"}


def test_limb_params_changes_one_length_and_moves_children():
    genome = walker()
    child = next(c for s in range(50) if (c := ops.limb_params(genome, CFG, rng(s))) and c != genome
                 and _changed_groups(genome, c) == [0])
    assert child.groups[0].length != genome.groups[0].length
    assert child.groups[0].radius == genome.groups[0].radius
    old, new = ({limb.id: limb for limb in place_limbs(g)} for g in (genome, child))
    shift = (child.groups[0].length - genome.groups[0].length) * old[0].direction
    assert np.allclose(new[2].origin, old[2].origin + shift)


def test_limb_params_draws_the_radius_too_when_its_range_allows():
    radii = load_config(overrides={"LIMB.RADIUS_RANGE": [0.04, 0.06, 0.01]}).unimal
    children = [ops.limb_params(walker(), radii, rng(s)) for s in range(30)]
    drawn = {round(g.radius, 6) for child in children if child for g in child.groups}
    assert drawn >= {0.04, 0.06}  # DERL's limb_params redraws radius and length


def test_limb_params_rejects_an_overlapping_length():
    # A leg (0) down, an arm (1) forward, a forearm (2) back-down from the arm's tip:
    # at length 1.0 the forearm crosses the leg.
    tight = load_config(overrides={"LIMB.HEIGHT_RANGE": [0.2, 1.0, 0.8]}).unimal
    genome = Genome("t", 0.1, 500, 500, (
        group([0], theta=0, phi=180, length=1.0),
        group([1], theta=0, phi=90, length=0.2),
        group([2], parent=1, site="btm", theta=180, phi=135, length=0.2),
    ), next_limb_id=3)
    long_forearm = dataclasses.replace(genome, groups=genome.groups[:2] + (
        dataclasses.replace(genome.groups[2], length=1.0),))
    assert not ops.has_forbidden_contact(genome, tight) and ops.has_forbidden_contact(long_forearm, tight)
    results = {ops.limb_params(genome, tight, rng(s)) for s in range(30)}
    assert long_forearm not in results and None in results


def test_density_redraws_head_and_limb_density_only():
    child = ops.density(walker(), CFG, rng(3))
    assert child.groups == walker().groups
    assert child.head_density in range(500, 1001, 100) and child.limb_density in range(500, 1001, 100)


def test_delete_limb_removes_only_leaf_groups():
    genome = walker()
    deleted = set()
    for seed in range(30):
        child = ops.delete_limb(genome, CFG, rng(seed))
        validate(child)
        (gone,) = set(genome.groups) - set(child.groups)
        deleted.add(gone.ids)
    assert deleted == {(2, 3), (4,)}  # the thighs (0, 1) carry the shins


# ---------------------------------------------------------------- mutate and random_genome


def test_mutate_records_lineage_and_always_changes_the_genome():
    genome = walker()
    for seed in range(30):
        child = mutate(genome, CFG, rng(seed), f"c{seed}")
        assert child.id == f"c{seed}" and child.parent_id == "walker"
        assert child.mutation in CFG.MUTATION_OPS and child.body() != genome.body()


def test_mutate_redraws_until_different_and_gives_up_loudly():
    fixed = with_ops("density", TORSO={"DENSITY_RANGE": [700]}, LIMB={"DENSITY_RANGE": [600]})
    with pytest.raises(RuntimeError, match="left it unchanged"):
        mutate(walker(), fixed, rng(), "c")
    only_delete = with_ops("delete_limb")
    two = dataclasses.replace(walker(), groups=walker().groups[:1])
    with pytest.raises(ValueError, match="no op of EVO.MUTATION_OPS applies to 2 limbs"):
        mutate(two, only_delete, rng(), "c")


def test_mutation_chains_keep_preconditions():
    genome = random_genome(CFG, rng(11), "r")
    for step in range(60):
        child = mutate(genome, CFG, rng(step), f"r{step}")
        if child.mutation == "delete_limb":
            assert genome.num_limbs > 2
        if child.mutation == "grow_limb":
            assert genome.num_limbs < CFG.LIMB.MAX_LIMBS
        assert 1 <= child.num_limbs <= CFG.LIMB.MAX_LIMBS
        validate(child)
        genome = child


def test_random_genome_reaches_its_limb_count_deterministically():
    counts = []
    for seed in range(12):
        a = random_genome(CFG, rng(seed), "x")
        assert a.to_json() == random_genome(CFG, rng(seed), "x").to_json()
        assert a.parent_id is None and a.mutation is None
        counts.append(a.num_limbs)
        assert 2 <= a.num_limbs <= 9  # target 2..8, a pair may overshoot by one
    assert len(set(counts)) > 3


def test_random_genome_config_errors():
    with pytest.raises(ValueError, match="NUM_LIMBS_RANGE"):
        random_genome(load_config(overrides={"LIMB.NUM_LIMBS_RANGE": [2, 12, 1]}), rng(), "x")
    with pytest.raises(ValueError, match="config key LIMB.HEIGHT_RANGE must be"):
        random_genome(load_config(overrides={"LIMB.HEIGHT_RANGE": [0.2, 0.4]}), rng(), "x")


@pytest.mark.parametrize("field, value", [("head_radius", 1e300), ("head_density", 1e9), ("limb_density", 0.01)])
def test_genome_values_outside_physical_bounds_are_refused(field, value):
    data = json.loads(random_genome(CFG, np.random.default_rng(0), "g").to_json())
    data[field] = value
    with pytest.raises(GenomeError, match=rf"{field} must be a number in \["):
        Genome.from_json(json.dumps(data))
    data = json.loads(random_genome(CFG, np.random.default_rng(0), "g").to_json())
    data["groups"][0]["joints"][0]["gear"] = 1e30
    with pytest.raises(GenomeError, match=r"joint gear must be a number in \[0.001, 10000\], got 1e\+30"):
        Genome.from_json(json.dumps(data))
