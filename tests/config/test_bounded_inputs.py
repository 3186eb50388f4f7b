"""One way in: every YAML and JSON text derl takes from outside the process goes through one bounded reader
(``derl.fileio.reads``), and every config value has an upper bound; a refusal is one line and exit code 2.

The hostile inputs are those of issue 48: a self-alias and a 40-level alias bomb as one override value
(a RecursionError traceback, 2.2 GB then a MemoryError), a list nested 500 deep, the same in a ``--cfg``
file, a 4 MB file of 2,000,000 items (59 s and 1.5 GB), ``PPO.TIMESTEPS 1e9`` and ``PPO.NUM_ENVS 1e6``
(``Unable to allocate 462 GiB``), and a worker's MemoryError retried as an environment failure.
"""

import ast
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from derl.checked_config import load_config
from derl.config import ConfigError
from tests.conftest import ROOT

SELF_ALIAS = "&a [*a]"
# 40 levels of three aliases each: 3**40 leaves once expanded, in 860 bytes.
BOMB = "[" + ",".join(["&a0 [lol,lol,lol]"] + [f"&a{i} [*a{i - 1},*a{i - 1},*a{i - 1}]" for i in range(1, 41)]) + "]"
DEEP = "[" * 500 + "]" * 500


@pytest.fixture
def values_composed(monkeypatch) -> list[int]:
    """How many YAML values the bounded reader composed (``[count]``): the work a refusal cost, counted,
    not timed (a busy machine is slower, never more work)."""
    from derl.fileio import reads

    count = [0]
    compose = reads._BoundedLoader.compose_node

    def counted(self, parent, index):
        count[0] += 1
        return compose(self, parent, index)

    monkeypatch.setattr(reads._BoundedLoader, "compose_node", counted)
    return count


# --- one reader ------------------------------------------------------------------------------------------

# The parsers of YAML and JSON text: only derl/fileio/reads.py calls them.
PARSERS = {("yaml", "safe_load"), ("yaml", "load"), ("yaml", "full_load"), ("yaml", "unsafe_load"),
           ("yaml", "safe_load_all"), ("yaml", "load_all"), ("yaml", "compose"), ("yaml", "parse"),
           ("json", "load"), ("json", "loads")}
READER = ROOT / "derl" / "fileio" / "reads.py"


def _parser_calls(path: Path, root: Path = ROOT) -> list[str]:
    """``module.function`` of every call of a YAML or JSON parser in ``path`` (``json.loads(...)``,
    ``from json import loads``, ``import yaml as y``: by what the name is bound to)."""
    tree = ast.parse(path.read_text(), str(path))
    modules = {"yaml": "yaml", "json": "json"}
    functions: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("yaml", "json"):
                    modules[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module in ("yaml", "json"):
            for alias in node.names:
                functions[alias.asname or alias.name] = (node.module, alias.name)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in modules:
            name = (modules[func.value.id], func.attr)
        elif isinstance(func, ast.Name) and func.id in functions:
            name = functions[func.id]
        else:
            continue
        if name in PARSERS:
            found.append(f"{path.relative_to(root)}:{node.lineno} {'.'.join(name)}")
    return found


def test_only_the_bounded_reader_parses_yaml_or_json():
    """No module of derl, tools/ or evo_single_proc.py but derl/fileio/reads.py calls yaml's or json's parsers."""
    files = [*sorted((ROOT / "derl").rglob("*.py")), *sorted((ROOT / "tools").rglob("*.py")),
             ROOT / "evo_single_proc.py"]
    calls = [call for path in files if path != READER for call in _parser_calls(path)]
    assert calls == [], calls
    assert _parser_calls(READER)  # the scan finds the reader's own calls


def test_the_scan_finds_every_way_of_calling_a_parser(tmp_path):
    source = tmp_path / "sample.py"
    source.write_text("import json\nimport yaml as y\nfrom json import loads as parse\n"
                      "json.loads('1')\ny.safe_load('a')\nparse('2')\njson.dumps(1)\n")
    found = sorted(_parser_calls(source, tmp_path), key=lambda call: int(call.split(":")[1].split(" ")[0]))
    assert found == ["sample.py:4 json.loads", "sample.py:5 yaml.safe_load", "sample.py:6 json.loads"]


# --- overrides ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, reason", [
    (SELF_ALIAS, "anchors and aliases"), (BOMB, "anchors and aliases"), (DEEP, "nests deeper than 16 levels"),
    ("[" + ",".join(["0"] * 20_000) + "]", "holds more than 10000 items"), ("x" * 70_000, "larger than 65536 bytes"),
    ("1" * 5000, "cannot be converted"),
], ids=["self-alias", "bomb", "500 deep", "20,000 items", "70 KB", "5000 digits"])
def test_a_hostile_override_is_one_line_naming_the_key(value, reason, values_composed):
    with pytest.raises(ConfigError) as caught:
        load_config(None, ["EVO.SELECTION_CRITERIA", value])
    message = str(caught.value)
    assert message.startswith("config key EVO.SELECTION_CRITERIA: its value on the command line is refused: ")
    assert reason in message and "\n" not in message and len(message) < 300
    assert caught.value.key == "EVO.SELECTION_CRITERIA" and values_composed[0] <= 10_001  # MAX_YAML_ITEMS + 1


