"""One evolution worker: claim a slot, make its morphology, train it, publish it; repeat.

Run by the coordinator as ``python -m derl.evolution.worker --worker W [--cfg FILE] [KEY VALUE ...]``.

Order of work: the slot this worker held when it last died (resumed from its
checkpoint), then the unfinished slots of this node's workers that no longer run
(a restart with fewer workers: worker ``w`` adopts those of ``w + k * NUM_PROCESSES``),
then the initial population (its own share first, then any slot
nobody has claimed), then, once every initial morphology is published,
tournament children until all ``SEARCH_SPACE_SIZE`` slots are claimed.

Exit codes: 0 no slot left, ``EXIT_STOPPED`` stopped on request (signal, STOP
file, coordinator gone), ``EXIT_FATAL`` a problem a restart cannot fix,
``EXIT_ENVIRONMENT`` a failure that is not the morphology's (``derl.evolution.failures``:
a full disk, an I/O error, a missing device, a bug); its slot and checkpoint stay as they
were and the coordinator restarts the worker after a back-off.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import resource
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from derl.checked_config import load_config_or_exit
from derl.config import CfgNode
from derl.evolution.backend import Backend, TrainOutcome, load_backend
from derl.evolution.failures import WHOSE, classify, describe
from derl.evolution.lease import Heartbeat, heartbeat_interval, takeover_reason
from derl.evolution.population import init_claim_order, num_initial_slots, parse_id, ppo_seed, slot_id, slot_rng
from derl.evolution.results import PublishedResults, is_finite_summary
from derl.evolution.schema import morphology_files
from derl.evolution.storage import RunDir
from derl.lifetime import die_with_parent

EXIT_FATAL = 3
EXIT_STOPPED = 4
EXIT_ENVIRONMENT = 5
# Morphologies that may fail in a row in one slot, in one worker's hands, before the run is declared
# broken (only failures of the morphology itself count: derl.evolution.failures).
MAX_ATTEMPTS = 10
STOP_POLL_SECONDS = 5.0
HEARTBEAT_SECONDS = 30.0
COORDINATOR_PID_VARIABLE = "DERL_EVO_COORDINATOR_PID"
INIT_POLL_SECONDS = 1.0
# How often a worker with nothing to claim looks for slots to take over (or a finished search).
WAIT_POLL_SECONDS = 5.0


class Stopped(Exception):
    """The worker was asked to stop; its slot stays claimed and resumes on restart."""


class FatalError(Exception):
    """A problem that restarting the worker would repeat."""


class SlotLost(Exception):
    """Another worker took this slot over (our heartbeat went stale) or published it: yield it."""


class StopSignal:
    """``should_stop`` for the trainer: a signal, a dead coordinator or the STOP file.

    The STOP file is checked at most every ``STOP_POLL_SECONDS`` and the
    heartbeat written every ``HEARTBEAT_SECONDS``, so polling once per PPO
    iteration costs nothing.
    """

    def __init__(self, run: RunDir, heartbeat):
        self.run = run
        self.heartbeat = heartbeat
        self.parent = int(os.environ.get(COORDINATOR_PID_VARIABLE, os.getppid()))
        self.requested = False
        # Set by the worker while it fills a slot: True once another worker has taken the slot over.
        self.slot_lost: Callable[[], bool] | None = None
        self.lost = False
        self._last_poll = self._last_beat = time.monotonic()

    def handle_signal(self, signum: int, frame: Any) -> None:
        self.requested = True

    def __call__(self) -> bool:
        if os.getppid() != self.parent:
            self.requested = True
        now = time.monotonic()
        if now - self._last_beat >= HEARTBEAT_SECONDS:
            self._last_beat = now
            self.heartbeat()
        if not self.requested and now - self._last_poll >= STOP_POLL_SECONDS:
            self._last_poll = now
            self.requested = self.run.stop_requested()
            self.lost = self.lost or (self.slot_lost is not None and self.slot_lost())
        return self.requested or self.lost

    def check(self) -> None:
        if self():
            raise SlotLost if self.lost and not self.requested else Stopped

    def still_ours(self) -> bool:
        """Whether the slot's files are still ours to write: a fresh look at the leases before each
        checkpoint (a worker woken from a long pause must not overwrite those of its taker)."""
        self.lost = self.lost or (self.slot_lost is not None and self.slot_lost())
        return not self.lost


class Worker:
    def __init__(self, cfg: CfgNode, run: RunDir, backend: Backend, worker: int):
        self.cfg = cfg
        self.run = run
        self.backend = backend
        self.node = cfg.NODE_ID
        self.worker = worker
        self.results = PublishedResults(run)
        self.previous = run.read_worker_state(self.node, worker) or {}
        # The peak memory is kept across restarts: the coordinator sizes the next session by it.
        self.state: dict[str, Any] = {"slot": None, "id": None, "status": "starting",
                                      "peak_rss_bytes": self.previous.get("peak_rss_bytes", 0),
                                      "peak_gpu_bytes": self.previous.get("peak_gpu_bytes", 0)}
        self.stop = StopSignal(run, self._write_state)
        self.next_child_slot = num_initial_slots(cfg.EVO)
        self.lease_seconds = cfg.EVO.LEASE_SECONDS
        self.wait_seconds = min(WAIT_POLL_SECONDS, heartbeat_interval(self.lease_seconds))
        # Scans for slots to take over read a few files per slot in flight: one per heartbeat interval.
        self.scan_seconds = heartbeat_interval(self.lease_seconds)
        self._next_scan = 0.0

    def _write_state(self, **changes: Any) -> None:
        self.state.update(changes, node=self.node, worker=self.worker, pid=os.getpid(), updated=time.time(),
                          peak_rss_bytes=max(self.state["peak_rss_bytes"], peak_rss_bytes()),
                          peak_gpu_bytes=max(self.state["peak_gpu_bytes"], peak_gpu_bytes()))
        self.run.write_worker_state(self.node, self.worker, self.state)

    def _log(self, message: str) -> None:
        print(f"[worker {self.node}-{self.worker}] {message}", flush=True)

    def run_all(self) -> None:
        """Does this worker's share of the search, then returns (raises Stopped or FatalError)."""
        if self.previous.get("slot") is not None:
            self._resume(self.previous["slot"])
        self._adopt_orphaned_slots()
        evo = self.cfg.EVO
        order = init_claim_order(num_initial_slots(evo), self.cfg.NUM_NODES, self.node, evo.NUM_PROCESSES,
                                 self.worker)
        for slot in order:
            if not self.run.is_claimed(slot) and self._claim(slot):
                self._fill_slot(slot)
        if evo.IS_EVO:  # random search has no children: every slot was in the order above
            self._wait_for_initial_population()
        while (slot := self._claim_next_child_slot()) is not None:
            self._fill_slot(slot)
        self._finish_search()
        self._write_state(slot=None, id=None, status="finished")

    def _finish_search(self) -> None:
        """Waits until every slot is published, filling what nobody holds any more.

        That is a slot nobody claims (its claim was quarantined) or one whose owner went
        silent for ``EVO.LEASE_SECONDS`` (a dead node) or works elsewhere (its result was
        quarantined). Without this, a node that dies for good would hold its slots forever.
        """
        total = self.cfg.EVO.SEARCH_SPACE_SIZE
        while True:
            self.results.refresh()
            done = {parse_id(morphology_id)[0] for morphology_id in self.results.by_id}
            if len(done) >= total:
                return
            if self._help_unfinished(slot for slot in range(total) if slot not in done):
                continue
            self._write_state(slot=None, id=None, status=f"waiting for {total - len(done)} slots held by others")
            self.stop.check()
            time.sleep(self.wait_seconds)

    def _help_unfinished(self, slots: Iterable[int]) -> bool:
        """Claims or takes over the first of ``slots`` that nobody holds and fills it; False if none.

        Scans at most once per ``scan_seconds`` (False in between), to spare the shared filesystem.
        """
        if time.monotonic() < self._next_scan:
            return False
        self._next_scan = time.monotonic() + self.scan_seconds
        claimed = set(self.run.claimed_slots())
        now = None
        for slot in slots:
            claim = self.run.read_slot(slot) if slot in claimed else None
            if claim is None:  # never claimed, or its claim was quarantined just now
                if self._claim(slot):
                    self._fill_slot(slot)
                    return True
                continue
            now = now or self.run.beat(self.node, self.worker)  # the shared filesystem's clock
            reason = takeover_reason(self.run, slot, claim, now, self.lease_seconds)
            if reason is not None and self._take_over(slot, claim, reason):
                self._fill_slot(slot)
                return True
        return False

    def _take_over(self, slot: int, claim: dict[str, Any], reason: str) -> bool:
        self.stop.check()
        self._write_state(slot=slot, id=claim["id"], status="taking over")
        if not self._new_lease(slot, claim):
            return False  # another worker was faster
        self._log(f"took over slot {slot} ({claim['id'] or 'damaged claim'}): {reason}")
        return True

    def _new_lease(self, slot: int, claim: dict[str, Any]) -> bool:
        """Takes the next lease of ``slot`` for this worker (exclusive creation); False if another
        process took it first. Whoever held ``claim`` sees the later lease and yields the slot."""
        attempt = claim["attempt"] or 0  # a damaged claim: from attempt 0, skipping those failed or published
        mine = {"slot": slot, "id": slot_id(slot, attempt), "attempt": attempt, "node": self.node,
                "worker": self.worker}
        return self.run.take_over_slot(slot, claim, mine)

    def _resume(self, slot: int) -> None:
        """Resumes a slot this (node, worker) held in an earlier session, under a new lease: a process
        of that session still running elsewhere (a node requeued while cut off) then yields it."""
        claim = self.run.read_slot(slot)
        if claim and claim.get("damaged"):  # ours unless another worker on this slot still beats
            now = self.run.beat(self.node, self.worker)
            if takeover_reason(self.run, slot, claim, now, self.lease_seconds, (self.node, self.worker)) is None:
                return
        elif not claim or (claim["node"], claim["worker"]) != (self.node, self.worker):
            return
        if self._new_lease(slot, claim):
            self._log(f"resuming slot {slot}")
            self._fill_slot(slot)

    def _adopt_orphaned_slots(self) -> None:
        """Resumes the slots of workers ``w + k * NUM_PROCESSES`` of this node, which no longer run.

        Without this, a node restarted with fewer workers (``NUM_PROCESSES 0`` resolves anew at each
        start) would leave their claimed slots unfinished forever. Our own state records the slot
        before the claim changes hands, so a crash in between is resumed like any other.
        """
        count = self.cfg.EVO.NUM_PROCESSES
        for other in self.run.worker_indices(self.node):
            if other < count or other % count != self.worker:
                continue
            state = self.run.read_worker_state(self.node, other) or {}
            slot = state.get("slot")
            if slot is None:
                continue
            lock = _try_worker_lock(self.run, self.node, other)
            if lock is None:
                continue  # that worker still runs (an older session winding down)
            try:
                claim = self.run.read_slot(slot)
                if claim and (claim["node"], claim["worker"]) == (self.node, other):
                    self._log(f"adopting slot {slot} of worker {self.node}-{other}, which no longer runs")
                    self._write_state(slot=slot, id=claim["id"], status="adopting")
                    if self._new_lease(slot, claim):
                        self._fill_slot(slot)
                self.run.write_worker_state(self.node, other, {**state, "slot": None, "id": None,
                                                               "status": f"slot adopted by worker {self.worker}"})
            finally:
                os.close(lock)

    def _claim(self, slot: int) -> bool:
        self.stop.check()
        # The intent is recorded first: a worker killed between the two writes finds its claim on restart.
        self._write_state(slot=slot, id=slot_id(slot), status="claiming")
        claim = {"slot": slot, "id": slot_id(slot), "attempt": 0, "node": self.node, "worker": self.worker}
        return self.run.claim_slot(slot, claim)

    def _claim_next_child_slot(self) -> int | None:
        # Claims are permanent, so every slot passed over stays claimed: never scan it again.
        while self.next_child_slot < self.cfg.EVO.SEARCH_SPACE_SIZE:
            slot = self.next_child_slot
            self.next_child_slot += 1
            if not self.run.is_claimed(slot) and self._claim(slot):
                return slot
        return None

    def _wait_for_initial_population(self) -> None:
        size = num_initial_slots(self.cfg.EVO)
        deadline = time.monotonic() + self.cfg.EVO.INIT_WAIT_TIMEOUT
        self.results.refresh()
        while (published := self.results.count_slots_below(size)) < size:
            done = {parse_id(morphology_id)[0] for morphology_id in self.results.by_id}
            if self._help_unfinished(slot for slot in range(size) if slot not in done):  # a dead node's slots
                self.results.refresh()
                continue
            status = f"waiting for the initial population ({published}/{size})"
            self._write_state(slot=None, id=None, status=status)
            if time.monotonic() > deadline:
                raise FatalError(f"initial population still incomplete ({published}/{size}) after "
                                 f"EVO.INIT_WAIT_TIMEOUT={self.cfg.EVO.INIT_WAIT_TIMEOUT} s")
            self.stop.check()
            time.sleep(INIT_POLL_SECONDS)
            self.results.refresh()

    def _fill_slot(self, slot: int) -> None:
        """Publishes one morphology in ``slot``, unless another worker takes the slot over meanwhile."""
        claim = self.run.read_slot(slot)
        if claim is None or (claim["node"], claim["worker"]) != (self.node, self.worker):
            return  # not ours (any more)
        lease = claim["lease"]
        self.stop.lost = False
        self.stop.slot_lost = lambda: self.run.slot_taken_over(slot, lease)
        try:
            self._fill_claimed_slot(slot, claim)
        except SlotLost:
            self._log(f"slot {slot} was taken over by another worker; yielding it without publishing")
            self._write_state(slot=None, id=None, status=f"yielded slot {slot}")
        finally:
            self.stop.slot_lost = None
            self.stop.lost = False

    def _fill_claimed_slot(self, slot: int, claim: dict[str, Any]) -> None:
        """Publishes one morphology in ``slot``, replacing failed ones (each recorded in error_metadata/).

        ``MAX_ATTEMPTS`` failures in a row here stop the node (exit ``EXIT_FATAL``): every new body
        failing means the search is broken. The count starts afresh with each fill, so a rerun after
        the cause is fixed, or a node that takes the slot over, tries again with the next attempts.
        """
        attempt = claim["attempt"]
        failed_here = 0
        while True:
            morphology_id = slot_id(slot, attempt)
            if self.run.is_published(morphology_id):
                return
            if not self.run.has_failed(morphology_id):
                try:
                    self._make_and_train(slot, attempt)
                    return
                except (Stopped, FatalError, SlotLost):
                    raise
                except Exception as err:  # noqa: BLE001 - a failure of the morphology is recorded, not fatal
                    self.stop.check()  # e.g. its processes killed during shutdown
                    if not self.stop.still_ours():  # the taker may publish this id: no failure record
                        raise SlotLost from None
                    if classify(err) != "morphology":
                        raise  # the node's problem: the slot keeps its attempt (see run_worker)
                    self._record_failure(morphology_id, slot, attempt, err)
                    failed_here += 1
            attempt += 1
            if failed_here >= MAX_ATTEMPTS:
                raise FatalError(f"slot {slot}: {MAX_ATTEMPTS} morphologies failed in a row (attempts "
                                 f"{attempt - MAX_ATTEMPTS}-{attempt - 1}, see error_metadata/); every new body "
                                 "fails, so the search looks broken: rerun to try the next attempts")
            if self.run.slot_taken_over(slot, claim["lease"]):
                raise SlotLost
            self.run.replace_slot(slot, {"slot": slot, "id": slot_id(slot, attempt), "attempt": attempt,
                                         "node": self.node, "worker": self.worker, "lease": claim["lease"]})

    def _record_failure(self, morphology_id: str, slot: int, attempt: int, err: Exception) -> None:
        reason = f"{type(err).__name__}: {err}".splitlines()[0]
        self._log(f"{morphology_id} failed: {reason}")
        self.run.record_failure({
            "id": morphology_id, "slot": slot, "attempt": attempt, "reason": reason,
            "traceback": traceback.format_exc(limit=-8), "node": self.node, "worker": self.worker,
        })

    def _make_genome(self, slot: int, attempt: int) -> None:
        morphology_id = slot_id(slot, attempt)
        rng = slot_rng(self.cfg.RNG_SEED, slot, attempt)
        if slot >= num_initial_slots(self.cfg.EVO):
            self.results.refresh()
            parent_id = self.results.select_parent(self.cfg, rng)
            try:
                parent = self.run.read_genome(parent_id)
            except FileNotFoundError as err:  # quarantined: this child cannot be made; the next attempt
                raise ValueError(f"parent genome unavailable: {err}") from None  # draws another parent
            genome = self.backend.mutate(self.cfg, parent, rng, morphology_id)
        else:  # a replacement of a failed initial morphology
            genome = self.backend.random_genome(self.cfg, rng, morphology_id)
        self.run.write_genome(morphology_id, genome, self.backend.to_mjcf(self.cfg, genome))

    def _make_and_train(self, slot: int, attempt: int) -> None:
        morphology_id = slot_id(slot, attempt)
        self._write_state(slot=slot, id=morphology_id, status="training")
        if not self.run.has_genome(morphology_id):
            self._make_genome(slot, attempt)
        seed = ppo_seed(self.cfg.RNG_SEED, slot, attempt)
        checkpoint = self.run.checkpoint_path(morphology_id)
        resume = checkpoint.exists()
        self._log(f"{'resuming' if resume else 'training'} {morphology_id} (seed {seed})")
        outcome = self.backend.train(
            self.cfg, self.run.xml_path(morphology_id), seed=seed, checkpoint_path=checkpoint,
            metrics_path=self.run.metrics_path(morphology_id), resume=resume, should_stop=self.stop,
            may_save=self.stop.still_ours,
        )
        if not outcome.completed:
            self.stop.check()
            raise Stopped
        if not is_finite_summary(outcome.summary):
            raise ValueError(f"training summary is not finite: {outcome.summary}")
        if slot >= self.cfg.EVO.SEARCH_SPACE_SIZE - self.cfg.EVO.VIDEOS_LAST_N:
            self._record_video(morphology_id, seed)
        # Dying between the number and the metadata leaves the number unused (a gap): the
        # resumed worker finds the finished checkpoint and takes a new number.
        if not self.stop.still_ours():
            raise SlotLost
        publication = self.run.take_publication_number(morphology_id, self.node, self.worker)
        if not self.run.publish(self.build_metadata(morphology_id, slot, attempt, seed, outcome, publication)):
            raise SlotLost  # published by the worker that took the slot over
        shown = (self.cfg.EVO.SELECTION_CRITERIA[0], "return")
        fitness = {key: outcome.summary.get(key, float("nan")) for key in shown}
        self._log(f"published {morphology_id} (publication {publication}): "
                  + ", ".join(f"{key} {value:.3f}" for key, value in fitness.items()))

    def _record_video(self, morphology_id: str, seed: int) -> None:
        """``videos/<id>.mp4`` of one of the last ``EVO.VIDEOS_LAST_N`` morphologies, before it is published.

        A video that cannot be made (no headless GL, say) is logged and skipped: it never costs the result.
        """
        try:
            path = self.run.save_video(morphology_id, lambda staged: self.backend.record_video(
                self.cfg, self.run.xml_path(morphology_id), self.run.checkpoint_path(morphology_id), seed, staged))
            self._log(f"video {self.run.relative(path)}")
        except Exception as err:  # noqa: BLE001 - see the docstring
            self._log(f"no video for {morphology_id}: {type(err).__name__}: {err}".splitlines()[0])

    def _lineage(self, morphology_id: str, parent_id: str | None) -> str:
        """``<root>/.../<parent>/<id>``: the parent's published lineage, or, if its metadata was
        quarantined after it was chosen, its genome's parent, and so on (the result is not lost).

        Where the chain breaks (an ancestor's genome quarantined too, or a crafted cycle) the
        lineage starts at the last ancestor known: the result is published, never retried forever.
        """
        chain = [morphology_id]
        while parent_id is not None and parent_id not in chain:
            parent = self.results.by_id.get(parent_id)
            if parent is not None:
                return "/".join([parent["lineage"], *reversed(chain)])
            chain.append(parent_id)
            try:
                parent_id = json.loads(self.run.read_genome(parent_id)).get("parent_id")
            except FileNotFoundError:
                break
        return "/".join(reversed(chain))

    def build_metadata(self, morphology_id: str, slot: int, attempt: int, seed: int,
                       outcome: TrainOutcome, publication: int) -> dict[str, Any]:
        """The published record of a morphology (``metadata/<id>.json``)."""
        genome = json.loads(self.run.read_genome(morphology_id))
        parent_id = genome.get("parent_id")
        self.results.refresh()
        lineage = self._lineage(morphology_id, parent_id)
        return {
            "id": morphology_id,
            "parent_id": parent_id,
            "lineage": lineage,
            "mutation": genome.get("mutation"),
            "slot": slot,
            "attempt": attempt,
            "seed": seed,
            "node": self.node,
            "worker": self.worker,
            "device": self.cfg.DEVICE,  # the coordinator gives each worker a concrete device
            **{key: float(value) for key, value in outcome.summary.items()},
            "env_steps": int(outcome.env_steps),
            "iterations": int(outcome.iterations),
            "wall_time": float(outcome.wall_time),
            "steps_per_sec": float(outcome.steps_per_sec),
            "files": morphology_files(morphology_id),
            "published_at": time.time(),
            "publication": publication,
        }


