"""The config's rules, each owned by one declaration (issue 54): every number bounded at both ends; the design
space the config lets a search draw is the one the genome reader accepts back; the memory check covers every
array the config sizes; a config fault found while training names its keys; a text key takes its text; a lease
spans several heartbeats. Each rule is checked over every key it covers, from the declarations themselves."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from derl.checked_config import Config, load_config
from derl.config import ConfigError
from tests.conftest import ROOT


def _keys(cls: type = Config, prefix: str = ""):
    """(dotted key, dataclass field) of every key of the typed config, sections walked."""
    for field in dataclasses.fields(cls):
        if field.default_factory is not dataclasses.MISSING:
            yield from _keys(field.default_factory, f"{prefix}{field.name}.")
        else:
            yield f"{prefix}{field.name}", field


# A key that holds numbers: an int or a float, or a list (of lists) of them; bools are no numbers.
NUMERIC = {key: field for key, field in _keys() if re.search(r"\b(int|float)\b", str(field.type))}


def test_every_numeric_key_list_item_and_span_value_has_a_finite_range():
    assert len(NUMERIC) >= 84 and "TERRAIN.SIZE" in NUMERIC and "TORSO.HEAD_RADIUS_RANGE" in NUMERIC
    unbounded = [key for key, field in NUMERIC.items()
                 if (allowed := field.metadata["allowed"]) is None
                 or not (math.isfinite(allowed.low) and math.isfinite(allowed.high))]
    assert unbounded == []


def _beyond(key: str, field, high: bool):
    """A value of ``key`` with one number just past its range (high or low end), in the key's shape."""
    allowed = field.metadata["allowed"]
    edge = allowed.high if high else allowed.low
    number = edge + (1 if high else -1) * max(1, abs(edge))
    default = dict(_plain_defaults())[key]
    whole = isinstance(default, int) or allowed.whole
    number = int(number) if whole else float(number)
    if not isinstance(default, list):
        return number
    if default and isinstance(default[0], list):  # BODY.JOINT_ANGLE_LIST: [[low, high], ...]
        return [[number, number]]
    return [number]


def _plain_defaults():
    from derl.config import flatten

    return flatten(Config().to_dict())


SETTABLE = [key for key, field in NUMERIC.items() if not field.metadata["derived"]]


@pytest.mark.parametrize("key", SETTABLE)
def test_a_number_past_either_end_of_its_key_is_one_line_naming_the_key(key):
    field = NUMERIC[key]
    for high in (True, False):
        value = _beyond(key, field, high)
        with pytest.raises(ConfigError) as caught:
            load_config(None, {key: value})
        assert caught.value.key == key and key in str(caught.value) and "\n" not in str(caught.value), value


def test_the_defaults_and_every_preset_lie_inside_the_ranges():
    load_config()
    for preset in sorted((ROOT / "configs").rglob("*.yml")):
        load_config([preset] if preset.name != "gpu_server.yml" else [ROOT / "configs/evo/ft.yml", preset])


def test_the_config_reference_shows_every_range():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    table = hooks.config_table()
    for key, field in NUMERIC.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| `{key}` |"))
        assert f"`{field.metadata['allowed'].text()}`" in row, key
    assert "| `TORSO.HEAD_RADIUS_RANGE` | `[0.1]` | list | `[0.001, 10]` |" in table


# --- the design space and the genome reader --------------------------------------------------------------

# The design space's span keys and the genome field each draws.
DRAWN = {"TORSO.HEAD_RADIUS_RANGE": "head_radius", "TORSO.DENSITY_RANGE": "head_density",
         "LIMB.DENSITY_RANGE": "limb_density", "LIMB.RADIUS_RANGE": "radius", "LIMB.HEIGHT_RANGE": "length",
         "BODY.MOTOR_GEAR_RANGE": "gear"}


def test_the_edge_tests_cover_every_span_of_the_design_space():
    spans = {key for key, field in NUMERIC.items() if field.metadata["span"] and key.split(".")[0] in
             ("BODY", "TORSO", "LIMB")}
    assert spans == {*DRAWN, "LIMB.NUM_LIMBS_RANGE"}


def _at(genome, field: str, value: float):
    """``genome`` with every value of ``field`` (a genome field, or a limb group's or a joint's) set to ``value``."""
    if field in ("head_radius", "head_density", "limb_density"):
        return dataclasses.replace(genome, **{field: value})
    groups = []
    for group in genome.groups:
        if field == "gear":
            group = dataclasses.replace(group, joints=tuple(dataclasses.replace(j, gear=value) for j in group.joints))
        else:
            group = dataclasses.replace(group, **{field: value})
        groups.append(group)
    return dataclasses.replace(genome, groups=tuple(groups))


