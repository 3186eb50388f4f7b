"""Progress of a run read from its ``OUT_DIR`` (what ``tools/status.py`` prints)."""

from __future__ import annotations

import time

from derl.config import load_config
from derl.evolution.results import PublishedResults, rank
from derl.evolution.storage import RunDir

# A worker whose heartbeat is older than this is not counted as running.
HEARTBEAT_TIMEOUT_SECONDS = 120.0
_IDLE = ("finished", "stopped")


def _is_running(state: dict, now: float) -> bool:
    idle = str(state.get("status")).startswith(_IDLE)
    return not idle and now - state["updated"] < HEARTBEAT_TIMEOUT_SECONDS


def status_lines(out_dir: str) -> list[str]:
    """Done/total, running workers, best fitness and ETA of the run in ``out_dir``."""
    run = RunDir(out_dir)
    if not run.config_path().exists():
        raise FileNotFoundError(f"{run.root} is not an evolution output folder (no config.yaml)")
    cfg = load_config(run.config_path())
    results = PublishedResults(run)
    results.refresh()
    evo = cfg.EVO
    done, total = len(results.by_id), evo.SEARCH_SPACE_SIZE
    now = time.time()
    running = [state for state in run.worker_states() if _is_running(state, now)]
    lines = [
        f"run: {run.root}",
        f"done: {done}/{total} ({100 * done / total:.1f}%), failed: {len(run.failed_ids())}, "
        f"claimed slots: {run.num_claimed_slots()}",
        f"running workers: {len(running)}",
        *(f"  {s['node']}-{s['worker']} pid {s['pid']}: {s['status']} {s.get('id') or ''}".rstrip()
          for s in sorted(running, key=lambda s: (s["node"], s["worker"]))),
    ]
    ranked = rank(list(results.by_id.values()), evo.SELECTION_CRITERIA, evo.SELECTION_CRITERIA_OBJ)
    if ranked:
        best = ranked[0]
        values = ", ".join(f"{key}={best[key]:.3f}" for key in evo.SELECTION_CRITERIA)
        lines.append(f"best: {best['id']} {values} (lineage {best['lineage']})")
    summary = run.read_summary() or {}
    if done >= total:
        lines.append("state: done")
    elif summary.get("eta_hours") is not None:
        measured = time.strftime("%H:%M", time.localtime(summary["updated"]))
        lines.append(f"rate: {summary['morphologies_per_hour']:.1f} morphologies/hour, "
                     f"ETA: {summary['eta_hours']:.2f} h (measured at {measured})")
    else:
        lines.append("rate: not measured yet")
    return lines
