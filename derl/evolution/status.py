"""Progress of a run read from its ``OUT_DIR`` (what ``tools/status.py`` prints)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence

from derl.checked_config import EvoCfg
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.worker_store import WorkerStatus
from derl.evolution.lease import age_text, file_age, heartbeat_interval, is_fresh
from derl.evolution.population import parse_id, search_text
from derl.evolution.results import PublishedResults, rank

_IDLE = ("finished", "stopped", "fatal")


def _filesystem_now(run: RunDir) -> float:
    try:
        return run.filesystem_now()
    except OSError:  # a read-only view of the folder: this machine's clock is the best left
        return time.time()


# A preparing coordinator beats every ``heartbeat_interval(EVO.LEASE_SECONDS)`` (``derl.evolution.prepare``); one
# silent for this many intervals has stopped (killed, say), though no slot it holds waits for the lease.
PREPARING_BEATS_MISSED = 3


def preparing_ages(run: RunDir, now: float, lease_seconds: float) -> dict[int, float]:
    """How long ago each node whose coordinator prepared the run beat (``WorkerStore.preparing_beats``).

    A beat older than ``lease_seconds`` is left out: that coordinator was killed while preparing long
    ago; a younger one may still be stopped (``still_preparing``).
    """
    return {node: file_age(now, beat, lease_seconds) for node, beat in run.workers.preparing_beats().items()
            if is_fresh(now, beat, lease_seconds)}


def still_preparing(age: float, lease_seconds: float) -> bool:
    """Whether a preparing beat ``age`` seconds old is a running coordinator's: it beats every
    ``heartbeat_interval``, so one silent for ``PREPARING_BEATS_MISSED`` of them has stopped."""
    return age < PREPARING_BEATS_MISSED * heartbeat_interval(lease_seconds)


def preparing_text(node: int) -> str:
    """What a preparing node does: node 0 draws the initial population, the others wait for it."""
    return "drawing the initial population" if node == 0 else "waiting for node 0's initial population"


def node_lines(evo: EvoCfg, run: RunDir, results: PublishedResults) -> list[str]:
    """One line per node: its workers' states, its last heartbeat and the unfinished slots it holds,
    or that its coordinator prepares the run (``preparing_ages``).

    Heartbeat ages compare file times on the shared folder. A node whose newest heartbeat is
    older than ``EVO.LEASE_SECONDS`` is stale: other nodes take its slots over.
    """
    now = _filesystem_now(run)
    preparing = preparing_ages(run, now, evo.LEASE_SECONDS)
    done = {parse_id(morphology_id)[0] for morphology_id in results.by_id}
    held: dict[int, list[int]] = defaultdict(list)
    for slot in run.slots.claimed():
        if slot not in done and (claim := run.slots.read(slot)) is not None and claim.node is not None:
            held[claim.node].append(slot)  # a damaged claim names no node
    states: dict[int, list[WorkerStatus]] = defaultdict(list)
    for state in run.workers.states():
        states[state.node].append(state)
    lines = []
    for node in sorted(set(states) | set(held) | set(preparing)):
        prepares = ""
        if node in preparing:
            silent = preparing[node]
            prepares = f"preparing ({preparing_text(node)}), last heartbeat {silent:.0f} s ago" \
                if still_preparing(silent, evo.LEASE_SECONDS) else \
                f"stopped preparing ({preparing_text(node)}; last heartbeat {silent:.0f} s ago, it beats every " \
                f"{heartbeat_interval(evo.LEASE_SECONDS):g} s)"
        if not states[node] and not held[node]:
            lines.append(f"  node {node}: {prepares}")
            continue
        beats = [b for s in states[node] if (b := run.workers.heartbeat_time(node, s.worker)) is not None]
        fresh = [b for b in beats if is_fresh(now, b, evo.LEASE_SECONDS)]  # a beat from the future is not
        newest = max(fresh or beats, default=None)
        working = [s for s in states[node] if not str(s.status).startswith(_IDLE)]
        stale = bool(working or held[node]) and not fresh
        statuses = ", ".join(f"{s.worker}: {s.status} {s.id or ''}".rstrip()
                             for s in sorted(states[node], key=lambda s: s.worker))
        heartbeat = age_text(now, newest, evo.LEASE_SECONDS)
        slots = ", ".join(map(str, held[node])) or "none"
        flag = f" STALE (older than EVO.LEASE_SECONDS {evo.LEASE_SECONDS:g}: its slots are taken over)" \
            if stale else ""
        also = f"; its coordinator is {prepares}" if prepares else ""
        lines.append(f"  node {node}: last heartbeat {heartbeat}, holds slots {slots}; workers {statuses}{flag}{also}")
    return lines


def _is_running(state: WorkerStatus, heartbeat: float | None, now: float, lease_seconds: float) -> bool:
    return not str(state.status).startswith(_IDLE) and is_fresh(now, heartbeat, lease_seconds)


def status_lines(out_dir: str) -> list[str]:
    """Done/total, running workers, best fitness, state and (while workers run) ETA of the run in ``out_dir``."""
    run = RunDir.open(out_dir, skip=True)  # a bad file is named in one warning line and skipped
    if (problem := run.not_a_search()) is not None or run.config is None:
        raise FileNotFoundError(problem or f"{run.root} is not an evolution output folder (no config.yaml)")
    cfg = run.config
    results = PublishedResults(run, cfg.EVO)
    results.refresh()
    evo = cfg.EVO
    done, total = len(results.by_id), evo.SEARCH_SPACE_SIZE
    now = _filesystem_now(run)
    workers = run.workers
    running = [state for state in workers.states()
               if _is_running(state, workers.heartbeat_time(state.node, state.worker), now, evo.LEASE_SECONDS)]
    lines = [
        f"run: {run.root}",
        f"search: {search_text(evo)}",
        f"done: {done}/{total} ({100 * done / total:.1f}%), failed: {len(run.failures.failed_ids())}, "
        f"claimed slots: {run.slots.num_claimed()}",
        f"running workers: {len(running)}",
        "nodes:",
        *node_lines(cfg.EVO, run, results),
    ]
    ranked = rank(list(results.by_id.values()), evo.SELECTION_CRITERIA, evo.SELECTION_CRITERIA_OBJ)
    if ranked:
        best = ranked[0]
        values = ", ".join(f"{key}={best.fitness[key]:.3f}" for key in evo.SELECTION_CRITERIA)
        lines.append(f"best: {best.id} {values} (lineage {best.lineage})")
    preparing = sorted(node for node, age in preparing_ages(run, now, evo.LEASE_SECONDS).items()
                       if still_preparing(age, evo.LEASE_SECONDS))
    lines.extend(progress_lines(done, total, len(running), bool(run.workers.states()), preparing,
                                run.stop_requested(), run.read_summary() or {}, evo.LEASE_SECONDS))
    return lines


def progress_lines(done: int, total: int, running: int, ever_started: bool, preparing: Sequence[int],
                   stop_file: bool, summary: dict, lease_seconds: float) -> list[str]:
    """The run's state, and its rate and ETA while workers run: no ETA for a run nothing advances.

    A worker that has not beaten within ``lease_seconds`` counts as gone (Ctrl-C, a crash, a lost
    node). ``preparing``: the nodes whose coordinator prepares the run and still beats (``still_preparing``);
    with no worker running the run is preparing, not stopped.
    """
    if done >= total:
        return ["state: done"]
    if stop_file:
        return ["state: stopped; STOP file present: delete it and rerun the same command to resume"]
    if not running and preparing:
        return [f"state: preparing ({'; '.join(f'node {node} {preparing_text(node)}' for node in preparing)})"]
    if not running:
        if not ever_started:
            return ["state: no worker has started yet and no node is preparing the run; "
                    "if no evo_single_proc.py runs, rerun the same command to resume"]
        return [f"state: stopped (no worker beat in the last {lease_seconds:g} s); rerun the same command to resume"]
    lines = [f"state: running ({running} workers)"]
    if summary.get("eta_hours") is not None:
        measured = time.strftime("%H:%M", time.localtime(summary["updated"]))
        lines.append(f"rate: {summary['morphologies_per_hour']:.1f} morphologies/hour, "
                     f"ETA: {summary['eta_hours']:.2f} h (measured at {measured})")
    else:
        lines.append("rate: not measured yet")
    return lines