@pytest.mark.parametrize("key", sorted(DRAWN))
@pytest.mark.parametrize("end", ["low", "high"])
def test_every_value_a_span_at_its_edge_draws_the_reader_accepts_and_past_it_the_config_refuses(key, end):
    """``TORSO.HEAD_RADIUS_RANGE [100]`` was accepted, and every genome it drew was refused on read-back (head
    radius at most 10): the search made body 000000 again and again without end."""
    from derl.morphology import Genome, random_genome

    allowed = NUMERIC[key].metadata["allowed"]
    edge = getattr(allowed, end)
    unimal = load_config(None, {key: [edge]}).unimal
    genome = _at(random_genome(load_config().unimal, np.random.default_rng(0), "g0"), DRAWN[key], edge)
    assert Genome.from_json(genome.to_json(), unimal) == genome  # the design space of the config at the edge
    assert Genome.from_json(genome.to_json()) == genome  # the reader's physical bounds alone
    past = edge * 10 if end == "high" else edge / 10
    with pytest.raises(ConfigError, match=rf"^config key {re.escape(key)} must be "):
        load_config(None, {key: [past]})


def test_a_search_at_the_largest_head_draws_genomes_it_reads_back():
    from derl.morphology import Genome, random_genome

    unimal = load_config(None, ["TORSO.HEAD_RADIUS_RANGE", "[10]"]).unimal
    for seed in range(3):
        genome = random_genome(unimal, np.random.default_rng(seed), f"g{seed}")
        assert genome.head_radius == 10 and Genome.from_json(genome.to_json(), unimal) == genome


