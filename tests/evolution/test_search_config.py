"""One config per search: OUT_DIR/config.yaml, node-local keys and manifest/
(docs/guides/evolution.md#one-config-per-search).

The process tests run the real ``evo_single_proc.py`` with the fake backend of
``tests/evo_fake_backend.py`` (each search takes seconds).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from derl.checked_config import load_config
from derl.config import ConfigError, dump_config
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.search_config import HEADER, differences, join_search, versions
from tests.conftest import DEFAULT_CFG
from tests.evolution.test_evolution_protocol import ENV, ROOT, alive, published, start, worker_pids

SEARCH = ("EVO.NUM_PROCESSES", "2", "EVO.INIT_POPULATION_SIZE", "4", "EVO.SEARCH_SPACE_SIZE", "4",
          "EVO.AGING_WINDOW_SIZE", "4", "EVO.SELECTION_CRITERIA", "[__reward__forward]",
          "EVO.SELECTION_CRITERIA_OBJ", "[-1]", "NUM_NODES", "2", "PPO.MAX_STATE_ACTION_PAIRS", "20480")


def evo(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "evo_single_proc.py", "--cfg", str(DEFAULT_CFG), "OUT_DIR", str(out),
                           *SEARCH, *extra],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)


def first_node(out: Path) -> str:
    """OUT_DIR as the first node leaves it (config.yaml, manifest/0.json); returns config.yaml's text."""
    run = RunDir(out)
    run.create()
    join_search(load_config(None, ["OUT_DIR", str(out), *SEARCH]), run, lambda message: None)
    return run.config_path().read_text()


def test_a_resume_or_second_node_with_another_budget_refuses_in_one_line(tmp_path):
    out = tmp_path / "run"
    config = first_node(out)
    assert config.startswith(HEADER) and load_config(out / "config.yaml").PPO.MAX_STATE_ACTION_PAIRS == 20480
    for node in ("0", "1"):
        refused = evo(out, "NODE_ID", node, "PPO.MAX_STATE_ACTION_PAIRS", "40960")
        assert refused.returncode == 2 and refused.stdout == ""
        assert refused.stderr == (f"error: config differs from {out / 'config.yaml'}: PPO.MAX_STATE_ACTION_PAIRS "
                                  "40960 != 20480; start with the same config or a new OUT_DIR\n")
    several = evo(out, "NODE_ID", "1", "RNG_SEED", "7", "EVO.TOURNAMENT_TYPE", "vanilla_num")
    assert several.returncode == 2
    assert "EVO.TOURNAMENT_TYPE vanilla_num != aging_num, RNG_SEED 7 != 1;" in several.stderr
    assert (out / "config.yaml").read_text() == config
    assert sorted(p.name for p in (out / "manifest").iterdir()) == ["0.json"]  # refused nodes leave nothing
    assert not (out / "init_population.json").exists()


@pytest.mark.slow
def test_nodes_with_other_node_local_keys_join_one_search(tmp_path):
    out = tmp_path / "run"
    first = evo(out)
    assert first.returncode == 0, first.stderr
    config = (out / "config.yaml").read_text()
    joined = evo(out, "NODE_ID", "1", "EVO.NUM_PROCESSES", "1", "TORCH_THREADS", "2", "CHECKPOINT_PERIOD", "3")
    assert joined.returncode == 0, joined.stderr
    assert (out / "config.yaml").read_text() == config
    manifest = {p.name: json.loads(p.read_text()) for p in (out / "manifest").iterdir()}
    assert sorted(manifest) == ["0.json", "1.json"]
    assert {key: manifest["1.json"][key] for key in ("python", "torch", "numpy")} == {
        key: versions()[key] for key in ("python", "torch", "numpy")}
    assert "warning" not in joined.stderr


