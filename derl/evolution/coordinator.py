"""The per-node coordinator behind ``evo_single_proc.py``.

It prepares ``OUT_DIR`` (the first node creates ``config.yaml``, every node
must match it: ``search_config``; node 0 writes the initial population, other
nodes wait for it, each beating ``nodes/<node>-<token>.preparing`` meanwhile: ``derl.evolution.prepare``),
starts ``EVO.NUM_PROCESSES`` worker processes (refused above what the node's cores and memory
hold: ``derl.evolution.node_size``), each in its own session (process group) and
loading this node's config from a node-private file (``node_config_file``, in a ``private_folder``
that the next coordinator on this host removes if this one is SIGKILLed), restarts one that
dies after a back-off that doubles while it keeps failing (``derl.evolution.failures``; the node stops once one has
failed for ``EVO.LEASE_SECONDS``, after which other nodes take its slots over
anyway), rewrites ``summary.json`` every few seconds (node 0 also the search's TensorBoard curves,
``derl.evolution.curves``), and returns when every
worker has run out of work. On SIGINT/SIGTERM it stops every process group it started:
SIGTERM, a grace period, then SIGKILL. A worker is SIGKILLed at once if the coordinator itself is
killed (``PR_SET_PDEATHSIG``), and its children with it (``derl.lifetime.guard_group``), so none is
left orphaned.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from derl.checked_config import EvoCfg, load_config
from derl.config import with_values
from derl.evolution.backend import load_backend
from derl.evolution.curves import SearchCurves
from derl.evolution.failures import MAX_DELAY_SECONDS, Streak, gives_up, next_streak, restart_delay
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.node_size import mps_note, worker_count, worker_devices
from derl.evolution.population import search_text
from derl.evolution.prepare import prepare_run, preparing
from derl.evolution.private_folder import node_config_file, private_folder
from derl.evolution.process import (
    COORDINATOR_PID_VARIABLE,
    EXIT_CONFIG,
    EXIT_ENVIRONMENT,
    EXIT_FATAL,
    EXIT_STOPPED,
    catch_stop_signals,
    log,
)
from derl.evolution.results import PublishedResults, summarize
from derl.evolution.search_config import join_search
from derl.threads import limit_threads

POLL_SECONDS = 1.0
SUMMARY_SECONDS = 10.0
RETRY_SECONDS = 10.0
GRACE_SECONDS = 10.0
def _cpu_seconds() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT while the run is prepared; ``signum`` gives the exit code 128 + signum."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum: int, frame) -> None:
    raise Interrupted(signum)


class Coordinator:
    """Starts, watches, restarts and stops this node's worker processes.

    It reads the search (``evo``: its ``NUM_PROCESSES`` workers, their lease, the fitness shown), this
    ``node`` and whether TensorBoard is on (``TENSORBOARD.ENABLED``: node 0 then draws the search's curves).
    """

    def __init__(self, evo: EvoCfg, run: RunDir, worker_args: Sequence[str], devices: Sequence[str] = (), *,
                 node: int, tensorboard: bool):
        self.evo, self.node = evo, node
        self.run = run
        self.worker_args = list(worker_args)
        self.devices = list(devices)  # worker w's DEVICE override; empty: the config's DEVICE
        self.procs: dict[int, subprocess.Popen] = {}
        self.started: dict[int, float] = {}  # monotonic start time of each running worker
        self.streaks: dict[int, Streak] = {}  # each failing worker's failures in a row
        self.restart_at: dict[int, float] = {}  # workers waiting out their back-off: when to restart
        self.signalled: int | None = None
        self.results = PublishedResults(run, evo)
        self.logged_progress: tuple[int, int] | None = None
        self.curves = SearchCurves(evo, run) if node == 0 and tensorboard else None
        self.summary_written = False  # the last summary.json, when the workers ended

    def _handle_signal(self, signum: int, frame) -> None:
        self.signalled = signum

    def _start(self, worker: int) -> None:
        env = dict(os.environ)  # derl is installed (`make setup`: pip install -e .)
        env[COORDINATOR_PID_VARIABLE] = str(os.getpid())
        command = [sys.executable, "-m", "derl.evolution.worker", "--worker", str(worker), *self.worker_args]
        if self.devices:
            command += ["DEVICE", self.devices[worker]]
        self.procs[worker] = subprocess.Popen(command, env=env, start_new_session=True)
        self.started[worker] = time.monotonic()

    def _kill_group(self, proc: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)  # the worker leads its own group (start_new_session)
        except ProcessLookupError:
            pass

    def run_workers(self) -> int:
        """Runs the workers to the end of this node's work; returns the process exit code."""
        previous = catch_stop_signals(self._handle_signal)
        self.results.refresh()
        session = {"started": time.time(), "published_at_start": len(self.results.by_id),
                   "cpu_at_start": _cpu_seconds()}
        try:
            for worker in range(self.evo.NUM_PROCESSES):
                self._start(worker)
            log(f"node {self.node}: started {len(self.procs)} workers, output in {self.run.root}")
            code = self._supervise(session)
        finally:
            self.stop_all()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.summary_written = self._try_write_summary(session)
        if self.curves is not None:
            self.curves.close()
        return code

    def _supervise(self, session: dict[str, float]) -> int:
        last_summary = time.monotonic()
        while self.procs or self.restart_at:
            if self.signalled is not None:
                log(f"received signal {self.signalled}: stopping all workers")
                return 128 + self.signalled
            for worker, proc in list(self.procs.items()):
                code = proc.poll()
                if code is not None and (node_code := self._on_exit(worker, proc, code)) is not None:
                    return node_code
            self._restart_due()
            if time.monotonic() - last_summary >= SUMMARY_SECONDS:
                self._try_write_summary(session)
                last_summary = time.monotonic()
            time.sleep(POLL_SECONDS)
        return 0

    def _on_exit(self, worker: int, proc: subprocess.Popen, code: int) -> int | None:
        """Handles a worker's exit; the node's exit code if the whole node must stop, else None."""
        self._kill_group(proc, signal.SIGKILL)  # processes a dead worker may leave behind
        del self.procs[worker]
        if code == 0 or (code == EXIT_STOPPED and self.run.stop_requested()):
            log(f"worker {worker} {'finished' if code == 0 else 'stopped'}")
            return None
        if code == EXIT_FATAL:
            log(f"worker {worker} hit a fatal error; stopping the node")
            return EXIT_FATAL
        if code == EXIT_CONFIG:  # its error line names the key; every other worker would meet it too
            log(f"worker {worker} found a fault of the config (its error line names the key); stopping the node: "
                "fix it and run the same command to resume")
            return EXIT_CONFIG
        now = time.monotonic()
        limit = self.evo.LEASE_SECONDS
        # A run shorter than the lease or the longest back-off is part of the same crash loop.
        healthy = max(limit, MAX_DELAY_SECONDS)
        streak = self.streaks[worker] = next_streak(self.streaks.get(worker), now, now - self.started[worker], healthy)
        # A worker stopped though neither this coordinator nor a STOP file asked (a signal sent to it alone, a
        # job's processes signalled one by one) left its slots to nobody: restarted like one that died.
        what = {EXIT_ENVIRONMENT: "stopped by a failure that is not a morphology's",
                EXIT_STOPPED: "stopped though no stop was asked of the node"}.get(code, "died")
        if gives_up(streak, now, limit):
            log(f"worker {worker} {what} (exit {code}) and has been failing for {now - streak.since:.0f} s "
                f"({streak.failures} times in a row, EVO.LEASE_SECONDS {limit:g}): stopping node "
                f"{self.node}; fix the cause in the worker's last error line and run the same command "
                "to resume")
            return EXIT_ENVIRONMENT
        delay = restart_delay(streak.failures)
        log(f"worker {worker} {what} (exit {code}), failure {streak.failures} in a row; restarting it in {delay:g} s")
        self.restart_at[worker] = now + delay
        return None

    def _restart_due(self) -> None:
        """Restarts the workers whose back-off is over (none once a stop was requested).

        A transient error of the shared filesystem or of fork (ESTALE, EIO, EAGAIN) postpones the
        restart by ``RETRY_SECONDS``: stopping the node for it would kill its healthy workers too.
        """
        due = [worker for worker, at in self.restart_at.items() if at <= time.monotonic()]
        if not due:
            return
        try:
            if self.run.stop_requested():
                self.restart_at.clear()
                return
            for worker in due:
                self._start(worker)
                del self.restart_at[worker]
        except OSError as err:
            log(f"restarting worker(s) {', '.join(map(str, due))} failed ({err}); trying again in {RETRY_SECONDS:g} s")
            for worker in due:
                if worker in self.restart_at:
                    self.restart_at[worker] = time.monotonic() + RETRY_SECONDS

    def stop_all(self) -> None:
        """SIGTERM to every worker group, then SIGKILL to what is left after the grace period."""
        live = [proc for proc in self.procs.values() if proc.poll() is None]
        descendants = []
        for proc in live:
            try:
                descendants += psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                pass
            self._kill_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        for proc in live:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.procs.values():
            self._kill_group(proc, signal.SIGKILL)
            proc.wait()
        for child in descendants:  # anything that left its group
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        self.procs.clear()

    def _try_write_summary(self, session: dict[str, float]) -> bool:
        """``_write_summary``, logging instead of failing when the filesystem refuses (a full disk); whether
        it was written."""
        try:
            self._write_summary(session)
        except OSError as err:
            log(f"summary.json not updated: {err}")
            return False
        return True

    def _write_summary(self, session: dict[str, float]) -> None:
        self.results.refresh()
        summary = summarize(self.evo, self.run, self.results, session)
        elapsed = max(time.time() - session["started"], 1e-9)
        summary["coordinator"] = {
            "node": self.node, "workers": self.evo.NUM_PROCESSES,
            "session_seconds": elapsed, "cpu_fraction": (_cpu_seconds() - session["cpu_at_start"]) / elapsed,
        }
        self.run.write_summary(summary)
        if self.curves is not None:
            self.curves.update(self.results.by_id.values(), summary["morphologies_per_hour"])
        progress = (summary["published"], summary["failed"])
        if progress in (self.logged_progress, (0, 0)):  # no news, or nothing published nor failed yet
            return
        self.logged_progress = progress
        best = summary["best"]
        best_text = f", best {best['id']} {best.get(self.evo.SELECTION_CRITERIA[0]):.3f}" if best else ""
        memory = f", worker memory up to {self._worker_memory_mb():.0f} MB" if self.procs else ""
        log(f"{summary['published']}/{summary['total']} published, {summary['failed']} failed"
            f"{best_text}{eta_text(summary)}{memory}")

    def _worker_memory_mb(self) -> float:
        """Largest resident memory of one worker with its subprocesses (psutil)."""
        largest = 0
        for proc in self.procs.values():
            try:
                root = psutil.Process(proc.pid)
                tree = [root, *root.children(recursive=True)]
                largest = max(largest, sum(p.memory_info().rss for p in tree))
            except psutil.NoSuchProcess:
                pass
        return largest / 2**20


def eta_text(summary: dict) -> str:
    """``", 95/h, ETA 9 min"`` for the progress line (hours past 2 h); empty when done or not measured yet."""
    eta, rate = summary["eta_hours"], summary["morphologies_per_hour"]
    if eta is None or summary["published"] >= summary["total"]:
        return ""
    return f", {rate:.0f}/h, ETA {eta * 60:.0f} min" if eta < 2 else f", {rate:.0f}/h, ETA {eta:.1f} h"


def run_node(cfg_file: str | Path | None, overrides: Sequence[str]) -> int:
    """Everything ``evo_single_proc.py`` does for one node; returns the exit code (docs/reference/commands.md).

    Raises:
        ConfigError, ValueError, TimeoutError, OSError: while preparing the run, with a one-line message.
    """
    cfg = load_config(cfg_file, overrides, this_node=True)
    run = RunDir(cfg.OUT_DIR, quarantine=True)
    if run.stop_requested():
        raise ValueError(f"{run.root / 'STOP'} exists (a stop was requested); delete it to resume the run")
    # Before anything is created: a count the node cannot hold is refused.
    num = worker_count(cfg.EVO, run, node=cfg.NODE_ID, vecenv_threads=cfg.VECENV.THREADS)
    run.create()
    cfg = join_search(cfg, run, log)  # OUT_DIR/config.yaml plus this node's node-local keys
    # Only now is the search's size this node's: names are held to it (a slot of another size is never moved).
    run.hold_names_to(cfg.EVO.SEARCH_SPACE_SIZE)
    log(f"node {cfg.NODE_ID}: {search_text(cfg.EVO)}")
    limit_threads(cfg.TORCH_THREADS)  # the initial population is drawn here; workers set their own
    devices, num = worker_devices(cfg.EVO, cfg.trainer, run, num, node=cfg.NODE_ID, sim_backend=cfg.SIM.BACKEND)
    if cfg.DEVICE != "cpu":
        log(f"learner devices of workers 0..{num - 1}: {', '.join(devices)}{mps_note(devices, os.environ)}")
    # Workers run this node's config, resolved: OUT_DIR absolute, NUM_PROCESSES counted.
    cfg = with_values(cfg, {"OUT_DIR": str(run.root), "EVO.NUM_PROCESSES": num})
    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM stops preparation like Ctrl-C, exit 143
    try:
        with preparing(run, cfg.NODE_ID, cfg.EVO.LEASE_SECONDS):
            prepare_run(cfg.EVO, cfg.unimal, run, load_backend(), node=cfg.NODE_ID, rng_seed=cfg.RNG_SEED)
    except ChildProcessError as err:  # an OSError, but no bad input: a process of the pool was killed
        print(f"error: {err} while drawing the initial population (killed, or out of memory: the node's "
              "problem, not the config's); run the same command to resume", file=sys.stderr, flush=True)
        return EXIT_ENVIRONMENT
    with private_folder(cfg.NODE_ID) as private:
        worker_args = ["--cfg", str(node_config_file(cfg, private))]
        coordinator = Coordinator(cfg.EVO, run, worker_args, devices, node=cfg.NODE_ID,
                                  tensorboard=cfg.TENSORBOARD.ENABLED)
        code = coordinator.run_workers()
    if code != 0:  # a stop or a failure, said in the log (a broken folder is not read again)
        return code
    results = PublishedResults(run, cfg.EVO)  # what status and summary.json count: checked records
    results.refresh()
    published = len(results.by_id)
    if published >= cfg.EVO.SEARCH_SPACE_SIZE:
        see = "see summary.json" if coordinator.summary_written else "summary.json could not be written"
        log(f"search complete: {published} morphologies in {run.root} ({see})")
    elif run.stop_requested():
        log(f"stopped by {run.root / 'STOP'}: delete it and run the same command to resume")
        return EXIT_STOPPED
    else:
        log(f"node {cfg.NODE_ID} has no work left; {published}/{cfg.EVO.SEARCH_SPACE_SIZE} published so far")
    return code
