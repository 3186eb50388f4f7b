"""The one validation of a loaded config (derl.checked_config) and the rule that no key is inert."""

import ast
import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from derl.checked_config import DERIVED_KEYS, Config, load_config, load_run_config
from derl.config import REPLACED_KEYS, RETIRED_KEYS, ConfigError, declared_keys, dump_config, flatten
from derl.envs.warp_check import WARP_MODULES, check_backend_here
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.search_config import join_search
from derl.ppo.config import LR_SCALING_NAMES
from tests.conftest import ROOT

# Modules whose mention of a key is not a use: the machinery, the sections' declarations and checks.
NOT_READERS = ("derl/config/__init__.py", "derl/config/keys.py", "derl/config/parse.py", "derl/checked_config.py",
               "derl/morphology/config.py", "derl/envs/config.py", "derl/ppo/config.py")


@pytest.mark.parametrize("overrides, key, text", [
    (["PPO.GAMMA", "nan"], "PPO.GAMMA", "must be finite"),
    (["PPO.GAMMA", "1.5"], "PPO.GAMMA", "must be at most 1"),
    (["PPO.BASE_LR", "-3e-4"], "PPO.BASE_LR", "must be positive"),
    (["PPO.CLIP_EPS", "0"], "PPO.CLIP_EPS", "must be positive"),
    (["PPO.ENTROPY_COEF", "-0.1"], "PPO.ENTROPY_COEF", "must not be negative"),
    (["EVO.PERCENT_PARTICIPANTS", "120"], "EVO.PERCENT_PARTICIPANTS", "must be at most 100"),
    (["RNG_SEED", "-1"], "RNG_SEED", "must not be negative, got -1"),
    (["MODEL.PRO_HIDDEN_DIMS", "[64, 0]"], "MODEL.PRO_HIDDEN_DIMS", "must be positive, got [64, 0]"),
    (["MODEL.OBS_FEAT_HIDDEN_DIMS", "[64.5]"], "MODEL.OBS_FEAT_HIDDEN_DIMS", "must hold whole numbers"),
    (["XML.GEOM_CONDIM", "2"], "XML.GEOM_CONDIM", "must be one of 1, 3, 4, 6"),
    (["EVO.NUM_PARTICIPANTS", "0"], "EVO.NUM_PARTICIPANTS", "must be positive"),
    (["EVO.AGING_WINDOW_SIZE", "0"], "EVO.AGING_WINDOW_SIZE", "must be positive"),
    (["EVO.NUM_PROCESSES", "-1"], "EVO.NUM_PROCESSES", "must not be negative"),
    (["EVO.TOURNAMENT_TYPE", "aging"], "EVO.TOURNAMENT_TYPE", "use one of aging_num"),
    (["EVO.MUTATION_OPS", "[grow_limb, shrink]"], "EVO.MUTATION_OPS", "'shrink'"),
    (["EVO.MUTATION_OPS", "[gear]"], "EVO.MUTATION_OPS", "must include grow_limb"),
    (["EVO.SELECTION_CRITERIA", "[__reward__fwd]", "SELECTION_CRITERIA_OBJ", "[-1]"], "EVO.SELECTION_CRITERIA",
     "__reward__fwd"),
    (["EVO.SELECTION_CRITERIA", "[__reward__forward]"], "EVO.SELECTION_CRITERIA_OBJ", "2 values for 1"),
    (["EVO.SELECTION_CRITERIA_OBJ", "[-1, 0]"], "EVO.SELECTION_CRITERIA_OBJ", "-1 (maximise) or 1"),
    (["EVO.INIT_POPULATION_SIZE", "10", "SEARCH_SPACE_SIZE", "5"], "EVO.INIT_POPULATION_SIZE", "must not exceed"),
    (["NODE_ID", "2", "NUM_NODES", "2"], "NODE_ID", "out of range"),
    (["ENV.TASK", "locomotoin"], "ENV.TASK", "unknown ENV.TASK"),
    (["ENV.KEYS_TO_KEEP", "[proprioceptive, eyes]"], "ENV.KEYS_TO_KEEP", "unknown ENV.KEYS_TO_KEEP"),
    (["ENV.OBS_TYPES", "[position, speed]"], "ENV.OBS_TYPES", "'speed'"),
    (["ENV.OBS_TYPES", "[]"], "ENV.OBS_TYPES", "is empty"),
    (["TERRAIN.TYPES", "[hills]"], "TERRAIN.TYPES", "'hills'"),
    (["TERRAIN.FLAT_LENGTH_RANGE", "[0]"], "TERRAIN.FLAT_LENGTH_RANGE", "never reach its end"),
    (["TERRAIN.FLAT_LENGTH_RANGE", "[0.01]"], "TERRAIN.FLAT_LENGTH_RANGE", "half a height-map cell"),
    (["TERRAIN.STEP_LENGTH_RANGE", "[-4]"], "TERRAIN.STEP_LENGTH_RANGE", "must not be negative"),
    (["OBJECT.TYPE", "cube"], "OBJECT.TYPE", "'cube'"),
    (["VECENV.THREADS", "0"], "VECENV.THREADS", "must be positive"),
    (["PPO.LR_SCALING", "square"], "PPO.LR_SCALING", "none, sqrt, linear"),
    (["DEVICE", "gpu"], "DEVICE", "cpu, cuda, cuda:N or auto"),
    (["SIM.BACKEND", "mjx"], "SIM.BACKEND", "use one of mujoco, warp"),
    (["SIM.NCONMAX", "0"], "SIM.NCONMAX", "must be positive"),
    (["SIM.NJMAX", "-8"], "SIM.NJMAX", "must be positive"),
    (["LIMB.HEIGHT_RANGE", "[0.4, 0.2, 0.1]"], "LIMB.HEIGHT_RANGE", "[start, stop, step>0]"),
    (["LIMB.NUM_LIMBS_RANGE", "[2, 12, 1]"], "LIMB.NUM_LIMBS_RANGE", "1..LIMB.MAX_LIMBS"),
    (["TERRAIN.SIZE", "[25, .inf, 1]"], "TERRAIN.SIZE", "must be finite"),
])
def test_bad_values_are_one_line_naming_the_key_and_where_it_was_set(overrides, key, text):
    with pytest.raises(ConfigError) as caught:
        load_config(None, overrides)
    message = str(caught.value)
    assert caught.value.key == key and key in message and text in message
    assert message.endswith("(set on the command line)") and "\n" not in message


