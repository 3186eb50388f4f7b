"""Every command behaves alike (docs/reference/commands.md): ``--help`` prints help and exits
0, Ctrl-C stops a training with exit code 130 and no traceback, and the docs' exit-code table is
the code's."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from derl.checked_config import load_config
from derl.cli import EXIT_INTERRUPTED, EXIT_USAGE
from derl.evolution import process
from derl.morphology import random_genome
from tests.conftest import ROOT

TOOLS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tools").glob("*.py")) + ["evo_single_proc.py"]
LAUNCHERS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tools").glob("*.sh")) + ["tools/slurm/derl.sbatch"]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def _interrupt_training(proc: subprocess.Popen, out: Path, start_timeout: float, stop_timeout: float) -> None:
    """Ctrl-C once the training in ``out`` has checkpointed (metrics.jsonl appears at the first checkpoint):
    it stops with 130, no traceback, a resumable checkpoint and no final metrics."""
    deadline = time.monotonic() + start_timeout
    while not (out / "metrics.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=stop_timeout)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "--resume" in err, err
    assert (out / "model.pt").is_file() and not (out / "metrics.json").exists()  # resumable, not finished


def test_help_exits_0_for_every_tool_and_launcher():
    commands = [[sys.executable, tool] for tool in TOOLS] + [["bash", launcher] for launcher in LAUNCHERS]
    assert len(commands) >= 11
    running = [subprocess.Popen([*command, "--help"], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for command in commands]  # side by side: 2 s
    for command, proc in zip(commands, running, strict=True):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (command, err)
        assert "usage" in out.lower() or len(out.splitlines()) > 3, (command, out)


def test_tools_are_thin_and_their_help_says_each_thing_once():
    """Scripts parse arguments and call the library (<= 80 lines); --help repeats no paragraph."""
    lengths = {tool: len((ROOT / tool).read_text().splitlines()) for tool in TOOLS}
    assert max(lengths.values()) <= 80, lengths
    for tool in TOOLS:
        out = subprocess.run([sys.executable, tool, "--help"], cwd=ROOT, env=ENV, capture_output=True, text=True,
                             timeout=120).stdout
        paragraphs = [p.strip() for p in out.split("\n\n") if p.strip()]
        assert len(paragraphs) == len(set(paragraphs)), (tool, out)
        first = (ROOT / tool).read_text().split('"""')[1].splitlines()[0]
        assert out.count(first[:60]) <= 1, (tool, out)


def test_the_readme_and_the_configuration_guide_name_the_tools_that_take_cfg():
    """The README said every command takes --cfg; tools/status.py and tools/evaluate.py refuse it (exit 2)."""
    takes = {tool for tool in TOOLS if 'add_argument("--cfg"' in (ROOT / tool).read_text()}
    assert "tools/train_ppo.py" in takes and "tools/status.py" not in takes
    for page in ("README.md", "docs/guides/configuration.md"):
        named = re.search(r"((?:`[\w/.]+`(?:, | and ))+`[\w/.]+`) take `--cfg", (ROOT / page).read_text())
        assert named and set(re.findall(r"`([\w/.]+)`", named.group(1))) == takes, page


