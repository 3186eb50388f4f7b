"""The GPU check's end-to-end rows: real trainings and a real evolution, each a process of its own.

A row starts processes exactly as a user does (``tools/train_ppo.py``, ``evo_single_proc.py``), at
once where it compares concurrency, waits for them under a time limit (a process still running
then is killed with its group and the row fails, naming the limit), and reads what they wrote:
each training's ``metrics.jsonl`` (one record per iteration), the evolution's ``summary.json``.

Rates of a training (``training_rates``): the loop rate, env steps per second of collection and
update, over the iterations after the first (the first loads or compiles the kernels and
captures the graphs: a new morphology's cost, measured by its own row), and the wall rate, env
steps over the seconds from the start of the processes to the exit of the last one (start-up,
compiles and captures included: what a short training pays). ``k`` trainings at once: their loop
rates add up (they ran side by side), and the wall rate counts all their env steps.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.children import Child, failure
from benchmarks.gpu_verdicts import RowError
from derl.fileio.reads import parse_json, read_bytes, read_json
from derl.paths import REPO_ROOT, evo_preset

# The evolution of the ft_gpu_evolution row: 4 morphologies, 2 workers, about 3 iterations each.
TINY_EVOLUTION = {"EVO.NUM_PROCESSES": 2, "EVO.INIT_POPULATION_SIZE": 2, "EVO.SEARCH_SPACE_SIZE": 4,
                  "EVO.AGING_WINDOW_SIZE": 2, "EVO.NUM_PARTICIPANTS": 2, "PPO.MAX_STATE_ACTION_PAIRS": 300000}


@dataclass
class Finished:
    """What ``run_at_once`` saw: each process's exit code and output tail, and the wall seconds of all."""

    returncodes: list[int | None]  # None: killed at the time limit
    tails: list[str]
    seconds: float


def overrides_args(overrides: dict) -> list[str]:
    """``KEY VALUE`` command-line pairs of ``overrides``, as every tool takes them."""
    return [str(part) for key, value in overrides.items() for part in (key, value)]


def training_command(configs: list[Path], xml: Path, out: Path, overrides: dict) -> list[str]:
    """One ``tools/train_ppo.py`` training of ``xml`` into ``out`` (no progress bar)."""
    cfgs = [arg for cfg in configs for arg in ("--cfg", str(cfg))]
    return [sys.executable, str(REPO_ROOT / "tools" / "train_ppo.py"), *cfgs, "--xml", str(xml), "--out", str(out),
            "--quiet", *overrides_args(overrides)]


def evolution_command(out: Path, device: str, overrides: dict, preset: str = "ft_gpu") -> list[str]:
    """The tiny evolution of ``configs/evo/<preset>.yml`` into ``out`` on ``device``."""
    return [sys.executable, str(REPO_ROOT / "evo_single_proc.py"), "--cfg", str(evo_preset(preset)),
            *overrides_args({**TINY_EVOLUTION, "DEVICE": device, "OUT_DIR": out, **overrides})]


def run_at_once(commands: list[list[str]], timeout: float, log_dir: Path) -> Finished:
    """Starts the Python scripts ``commands`` (``[python, script, args...]``) together, each a
    ``benchmarks.children.Child`` in its own process group and dying with this process (the check
    stopped at its time limit leaves nothing on the GPU), output to a log in ``log_dir``; waits for all
    of them up to ``timeout`` seconds in all, and kills the groups of those still running then."""
    started = time.perf_counter()
    children = [Child(command, f"process {index}", log_dir / f"process-{index}.log", dies_with_parent=True)
                for index, command in enumerate(commands)]
    ended = [child.wait(max(0.0, timeout - (child.started - started))) for child in children]
    return Finished([end.returncode for end in ended], [end.output for end in ended], time.perf_counter() - started)


def check_finished(finished: Finished, timeout: float, what: str) -> None:
    """Raises ``RowError`` naming the first process that was killed at the limit or failed."""
    for index, (code, tail) in enumerate(zip(finished.returncodes, finished.tails, strict=True)):
        line = failure(f"{what} {index}", code, tail, timeout)
        if line is not None:
            raise RowError(line)


