"""tools/train_ppo.py run for real with tiny budgets (every budget is a config key)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from derl.checked_config import load_config
from derl.morphology import random_genome

ROOT = Path(__file__).resolve().parents[2]
TINY = ["PPO.NUM_ENVS", "2", "PPO.TIMESTEPS", "16", "PPO.BATCH_SIZE", "16"]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "train_ppo.py"), *args],
        capture_output=True, text=True, timeout=300, check=False,
    )


def test_train_from_genome_resume_and_eval(tmp_path):
    genome = random_genome(load_config().unimal, np.random.default_rng(0), "g0")
    genome_file = tmp_path / "g0.json"
    genome_file.write_text(genome.to_json())
    out = tmp_path / "run"
    first = _run("--genome", str(genome_file), "--out", str(out), *TINY, "MAX_STATE_ACTION_PAIRS", "64")
    assert first.returncode == 0, first.stderr
    for name in ("config.yaml", "run.json", "g0.xml", "model.pt", "metrics.jsonl", "metrics.json"):
        assert (out / name).is_file(), name
    torch.load(out / "model.pt", weights_only=True)

    # As docs/guides/training.md says: the folder's config.yaml and run.json, plus the overrides given now.
    resumed = _run("--out", str(out), "--resume", "--quiet", "MAX_STATE_ACTION_PAIRS", "128")
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads((out / "metrics.json").read_text())
    assert final["iterations"] == 4 and final["env_steps"] == 128 and final["completed"]
    assert {"return", "__reward__forward", "__reward__ctrl", "x_pos", "metric"} <= set(final["summary"])
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2, 3, 4]

    # A resume of the finished training says so and changes nothing (it used to rewrite the summary
    # as that of zero new episodes: return 0.0, the reward terms gone).
    before = {path.name: path.read_bytes() for path in out.iterdir() if path.is_file()}
    again = _run("--out", str(out), "--resume", "--quiet", "MAX_STATE_ACTION_PAIRS", "128")
    assert again.returncode == 0, again.stderr
    assert "already finished" in again.stderr and json.loads(again.stdout)["return"] == final["summary"]["return"]
    assert {path.name: path.read_bytes() for path in out.iterdir() if path.is_file()} == before

    # TensorBoard's own reader finds the curves, by env step, over both sessions.
    accumulator = EventAccumulator(str(out / "tensorboard"))
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    assert {"episode/return", "reward/forward", "train/loss", "train/entropy", "train/approx_kl", "train/lr",
            "time/steps_per_sec"} <= tags, tags
    assert [event.step for event in accumulator.Scalars("train/lr")] == [32, 64, 96, 128]

    replay = _run("--eval", str(out / "model.pt"), *TINY, "ENV.EPISODE_LENGTH", "20")
    assert replay.returncode == 0, replay.stderr
    report = json.loads(replay.stdout)
    assert len(report["returns"]) == 1 and report["lengths"][0] <= 20


def test_missing_env_source_is_a_one_line_error(tmp_path):
    result = _run("--out", str(tmp_path), *TINY)
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: give one of --xml, --genome or --env-id "
                                    "(or --eval CKPT, or --out DIR --resume)")


def test_refused_commands_leave_no_folder(tmp_path):
    """An env refused once training starts (no Box action space): one line, exit 2, no folder left.
    (--resume of a missing folder and --eval of a missing checkpoint: test_tools_errors.)"""
    unsupported = _run("--env-id", "CartPole-v1", "--out", str(tmp_path / "new" / "run"), *TINY)
    assert unsupported.returncode == 2 and "not supported" in unsupported.stderr, unsupported.stderr
    assert list(tmp_path.iterdir()) == []
