"""A training's metrics file (``metrics.jsonl``: one record of numbers per PPO iteration) read back on
resume, and the records a checkpoint carries, both checked: a shared folder may hold anything."""

from __future__ import annotations

import logging
from pathlib import Path

from derl.fileio.reads import JsonFileError, NotRegularFile, parse_json, read_bytes
from derl.ppo.checkpoint import CheckpointError

log = logging.getLogger(__name__)


def checkpoint_records(records: object, up_to_iteration: int, checkpoint_path: Path) -> list[dict]:
    """The metrics records a checkpoint carries, checked: records of numbers (``_metrics_record_problem``)
    of increasing iterations up to its own.

    Raises:
        CheckpointError: they are not (a foreign or damaged checkpoint in a shared folder).
    """
    if isinstance(records, list) and all(_metrics_record_problem(record) is None for record in records):
        iterations = [record["iteration"] for record in records]
        if all(i <= up_to_iteration for i in iterations) and iterations == sorted(set(iterations)):
            return records
    raise CheckpointError(f"{checkpoint_path}: its metrics records are not iterations up to {up_to_iteration}")


# A metrics line is one flat record of numbers (``PPO.iterate``), under 2 KB; a curve of DERL's
# 1,220 iterations under 3 MB. Anything past these bounds was not written by derl.
MAX_METRICS_LINE_BYTES = 64 * 2**10
MAX_METRICS_BYTES = 64 * 2**20


def _metrics_record_problem(record: object) -> str | None:
    """Why ``record`` is no metrics record of ``PPO.iterate`` (an object of numbers, ``iteration`` >= 1), or None."""
    if not isinstance(record, dict):
        return f"is {type(record).__name__}, not a record"
    iteration = record.get("iteration")
    if not isinstance(iteration, int) or isinstance(iteration, bool) or iteration < 1:
        return f"has iteration {iteration!r:.40}, expected an integer >= 1"
    for key, value in record.items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            return f"has {key!r:.40}: {value!r:.40}, expected a number"
    return None


def read_metrics(metrics_path: Path | None, up_to_iteration: int) -> list[dict]:
    """The metrics records of a resumed run, up to its checkpoint's iteration.

    The file is read back from a folder that other processes may write: one that is not a regular
    file (a link, a FIFO), too large, or whose lines are too long, not JSON, nested or not records
    of numbers (``_metrics_record_problem``) is the folder's problem, not the morphology's: one
    warning line names it, and training carries on from the checkpoint with the curve started
    afresh (the next checkpoint's atomic write replaces the file).
    """
    if metrics_path is None:
        return []
    try:
        lines = read_bytes(metrics_path, MAX_METRICS_BYTES).splitlines()
    except FileNotFoundError:
        return []
    except NotRegularFile as err:
        return _bad_metrics(metrics_path, err.reason)
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if len(line) > MAX_METRICS_LINE_BYTES:
            return _bad_metrics(metrics_path, f"line {number} is longer than {MAX_METRICS_LINE_BYTES} bytes")
        try:
            record = parse_json(line, f"{metrics_path} line {number}")
        except JsonFileError as err:  # not JSON, or nested thousands deep
            return _bad_metrics(metrics_path, f"line {number} is not a JSON record ({err.reason})")
        if (problem := _metrics_record_problem(record)) is not None:
            return _bad_metrics(metrics_path, f"line {number} {problem}")
        records.append(record)
    return [record for record in records if record["iteration"] <= up_to_iteration]


def _bad_metrics(metrics_path: Path, reason: str) -> list[dict]:
    log.warning("%s", JsonFileError(metrics_path, f"{reason}; not derl's metrics: its records are dropped and "
                                                  "training goes on from the checkpoint"))
    return []
