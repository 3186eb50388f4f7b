"""Species de-duplication and the initial population."""

import dataclasses
import itertools

import numpy as np
import pytest

from derl.morphology import initial_population, random_genome, species_labels
from derl.morphology.geometry import rotation_signature
from derl.morphology.population import assignment_cost, select_members
from tests.morphology.test_morphology import CFG, walker


def test_assignment_cost_matches_rows_optimally():
    a = np.array([[0.0] * 9, [1.0] * 9])
    b = np.array([[1.0] * 9, [0.1] + [0.0] * 8])
    assert np.isclose(assignment_cost(a, b), 0.1)  # swapped rows, one off by 0.1


def test_species_are_connected_components_of_close_pairs():
    base = np.eye(3).reshape(1, 9).repeat(2, axis=0)
    base[1] = -base[1]
    step = np.zeros(9)
    step[0] = 0.15
    signatures = [
        base,                      # 0
        base[::-1].copy(),         # 1: same matrices, other order -> species 0
        base + step,               # 2: cost 0.3 from 0 ...
        base + step / 2,           # 3: ... but 0.15 from both 0 and 2 -> joins them
        base[:1],                  # 4: one limb -> its own species
        base + 10 * step,          # 5: far away
    ]
    assert species_labels(signatures) == [0, 0, 0, 0, 4, 5]
    assert species_labels(signatures[:3]) == [0, 0, 2]


def _brute_force_labels(signatures, threshold=0.2):
    parent = list(range(len(signatures)))

    def find(k):
        while parent[k] != k:
            k = parent[k]
        return k
    for i, j in itertools.combinations(range(len(signatures)), 2):
        if len(signatures[i]) == len(signatures[j]) and assignment_cost(signatures[i], signatures[j]) < threshold:
            ri, rj = find(i), find(j)
            parent[max(ri, rj)] = min(ri, rj)
    return [find(k) for k in range(len(signatures))]


def test_bucketing_finds_the_same_species_as_all_pairs():
    rng = np.random.default_rng(0)
    genomes = [random_genome(CFG, np.random.default_rng(s), "g") for s in range(40)]
    signatures = [rotation_signature(g) for g in genomes]
    noisy = [s + rng.normal(0, 0.02, s.shape) for s in signatures for _ in range(2)]
    signatures += noisy + [s[rng.permutation(len(s))] for s in signatures[:20]]
    labels = species_labels(signatures)
    assert labels == _brute_force_labels(signatures)
    assert len(set(labels)) < len(signatures)


def test_dedup_keeps_exactly_one_of_each_structure():
    # Same bodies with other joints, densities or limb order are one species.
    genomes = [walker(), random_genome(CFG, np.random.default_rng(1), "r")]
    twins = [
        dataclasses.replace(walker(), limb_density=900),
        dataclasses.replace(walker(), groups=tuple(dataclasses.replace(g, joints=g.joints[:1])
                                                   for g in walker().groups)),
    ]
    everything = genomes + twins + [genomes[1]]
    labels = species_labels([rotation_signature(g) for g in everything])
    assert labels == [0, 1, 0, 0, 1]
    chosen = select_members(labels, 2, np.random.default_rng(0))
    assert chosen == [0, 1]


def test_select_members_trims_or_pads_to_the_exact_size():
    labels = [0, 0, 2, 3, 3, 5, 6]  # species 0, 2, 3, 5, 6
    trimmed = select_members(labels, 3, np.random.default_rng(0))
    assert len(trimmed) == 3 and set(trimmed) <= {0, 2, 3, 5, 6}
    padded = select_members(labels, 6, np.random.default_rng(0))
    assert padded[:5] == [0, 2, 3, 5, 6] and padded[5] in (1, 4)


def test_initial_population_is_exact_deterministic_and_worker_independent():
    ids = [f"0-{k}" for k in range(6)]
    one = initial_population(CFG, seed=3, size=6, ids=ids)
    assert [g.id for g in one] == ids and all(g.parent_id is None for g in one)
    labels = species_labels([rotation_signature(g) for g in one])
    assert len(set(labels)) == 6  # 60 candidates hold far more than 6 species
    two = initial_population(CFG, seed=3, size=6, ids=lambda k: f"0-{k}", num_workers=2)
    assert [g.to_json() for g in one] == [g.to_json() for g in two]


def test_initial_population_rejects_bad_ids():
    with pytest.raises(ValueError, match="needs 3 unique ids"):
        initial_population(CFG, seed=0, size=3, ids=["a", "a", "b"])
