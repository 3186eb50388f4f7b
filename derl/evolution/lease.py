"""Dead nodes: worker heartbeats and the takeover of slots whose owner went silent.

Every worker touches ``workers/<node>-<worker>.alive`` from a background thread. A
slot's owner is alive while that file's mtime is recent; ages are differences of
file times on the shared filesystem (the heartbeat against a file the judge has
just touched), so no two machines' clocks are compared. A claimed, unpublished
slot is free to take over when its owner's heartbeat is older than
``EVO.LEASE_SECONDS``, or when its owner, alive, works on another slot (its
result was quarantined, say). The takeover itself is an exclusive creation of the
slot's next lease (``SlotStore.take_over``): one taker wins; the old owner, if it
comes back, sees the later lease and yields the slot without publishing (``StopSignal``
raises ``SlotLost``). A coordinator beats too while it prepares the run (``nodes/<node>-<token>.preparing``,
for ``tools/status.py``), but holds no slot: no takeover reads its heartbeat.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from derl.checked_config import BEATS_PER_LEASE
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.slot_store import Claim
from derl.evolution.process import COORDINATOR_PID_VARIABLE, Stopped

# Heartbeats at most this far apart, and at least BEATS_PER_LEASE per lease.
HEARTBEAT_SECONDS = 30.0
# How far ahead of the judge's "now" a file time may be and still be now (``file_age``).
FUTURE_SLACK_SECONDS = 60.0
# How often a training worker looks for the STOP file and a later lease of its slot, and rewrites its state.
STOP_POLL_SECONDS = 5.0
STATE_SECONDS = 30.0


def heartbeat_interval(lease_seconds: float) -> float:
    """Seconds between beats: at most ``HEARTBEAT_SECONDS``, ``BEATS_PER_LEASE`` per lease (whose lower bound,
    ``EVO.LEASE_SECONDS``'s, keeps the beats at least ``MIN_HEARTBEAT_SECONDS`` apart)."""
    return min(HEARTBEAT_SECONDS, lease_seconds / BEATS_PER_LEASE)


def file_age(now: float, then: float, lease_seconds: float) -> float:
    """Seconds from the file time ``then`` to ``now`` (both the shared filesystem's clock); ``math.inf``
    for a time from the future, which says nothing of life: it never counts as fresh.

    Every judgement of liveness goes through here (``is_fresh``): heartbeats, claims and leases,
    the evaluation's claims, ``tools/status.py``. A beat may land between the judge's ``now`` and its
    look at the file, so a time ahead by at most ``FUTURE_SLACK_SECONDS`` (or the lease, if shorter) is
    now; further ahead (a clock set wrong, a planted mtime) it is from the future: a slot whose owner's
    heartbeat is dated ten years ahead would otherwise be held for ten years.
    """
    if then - now > min(FUTURE_SLACK_SECONDS, lease_seconds):
        return math.inf
    return max(now - then, 0.0)


def is_fresh(now: float, then: float | None, lease_seconds: float) -> bool:
    """Whether the file time ``then`` (None: no file) is at most ``lease_seconds`` old at ``now`` (``file_age``)."""
    return then is not None and file_age(now, then, lease_seconds) <= lease_seconds


def age_text(now: float, then: float | None, lease_seconds: float) -> str:
    """``12 s ago``, ``never``, or, for a time from the future (``file_age``), how far ahead it is dated."""
    if then is None:
        return "never"
    if (age := file_age(now, then, lease_seconds)) == math.inf:
        return f"dated {then - now:.0f} s in the future (a clock set wrong, or planted: counts as stale)"
    return f"{age:.0f} s ago"


def is_stale(now: float, heartbeat: float | None, claimed: float | None, lease_seconds: float) -> bool:
    """True unless the newer of the owner's heartbeat and its claim is fresh (``is_fresh``: at most
    ``lease_seconds`` old at ``now``, and not from the future).

    All three times are file mtimes on the shared filesystem. A claim made after the owner's
    last heartbeat counts as a sign of life (a fresh claim is never stale); one made before a
    heartbeat dated in the future does not.
    """
    times = [t for t in (heartbeat, claimed) if t is not None]
    return not times or not is_fresh(now, max(times), lease_seconds)


def takeover_reason(run: RunDir, slot: int, claim: Claim, now: float, lease_seconds: float,
                    me: tuple[int, int] | None = None) -> str | None:
    """Why the owner of ``claim`` (the current claim of ``slot``) no longer holds it, or None.

    A damaged claim (``SlotStore.read``) names no owner. Every worker records a slot in its
    state before it claims or takes it over, so the slot is held while a worker other than ``me``
    (node, worker) whose state says it works on the slot has beaten within ``lease_seconds``.
    """
    if claim.damaged:
        holders = [state for state in run.workers.states() if state.slot == slot and (state.node, state.worker) != me]
        beats = [run.workers.heartbeat_time(s.node, s.worker) for s in holders]
        if not any(is_fresh(now, beat, lease_seconds) for beat in beats):
            return f"its claim {claim.damaged}, and no other worker on slot {slot} beat in {lease_seconds:g} s"
        return None
    assert claim.node is not None and claim.worker is not None and claim.id is not None  # not damaged
    owner = (claim.node, claim.worker)
    name = f"{owner[0]}-{owner[1]}"
    state = run.workers.read_state(*owner)  # read before the metadata: the owner publishes, then moves on
    if run.publications.is_published(claim.id):
        return None
    if (working_on := state and state.slot) != slot:
        return f"its owner {name} works on slot {working_on}"
    heartbeat = run.workers.heartbeat_time(*owner)
    if is_stale(now, heartbeat, run.slots.claim_time(slot, claim.lease), lease_seconds):
        age = age_text(now, heartbeat, lease_seconds)
        return f"its owner {name} last beat {age} (EVO.LEASE_SECONDS {lease_seconds:g})"
    return None


class Heartbeat:
    """A daemon thread that calls ``beat`` every ``interval`` seconds: it touches a heartbeat file, a
    worker's (``WorkerStore.beat``) or, while it prepares the run, a coordinator's (``WorkerStore.beat_preparing``)."""

    def __init__(self, beat: Callable[[], object], interval: float):
        self.beat, self.interval = beat, interval
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="derl-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self.beat()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ends the beats; waits at most one interval for the thread (a beat blocked on a hung network
        filesystem must not hold up a node's shutdown: the thread is a daemon)."""
        self._done.set()
        self._thread.join(timeout=self.interval)

    def _loop(self) -> None:
        while not self._done.wait(self.interval):
            try:
                self.beat()
            except OSError:
                pass  # a full or flaky filesystem: the next beat retries; a long outage costs the lease


class SlotLost(Exception):
    """Another worker took this slot over (our heartbeat went stale) or published it: yield it."""


class StopSignal:
    """``should_stop`` for the trainer: a signal, a dead coordinator, the STOP file, or the slot's lease lost.

    The STOP file and the lease are checked at most every ``STOP_POLL_SECONDS`` and
    ``write_state`` called every ``STATE_SECONDS``, so polling once per PPO iteration costs nothing.
    """

    def __init__(self, run: RunDir, write_state: Callable[[], None]):
        self.run = run
        self.write_state = write_state
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
        if now - self._last_beat >= STATE_SECONDS:
            self._last_beat = now
            self.write_state()
        if not self.requested and now - self._last_poll >= STOP_POLL_SECONDS:
            self._last_poll = now
            self.requested = self.run.stop_requested()
            self.lost = self.lost or (self.slot_lost is not None and self.slot_lost())
        return self.requested or self.lost

    def check(self) -> None:
        """Raises ``SlotLost`` or ``Stopped`` if the worker must leave its slot."""
        if self():
            raise SlotLost if self.lost and not self.requested else Stopped

    def still_ours(self) -> bool:
        """Whether the slot's files are still ours to write: a fresh look at the leases before each
        checkpoint (a worker woken from a long pause must not overwrite those of its taker)."""
        self.lost = self.lost or (self.slot_lost is not None and self.slot_lost())
        return not self.lost