def test_override_values_parse_as_before():
    cfg = load_config(None, ["EVO.SELECTION_CRITERIA", "[__reward__forward]", "EVO.SELECTION_CRITERIA_OBJ", "[-1]",
                             "PPO.NUM_ENVS", "1e1", "OUT_DIR", "a: b: c", "TENSORBOARD.ENABLED", "false",
                             "BODY.JOINT_ANGLE_LIST", "[[-30, 0], [0, 30]]"])
    assert cfg.EVO.SELECTION_CRITERIA == ("__reward__forward",) and cfg.EVO.SELECTION_CRITERIA_OBJ == (-1,)
    assert cfg.PPO.NUM_ENVS == 10 and cfg.OUT_DIR == "a: b: c" and cfg.TENSORBOARD.ENABLED is False
    assert cfg.BODY.JOINT_ANGLE_LIST == ((-30, 0), (0, 30))


# --- config files ------------------------------------------------------------------------------------------

def _bounded_load(path: Path) -> tuple[str, int]:
    """The refusal's message and the peak of Python's allocations while loading ``path``."""
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        return str(caught.value), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("text, reason", [
    (f"EVO:\n  SELECTION_CRITERIA: {SELF_ALIAS}\n", "anchors and aliases"),
    (f"EVO:\n  SELECTION_CRITERIA: {BOMB}\n", "anchors and aliases"),
    (f"EVO:\n  SELECTION_CRITERIA: {DEEP}\n", "nests deeper than 16 levels"),
    ("EVO:\n  SELECTION_CRITERIA: [" + ",".join(["0"] * 2_000_000) + "]\n", "is larger than 262144 bytes"),
    ("EVO:\n  SELECTION_CRITERIA: [" + ",".join(["0"] * 100_000) + "]\n", "holds more than 10000 items"),
], ids=["self-alias", "bomb", "500 deep", "2,000,000 items in 4 MB", "100,000 items in 200 KB"])
def test_a_hostile_config_file_is_refused_at_once_naming_it(tmp_path, text, reason, values_composed):
    """At once: at most ``MAX_YAML_ITEMS`` + 1 values composed (none for a file refused by its size) and
    64 MiB of Python's allocations, whatever the machine's speed."""
    path = tmp_path / "hostile.yml"
    path.write_text(text)
    message, peak = _bounded_load(path)
    assert message.startswith(f"config file {path}: ") and reason in message and "\n" not in message
    assert values_composed[0] <= (0 if "larger than" in reason else 10_001) and peak < 64 * 2**20, (values_composed,
                                                                                                    peak)


def test_a_users_config_file_may_be_a_link(tmp_path):
    (tmp_path / "real.yml").write_text("PPO:\n  NUM_ENVS: 4\n")
    (tmp_path / "link.yml").symlink_to("real.yml")
    assert load_config(tmp_path / "link.yml").PPO.NUM_ENVS == 4
    with pytest.raises(ConfigError, match=r"link.yml: is a symbolic link"):
        load_config(tmp_path / "link.yml", read_back=True)  # a file derl wrote: never through a link


