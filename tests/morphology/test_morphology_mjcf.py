"""The MJCF contract, head height, exclusions, determinism, fuzz and the acceptance rule check."""

import mujoco
import numpy as np
import pytest

from derl.checked_config import load_config
from derl.morphology import Genome, mutate, random_genome, to_mjcf
from derl.morphology.geometry import capsule_frame, place_limbs
from derl.morphology.mjcf import contact_pairs
from tests.morphology.test_morphology import CFG, group, walker
from tests.morphology_checks import assert_mirror_symmetric, simulate_on_floor


def compiled(genome: Genome, cfg=CFG):
    model = mujoco.MjModel.from_xml_string(to_mjcf(genome, cfg))
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    return model, data


def test_names_motors_and_sensors_follow_the_contract():
    model, data = compiled(walker())
    assert model.body(1).name == "torso/0" and model.body_parentid[1] == 0
    assert model.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE and model.joint(0).name == "root"
    assert model.dof_damping[0] == 0 and model.dof_armature[0] == 0
    hinges = [model.joint(j).name for j in range(1, model.njnt)]
    assert hinges == ["limbx/0", "limbx/2", "limby/2", "limbx/1", "limbx/3", "limby/3", "limbx/4"]
    assert [model.actuator(a).name for a in range(model.nu)] == hinges
    assert np.all(model.actuator_gear[:, 0] == 200) and np.all(model.actuator_ctrlrange == [-1, 1])
    assert np.all(model.dof_damping[6:] == 1) and np.all(model.dof_armature[6:] == 1)
    assert np.all(model.jnt_limited[1:]) and np.all(model.geom_condim == 3)
    for i in range(5):
        for site in (f"limb/mid/{i}", f"limb/btm/{i}", f"limb/btm_pos/{i}", f"limb/touch/{i}"):
            model.site(site)
        assert model.geom(f"limb/{i}").type == mujoco.mjtGeom.mjGEOM_CAPSULE
    for site in ("root", "torso/btm_pos/0", "torso/touch/0"):
        model.site(site)
    kinds = [model.sensor_type[s] for s in range(model.nsensor)]
    t = mujoco.mjtSensor
    assert kinds[:4] == [t.mjSENS_ACCELEROMETER, t.mjSENS_GYRO, t.mjSENS_VELOCIMETER, t.mjSENS_SUBTREEANGMOM]
    assert kinds[4:] == [t.mjSENS_TOUCH] * 6 and model.nsensordata == 12 + 6
    touch_bodies = [model.site_bodyid[model.sensor_objid[s]] for s in range(4, 10)]
    assert touch_bodies == list(range(1, 7))  # head first, then limbs in document order


def test_limb_geometry_and_densities_follow_the_genome():
    genome = walker()
    model, data = compiled(genome)
    for limb in place_limbs(genome):
        geom = model.geom(f"limb/{limb.id}")
        assert np.isclose(geom.size[0], 0.05) and np.isclose(geom.size[1], (0.05 + limb.length) / 2)
        assert np.isclose(np.linalg.norm(model.geom_pos[geom.id]), (0.05 + limb.length) / 2)
    head_mass = 700 * 4 / 3 * np.pi * 0.1**3
    assert np.isclose(model.body("torso/0").mass[0], head_mass)


def test_capsule_frame_is_the_compiled_geom_frame():
    for seed in range(5):
        genome = random_genome(CFG, np.random.default_rng(seed), "g")
        model, data = compiled(genome)
        for limb in place_limbs(genome):
            xmat = data.geom_xmat[model.geom(f"limb/{limb.id}").id].reshape(3, 3)
            assert np.allclose(xmat, capsule_frame(limb.direction), atol=1e-9)


def _lowest_geom_z(model, data):
    lows = []
    for g in range(model.ngeom):
        half = model.geom_size[g, 1] if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_CAPSULE else 0.0
        ends = data.geom_xpos[g, 2] + np.array([-1, 1]) * half * data.geom_xmat[g, 8]
        lows.append(ends.min() - model.geom_size[g, 0])
    return min(lows)