def test_a_design_space_that_cannot_grow_its_bodies_is_one_line_naming_its_keys_at_the_first_draw(tmp_path):
    """``LIMB.RADIUS_RANGE '[10]'``: every second limb overlaps; was a RuntimeError after 10,000 operators (four
    minutes of MuJoCo contact checks per body, in every slot), now a ``ConfigError`` after 20 failed grows, which a
    search ends with exit 2 (make fuzz, seed 1024383)."""
    from derl.morphology import random_genome
    from derl.morphology.mutations import INIT_FAILED_GROWS

    unimal = load_config(None, ["LIMB.RADIUS_RANGE", "[10.0]", "LIMB.NUM_LIMBS_RANGE", "[7]"]).unimal
    with pytest.raises(ConfigError, match=rf"cannot grow a body of 7 limbs.*the last {INIT_FAILED_GROWS} grow_limb"
                       ) as caught:
        random_genome(unimal, np.random.default_rng(1024383), "g0")
    assert "LIMB.RADIUS_RANGE" in caught.value.keys and "\n" not in str(caught.value)
    run = subprocess.run([sys.executable, str(ROOT / "evo_single_proc.py"), "--cfg", "configs/evo/quick.yml",
                          "OUT_DIR", str(tmp_path / "run"), "EVO.NUM_PROCESSES", "1", "LIMB.RADIUS_RANGE", "[10.0]"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 2 and run.stderr.strip().startswith("error: the design space cannot grow"), run.stderr
    assert not (tmp_path / "run" / "published").exists() or not any((tmp_path / "run" / "published").iterdir())


def test_joint_ranges_and_axes_the_reader_refuses_are_refused_by_the_config():
    with pytest.raises(ConfigError, match=r"^config key BODY.JOINT_ANGLE_LIST must hold \[low, high\] pairs"):
        load_config(None, ["BODY.JOINT_ANGLE_LIST", "[[30, -30]]"])
    with pytest.raises(ConfigError, match=r"^config key BODY.JOINT_AXIS: unknown value 'z'"):
        load_config(None, ["BODY.JOINT_AXIS", "[x, z]"])
    with pytest.raises(ConfigError, match=r"^config key BODY.JOINT_ANGLE_LIST must be at most 360"):
        load_config(None, ["BODY.JOINT_ANGLE_LIST", "[[0, 720]]"])


@pytest.mark.parametrize("key, value, problem", [
    ("BODY.JOINT_ANGLE_LIST", "[1, 2]", "must hold lists as its items"),  # was a TypeError traceback
    ("ENV.MODULES", "[[1]]", "must hold texts as its items"),  # was accepted
    ("BODY.JOINT_ANGLE_LIST", "[[-360, 1e+308]]", "must hold numbers as its items"),  # YAML's 1e+308 is text
    ("EVO.SELECTION_CRITERIA", "[1]", "must hold texts as its items"),
    ("BODY.JOINT_AXIS", "[xx]", "unknown value 'xx'"),  # was accepted, then MuJoCo refused a repeated name
    ("BODY.JOINT_AXIS", "[yx]", "unknown value 'yx'"),
])
def test_a_list_keys_items_have_the_kind_of_its_defaults_items(key, value, problem):
    with pytest.raises(ConfigError, match=rf"^config key {key}:? {re.escape(problem)}") as caught:
        load_config(None, [key, value])
    assert caught.value.key == key and "\n" not in str(caught.value)


def test_a_genome_refused_for_its_limbs_names_its_id_on_one_line():
    import json

    from derl.morphology import Genome, GenomeError, random_genome

    data = json.loads(random_genome(load_config().unimal, np.random.default_rng(0), "g0").to_json())
    with pytest.raises(GenomeError, match=r"is not a valid id") as caught:
        Genome.from_json(json.dumps({**data, "id": "a\nb", "groups": []}), load_config().unimal)
    assert "\n" not in str(caught.value)


def test_an_empty_joint_range_is_refused_by_the_config_and_the_reader_as_mujoco_refuses_it():
    from derl.morphology import Genome, GenomeError, random_genome

    with pytest.raises(ConfigError, match=r"^config key BODY.JOINT_ANGLE_LIST must hold \[low, high\] pairs"):
        load_config(None, ["BODY.JOINT_ANGLE_LIST", "[[30, 30]]"])
    genome = random_genome(load_config().unimal, np.random.default_rng(0), "g0")
    group = genome.groups[0]
    empty = dataclasses.replace(group, joints=(dataclasses.replace(group.joints[0], range=(30, 30)),))
    with pytest.raises(GenomeError, match=r"joint range \[30, 30\] must have its low end below its high end"):
        Genome.from_json(dataclasses.replace(genome, groups=(empty, *genome.groups[1:])).to_json())


def test_a_genome_number_past_the_float_range_is_a_genome_error():
    import json

    from derl.morphology import Genome, GenomeError, random_genome

    data = json.loads(random_genome(load_config().unimal, np.random.default_rng(0), "g0").to_json())
    for unimal in (None, load_config().unimal):
        with pytest.raises(GenomeError, match=r"^genome field head_radius must be a number in float range"):
            Genome.from_json(json.dumps({**data, "head_radius": 10**400}), unimal)


# --- the memory check at load ------------------------------------------------------------------------------

@pytest.fixture
def node_of_24_gib(monkeypatch):
    import psutil

    class Memory:
        total = available = 24 * 2**30

    monkeypatch.setattr(psutil, "virtual_memory", lambda: Memory())


TERRAIN = ["ENV.MODULES", "[Agent, Terrain]"]
PATCH = ["ENV.MODULES", "[Agent, Terrain]", "ENV.KEYS_TO_KEEP", "[proprioceptive, hfield]"]


@pytest.mark.parametrize("overrides, first_key, text", [
    # 32 maps of 20,023 x 20,023 cells of 4 bytes: 48 GiB
    ([*TERRAIN, "TERRAIN.SIZE", "[1000, 1000, 1]"], "TERRAIN.SIZE", "height maps (32 of 20023 x 20023 cells)"),
    # the patch: 48,874,081 values per env step at 100 cells/m, in every env step of the rollout
    ([*PATCH, "HFIELD.OBS_SIZE", "[100, 100, 100, 100]", "HFIELD.NUM_DIVS", "100"], "HFIELD.OBS_SIZE",
     "height-field values per env step"),
    ([*PATCH, "HFIELD.OBS_SIZE", "[20, 20, 20, 20]", "HFIELD.NUM_DIVS", "100", "PPO.NUM_ENVS", "1", "PPO.TIMESTEPS",
      "1"], "HFIELD.OBS_SIZE", "height-field patch offsets (720 headings x"),
])
def test_arrays_the_config_sizes_past_the_nodes_memory_are_one_line_naming_the_keys(node_of_24_gib, overrides,
                                                                                   first_key, text):
    assert load_config(None, overrides)  # a report of such a run still loads
    with pytest.raises(ConfigError) as caught:
        load_config(None, overrides, this_node=True)
    message = str(caught.value)
    assert caught.value.key == first_key and first_key in message and text in message, message
    assert "this node has 24 GiB of memory" in message and "\n" not in message
    assert message.endswith("(set on the command line)")


def test_a_patch_of_fewer_than_two_cells_each_way_is_refused_where_it_is_observed():
    """One cell made the patch's log-spaced offsets 0 / 0: a reach of 9e18 cells, then a failed allocation."""
    assert load_config(None, ["HFIELD.NUM_DIVS", "1"]).HFIELD.NUM_DIVS == 1  # not observed: no patch
    with pytest.raises(ConfigError, match=r"^config key HFIELD.OBS_SIZE \[1, 4, 4, 4\] must reach at least 2 "):
        load_config(None, [*PATCH, "HFIELD.NUM_DIVS", "1"])


def _train_ppo(*args: str | bytes, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "train_ppo.py"), *args], cwd=cwd,
                          capture_output=True, timeout=120)