# Every integer key of the defaults; derived keys are computed, never set.
RANGES = {doc.key: doc.allowed for doc in declared_keys(Config)}
INTEGER_KEYS = [key for key, value in flatten(Config().to_dict())
                if isinstance(value, int) and not isinstance(value, bool) and key not in DERIVED_KEYS]


@pytest.mark.parametrize("key", INTEGER_KEYS)
def test_every_integer_key_refuses_a_value_outside_its_range_naming_it(key):
    """Every integer key declares its range; one below its lowest and one above its highest value is refused."""
    allowed = RANGES[key]
    default = load_config(None, []).get_path(key)
    assert allowed.problem(default) is None
    for bad in (allowed.low - 1, allowed.high + 1):
        assert math.isfinite(bad), f"{key} needs both bounds: no integer key is unbounded"
        with pytest.raises(ConfigError) as caught:
            load_config(None, [key, str(bad)])
        assert caught.value.key == key and str(caught.value).startswith(f"config key {key} ")
        assert str(caught.value).endswith("(set on the command line)") and "\n" not in str(caught.value)


def test_an_error_names_the_file_that_set_the_key(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("EVO:\n  TOURNAMENT_TYPE: aging_nmu\n")
    with pytest.raises(ConfigError, match=rf"EVO.TOURNAMENT_TYPE.*\(set in {bad}\)$"):
        load_config(bad)
    bad.write_text("PPO:\n  GAMMA: abc\n")
    with pytest.raises(ConfigError, match=rf"PPO.GAMMA expects float.*\(set in {bad}\)$"):
        load_config(bad)


def test_a_conflict_between_two_keys_names_where_the_one_set_came_from(tmp_path):
    preset = tmp_path / "preset.yml"
    preset.write_text("EVO:\n  SELECTION_CRITERIA: [__reward__forward, __reward__stand, return]\n")
    with pytest.raises(ConfigError, match=rf"SELECTION_CRITERIA_OBJ has 2 values for 3 .*\(set in {preset}\)$"):
        load_config(preset)
    with pytest.raises(ConfigError, match=r"INIT_POPULATION_SIZE \(576\) must not exceed .*\(set on the command"):
        load_config(None, ["SEARCH_SPACE_SIZE", "100"])


def test_cuda_on_a_node_without_it_is_an_error_only_where_it_would_train():
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert load_config(None, ["DEVICE", "cuda"]).DEVICE == "cuda"  # a report of a GPU run still loads
    with pytest.raises(ConfigError, match=r"^config key DEVICE cuda: no CUDA device is visible"):
        load_config(None, ["DEVICE", "cuda"], this_node=True)
    assert load_config(None, ["DEVICE", "auto"], this_node=True).DEVICE == "auto"


def test_the_warp_backend_without_its_packages_is_an_error_only_where_it_would_train(monkeypatch):
    for name in WARP_MODULES:
        monkeypatch.setitem(sys.modules, name, None)  # Python's way to make a module unimportable
    assert load_config(None, ["SIM.BACKEND", "warp"]).SIM.BACKEND == "warp"  # a report of a warp run loads
    check_backend_here("mujoco")
    with pytest.raises(ConfigError) as caught:
        load_config(None, ["SIM.BACKEND", "warp"], this_node=True)
    message = str(caught.value)
    assert message.startswith("config key SIM.BACKEND warp needs the Python module(s) warp, mujoco_warp, not installed")
    assert "pip install -r requirements-gpu.txt" in message and "make setup-gpu" in message
    assert caught.value.key == "SIM.BACKEND" and "\n" not in message
    monkeypatch.delitem(sys.modules, "warp")
    if importlib.util.find_spec("warp") is not None:  # warp installed here: only mujoco_warp is named
        with pytest.raises(ConfigError, match=r"module\(s\) mujoco_warp, not installed"):
            check_backend_here("warp")


def _without_warp(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python cannot import warp or mujoco_warp (a ``sitecustomize`` hides them)."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(f"import sys\nfor name in {WARP_MODULES!r}:\n    sys.modules[name] = None\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), os.environ["PYTHONPATH"]])}