# --- bounds of values --------------------------------------------------------------------------------------

@pytest.mark.parametrize("key, value, text", [
    ("PPO.TIMESTEPS", "1e9", "config key PPO.TIMESTEPS must be at most 65536, got 1000000000"),
    ("PPO.NUM_ENVS", "1e6", "config key PPO.NUM_ENVS must be at most 65536, got 1000000"),
    ("PPO.BATCH_SIZE", "1e9", "config key PPO.BATCH_SIZE must be at most 16777216"),
    ("PPO.MAX_STATE_ACTION_PAIRS", "1e15", "must be at most 1000000000000"),
    ("EVO.SEARCH_SPACE_SIZE", "1e9", "config key EVO.SEARCH_SPACE_SIZE must be at most 1000000"),
    ("LIMB.HEIGHT_RANGE", "[0, 1.0e+9, 1.0e-9]", "config key LIMB.HEIGHT_RANGE spans more than 10000 values"),
    ("LIMB.HEIGHT_RANGE", "[0, 1e9, 1]", "config key LIMB.HEIGHT_RANGE expects a list of numbers"),  # was a TypeError
    ("MODEL.PRO_HIDDEN_DIMS", "[64, 100000]", "config key MODEL.PRO_HIDDEN_DIMS must be at most 4096"),
    ("MODEL.PRO_HIDDEN_DIMS", "[" + ", ".join(["8"] * 17) + "]", "holds 17 layers; at most 16"),
])
def test_a_size_past_its_bound_is_refused_naming_the_key(key, value, text):
    with pytest.raises(ConfigError) as caught:
        load_config(None, [key, value])
    assert text in str(caught.value) and caught.value.key == key and "\n" not in str(caught.value)


def test_presets_fit_their_bounds():
    for preset in sorted((ROOT / "configs").rglob("*.yml")):
        if preset.name != "gpu_server.yml":
            load_config(preset)
    load_config([ROOT / "configs" / "evo" / "ft.yml", ROOT / "configs" / "gpu_server.yml"])


def test_rollout_buffers_larger_than_the_node_are_refused_at_load_with_the_figure(monkeypatch):
    import psutil

    class Memory:
        total = available = 24 * 2**30

    monkeypatch.setattr(psutil, "virtual_memory", lambda: Memory())
    # 65536 x 65536 env steps of at least 26 bytes: 104 GiB.
    overrides = ["PPO.TIMESTEPS", "65536", "PPO.NUM_ENVS", "65536"]
    assert load_config(None, overrides).PPO.NUM_ENVS == 65536  # a report of such a run still loads
    with pytest.raises(ConfigError) as caught:
        load_config(None, overrides, this_node=True)
    assert str(caught.value) == ("config keys PPO.TIMESTEPS x PPO.NUM_ENVS (65536 x 65536) need at least 104 GiB of "
                                 "rollout buffers (26 bytes per env step); this node has 24 GiB of memory "
                                 "(set on the command line)")
    load_config(None, ["PPO.TIMESTEPS", "65536", "PPO.NUM_ENVS", "64"], this_node=True)  # 104 MiB: fits


def test_a_rollout_larger_than_free_memory_is_refused_before_it_is_allocated_and_never_retried():
    from derl.evolution.failures import classify
    from derl.ppo.rollout import Rollout, RolloutTooLarge

    with pytest.raises(RolloutTooLarge, match=r"^PPO.TIMESTEPS x PPO.NUM_ENVS \(65536 x 65536 env steps of 200 "
                                              r"observation and 10 action values\) needs 3432 GiB of rollout "
                                              r"buffers; the host has \d+(\.\d)? [GM]iB free$"):
        Rollout.allocate(65536, 65536, 200, 10)
    small = Rollout.allocate(4, 2, 3, 1)
    assert small.obs.shape == (4, 2, 3)
    assert classify(RolloutTooLarge("x")) == "config" and classify(MemoryError()) == "config"
    try:
        try:
            raise MemoryError("Unable to allocate 462 GiB")
        except MemoryError as inner:
            raise RuntimeError("training failed") from inner
    except RuntimeError as outer:
        assert classify(outer) == "config"  # never "morphology", never retried as "environment"