@pytest.mark.parametrize("overrides, key", [
    (["TERRAIN.SIZE", "[100000, 100000, 1]"], "TERRAIN.SIZE"),
    (["ENV.KEYS_TO_KEEP", "[proprioceptive, hfield]", "HFIELD.OBS_SIZE", "[1000, 1000, 1000, 1000]"],
     "HFIELD.OBS_SIZE"),
    (["TERRAIN.SIZE", "[1000, 1000, 1]", "HFIELD.NUM_DIVS", "100"], "TERRAIN.SIZE"),  # 4.8 TB: no node has it
    (["ENV.FORWARD_REWARD_WEIGHT", "1e308"], "ENV.FORWARD_REWARD_WEIGHT"),
    (["EVO.LEASE_SECONDS", "0.001"], "EVO.LEASE_SECONDS"),
])
def test_train_ppo_refuses_them_in_one_line_before_anything_is_created(tmp_path, overrides, key):
    out = tmp_path / "run"
    done = _train_ppo("--cfg", str(ROOT / "configs/evo/vt.yml"), "--env-id", "Ant-v5", "--out", str(out),
                      *overrides, cwd=tmp_path)
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: config key"), done.stderr
    assert key in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# --- text keys take the text -------------------------------------------------------------------------------

def test_a_text_key_takes_the_command_lines_text_as_it_is():
    cfg = load_config(None, ["OUT_DIR", "runs/base #2", "ENV.TASK", "locomotion", "PPO.NUM_ENVS", "1e1",
                             "TERRAIN.SIZE", "[30, 20, 1]", "TENSORBOARD.ENABLED", "false"])
    assert cfg.OUT_DIR == "runs/base #2"  # not runs/base: ' #2' is no YAML comment in a text
    assert cfg.PPO.NUM_ENVS == 10 and cfg.TERRAIN.SIZE == (30, 20, 1) and cfg.TENSORBOARD.ENABLED is False
    assert load_config(None, ["OUT_DIR", "'*run'"]).OUT_DIR == "'*run'"
    assert load_config(None, ["OUT_DIR", "123"]).OUT_DIR == "123"


@pytest.mark.parametrize("text, problem", [
    ("runs/a\nb", "without control characters"), ("runs/a\x00b", "without control characters"),
    ("runs/\udcff", "UTF-8 encodes"), ("r" * 5000, "at most 4096 bytes"),
])
def test_a_text_that_cannot_name_a_path_is_one_line_naming_the_key(text, problem):
    with pytest.raises(ConfigError) as caught:
        load_config(None, ["OUT_DIR", text])
    message = str(caught.value)
    assert message.startswith("config key OUT_DIR must ") and problem in message and "\n" not in message
    assert caught.value.key == "OUT_DIR" and len(message) < 300


@pytest.mark.parametrize("value", [b"runs/a\nb", b"runs/\xff\xfe"])
def test_train_ppo_refuses_an_out_dir_it_cannot_encode_before_creating_it(tmp_path, value):
    done = _train_ppo("--cfg", str(ROOT / "configs/evo/vt.yml"), "--env-id", "Ant-v5", "OUT_DIR", value,
                      cwd=tmp_path)
    lines = done.stderr.decode(errors="replace").splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: config key OUT_DIR must ")
    assert list(tmp_path.iterdir()) == []


# --- a lease spans several heartbeats ----------------------------------------------------------------------

