"""Which slot a worker fills next, and the leases that make it its own (docs/design/run-folder.md#slots).

Order of work: the slot this worker held when it last died (resumed from its checkpoint), then
the unfinished slots of this node's workers that no longer run (a restart with fewer workers:
worker ``w`` adopts those of ``w + k * NUM_PROCESSES``), then the initial population (its own
share first, then any slot nobody has claimed), then, once every initial morphology is
published, tournament children until all ``SEARCH_SPACE_SIZE`` slots are claimed; then it helps
with the slots nobody holds any more (a dead node's) until every slot is published.

A slot holds one morphology id at a time: ``slot_id(slot, attempt)``. The DERL step
(``derl.evolution.step``) fills it; a morphology that fails is recorded in ``error_metadata/``
and the slot moves on to the next attempt.
"""

from __future__ import annotations

import dataclasses
import os
import time
import traceback
from collections.abc import Callable, Iterable

from derl.checked_config import EvoCfg
from derl.evolution.failures import classify
from derl.evolution.folder import schema
from derl.evolution.folder.failure_store import Failure
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.slot_store import Claim
from derl.evolution.lease import SlotLost, StopSignal, heartbeat_interval, takeover_reason
from derl.evolution.population import init_claim_order, num_initial_slots, parse_id, slot_id
from derl.evolution.process import FatalError, Stopped, WorkerState, try_worker_lock
from derl.evolution.results import PublishedResults

# Morphologies that may fail in a row in one slot, in one worker's hands, before the run is declared
# broken (only failures of the morphology itself count: derl.evolution.failures).
MAX_ATTEMPTS = 10
INIT_POLL_SECONDS = 1.0
# How often a worker with nothing to claim looks for slots to take over (or a finished search).
WAIT_POLL_SECONDS = 5.0