def peak_rss_bytes() -> int:
    """Peak resident memory of this worker and its finished subprocesses (Linux reports KiB)."""
    usage = [resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(usage) * 1024


# GPU memory a CUDA context takes outside torch's allocator (driver, kernels), added to its peak.
CUDA_CONTEXT_BYTES = 500 * 2**20


def peak_gpu_bytes() -> int:
    """Peak GPU memory of this worker's learner (0 if it never used CUDA); never imports torch."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return 0
    return torch.cuda.max_memory_reserved() + CUDA_CONTEXT_BYTES  # the trainer set its device current


def _try_worker_lock(run: RunDir, node: int, worker: int) -> int | None:
    """The lock of worker ``node-worker`` if no process holds it (None if one does)."""
    fd = run.open_own_file(run.worker_lock_path(node, worker))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _hold_worker_lock(run: RunDir, node: int, worker: int) -> int:
    """Blocks until no other process runs as this worker (e.g. one still stopping), then holds the lock."""
    fd = _try_worker_lock(run, node, worker)
    if fd is None:
        print(f"[worker {node}-{worker}] waiting for the previous worker {node}-{worker} to exit", flush=True)
        fd = run.open_own_file(run.worker_lock_path(node, worker))
        fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def run_worker(cfg: CfgNode, worker: int, backend: Backend | None = None) -> int:
    """Runs worker ``worker`` of node ``cfg.NODE_ID``; returns its exit code.

    A failure that is not a morphology's (those are recorded per slot) stops the worker with one
    line on stderr (and the traceback of a bug) and ``EXIT_ENVIRONMENT``; nothing else is written,
    so its slot keeps its attempt and its checkpoint.
    """
    try:
        return _run_worker(cfg, worker, backend)
    except Exception as err:  # noqa: BLE001 - see the docstring
        cause = classify(err)
        if cause != "environment":
            traceback.print_exc()
        print(f"[worker {cfg.NODE_ID}-{worker}] error: {describe(err)} ({WHOSE[cause]}; the slot and its "
              "checkpoint are kept; the coordinator restarts the worker)", file=sys.stderr, flush=True)
        return EXIT_ENVIRONMENT


def _run_worker(cfg: CfgNode, worker: int, backend: Backend | None) -> int:
    die_with_parent(signal.SIGTERM)  # the coordinator's death stops this worker like a signal
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering for EVO.VIDEOS_LAST_N; read at mujoco's import
    run = RunDir(cfg.OUT_DIR, quarantine=True)
    if run.init_population_ids() is None:
        print(f"error: {run.root} has no initial population; start evo_single_proc.py", file=sys.stderr)
        return EXIT_FATAL
    lock = _hold_worker_lock(run, cfg.NODE_ID, worker)
    heartbeat = Heartbeat(run, cfg.NODE_ID, worker, heartbeat_interval(cfg.EVO.LEASE_SECONDS)).start()
    this = Worker(cfg, run, backend or load_backend(), worker)
    signal.signal(signal.SIGTERM, this.stop.handle_signal)
    signal.signal(signal.SIGINT, this.stop.handle_signal)
    try:
        this.run_all()
        return 0
    except Stopped:
        _try_write_state(this, status="stopped")
        return EXIT_STOPPED
    except FatalError as err:
        print(f"[worker {cfg.NODE_ID}-{worker}] fatal: {err}", file=sys.stderr, flush=True)
        _try_write_state(this, status=f"fatal: {err}")
        return EXIT_FATAL
    except Exception as err:
        _try_write_state(this, status=f"stopped by a {classify(err)} failure: {describe(err)}")
        raise
    finally:
        heartbeat.stop()
        os.close(lock)


def _try_write_state(worker: Worker, **changes: Any) -> None:
    """Records the worker's last status if the filesystem lets it (a full disk may not)."""
    with contextlib.suppress(OSError):
        worker._write_state(**changes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", type=int, required=True, help="worker index on this node")
    parser.add_argument("--cfg", type=Path, help="YAML config file")
    parser.add_argument("overrides", nargs="*", help="KEY VALUE pairs")
    args = parser.parse_args(argv)
    cfg = load_config_or_exit(args.cfg, args.overrides, this_node=True)
    raise SystemExit(run_worker(cfg, args.worker))


if __name__ == "__main__":
    main()