@pytest.mark.parametrize("offset", [0.2, 0.05])
def test_lowest_point_sits_floor_offset_above_the_floor(offset):
    cfg = load_config(overrides={"BODY.FLOOR_OFFSET": offset})
    for seed in range(5):
        genome = random_genome(cfg.unimal, np.random.default_rng(seed), "g")
        for step in range(4):  # head height follows every change of the lowest point
            model, data = compiled(genome, cfg)
            assert np.isclose(_lowest_geom_z(model, data), offset, atol=1e-6)
            genome = mutate(genome, cfg.unimal, np.random.default_rng(step), f"g{step}")


def test_overlapping_pair_gets_an_exclusion_and_nothing_else_touches():
    # Two limbs leaving a leg's tip 60 degrees apart overlap at their roots.
    genome = Genome("p", 0.1, 500, 500, (group([0]), group([1, 2], parent=0, site="btm", theta=45, phi=135)),
                    next_limb_id=3)
    xml = to_mjcf(genome, CFG)
    assert xml.count("<exclude") == 1 and '<exclude body1="limb/1" body2="limb/2"/>' in xml
    model, data = compiled(genome)
    assert data.ncon == 0
    assert contact_pairs(xml) == []


def test_same_seed_same_bytes_and_different_seeds_differ():
    def build(seed):
        rng = np.random.default_rng(seed)
        genome = mutate(random_genome(CFG, rng, "a"), CFG, rng, "b")
        return genome.to_json() + to_mjcf(genome, CFG)
    assert build(5) == build(5)
    assert build(5) != build(6)


def _chains(num_chains: int, length: int, seed: int):
    """``num_chains`` mutation chains from 20 shared random ancestors."""
    root = np.random.SeedSequence(seed)
    ancestors = [random_genome(CFG, np.random.default_rng(s), f"a{k}") for k, s in enumerate(root.spawn(20))]
    for k, chain_seed in enumerate(root.spawn(num_chains)):
        rng = np.random.default_rng(chain_seed)
        genome = ancestors[k % len(ancestors)]
        for step in range(length):
            genome = mutate(genome, CFG, rng, f"c{k}-{step}")
        yield genome


def test_fuzz_500_mutation_chains_compile():
    # 500 keep make test inside its budget; the slow tests below run 2000 longer chains
    limb_counts = set()
    for genome in _chains(500, 1, seed=99):
        model = mujoco.MjModel.from_xml_string(to_mjcf(genome, CFG))
        assert model.nu == genome.dof and model.nbody == genome.num_limbs + 2
        limb_counts.add(genome.num_limbs)
    assert limb_counts >= set(range(2, 10))


@pytest.mark.slow
def test_fuzz_2000_long_chains_compile_and_simulate():
    for genome in _chains(2000, 10, seed=100):
        xml = to_mjcf(genome, CFG)
        simulate_on_floor(xml, steps=100)
        assert_mirror_symmetric(xml)


def test_sampled_genomes_stand_on_a_floor_and_are_mirror_symmetric():
    off_plane = 0
    for seed in np.random.SeedSequence(7).spawn(25):
        rng = np.random.default_rng(seed)
        genome = random_genome(CFG, rng, "s")
        for step in range(20):
            genome = mutate(genome, CFG, rng, f"s{step}")
        assert 1 <= genome.num_limbs <= CFG.LIMB.MAX_LIMBS
        xml = to_mjcf(genome, CFG)
        simulate_on_floor(xml)
        assert_mirror_symmetric(xml)
        off_plane += sum(g.is_pair for g in genome.groups)
    assert off_plane > 10


def test_mirror_check_catches_a_broken_pair():
    xml = to_mjcf(walker(), CFG)
    assert_mirror_symmetric(xml)
    broken = xml.replace('<body name="limb/1" pos="0 -0.07071068 ', '<body name="limb/1" pos="0 -0.0708 ')
    assert broken != xml
    with pytest.raises(AssertionError, match="has no mirror image"):
        assert_mirror_symmetric(broken)