def read_iterations(path: Path) -> list[dict]:
    """The iteration records of a training's ``metrics.jsonl``, checked for the fields the rates use."""
    try:
        lines = read_bytes(path).decode().splitlines()
        records = [parse_json(line, f"{path} line {number}") for number, line in enumerate(lines, 1) if line.strip()]
    except (OSError, ValueError) as err:
        raise RowError(f"{path}: unreadable ({err})") from None
    needed = ("env_steps", "collect_seconds", "update_seconds")
    if not records or not all(isinstance(r, dict) and all(isinstance(r.get(k), int | float) for k in needed)
                              for r in records):
        raise RowError(f"{path}: no iteration records with {', '.join(needed)}")
    return records


def loop_rate(records: list[dict]) -> float:
    """Env steps per second of collection + update over the iterations after the first (all of one)."""
    timed = records[1:] or records
    steps = records[-1]["env_steps"] - (records[0]["env_steps"] if len(records) > 1 else 0)
    seconds = sum(r["collect_seconds"] + r["update_seconds"] for r in timed)
    return steps / seconds if seconds > 0 else 0.0


def training_rates(runs: list[list[dict]], wall_seconds: float) -> dict:
    """The rates of ``len(runs)`` trainings that ran at once (module docstring)."""
    loops = [loop_rate(records) for records in runs]
    steps = sum(records[-1]["env_steps"] for records in runs)
    update = [r["update_seconds"] for records in runs for r in (records[1:] or records)]
    return {"processes": len(runs), "loop_steps_per_sec": round(sum(loops), 1),
            "loop_steps_per_sec_each": [round(rate, 1) for rate in loops],
            "wall_steps_per_sec": round(steps / wall_seconds, 1) if wall_seconds > 0 else 0.0,
            "env_steps": steps, "wall_seconds": round(wall_seconds, 1),
            "update_seconds_per_iteration": round(sum(update) / len(update), 4)}


def trainings_at_once(configs: list[Path], xml: Path, overrides: list[dict], timeout: float, folder: Path) -> dict:
    """``len(overrides)`` trainings of ``xml`` at once, one per override set; their ``training_rates``."""
    outs = [folder / f"training-{index}" for index in range(len(overrides))]
    commands = [training_command(configs, xml, out, extra) for out, extra in zip(outs, overrides, strict=True)]
    finished = run_at_once(commands, timeout, folder / "logs")
    check_finished(finished, timeout, "training")
    return training_rates([read_iterations(out / "metrics.jsonl") for out in outs], finished.seconds)


def evolution_verdict(summary: object, path: Path) -> dict:
    """``published``, ``failed`` and ``total`` of an evolution's ``summary.json``; ``RowError`` unless all
    ``total`` morphologies were published."""
    keys = ("published", "failed", "total")
    if not isinstance(summary, dict) or not all(isinstance(summary.get(key), int) for key in keys):
        raise RowError(f"{path}: no integer {', '.join(keys)}")
    counts = {key: summary[key] for key in keys}
    if counts["published"] < counts["total"] or counts["total"] < 1:
        raise RowError(f"{counts['published']}/{counts['total']} published, {counts['failed']} failed ({path})")
    return counts


def tiny_evolution(device: str, overrides: dict, timeout: float, folder: Path, preset: str = "ft_gpu") -> dict:
    """The tiny evolution of ``preset`` (the ``ft_gpu_evolution`` row's: ``ft_gpu.yml``); its counts and wall
    seconds (``RowError`` unless it published all)."""
    out = folder / "evolution"
    finished = run_at_once([evolution_command(out, device, overrides, preset)], timeout, folder / "logs")
    check_finished(finished, timeout, "evo_single_proc.py")
    try:
        summary = read_json(out / "summary.json")
    except (OSError, ValueError) as err:
        raise RowError(f"{out / 'summary.json'}: unreadable ({err})") from None
    return {**evolution_verdict(summary, out / "summary.json"), "wall_seconds": round(finished.seconds, 1)}