# --- through the real commands -----------------------------------------------------------------------------

def _command(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True, timeout=120)


def _one_line_exit_2(done: subprocess.CompletedProcess, text: str) -> None:
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and text in done.stderr, done.stderr


@pytest.mark.parametrize("tool, key, value, text", [
    ("evo_single_proc.py", "EVO.SELECTION_CRITERIA", SELF_ALIAS, "anchors and aliases"),
    ("evo_single_proc.py", "EVO.SELECTION_CRITERIA", BOMB, "anchors and aliases"),
    ("tools/train_ppo.py", "EVO.SELECTION_CRITERIA", DEEP, "nests deeper than 16 levels"),
    ("tools/train_ppo.py", "PPO.TIMESTEPS", "1e9", "config key PPO.TIMESTEPS must be at most 65536"),
    ("tools/train_ppo.py", "PPO.NUM_ENVS", "1e6", "config key PPO.NUM_ENVS must be at most 65536"),
], ids=["evo: self-alias", "evo: bomb", "train_ppo: 500 deep", "train_ppo: TIMESTEPS 1e9", "train_ppo: NUM_ENVS 1e6"])
def test_the_commands_refuse_a_hostile_override_in_one_line(tmp_path, tool, key, value, text):
    source = ["--env-id", "Pendulum-v1", "--out", "out"] if tool == "tools/train_ppo.py" else ["OUT_DIR", "out"]
    done = _command([str(ROOT / tool), "--cfg", str(ROOT / "configs" / "evo" / "quick.yml"), *source, key, value],
                    tmp_path)
    _one_line_exit_2(done, text)
    assert not (tmp_path / "out").exists()


def test_evo_single_proc_refuses_a_4_mb_config_file_at_once(tmp_path):
    (tmp_path / "big.yml").write_text("EVO:\n  SELECTION_CRITERIA: [" + ",".join(["0"] * 2_000_000) + "]\n")
    done = _command([str(ROOT / "evo_single_proc.py"), "--cfg", "big.yml", "OUT_DIR", "out"], tmp_path)
    _one_line_exit_2(done, "config file big.yml: is larger than 262144 bytes")  # refused by its size, unparsed
    assert not (tmp_path / "out").exists()


def test_evaluate_refuses_a_hostile_override_in_one_line(tmp_path):
    from benchmarks.report import build_synthetic_run

    build_synthetic_run(tmp_path / "run", morphologies=2, iterations=2, genomes=2)
    done = _command([str(ROOT / "tools" / "evaluate.py"), "run", "--tasks", "point_nav", "--top", "1",
                     "EVO.SELECTION_CRITERIA", SELF_ALIAS], tmp_path)
    _one_line_exit_2(done, "config key EVO.SELECTION_CRITERIA: its value on the command line is refused")
    assert not (tmp_path / "run" / "eval").exists()


# --- JSON ---------------------------------------------------------------------------------------------------

def test_json_is_bounded_in_items_too():
    from derl.fileio.reads import MAX_JSON_ITEMS, JsonFileError, parse_json

    assert len(parse_json("[" + ",".join(["0"] * (MAX_JSON_ITEMS - 1)) + "]", "ok")) == MAX_JSON_ITEMS - 1
    with pytest.raises(JsonFileError, match=rf"^many: holds more than {MAX_JSON_ITEMS} items$"):
        parse_json("[" + ",".join(["0"] * MAX_JSON_ITEMS) + "]", "many")
    with pytest.raises(JsonFileError, match=r"^deep: nests deeper than 32 levels$"):
        parse_json("[" * 33 + "]" * 33, "deep")
    assert parse_json("[" * 32 + "]" * 32, "deep enough")


def test_a_checkpoints_noise_state_that_is_not_a_record_draws_fresh_noise():
    from derl.fileio.reads import JsonFileError
    from derl.ppo.acting import NumpyNoise

    noise = NumpyNoise(0)
    noise.load_state("[1, 2]")  # a list, not a generator's state: logged and left, as another source's
    with pytest.raises(JsonFileError, match="action noise state: nests deeper"):
        noise.load_state("[" * 1000 + "]" * 1000)
