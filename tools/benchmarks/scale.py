"""The search's costs as it grows, measured on the simulated cluster: file operations and CPU per publication.

`tools/bench.py scale [--publications 100,400,1000,4000] [--workers 8,16] [--tools 4000:1220,20000:244]`

For each search size and worker count, one search runs to its end on the real coordinators, workers and
run folder with instant training (``benchmarks.cluster``, no faults; nodes of at most
``--workers-per-node`` workers). Every process counts its file operations on the run folder
(``benchmarks.sim_shim.Audit``: opens of files and of folders, listings, entries listed, bytes read, CPU
seconds), summed over the workers and over the coordinators. ``marginal`` is what one more publication
costs between consecutive sizes (``marginal``): flat from row to row is a cost per publication that
does not grow with the folder; one that grows with the size is quadratic in all. ``--tools`` times
``tools/status.py`` and ``tools/report.py --no-media`` (wall
seconds, peak memory) on synthetic finished runs (``benchmarks.report.build_synthetic_run``) of
RECORDS morphologies with curves of ITERATIONS records.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.cluster import Cluster
from benchmarks.report import build_synthetic_run
from benchmarks.sim_plan import Plan
from derl.arguments import bounded_int, bounded_ints
from derl.fileio.reads import read_json
from derl.paths import REPO_ROOT

OUTPUTS = {"keep": "folder"}
FIGURES = ("opens", "folder_opens", "listings", "entries", "read_chars", "cpu")


def _tool_runs(text: str) -> list[tuple[int, int]]:
    try:
        pairs = [tuple(int(v) for v in part.split(":")) for part in text.split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not RECORDS:ITERATIONS[,...]: {text!r}") from None
    if not all(len(p) == 2 and 1 <= p[0] <= 100_000 and 1 <= p[1] <= 100_000 for p in pairs):
        raise argparse.ArgumentTypeError(f"RECORDS and ITERATIONS from 1 to 100,000, got {text!r}")
    return pairs  # type: ignore[return-value]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--publications", type=bounded_ints(10, 100_000), default=[100, 400, 1000, 4000],
                        help="search sizes (EVO.SEARCH_SPACE_SIZE), comma-separated")
    parser.add_argument("--workers", type=bounded_ints(1, 1024), default=[8], help="workers in all, comma-separated")
    parser.add_argument("--workers-per-node", type=bounded_int(1, 64), default=8,
                        help="workers per simulated node (the nodes share this machine)")
    parser.add_argument("--tools", type=_tool_runs, default=[], help="RECORDS:ITERATIONS runs to time the tools on")
    parser.add_argument("--keep", type=Path, help="keep the run folders here")


def search_plan(publications: int, workers: int, per_node: int) -> Plan:
    """A search of ``publications`` morphologies on ``workers`` workers, DERL's proportions (576 of 4,000 initial)."""
    nodes = -(-workers // per_node)
    init = max(8, publications * 576 // 4000)
    return Plan(seed=0, nodes=nodes, workers=-(-workers // nodes), search=publications, init=init, lease=600.0,
                fail_every=0, train_seconds=0.0, clock_offsets=(0.0,) * nodes, faults=(), out_name="run")


def measure_search(where: Path, publications: int, workers: int, per_node: int) -> dict[str, Any]:
    """One search to its end with every process audited; its costs per publication, by role."""
    audit = where / "audit"
    audit.mkdir(parents=True)
    cluster = Cluster(search_plan(publications, workers, per_node), where, audit)
    started = time.monotonic()
    try:
        for node in range(cluster.plan.nodes):
            cluster.start(node)
        codes: dict[int, int] = {}
        while len(codes) < cluster.plan.nodes:
            codes.update(cluster.watch())
            time.sleep(0.5)
    finally:
        cluster.teardown()
    wall = time.monotonic() - started
    if any(codes.values()):
        raise RuntimeError(f"a node of the {publications}-morphology search failed: exit codes {codes}")
    totals: dict[str, dict[str, float]] = {}
    for path in audit.glob("*.json"):
        entry = read_json(path)
        role = totals.setdefault(entry["role"], dict.fromkeys(("processes", *FIGURES), 0.0))
        role["processes"] += 1
        for figure in FIGURES:
            role[figure] += entry[figure]
    nodes = cluster.plan.nodes
    return {"publications": publications, "nodes": nodes, "workers": nodes * cluster.plan.workers,
            "wall_seconds": round(wall, 1), "processes": {role: int(v["processes"]) for role, v in totals.items()},
            "totals": {role: {figure: round(v[figure], 3) for figure in FIGURES} for role, v in totals.items()}}


def marginal(searches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What one more publication costs between consecutive search sizes (same workers): the difference of the
    totals over the difference of the sizes, so that what every process pays once (start-up, imports) drops out.
    Flat from row to row: a cost per publication that does not grow with the folder."""
    rows = []
    for small, large in zip(searches, searches[1:], strict=False):
        added = large["publications"] - small["publications"]
        rows.append({"from": small["publications"], "to": large["publications"], "per_publication": {
            role: {figure: round((large["totals"][role][figure] - small["totals"][role][figure]) / added, 4)
                   for figure in FIGURES} for role in ("worker", "coordinator")}})
    return rows


def time_tool(command: list[str]) -> dict[str, Any]:
    """Wall seconds and peak memory (max RSS) of one tool run."""
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"exit": proc.returncode, "seconds": round(time.monotonic() - started, 2),
            "peak_mb": round(usage.ru_maxrss / 1024, 1), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2)}


def measure_tools(where: Path, records: int, iterations: int) -> dict[str, Any]:
    out = where / f"run-{records}"
    started = time.monotonic()
    if not (out / "metadata").is_dir():
        build_synthetic_run(out, records, iterations, genomes=64)
    built = time.monotonic() - started
    python = sys.executable
    return {"records": records, "iterations_per_curve": iterations, "build_seconds": round(built, 1),
            "status": time_tool([python, "tools/status.py", str(out)]),
            "report": time_tool([python, "tools/report.py", str(out), "--no-media", "--out",
                                 str(where / f"report-{records}")])}


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="derl-bench-scale-") as scratch:
        base = args.keep or Path(scratch)
        result: dict[str, Any] = {"cores": len(os.sched_getaffinity(0)), "searches": [], "marginal": {}, "tools": []}
        for workers in args.workers:
            searches = []
            for publications in args.publications:
                searches.append(measure_search(base / f"search-{publications}-{workers}", publications, workers,
                                               args.workers_per_node))
                print(json.dumps(searches[-1]), file=sys.stderr, flush=True)
            result["searches"] += searches
            result["marginal"][str(workers)] = marginal(searches)
        for records, iterations in args.tools:
            result["tools"].append(measure_tools(base, records, iterations))
            print(json.dumps(result["tools"][-1]), file=sys.stderr, flush=True)
        return result
