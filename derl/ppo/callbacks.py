"""Hooks of the training loop (Stable-Baselines3's ``BaseCallback``, reduced to what derl needs).

``derl.ppo.train(..., callbacks=[...])`` calls, on every rank of a data-parallel run:

- ``should_stop()`` before each iteration; if it is True on any rank, every rank saves a
  checkpoint and returns early (``TrainResult.completed`` is False);
- ``may_save()`` before each checkpoint; if it is False on any rank, the checkpoint files belong to
  another process now (an evolution slot taken over): nothing is written and the run returns early;
- ``on_iteration(record)`` after each iteration, with its metrics record (the same on all ranks);
- ``on_checkpoint(iteration, path)`` after each checkpoint (rank 0 wrote it).

``TensorBoard`` writes each record to event files; the caller closes it when training ends.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from derl.fileio.folders import make_folders
from derl.metrics import REWARD_PREFIX

if TYPE_CHECKING:  # tensorboard is imported only when a curve is written
    from torch.utils.tensorboard import SummaryWriter


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


# Record fields (``PPO.iterate``) that are episode statistics or timings; reward terms have their own
# group and everything else (losses, entropy, KL, learning rate) is the learner's.
_EPISODE_FIELDS = frozenset({"return", "x_pos", "metric", "length", "episodes"})
_TIME_FIELDS = frozenset({"steps_per_sec", "collect_seconds", "update_seconds"})


def tensorboard_tag(key: str) -> str | None:
    """The TensorBoard tag of a metrics record field (``episode/return``, ``reward/forward``,
    ``train/entropy``, ``time/steps_per_sec``); None for the x axes themselves."""
    if key in ("iteration", "env_steps"):
        return None
    if key.startswith(REWARD_PREFIX):
        return f"reward/{key[len(REWARD_PREFIX):]}"
    group = "episode" if key in _EPISODE_FIELDS else "time" if key in _TIME_FIELDS else "train"
    return f"{group}/{key}"


class TensorBoard(Callback):
    """Writes every iteration's record to TensorBoard event files in ``log_dir``, by env step.

    The learning curve (``episode/return``, ``episode/metric``), each reward term, the losses,
    entropy, KL and learning rate (``train/``) and the throughput (``time/``): what SB3's and
    CleanRL's users open first. Give it to the rank that writes files (rank 0).
    """

    def __init__(self, log_dir: str | Path):
        self.log_dir = Path(log_dir)
        self.writer: SummaryWriter | None = None

    def on_iteration(self, record: dict) -> None:
        if self.writer is None:
            from torch.utils.tensorboard import SummaryWriter  # imports tensorboard: only when asked for

            make_folders(self.log_dir)  # none a link (below a confined folder: derl.fileio.folders.confine_writes)
            # A resumed run hides the points an earlier run wrote past its last checkpoint.
            self.writer = SummaryWriter(str(self.log_dir), purge_step=record["env_steps"], flush_secs=30)
        for key, value in record.items():
            tag = tensorboard_tag(key)
            if tag is not None and isinstance(value, int | float) and not isinstance(value, bool):
                self.writer.add_scalar(tag, value, record["env_steps"])

    def on_checkpoint(self, iteration: int, path: Path | None) -> None:
        if self.writer is not None:
            self.writer.flush()  # a curve on disk as far as the checkpoint

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