class Scheduler:
    """Claims, resumes, adopts and takes over slots for one worker and runs ``step(slot, attempt)`` in them."""

    def __init__(self, evo: EvoCfg, num_nodes: int, run: RunDir, results: PublishedResults, stop: StopSignal,
                 state: WorkerState, step: Callable[[int, int], None]):
        self.evo, self.num_nodes, self.run, self.results = evo, num_nodes, run, results
        self.stop, self.state, self.step = stop, state, step
        self.node, self.worker = state.node, state.worker
        self.next_child_slot = num_initial_slots(evo)
        self.lease_seconds = evo.LEASE_SECONDS
        self.wait_seconds = min(WAIT_POLL_SECONDS, heartbeat_interval(self.lease_seconds))
        # Scans for slots to take over read a few files per slot in flight: one per heartbeat interval.
        self.scan_seconds = heartbeat_interval(self.lease_seconds)
        self._next_scan = 0.0

    def run_all(self) -> None:
        """Does this worker's share of the search, then returns (raises Stopped or FatalError)."""
        if self.state.previous.slot is not None:
            self._resume(self.state.previous.slot)
        self._adopt_orphaned_slots()
        evo = self.evo
        order = init_claim_order(num_initial_slots(evo), self.num_nodes, self.node, evo.NUM_PROCESSES,
                                 self.worker)
        for slot in order:
            if not self.run.slots.is_claimed(slot) and self._claim(slot):
                self._fill_slot(slot)
        if evo.IS_EVO:  # random search has no children: every slot was in the order above
            self._wait_for_initial_population()
        while (child := self._claim_next_child_slot()) is not None:
            self._fill_slot(child)
        self._finish_search()
        self.state.write(slot=None, id=None, status="finished")

    def _finish_search(self) -> None:
        """Waits until every slot is published, filling what nobody holds any more.

        That is a slot nobody claims (its claim was quarantined) or one whose owner went
        silent for ``EVO.LEASE_SECONDS`` (a dead node) or works elsewhere (its result was
        quarantined). Without this, a node that dies for good would hold its slots forever.
        """
        total = self.evo.SEARCH_SPACE_SIZE
        while True:
            self.results.refresh()
            done = {parse_id(morphology_id)[0] for morphology_id in self.results.by_id}
            if len(done) >= total:
                return
            if self._help_unfinished(slot for slot in range(total) if slot not in done):
                continue
            self.state.write(slot=None, id=None, status=f"waiting for {total - len(done)} slots held by others")
            self.stop.check()
            time.sleep(self.wait_seconds)

    def _help_unfinished(self, slots: Iterable[int]) -> bool:
        """Claims or takes over the first of ``slots`` that nobody holds and fills it; False if none.

        Scans at most once per ``scan_seconds`` (False in between), to spare the shared filesystem.
        """
        if time.monotonic() < self._next_scan:
            return False
        self._next_scan = time.monotonic() + self.scan_seconds
        claimed = set(self.run.slots.claimed())
        now = None
        for slot in slots:
            claim = self.run.slots.read(slot) if slot in claimed else None
            if claim is None:  # never claimed, or its claim was quarantined just now
                if self._claim(slot):
                    self._fill_slot(slot)
                    return True
                continue
            now = now or self.run.workers.beat(self.node, self.worker)  # the shared filesystem's clock
            reason = takeover_reason(self.run, slot, claim, now, self.lease_seconds)
            if reason is not None and self._take_over(slot, claim, reason):
                self._fill_slot(slot)
                return True
        return False

    def _take_over(self, slot: int, claim: Claim, reason: str) -> bool:
        self.stop.check()
        self.state.write(slot=slot, id=claim.id, status="taking over")
        if not self._new_lease(claim):
            return False  # another worker was faster
        self.state.log(f"took over slot {slot} ({claim.id or 'damaged claim'}): {reason}")
        return True

    def _new_lease(self, claim: Claim) -> bool:
        """Takes the next lease of ``claim``'s slot for this worker (exclusive creation); False if another
        process took it first. Whoever held ``claim`` sees the later lease and yields the slot."""
        attempt = claim.attempt or 0  # a damaged claim: from attempt 0, skipping those failed or published
        if claim.lease >= schema.MAX_LEASES:  # the next lease's name would be out of range: refused, taken again
            raise FatalError(f"slot {claim.slot} was taken over {schema.MAX_LEASES} times (leases/), the most its "
                             "names allow: its owners keep going silent; see workers/ and the nodes' logs")
        return self.run.slots.take_over(claim, attempt, self.node, self.worker)

    def _resume(self, slot: int) -> None:
        """Resumes a slot this (node, worker) held in an earlier session, under a new lease: a process
        of that session still running elsewhere (a node requeued while cut off) then yields it."""
        claim = self.run.slots.read(slot)
        if claim and claim.damaged:  # ours unless another worker on this slot still beats
            now = self.run.workers.beat(self.node, self.worker)
            if takeover_reason(self.run, slot, claim, now, self.lease_seconds, (self.node, self.worker)) is None:
                return
        elif not claim or claim.owner != (self.node, self.worker):
            return
        if self._new_lease(claim):
            self.state.log(f"resuming slot {slot}")
            self._fill_slot(slot)

    def _adopt_orphaned_slots(self) -> None:
        """Resumes the slots of workers ``w + k * NUM_PROCESSES`` of this node, which no longer run.

        Without this, a node restarted with fewer workers (``NUM_PROCESSES 0`` resolves anew at each
        start) would leave their claimed slots unfinished forever. Our own state records the slot
        before the claim changes hands, so a crash in between is resumed like any other.
        """
        count = self.evo.NUM_PROCESSES
        for other in self.run.workers.indices(self.node):
            if other < count or other % count != self.worker:
                continue
            state = self.run.workers.read_state(self.node, other)
            if state is None or state.slot is None:
                continue
            slot = state.slot
            lock = try_worker_lock(self.run, self.node, other)
            if lock is None:
                continue  # that worker still runs (an older session winding down)
            try:
                claim = self.run.slots.read(slot)
                if claim and claim.owner == (self.node, other):
                    self.state.log(f"adopting slot {slot} of worker {self.node}-{other}, which no longer runs")
                    self.state.write(slot=slot, id=claim.id, status="adopting")
                    if self._new_lease(claim):
                        self._fill_slot(slot)
                self.run.workers.write_state(dataclasses.replace(state, slot=None, id=None,
                                                                 status=f"slot adopted by worker {self.worker}"))
            finally:
                os.close(lock)

    def _claim(self, slot: int) -> bool:
        self.stop.check()
        # The intent is recorded first: a worker killed between the two writes finds its claim on restart.
        self.state.write(slot=slot, id=slot_id(slot), status="claiming")
        return self.run.slots.claim(slot, self.node, self.worker)

    def _claim_next_child_slot(self) -> int | None:
        # Claims are permanent, so every slot passed over stays claimed: never scan it again.
        while self.next_child_slot < self.evo.SEARCH_SPACE_SIZE:
            slot = self.next_child_slot
            self.next_child_slot += 1
            if not self.run.slots.is_claimed(slot) and self._claim(slot):
                return slot
        return None

    def _wait_for_initial_population(self) -> None:
        """Waits until every initial slot is published (tournaments draw from them), filling a dead node's.

        Other workers train the slots, and the leases hand a silent owner's to this one, so the wait
        ends; its bound is on progress: ``FatalError`` once no initial morphology was published for
        ``max(EVO.INIT_WAIT_TIMEOUT, EVO.LEASE_SECONDS)`` (a timeout of 0, other nodes' wait for node 0's
        drawing, never fails a worker whose neighbours are still training).
        """
        size = num_initial_slots(self.evo)
        patience = max(self.evo.INIT_WAIT_TIMEOUT, self.lease_seconds)
        deadline = time.monotonic() + patience
        self.results.refresh()
        last = self.results.count_slots_below(size)
        while (published := self.results.count_slots_below(size)) < size:
            if published > last:
                last, deadline = published, time.monotonic() + patience
            done = {parse_id(morphology_id)[0] for morphology_id in self.results.by_id}
            if self._help_unfinished(slot for slot in range(size) if slot not in done):  # a dead node's slots
                self.results.refresh()
                continue
            status = f"waiting for the initial population ({published}/{size})"
            self.state.write(slot=None, id=None, status=status)
            if time.monotonic() > deadline:
                raise FatalError(f"initial population still incomplete ({published}/{size}): none published for "
                                 f"{patience:g} s (EVO.INIT_WAIT_TIMEOUT {self.evo.INIT_WAIT_TIMEOUT}, "
                                 f"EVO.LEASE_SECONDS {self.lease_seconds:g})")
            self.stop.check()
            time.sleep(INIT_POLL_SECONDS)
            self.results.refresh()

    def _fill_slot(self, slot: int) -> None:
        """Publishes one morphology in ``slot``, unless another worker takes the slot over meanwhile."""
        claim = self.run.slots.read(slot)
        if claim is None or claim.owner != (self.node, self.worker):
            return  # not ours (any more)
        lease = claim.lease
        self.stop.lost = False
        self.stop.slot_lost = lambda: self.run.slots.taken_over(slot, lease)
        try:
            self._fill_claimed_slot(slot, claim)
        except SlotLost:
            self.state.log(f"slot {slot} was taken over by another worker; yielding it without publishing")
            self.state.write(slot=None, id=None, status=f"yielded slot {slot}")
        finally:
            self.stop.slot_lost = None
            self.stop.lost = False

    def _fill_claimed_slot(self, slot: int, claim: Claim) -> None:
        """Publishes one morphology in ``slot``, replacing failed ones (each recorded in error_metadata/).

        ``MAX_ATTEMPTS`` failures in a row here stop the node (exit ``EXIT_FATAL``): every new body
        failing means the search is broken. The count starts afresh with each fill, so a rerun after
        the cause is fixed, or a node that takes the slot over, tries again with the next attempts.
        """
        assert claim.attempt is not None  # ours, so not damaged
        attempt = claim.attempt
        failed_here = 0
        while True:
            morphology_id = slot_id(slot, attempt)
            if self.run.publications.is_published(morphology_id):
                return
            if not self.run.failures.has_failed(morphology_id):
                try:
                    self.state.write(slot=slot, id=morphology_id, status="training")
                    self.step(slot, attempt)
                    return
                except (Stopped, FatalError, SlotLost):
                    raise
                except Exception as err:  # noqa: BLE001 - a failure of the morphology is recorded, not fatal
                    self.stop.check()  # e.g. its processes killed during shutdown
                    if not self.stop.still_ours():  # the taker may publish this id: no failure record
                        raise SlotLost from None
                    if classify(err) != "morphology":
                        raise  # the node's problem: the slot keeps its attempt (see worker.run_worker)
                    self._record_failure(morphology_id, slot, attempt, err)
                    failed_here += 1
            attempt += 1
            if attempt > schema.MAX_ATTEMPTS:  # its id would be out of range: never counted, tried again
                raise FatalError(f"slot {slot} has used all {schema.MAX_ATTEMPTS} attempts its ids allow "
                                 "(see error_metadata/)")
            if failed_here >= MAX_ATTEMPTS:
                raise FatalError(f"slot {slot}: {MAX_ATTEMPTS} morphologies failed in a row (attempts "
                                 f"{attempt - MAX_ATTEMPTS}-{attempt - 1}, see error_metadata/); every new body "
                                 "fails, so the search looks broken: rerun to try the next attempts")
            if self.run.slots.taken_over(slot, claim.lease):
                raise SlotLost
            self.run.slots.replace(claim, attempt, self.node, self.worker)

    def _record_failure(self, morphology_id: str, slot: int, attempt: int, err: Exception) -> None:
        reason = f"{type(err).__name__}: {err}".splitlines()[0]
        self.state.log(f"{morphology_id} failed: {reason}")
        self.run.failures.record_failure(Failure(
            id=morphology_id, slot=slot, attempt=attempt, reason=reason, traceback=traceback.format_exc(limit=-8),
            node=self.node, worker=self.worker))