@pytest.mark.slow
def test_an_old_run_adopts_the_current_config_once_and_says_so(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    old = load_config(None, ["PPO.MAX_STATE_ACTION_PAIRS", "999999"]).to_dict()
    old["TERRAIN"]["CENTER_FLAT"] = 0  # a key this derl no longer has
    (out / "config.yaml").write_text(json.dumps(old))  # what node 0 of an older derl wrote (YAML)
    adopted = evo(out)
    assert adopted.returncode == 0, adopted.stderr
    assert "written by an older derl" in adopted.stdout and "adopted this node's config once" in adopted.stdout
    assert load_config(out / "config.yaml").PPO.MAX_STATE_ACTION_PAIRS == 20480
    again = evo(out)
    assert again.returncode == 0 and "older derl" not in again.stdout


def test_join_search_creates_once_and_warns_in_one_line_about_other_versions(tmp_path, capsys):
    run = RunDir(tmp_path / "run")
    run.create()
    cfg = load_config(None, ["OUT_DIR", str(run.root), "NUM_NODES", "2"])
    logged = []
    joined = join_search(cfg, run, logged.append)
    assert logged == [f"node 0: created {run.config_path()}"] and joined.to_dict() == cfg.to_dict()
    assert not run.create_config("other")  # exclusive: nobody replaces it
    other = {**versions(), "node": 1, "torch": "0.0.1-elsewhere"}
    run.write_manifest(1, other)
    here = load_config(None, ["OUT_DIR", str(run.root), "NUM_NODES", "2", "DEVICE", "auto", "NUM_PROCESSES", "3"])
    joined = join_search(here, run, logged.append)
    assert (joined.DEVICE, joined.EVO.NUM_PROCESSES) == ("auto", 3)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("warning: versions differ within this search: node 1 ran torch "
                                                   "0.0.1-elsewhere")


def test_node_local_keys_are_the_only_keys_ignored():
    cfg = load_config(None, ["OUT_DIR", "/shared/x y", "DEVICE", "cuda:1", "NODE_ID", "1", "NUM_NODES", "2",
                             "VECENV.THREADS", "3", "TORCH_THREADS", "4"])
    assert differences(cfg, load_config(None, ["NUM_NODES", "2"])) == []
    assert differences(cfg, load_config(None, [])) == ["NUM_NODES 2 != 1"]


def test_stored_config_round_trips_with_its_header(tmp_path):
    cfg = load_config(None, ["RNG_SEED", "5"])
    path = tmp_path / "config.yaml"
    path.write_text(HEADER + dump_config(cfg))
    assert load_config(path).to_dict() == cfg.to_dict()


def test_deleting_the_header_does_not_make_a_current_run_look_old(tmp_path):
    """Provenance comes from manifest/: a config.yaml stripped of its header comment in a run a current
    derl recorded is not adopted, so a resume with four times the PPO budget is still refused."""
    out = tmp_path / "run"
    config = first_node(out)
    (out / "config.yaml").write_text(config.removeprefix(HEADER))
    refused = evo(out, "PPO.MAX_STATE_ACTION_PAIRS", "81920")
    assert refused.returncode == 2 and "older derl" not in refused.stdout + refused.stderr
    assert refused.stderr.splitlines() == [f"error: config differs from {out / 'config.yaml'}: "
                                           "PPO.MAX_STATE_ACTION_PAIRS 81920 != 20480; start with the same "
                                           "config or a new OUT_DIR"]
    assert load_config(out / "config.yaml").PPO.MAX_STATE_ACTION_PAIRS == 20480


def test_a_search_that_has_begun_never_gets_a_new_config(tmp_path):
    """config.yaml deleted from a run a node has joined: a resume with another budget is refused in one
    line instead of writing a new config.yaml (which mixed 2,048- and 4,096-step morphologies)."""
    out = tmp_path / "run"
    first_node(out)
    (out / "config.yaml").unlink()
    refused = evo(out, "PPO.MAX_STATE_ACTION_PAIRS", "40960")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == (f"error: {out / 'config.yaml'} is missing but this search has begun (node(s) 0 joined "
                              "it); restore that file (the config the search started with) or start a new OUT_DIR\n")
    assert not (out / "config.yaml").exists()


def test_a_run_from_an_older_derl_without_its_config_is_refused_too(tmp_path):
    """No manifest/ (an older derl), but an initial population: that is a search that has begun."""
    run = RunDir(tmp_path / "run")
    run.create()
    run.mark_init_population(["000000"])
    with pytest.raises(ConfigError, match=r"config.yaml is missing but this search has begun \(its initial "):
        join_search(load_config(None, ["OUT_DIR", str(run.root)]), run, lambda message: None)
    assert not run.config_path().exists() and not run.manifest()


def test_a_restarted_worker_trains_with_its_nodes_config_not_an_edited_config_yaml(tmp_path):
    """Workers load the config their node joined with (a node-private file), so editing the shared
    config.yaml mid-run changes no budget: every morphology trains its 10 iterations."""
    out = tmp_path / "run"
    coordinator = start(out, "EVO.NUM_PROCESSES", "1", "EVO.SEARCH_SPACE_SIZE", "8")
    try:
        while not (out / "metadata").is_dir() or not published(out):
            assert coordinator.poll() is None
            time.sleep(0.05)
        path = out / "config.yaml"
        text = path.read_text()
        assert "MAX_STATE_ACTION_PAIRS: 40960," in text
        path.write_text(text.replace("MAX_STATE_ACTION_PAIRS: 40960,", "MAX_STATE_ACTION_PAIRS: 163840,"))
        assert load_config(path).PPO.MAX_ITERS == 40
        killed = [pid for pid in worker_pids(out) if alive(pid)]
        for pid in killed:
            os.kill(pid, signal.SIGKILL)  # the coordinator restarts it after 1 s
        assert killed and coordinator.wait(timeout=120) == 0
    finally:
        coordinator.kill()
        coordinator.wait()
    assert sorted(record["iterations"] for record in published(out).values()) == [10] * 8
    assert "died (exit -9)" in (tmp_path / "run-coordinator.log").read_text()