def test_the_lease_spans_beats_that_a_loaded_node_keeps():
    """EVO.LEASE_SECONDS 0.001 was in range: two workers took the last slot from each other 80 times."""
    from derl.checked_config import BEATS_PER_LEASE, MIN_HEARTBEAT_SECONDS
    from derl.evolution.lease import heartbeat_interval

    low = NUMERIC["EVO.LEASE_SECONDS"].metadata["allowed"].low
    assert low == BEATS_PER_LEASE * MIN_HEARTBEAT_SECONDS
    assert heartbeat_interval(low) == MIN_HEARTBEAT_SECONDS  # the relation lease.py computes
    assert all(heartbeat_interval(s) >= MIN_HEARTBEAT_SECONDS for s in (low, 3, 4, 600, 7 * 86400))
    for bad in ("0.001", "1"):
        with pytest.raises(ConfigError, match=rf"^config key EVO.LEASE_SECONDS must be at least {low}, got {bad}"):
            load_config(None, ["EVO.LEASE_SECONDS", bad])
    assert load_config(None, ["EVO.LEASE_SECONDS", "3"]).EVO.LEASE_SECONDS == 3.0  # the tests' tiny searches


# --- a config fault found while training -------------------------------------------------------------------

def _train_ppo_here(tmp_path: Path, monkeypatch, iterate) -> int:
    """``tools/train_ppo.py`` in this process on a tiny genome, with the trainer's iteration replaced by
    ``iterate(original, ppo)``; returns its exit code."""
    from derl.morphology import random_genome
    from derl.ppo import trainer

    genome = random_genome(load_config().unimal, np.random.default_rng(0), "g0")
    (tmp_path / "g0.json").write_text(genome.to_json())
    original = trainer.PPO.iterate
    monkeypatch.setattr(trainer.PPO, "iterate", lambda ppo: iterate(original, ppo))
    spec = importlib.util.spec_from_file_location("train_ppo_tool", ROOT / "tools" / "train_ppo.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool.main(["--genome", str(tmp_path / "g0.json"), "--out", str(tmp_path / "run"), "--quiet",
                      "PPO.NUM_ENVS", "2", "PPO.TIMESTEPS", "16", "PPO.BATCH_SIZE", "16",
                      "MAX_STATE_ACTION_PAIRS", "128", "TENSORBOARD.ENABLED", "false"])


def _not_finite(original, ppo) -> dict:
    record = original(ppo)
    return {**record, "loss": float("nan")} if record["iteration"] >= 2 else record


def _out_of_memory(original, ppo) -> dict:
    raise MemoryError("Unable to allocate 58.2 TiB for an array with shape (100001, 100001)")


@pytest.mark.parametrize("iterate, keys", [
    (_not_finite, ("ENV.FORWARD_REWARD_WEIGHT", "not finite")),
    (_out_of_memory, ("PPO.NUM_ENVS", "PPO.TIMESTEPS", "out of memory (Unable to allocate 58.2 TiB")),
], ids=["a loss not finite", "out of memory"])
def test_a_config_fault_while_training_is_one_line_naming_the_keys_and_leaves_no_folder(tmp_path, monkeypatch,
                                                                                       capsys, iterate, keys):
    """``ENV.FORWARD_REWARD_WEIGHT 1e308`` made every loss NaN: train_ppo ended with 'Out of range float values
    are not JSON compliant' (the key never named) and left a folder no --resume finished."""
    code = _train_ppo_here(tmp_path, monkeypatch, iterate)
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: training "), lines
    assert all(text in lines[0] for text in keys), lines[0]
    assert not (tmp_path / "run").exists()  # no checkpoint was saved: nothing to resume, nothing left


def test_the_training_guards_raise_config_errors_with_their_keys():
    """What a search's trainings take too (``derl.evolution.backend``): a ``ConfigError`` with ``keys``."""
    from derl.training.faults import REWARD_KEYS, FiniteTraining, config_faults

    cfg = load_config(None, ["ENV.MODULES", "[Agent, Terrain]"])
    FiniteTraining(cfg.world).on_iteration({"iteration": 1, "loss": 0.5, "return": 3.0})
    with pytest.raises(ConfigError) as caught:
        FiniteTraining(cfg.world).on_iteration({"iteration": 7, "loss": float("inf")})
    assert caught.value.keys == REWARD_KEYS and "iteration 7: loss not finite" in str(caught.value)
    with pytest.raises(ConfigError) as caught, config_faults(cfg.world, cfg.PPO):
        raise MemoryError()
    assert caught.value.keys == ("PPO.NUM_ENVS", "PPO.TIMESTEPS", "TERRAIN.SIZE", "HFIELD.NUM_DIVS")
