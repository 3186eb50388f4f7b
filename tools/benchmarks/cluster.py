"""The simulated cluster: the real coordinators, workers and run folder with instant training and injected faults.

`tools/bench.py cluster --seeds 0-9` runs one simulated search per seed and prints the problems each found;
`--seed N` reproduces seed N (`--keep DIR` keeps its folder and the coordinators' logs).

A seed (``benchmarks.sim_plan.plan``) draws N nodes x M workers on one OUT_DIR, each node one real
``evo_single_proc.py`` (``NODE_ID``/``NUM_NODES``) on ``configs/evo/quick.yml`` with the instant backend
(``benchmarks.sim_backend``), its clock offset and full disk through the test-only shims of
``benchmarks.sim_shim``, and fires its faults as the search publishes: signals to workers and
coordinators, files planted and damaged. A coordinator that ends with another code than 0 is started
again, as a user would. Once every node has finished, every node is started once more (a later start, no
faults), and the invariants of ``benchmarks.sim_checks`` are checked. A search that does not finish within
``--deadline`` seconds (nothing published, trained or restarted: a machine that is only slow makes progress), or
trains more than ``4 x EVO.SEARCH_SPACE_SIZE + 20`` times, is a problem too.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

from benchmarks.children import with_benchmarks
from benchmarks.sim_checks import Ledger, agreement_problems, number_problems, slot_problems
from benchmarks.sim_plan import Fault, Plan, plan
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.schema import MAX_LEASES, max_publications
from derl.evolution.folder.shared import Identity
from derl.evolution.folder.slot_store import Claim
from derl.evolution.folder.worker_store import WorkerStatus
from derl.evolution.population import slot_id
from derl.paths import REPO_ROOT, evo_preset

BACKEND = "benchmarks.sim_backend:InstantBackend"
OUTPUTS = {"keep": "folder"}  # derl.fileio.outputs.check_outputs: --keep holds each seed's folder
RESTARTS = 30  # starts of one node before the simulation calls it a node that cannot finish
POLL = 0.05
FUTURE = 10 * 365 * 86400.0  # a heartbeat planted ten years ahead


def reproduce_command(seed: int) -> str:
    return f"python tools/bench.py cluster --seed {seed} --keep /tmp/derl-sim-{seed}"


class Cluster:
    """The nodes of one plan on ``where/out/<plan.out_name>``: starting, signalling and watching them."""

    def __init__(self, seed_plan: Plan, where: Path, audit: Path | None = None):
        self.plan, self.where = seed_plan, where
        self.out = where / "out" / seed_plan.out_name
        self.ledger = Ledger(self.out)
        self.procs: dict[int, subprocess.Popen] = {}
        self.starts: Counter = Counter()
        self.exits: list[tuple[int, int]] = []
        self.family: set[tuple[int, float]] = set()  # (pid, start time) of every process of the nodes ever seen
        for folder in ("out", "logs", "trainings", "tmp", "site"):
            (where / folder).mkdir(parents=True, exist_ok=True)
        (where / "site" / "sitecustomize.py").write_text("import benchmarks.sim_shim as s\ns.install()\n")
        self.audit = audit

    def env(self, node: int) -> dict[str, str]:
        env = dict(os.environ, DERL_EVO_BACKEND=BACKEND, TMPDIR=str(self.where / "tmp"),
                   DERL_SIM_LOG=str(self.where / "trainings"), DERL_SIM_FAIL_EVERY=str(self.plan.fail_every),
                   DERL_SIM_TRAIN_SECONDS=str(self.plan.train_seconds))
        # PYTHONPATH: the test-only shim's sitecustomize first (benchmarks.sim_shim), then the benchmarks' folder
        # (the backend and the shim); derl itself is installed
        env = with_benchmarks(env, self.where / "site")
        if any(fault.kind == "full-disk" for fault in self.plan.faults):
            env["DERL_SIM_FULL_DISK"] = str(self.where / f"full-disk-{node}")
        if self.plan.clock_offsets[node]:
            env["DERL_SIM_CLOCK_OFFSET"] = str(self.plan.clock_offsets[node])
        if self.audit is not None:
            env.update(DERL_SIM_AUDIT=str(self.audit), DERL_SIM_AUDIT_ROOT=str(self.out))
        return env

    def start(self, node: int) -> None:
        command = [sys.executable, "evo_single_proc.py", "--cfg", str(evo_preset("quick")),
                   *self.plan.overrides(str(self.out), node)]
        with open(self.where / "logs" / f"node{node}.log", "a") as log:
            self.procs[node] = subprocess.Popen(command, cwd=REPO_ROOT, env=self.env(node), stdout=log,
                                                stderr=subprocess.STDOUT)
        self.starts[node] += 1

    def watch(self) -> dict[int, int]:
        """The nodes that ended since the last call, with their exit codes; remembers every process seen."""
        ended = {}
        for node, proc in list(self.procs.items()):
            try:
                self.family.update((child.pid, child.create_time())
                                   for child in psutil.Process(proc.pid).children(recursive=True))
            except psutil.NoSuchProcess:
                pass
            if (code := proc.poll()) is not None:
                ended[node] = code
                self.exits.append((node, code))
                del self.procs[node]
        return ended

    def trainings(self) -> int:
        return len(os.listdir(self.where / "trainings"))

    def teardown(self) -> None:
        """Ends every process of the nodes still running: the coordinators it started and the processes it saw
        them start (a pid counts only with the start time it was seen with: never a later process's reused pid)."""
        for proc in self.procs.values():
            proc.kill()
        for pid, started in self.family:
            try:
                process = psutil.Process(pid)
                if process.create_time() == started:
                    process.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        for proc in self.procs.values():
            proc.wait()

    # Faults.
    def fire(self, fault: Fault) -> str:
        """Carries out ``fault``; returns what it did, for the log."""
        if fault.kind.endswith("-coordinator"):
            proc = self.procs.get(fault.node)
            if proc is None:
                return "no coordinator running"
            proc.send_signal(signal.SIGKILL if fault.kind.startswith("sigkill") else signal.SIGTERM)
            return f"pid {proc.pid}"
        if fault.kind.endswith("-worker"):
            proc = self.procs.get(fault.node)
            try:
                workers = [child for child in (psutil.Process(proc.pid).children() if proc else [])
                           if "derl.evolution.worker" in child.cmdline()]
            except psutil.NoSuchProcess:
                workers = []
            if not workers:
                return "no worker running"
            chosen = workers[fault.index % len(workers)]
            chosen.send_signal(signal.SIGKILL if fault.kind.startswith("sigkill") else signal.SIGTERM)
            return f"pid {chosen.pid}"
        if fault.kind == "full-disk":
            (self.where / f"full-disk-{fault.node}").write_text(str(self.out))
            return f"for {fault.seconds:g} s"
        return self._plant(fault)

    def free_disk(self, node: int) -> None:
        (self.where / f"full-disk-{node}").unlink(missing_ok=True)

    def _plant(self, fault: Fault) -> str:
        plan_, out = self.plan, self.out
        published = sorted(p.stem for p in (out / "metadata").glob("*.json"))
        outsider = RunDir(out, identity=Identity("sim-outsider", 99999, "0" * 16))
        if fault.kind == "future-heartbeat":  # a worker no node runs, holding the last slot, beating from the future
            node, worker, slot = fault.node, plan_.workers, plan_.search - 1
            if not outsider.slots.claim(slot, node=node, worker=worker):
                return "slot already claimed"
            outsider.workers.write_state(WorkerStatus(node=node, worker=worker, slot=slot, id=slot_id(slot),
                                                      status="training", pid=99999))
            outsider.workers.beat(node, worker)
            future = time.time() + FUTURE
            os.utime(outsider.workers.heartbeat_path(node, worker), (future, future))
            return f"worker {node}-{worker} holds slot {slot}"
        if fault.kind == "publication-at-end":
            number = max_publications(plan_.search) - 1
            (out / "published" / f"{number:08d}.json").write_text('{"id": "000000", "node": 0, "worker": 0}')
            return f"published/{number:08d}.json"
        if fault.kind == "lease-at-end":  # the largest generation, held by a worker that is gone
            slot = plan_.search - 2
            claim = Claim.mine(slot, MAX_LEASES, 0, fault.node, plan_.workers, outsider.identity)
            path = outsider.slots.lease_path(slot, MAX_LEASES)
            path.write_text(json.dumps(claim.to_json()))
            return str(path.relative_to(out))
        if not published:
            return "nothing published yet"
        chosen = published[fault.index % len(published)]
        path = {"damaged-genome": out / "genomes" / f"{chosen}.json", "damaged-model": out / "models" / f"{chosen}.pt",
                "damaged-curve": out / "metrics" / f"{chosen}.jsonl"}[fault.kind]
        self.ledger.damaged.add(path)
        path.write_bytes(b'{"damaged')
        return str(path.relative_to(out))


def simulate(seed: int, where: Path, deadline: float = 300.0, max_processes: int = 4,
             audit: Path | None = None) -> tuple[list[str], list[str]]:
    """Runs seed ``seed`` in ``where``; returns its problems (empty: every invariant held) and its log."""
    cluster = Cluster(plan(seed, max_processes), where, audit)
    try:
        return _simulate(cluster, deadline)
    finally:
        cluster.teardown()


def _simulate(cluster: Cluster, deadline: float) -> tuple[list[str], list[str]]:
    plan_, log = cluster.plan, []
    faults, freed_at, done = list(plan_.faults), {}, set[int]()
    budget = 4 * plan_.search + 20
    progress, last_progress = None, time.monotonic()  # a busy machine is slow, a stuck search makes no progress
    for node in range(plan_.nodes):
        cluster.start(node)
    while len(done) < plan_.nodes:
        published = cluster.ledger.scan()
        while faults and faults[0].at <= published:
            fault = faults.pop(0)
            log.append(f"{published} published: {fault.kind} on node {fault.node}: {cluster.fire(fault)}")
            if fault.kind == "full-disk":
                freed_at[fault.node] = time.monotonic() + fault.seconds
        for node, at in list(freed_at.items()):
            if time.monotonic() >= at:
                cluster.free_disk(node)
                del freed_at[node]
        for node, code in cluster.watch().items():
            log.append(f"node {node} exits {code}")
            if code == 0:
                done.add(node)
            elif cluster.starts[node] >= RESTARTS:
                return [f"node {node} was started {RESTARTS} times and never finished (exits {code})"], log
            else:
                cluster.start(node)
        if (trainings := cluster.trainings()) > budget:
            return [f"{trainings} trainings for {plan_.search} morphologies: the search trains without end"], log
        if (now := (published, trainings, sum(cluster.starts.values()))) != progress:
            progress, last_progress = now, time.monotonic()
        elif time.monotonic() - last_progress > deadline:
            return [f"the search made no progress in {deadline:g} s (nothing published, trained or restarted; "
                    f"{published}/{plan_.search} published)"], log
        time.sleep(POLL)
    return _check(cluster, deadline, log), log


def _check(cluster: Cluster, deadline: float, log: list[str]) -> list[str]:
    """The invariants after the search, then after a later start of every node."""
    plan_, out = cluster.plan, cluster.out
    for node in range(plan_.nodes):  # a disk still full when every node ended is freed for the later start
        cluster.free_disk(node)
    cluster.ledger.scan()
    problems = _outside(cluster) + slot_problems(out, plan_.search) + number_problems(out) + agreement_problems(out)
    for node in range(plan_.nodes):  # a later start: nothing is left to do, nothing published changes
        cluster.start(node)
    start = time.monotonic()
    while cluster.procs and time.monotonic() - start < deadline:
        for node, code in cluster.watch().items():
            log.append(f"later start: node {node} exits {code}")
            if code != 0:
                problems.append(f"a later start of node {node} exits {code}")
        time.sleep(POLL)
    if cluster.procs:
        problems.append(f"a later start did not end in {deadline:g} s")
    problems += cluster.ledger.problems()
    problems += [f"after a later start: {p}" for p in slot_problems(out, plan_.search) + agreement_problems(out)]
    return problems


def _outside(cluster: Cluster) -> list[str]:
    """Nothing is written beside OUT_DIR in its parent folder."""
    others = sorted(set(os.listdir(cluster.out.parent)) - {cluster.out.name})
    return [f"written outside OUT_DIR {cluster.out.name!r}: {', '.join(others)}"] if others else []


def seed_range(text: str) -> list[int]:
    """``7`` or ``0-199``."""
    first, _, last = text.partition("-")
    try:
        low, high = int(first), int(last or first)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a seed or a range of seeds: {text!r}") from None
    if not 0 <= low <= high < low + 100_000:
        raise argparse.ArgumentTypeError(f"a range of at most 100,000 seeds from 0, got {text!r}")
    return list(range(low, high + 1))


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 1 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"seconds from 1 to 86,400, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", type=seed_range, default=seed_range("0-9"), help="seeds to run: N or A-B")
    parser.add_argument("--seed", type=seed_range, dest="seeds", help="one seed to reproduce (same as --seeds N)")
    parser.add_argument("--keep", type=Path, help="keep each seed's folder under this folder (logs/, out/)")
    parser.add_argument("--deadline", type=_seconds, default=300.0,
                        help="seconds a search may go without progress, and a later start take (default 300)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    results = {}
    for seed in args.seeds:
        with tempfile.TemporaryDirectory(prefix=f"derl-sim-{seed}-") as scratch:
            where = args.keep / str(seed) if args.keep else Path(scratch)
            problems, log = simulate(seed, where, args.deadline)
        results[str(seed)] = {"plan": repr(plan(seed)), "problems": problems, "log": log}
        if problems:
            results[str(seed)]["reproduce"] = reproduce_command(seed)
        print(f"seed {seed}: {'ok' if not problems else problems[0]}", file=sys.stderr, flush=True)
    failing = [seed for seed, result in results.items() if result["problems"]]
    return {"seeds": len(results), "failing": failing, "results": results,
            "reproduce": [reproduce_command(int(seed)) for seed in failing]}