def test_evo_single_proc_without_cfg_names_the_presets_and_starts_nothing(tmp_path):
    """No --cfg: not the paper-size search of the defaults into output/default, but one line and 2."""
    done = subprocess.run([sys.executable, str(ROOT / "evo_single_proc.py"), "EVO.NUM_PROCESSES", "1"], cwd=tmp_path,
                          env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == EXIT_USAGE and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: give --cfg"), done.stderr
    presets = sorted(p.stem for p in (ROOT / "configs" / "evo").glob("*.yml"))
    assert {"ft", "quick"} <= set(presets) and all(name in done.stderr for name in presets), done.stderr
    assert list(tmp_path.iterdir()) == []  # no output/default, nothing else


def _interrupt(command: list[str], started: str, tmp_path: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """Starts ``command``, waits for ``started`` in its output (the work is under way), sends SIGINT."""
    log = tmp_path / "log.txt"
    with open(log, "w") as sink:
        proc = subprocess.Popen(command, cwd=tmp_path, env=ENV, stdout=sink, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while started not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, log.read_text()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    return subprocess.CompletedProcess(command, code, log.read_text(), "")


def test_ctrl_c_stops_train_ppo_with_a_checkpoint_and_130(tmp_path):
    genome = tmp_path / "g.json"
    genome.write_text(random_genome(load_config().unimal, np.random.default_rng(0), "g0").to_json())
    out = tmp_path / "run"
    # metrics.jsonl appears at the first checkpoint (every iteration here): training is under way.
    command = [sys.executable, str(ROOT / "tools" / "train_ppo.py"), "--genome", str(genome), "--out", str(out),
               "PPO.NUM_ENVS", "2", "PPO.TIMESTEPS", "16", "PPO.BATCH_SIZE", "16", "CHECKPOINT_PERIOD", "1",
               "PPO.MAX_STATE_ACTION_PAIRS", "10000000", "TENSORBOARD.ENABLED", "false"]
    _interrupt_training(subprocess.Popen(command, cwd=tmp_path, env=ENV, stderr=subprocess.PIPE, text=True),
                        out, start_timeout=120, stop_timeout=60)
    assert not (out / "tensorboard").exists()  # TENSORBOARD.ENABLED false writes none


@pytest.mark.slow
def test_ctrl_c_stops_an_evolution_with_130(tmp_path):
    command = [sys.executable, str(ROOT / "evo_single_proc.py"), "--cfg", str(ROOT / "configs/evo/quick.yml"),
               "OUT_DIR", str(tmp_path / "run"), "EVO.NUM_PROCESSES", "1"]
    done = _interrupt(command, "started 1 workers", tmp_path)
    assert done.returncode == EXIT_INTERRUPTED and "Traceback" not in done.stdout, done.stdout


@pytest.mark.slow
def test_ctrl_c_stops_a_benchmark_with_130(tmp_path):
    command = [sys.executable, str(ROOT / "tools" / "bench.py"), "ppo", "--iters", "100000"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    time.sleep(8)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED and "Traceback" not in err, err


def test_docs_exit_code_table_is_the_codes():
    """The docs' table, the constants the code returns and the SLURM script's header agree."""
    section = (ROOT / "docs" / "reference" / "commands.md").read_text()
    rows = re.findall(r"^\| (\d+|128 \+ N) \| [^|]+ \| (`\w+`|-) \|$", section, flags=re.MULTILINE)
    assert [code for code, _ in rows] == ["0", "1", "2", "3", "4", "5", "128 + N"], rows
    constants = {"EXIT_USAGE": EXIT_USAGE, "EXIT_FATAL": process.EXIT_FATAL, "EXIT_STOPPED": process.EXIT_STOPPED,
                 "EXIT_ENVIRONMENT": process.EXIT_ENVIRONMENT, "EXIT_INTERRUPTED": EXIT_INTERRUPTED}
    named = {name.strip("`"): code for code, name in rows if name != "-"}
    assert set(named) == set(constants), named
    for name, code in named.items():
        assert constants[name] == (128 + signal.SIGINT if code == "128 + N" else int(code)), (name, code)
    header = (ROOT / "tools" / "slurm" / "derl.sbatch").read_text().split("#SBATCH", 1)[0]
    flat = " ".join(header.replace("#", " ").split())
    listed = re.search(r"docs/reference/commands\.md(?:#exit-codes)? \(([^)]*)\)", flat).group(1)
    assert re.findall(r"(\d+)(?:\+N)? ", listed) == ["0", "1", "2", "3", "4", "5", "128"], listed


@pytest.mark.slow
def test_ctrl_c_stops_an_evaluation_with_130(tiny_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    command = [sys.executable, str(ROOT / "tools" / "evaluate.py"), str(run), "--tasks", "point_nav", "--top", "1",
               "--workers", "1", "PPO.MAX_STATE_ACTION_PAIRS", "10000000", "PPO.NUM_ENVS", "2"]
    done = _interrupt(command, "1 at a time", tmp_path)
    assert done.returncode == EXIT_INTERRUPTED and "Traceback" not in done.stdout, done.stdout
    assert "received signal 2" in done.stdout


@pytest.mark.slow
def test_ctrl_c_stops_data_parallel_training_with_130(tmp_path):
    """tools/train_ddp.sh: the ranks checkpoint and stop; torchrun's agent sees no signal and no failed
    rank, so nothing prints a traceback; the script exits 130."""
    genome = tmp_path / "g.json"
    genome.write_text(random_genome(load_config().unimal, np.random.default_rng(0), "g0").to_json())
    out = tmp_path / "run"
    command = ["bash", str(ROOT / "tools" / "train_ddp.sh"), "--nproc", "2", "--genome", str(genome), "--out",
               str(out), "PPO.NUM_ENVS", "2", "PPO.TIMESTEPS", "16", "PPO.BATCH_SIZE", "16", "CHECKPOINT_PERIOD", "1",
               "PPO.MAX_STATE_ACTION_PAIRS", "10000000"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=dict(ENV, PYTHON=sys.executable), stderr=subprocess.PIPE,
                            text=True)
    _interrupt_training(proc, out, start_timeout=240, stop_timeout=120)
