"""Hooks of the training loop (Stable-Baselines3's ``BaseCallback``, reduced to what derl needs).

``derl.ppo.train(..., callbacks=[...])`` calls, on every rank of a data-parallel run:

- ``should_stop()`` before each iteration; if it is True on any rank, every rank saves a
  checkpoint and returns early (``TrainResult.completed`` is False);
- ``may_save()`` before each checkpoint; if it is False on any rank, the checkpoint files belong to
  another process now (an evolution slot taken over): nothing is written and the run returns early;
- ``on_iteration(record)`` after each iteration, with its metrics record (the same on all ranks);
- ``on_checkpoint(iteration, path)`` after each checkpoint (rank 0 wrote it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


class Callback:
    """Override the hooks you need; the defaults do nothing and never stop."""

    def should_stop(self) -> bool:
        return False

    def may_save(self) -> bool:
        return True

    def on_iteration(self, record: dict) -> None:
        pass

    def on_checkpoint(self, iteration: int, path: Path | None) -> None:
        pass


class StopWhen(Callback):
    """Stops the run when ``predicate()`` is True (a signal, a STOP file, a budget)."""

    def __init__(self, predicate: Callable[[], bool]):
        self.predicate = predicate

    def should_stop(self) -> bool:
        return self.predicate()


class SaveWhile(Callback):
    """Writes checkpoints only while ``predicate()`` is True (the files are still this run's)."""

    def __init__(self, predicate: Callable[[], bool]):
        self.predicate = predicate

    def may_save(self) -> bool:
        return self.predicate()


class OnIteration(Callback):
    """Calls ``function(record)`` after every iteration (a progress display, a list's ``append``)."""

    def __init__(self, function: Callable[[dict], None]):
        self.function = function

    def on_iteration(self, record: dict) -> None:
        self.function(record)
