"""Genomes at and past every limit of the design space: each number of a drawn body moved to a bound the
morphology package declares (its ``Range``s and ``(low, high)`` pairs, found by walking the modules, so a new
bound is attacked as soon as it is declared) or just past it, to a huge, non-finite or wrong-typed value; the
limb count to ``LIMB.MAX_LIMBS`` and one past; ids to the ends of their pattern.

The invariants: the reader refuses in one ``GenomeError`` line, or what it accepts compiles in MuJoCo and reads
back the same; a genome file is refused in one line naming the file.
"""

import copy
import json
import math

import mujoco
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import derl.morphology.config as morphology_config
import derl.morphology.genome_checks as genome_checks
from derl.checked_config import load_config
from derl.config import Range
from derl.morphology import Genome, GenomeError, random_genome, to_mjcf
from derl.morphology.files import InputError, load_genome
from tests.properties.declarations import examples

pytestmark = pytest.mark.fuzz

CFG = load_config()


def _declared_bounds() -> list[float]:
    """Both ends of every bound declared at the top of the morphology's modules, and the floats just past them."""
    found = set()
    for module in (genome_checks, morphology_config):
        for value in vars(module).values():
            if isinstance(value, Range):
                found |= {value.low, value.high}
            elif (isinstance(value, tuple) and len(value) == 2
                  and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)):
                found |= set(value)
            elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > 1000:  # MAX_LIMB_ID
                found.add(value)
    edges = set()
    for bound in found:
        edges |= {bound, math.nextafter(float(bound), math.inf), math.nextafter(float(bound), -math.inf)}
        if isinstance(bound, int):
            edges |= {bound + 1, bound - 1}
    return sorted(edges)


EDGES = _declared_bounds()
HOSTILE = [0, -0.0, -1, 1e308, -1e308, 10**400, float("nan"), float("inf"), True, "1", None, [], {}]
ID_ENDS = ["a" * 128, "a" * 129, "", "-a", "a/b", "..", "a\nb", "ab\x00"]


def _paths(data, prefix=()):
    """The path of every value in a genome's JSON tree."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _paths(value, (*prefix, index))
    yield prefix


def _set(data, path, value):
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


@st.composite
def genome_attacks(draw) -> tuple[dict, list]:
    """A drawn body, then one to three of its values moved to a declared limit, past it, or to a hostile value."""
    data = json.loads(random_genome(CFG.unimal, np.random.default_rng(draw(st.integers(0, 2**16))), "g0").to_json())
    moves = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["value", "value", "value", "limbs", "id"]))
        if kind == "limbs":
            count = draw(st.sampled_from([0, CFG.LIMB.MAX_LIMBS, CFG.LIMB.MAX_LIMBS + 1]))
            # an earlier move may have set "groups" itself to a hostile value
            groups = data["groups"] if isinstance(data.get("groups"), list) and data["groups"] else [{}]
            data["groups"] = [copy.deepcopy(groups[k % len(groups)]) for k in range(count)]
            moves.append(("groups", count))
            continue
        if kind == "id":
            field = draw(st.sampled_from(["id", "parent_id", "mutation"]))
            data[field] = draw(st.sampled_from(ID_ENDS))
            moves.append((field, data[field]))
            continue
        paths = [p for p in _paths(data) if p and p[0] != "schema_version"]
        path = draw(st.sampled_from(paths))
        value = draw(st.one_of(st.sampled_from(EDGES), st.sampled_from(HOSTILE), st.floats(), st.integers()))
        _set(data, path, value)
        moves.append((path, value))
    return data, moves


def _text(data) -> str:
    try:
        return json.dumps(data)
    except ValueError:  # an integer too long for Python to print
        return '{"schema_version": 1, "id": "' + "9" * 5000 + '"}'


@settings(max_examples=examples(40, 1))
@given(attack=genome_attacks(), design_space=st.booleans())
def test_a_genome_past_a_limit_is_refused_in_one_line_or_compiles_and_reads_back_the_same(attack, design_space):
    data, moves = attack
    unimal = CFG.unimal if design_space else None
    try:
        genome = Genome.from_json(_text(data), unimal)
    except GenomeError as err:
        assert "\n" not in str(err) and str(err), (moves, str(err))
        return
    model = mujoco.MjModel.from_xml_string(to_mjcf(genome, CFG.unimal))  # accepted: MuJoCo builds it
    assert model.nbody == genome.num_limbs + 2, moves  # the world, the head and each limb
    assert Genome.from_json(genome.to_json(), unimal) == genome, moves


@settings(max_examples=examples(10, 1 / 10))
@given(attack=genome_attacks())
def test_a_genome_file_past_a_limit_is_refused_in_one_line_naming_the_file(attack, tmp_path_factory):
    data, moves = attack
    path = tmp_path_factory.mktemp("genome") / "body.json"
    path.write_text(_text(data))
    try:
        load_genome(path, CFG.unimal)
    except InputError as err:
        assert "\n" not in str(err) and str(path) in str(err), (moves, str(err))