@pytest.mark.parametrize("script", ["evo_single_proc.py", "tools/train_ppo.py"])
def test_the_warp_backend_without_its_packages_exits_2_at_start_up(script, tmp_path):
    done = subprocess.run([sys.executable, script, "--cfg", "configs/evo/quick.yml", "OUT_DIR", str(tmp_path / "out"),
                           "SIM.BACKEND", "warp"], cwd=ROOT, env=_without_warp(tmp_path), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: config key SIM.BACKEND warp needs the Python module(s) warp, mujoco_warp")
    assert "requirements-gpu.txt" in done.stderr and done.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_every_preset_and_task_config_passes():
    for path in sorted((ROOT / "configs").rglob("*.yml")):
        load_config(path)


def test_choice_tables_match_their_implementations():
    from derl.ppo.trainer import LR_SCALINGS

    assert set(LR_SCALINGS) == set(LR_SCALING_NAMES)


@pytest.mark.parametrize("key", sorted(RETIRED_KEYS))
def test_removed_keys_are_unknown(key, tmp_path):
    with pytest.raises(ConfigError, match=rf"^unknown config key '{key}'"):
        load_config(None, [key, "1"])
    section, _, leaf = key.rpartition(".")
    (tmp_path / "mine.yml").write_text(f"{section}:\n  {leaf}: 1\n" if section else f"{leaf}: 1\n")
    with pytest.raises(ConfigError, match=rf"^unknown config key '{key}'.* \(set in .*mine\.yml\)$"):
        load_config(tmp_path / "mine.yml")


@pytest.mark.parametrize("key", sorted(REPLACED_KEYS))
def test_a_replaced_key_says_what_replaced_it(key):
    with pytest.raises(ConfigError) as caught:
        load_config(None, [key, "1"])
    assert str(caught.value) == f"unknown config key '{key}': removed, {REPLACED_KEYS[key]}"
    assert "VECENV.THREADS" in str(caught.value)
    with pytest.raises(ConfigError, match=r"^unknown config key 'IN_SERIES': removed, "):
        load_config(None, ["IN_SERIES", "4"])  # by its leaf name too


def _old_run_config(tmp_path) -> Path:
    """A config.yaml as an older derl dumped it: today's keys plus every retired one."""
    tree = load_config(None, {"PPO.GAMMA": 0.98}).to_dict()
    for key in RETIRED_KEYS:
        section, _, leaf = key.rpartition(".")
        (tree.setdefault(section, {}) if section else tree)[leaf] = 1
    path = tmp_path / "run" / "config.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(tree))
    return path


def test_a_run_config_written_by_an_older_derl_still_loads_for_readers(tmp_path):
    path = _old_run_config(tmp_path)
    cfg = load_run_config(path)
    assert cfg.PPO.GAMMA == 0.98 and dump_config(cfg) == dump_config(load_config(None, {"PPO.GAMMA": 0.98}))
    with pytest.raises(ConfigError, match="^unknown config key"):  # as a user's config: no leniency
        load_config(path)
    (path.parent / "metadata").mkdir()
    done = subprocess.run([sys.executable, "tools/status.py", str(path.parent)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "unknown config key" not in done.stderr, done.stderr


def test_setting_a_removed_key_exits_2_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, "evo_single_proc.py", "--cfg", "configs/evo/quick.yml",
                           "OUT_DIR", str(tmp_path / "out"), "TERRAIN.CENTER_FLAT", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("error: unknown config key 'TERRAIN.CENTER_FLAT'") and done.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("key, value, text", [
    ("EVO.SELECTION_CRITERIA", "[__reward__forwrd]", "unknown EVO.SELECTION_CRITERIA ['__reward__forwrd']"),
    ("EVO.TOURNAMENT_TYPE", "agingnum", "config key EVO.TOURNAMENT_TYPE: unknown value 'agingnum'"),
    ("DEVICE", "cuda:7", "config key DEVICE cuda:7:"),
    ("RNG_SEED", "-1", "config key RNG_SEED must not be negative, got -1 (set on the command line)"),
    ("EVO.NUM_PROCESSES", "1000", "config key EVO.NUM_PROCESSES 1000 is more than this node holds: "),
    ("EVO.NUM_PROCESSES", "10000", "config key EVO.NUM_PROCESSES must be at most 1024, got 10000"),
    ("PPO.NUM_ENVS", "0", "config key PPO.NUM_ENVS must be positive, got 0"),
    ("HFIELD.NUM_DIVS", "1000", "config key HFIELD.NUM_DIVS must be at most 100, got 1000"),
])
def test_a_config_typo_stops_evo_single_proc_before_anything_is_written(tmp_path, key, value, text):
    if key == "DEVICE":
        torch = pytest.importorskip("torch")
        if torch.cuda.device_count() > 7:
            pytest.skip("this machine has cuda:7")
    done = subprocess.run([sys.executable, "evo_single_proc.py", "--cfg", "configs/evo/quick.yml",
                           "OUT_DIR", str(tmp_path / "out"), key, value],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: {text}") and done.stderr.count("\n") == 1
    assert done.stdout == "" and not (tmp_path / "out").exists()


def _tree(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else b"")
            for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("key, value", [("RNG_SEED", "-1"), ("EVO.NUM_PROCESSES", "10000")])
def test_a_bad_value_leaves_an_existing_run_folder_as_it_was(tmp_path, key, value):
    """A resume with a value no process can use is refused before anything in OUT_DIR is touched
    (``RNG_SEED -1`` used to fail after writing config.yaml, poisoning the run for the next resume)."""
    out = tmp_path / "out"
    args = [sys.executable, "evo_single_proc.py", "--cfg", "configs/evo/quick.yml", "OUT_DIR", str(out)]
    RunDir(out).create()
    join_search(load_config("configs/evo/quick.yml", ["OUT_DIR", str(out)]), RunDir(out), lambda message: None)
    before = _tree(out)
    done = subprocess.run([*args, key, value], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith(f"error: config key {key} ") and done.stderr.count("\n") == 1
    assert _tree(out) == before


def _section_of(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """The config section an attribute is read from: ``cfg.PPO.X`` -> PPO, ``evo.X`` with ``evo = cfg.EVO``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    return None


def inert_keys(leaves: list[str], sources: list[Path]) -> list[str]:
    """The leaf keys (dotted paths) that no source reads, by a static scan of attribute chains.

    ``SECTION.LEAF`` counts as read where code has ``<...>.SECTION.LEAF``, ``alias.LEAF`` with
    ``alias = <...>.SECTION`` in the same module, or the leaf name as a string (a key looked up
    by name, e.g. ``cfg.TERRAIN[length_key]``). A leaf name that no other section has also counts
    when read from any object that is not another section (a function given ``cfg.PPO`` as ``cfg``).
    A top-level key counts when read as an attribute anywhere.
    """
    sections = {path.split(".")[0] for path in leaves if "." in path}
    names = [path.rsplit(".", 1)[-1] for path in leaves]
    reads: set[tuple[str | None, str]] = set()
    strings: set[str] = set()
    for source in sources:
        tree = ast.parse(source.read_text(), str(source))
        aliases = {target.id: node.value.attr for node in ast.walk(tree) if isinstance(node, ast.Assign)
                   and isinstance(node.value, ast.Attribute) and node.value.attr in sections
                   for target in node.targets if isinstance(target, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                reads.add((_section_of(node.value, aliases), node.attr))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.add(node.value)
    read_leaves = {leaf for _, leaf in reads}
    inert = []
    for path in leaves:
        section, _, leaf = path.rpartition(".")
        if not section:
            found = leaf in read_leaves
        else:
            unique = names.count(leaf) == 1
            found = (section, leaf) in reads or leaf in strings or (
                unique and any(name == leaf and sec not in sections for sec, name in reads))
        if not found:
            inert.append(path)
    return inert


def _reader_sources() -> list[Path]:
    files = [*(ROOT / "derl").rglob("*.py"), *(ROOT / "tools").glob("*.py"), ROOT / "evo_single_proc.py"]
    return sorted(f for f in files if str(f.relative_to(ROOT)) not in NOT_READERS)


def test_no_config_key_is_inert():
    leaves = [path for path, _ in flatten(Config().to_dict())]
    assert inert_keys(leaves, _reader_sources()) == []


def test_the_inert_key_scan_finds_a_key_nothing_reads(tmp_path):
    leaves = [path for path, _ in flatten(Config().to_dict())]
    added = ["PPO.NOBODY_READS_THIS", "TORSO.RADIUS_RANGE", "TORSO.CONDIM", "TOP_LEVEL_NOBODY_READS"]
    assert inert_keys(leaves + added, _reader_sources()) == added
    reader = tmp_path / "reader.py"
    reader.write_text("def f(cfg):\n    torso = cfg.TORSO\n    return torso.RADIUS_RANGE, cfg.PPO.NOBODY_READS_THIS\n")
    assert inert_keys(leaves + added, [*_reader_sources(), reader]) == added[2:]


def test_the_warp_backend_takes_every_task_drawn_terrain_from_a_bank():
    """MuJoCo Warp shares a height field between worlds: VT, MVT and escape_bowl run there on a terrain
    bank (TERRAIN.BANK_SIZE 0, DERL's terrain per episode on MuJoCo C, means WARP_BANK_SIZE there);
    props, goals and obstacle boxes it holds per world."""
    from derl.envs.tasks import make_task
    from derl.envs.terrain_bank import WARP_BANK_SIZE

    evaluation = sorted(f"eval/{path.stem}" for path in (ROOT / "configs" / "eval").glob("*.yml"))
    assert len(evaluation) == 8
    for name in ("evo/ft", "evo/vt", "evo/mvt", *evaluation):
        assert load_config(ROOT / "configs" / f"{name}.yml", ["SIM.BACKEND", "warp"]).SIM.BACKEND == "warp", name
    for name, size in (("evo/vt", WARP_BANK_SIZE), ("evo/mvt", WARP_BANK_SIZE), ("eval/escape_bowl", 8)):
        cfg = load_config(ROOT / "configs" / f"{name}.yml", ["SIM.BACKEND", "warp", "TERRAIN.BANK_SIZE",
                                                            "8" if size == 8 else "0"])
        assert len(make_task(cfg, 1).arena.heights.interior) == size, name
        assert make_task(load_config(ROOT / "configs" / f"{name}.yml"), 1).arena.bank is None  # MuJoCo C: DERL's
    # a task whose terrain cannot come from the bank (obstacle's boxes are written into its height maps)
    with pytest.raises(ConfigError, match=r"redraws its terrain each episode \(hfield_data\).*takes no terrain bank"):
        load_config(ROOT / "configs" / "eval" / "obstacle.yml", ["SIM.BACKEND", "warp", "TERRAIN.TYPES", "[steps]",
                                                                 "TERRAIN.FLAT_LENGTH_RANGE", "[2, 4, 1]"])
