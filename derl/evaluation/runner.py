"""Trains the cells of an evaluation, ``workers`` at a time, each in its own process.

Like the evolution's coordinator: each training runs in its own session
(``python -m derl.evaluation``, ``derl.evaluation.cell``) and dies with this process (``PR_SET_PDEATHSIG``); a
training that dies is restarted from its checkpoint, at most ``MAX_ATTEMPTS`` times, then
the cell is given up (exit code 1; a rerun tries it again). Finished cells are skipped, so a
rerun does nothing twice. Cells claimed by a live process elsewhere are skipped and looked at
again every heartbeat interval; once nothing is left to start here, this process waits for
them, taking over those whose owner died (``derl.evaluation.store``). One line per finished cell.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from tqdm import tqdm

from derl.analysis.run import RunView
from derl.evaluation.cell import PARENT_PID_VARIABLE
from derl.evaluation.plan import Cell
from derl.evaluation.store import CellResult, EvalDir
from derl.evolution.lease import heartbeat_interval
from derl.evolution.process import EXIT_FATAL
from derl.fileio.folders import NotAFolder, make_folders
from derl.lifetime import die_with_parent
from derl.progress import progress_bar

# Starts of one cell on this node (the first included) before it is given up.
MAX_ATTEMPTS = 3
POLL_SECONDS = 0.5
# Seconds a stopping training gets between SIGTERM and SIGKILL.
GRACE_SECONDS = 10.0


def log(message: str) -> None:
    tqdm.write(f"[evaluate] {message}", file=sys.stdout)  # above the progress bar, if one is drawn
    sys.stdout.flush()


@dataclass
class _Training:
    cell: Cell
    generation: int
    proc: subprocess.Popen
    started: float = field(default_factory=time.monotonic)


class Evaluation:
    """The cells of one ``tools/evaluate.py`` call on this node."""

    def __init__(self, cells: Sequence[Cell], views: Sequence[RunView], overrides: Sequence[str], workers: int,
                 nproc: int = 1):
        self.cells = list(cells)
        self.overrides = list(overrides)
        self.workers = workers
        self.nproc = nproc
        self.stores = {view.run.root: EvalDir(view.run, view.cfg.EVO.LEASE_SECONDS) for view in views}
        self.interval = min(heartbeat_interval(store.lease_seconds) for store in self.stores.values())
        self.running: dict[Cell, _Training] = {}
        self.attempts = dict.fromkeys(self.cells, 0)
        self.given_up: list[Cell] = []
        self.pending: list[Cell] = []
        self.done = 0
        self.not_before: dict[Cell, float] = {}  # cells held elsewhere: when to look again
        self.signalled: int | None = None
        # Cells done, on a terminal; each running cell's curves are live in its tensorboard/ folder.
        self.bar = progress_bar(len(self.cells), "cells", unit="cell")

    def _store(self, cell: Cell) -> EvalDir:
        return self.stores[cell.run]

    def _start(self, cell: Cell, generation: int) -> None:
        out_dir = self._store(cell).cell_dir(cell)
        make_folders(out_dir, self._store(cell).run.root)  # eval/ and its folders: none a link
        env = dict(os.environ)
        command = [sys.executable, "-m", "derl.evaluation", str(cell.run), cell.task, cell.id,
                   str(cell.seed), str(out_dir), *self.overrides]
        if self.nproc > 1:  # data-parallel ranks, as tools/train_ddp.sh starts them
            command[1:1] = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(self.nproc)]
            env.pop(PARENT_PID_VARIABLE, None)  # the ranks' parent is torchrun's agent
        else:
            env[PARENT_PID_VARIABLE] = str(os.getpid())
        self.attempts[cell] += 1
        proc = subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=die_with_parent)
        self.running[cell] = _Training(cell, generation, proc)

    def _kill(self, training: _Training, sig: int) -> None:
        try:
            os.killpg(training.proc.pid, sig)
        except ProcessLookupError:
            pass

    def _handle_signal(self, signum: int, frame) -> None:
        self.signalled = signum

    def run(self) -> int:
        """Trains what is left; 0 when every cell is finished, 1 if one was given up, 128 + signal if stopped."""
        previous = {sig: signal.signal(sig, self._handle_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return self._loop()
        finally:
            self.bar.close()
            self._stop_all()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for store in self.stores.values():
                store.write_summary()

    def _loop(self) -> int:
        self.pending = [cell for cell in self.cells if self._store(cell).result(cell) is None]
        self.done = len(self.cells) - len(self.pending)
        self.bar.update(self.done)
        log(f"{len(self.cells)} cells, {self.done} already done, {self.workers} at a time")
        waiting_shown = None
        last_beat = time.monotonic()
        while self.pending:
            if self.signalled is not None:
                log(f"received signal {self.signalled}: stopping; rerun to continue")
                return 128 + self.signalled
            for cell, training in list(self.running.items()):
                code = training.proc.poll()
                if code is not None:
                    self._kill(training, signal.SIGKILL)  # processes it may leave behind
                    del self.running[cell]
                    self._exited(cell, training, code)
            self._fill()
            self.bar.set_postfix_str(f"{len(self.running)} training", refresh=False)
            self.bar.refresh()
            if time.monotonic() - last_beat >= self.interval:
                last_beat = time.monotonic()
                self._beat()
            held_elsewhere = len(self.pending) - len(self.running)
            if not self.running and held_elsewhere and waiting_shown != held_elsewhere:
                log(f"waiting for {held_elsewhere} cells trained elsewhere")
                waiting_shown = held_elsewhere
            time.sleep(POLL_SECONDS)
        return 1 if self.given_up else 0

    def _fill(self) -> None:
        """Starts pending cells this process can claim, up to ``workers`` trainings."""
        now = time.monotonic()
        for cell in list(self.pending):
            if len(self.running) >= self.workers:
                return
            if cell in self.running or self.not_before.get(cell, 0.0) > now:
                continue
            store = self._store(cell)
            if (result := store.result(cell)) is not None:  # finished elsewhere meanwhile
                self._record(cell, result, "elsewhere")
                continue
            generation = store.claim(cell)
            if generation is None:
                self.not_before[cell] = now + self.interval
                continue
            self._start(cell, generation)

    def _record(self, cell: Cell, result: CellResult, how: str) -> None:
        """Counts a finished cell, prints its line and rewrites its run's summary."""
        self.pending.remove(cell)
        self.done += 1
        self.bar.update(1)
        summary = result["summary"]
        log(f"{self.done}/{len(self.cells)} done: {cell.label()}: return {_num(summary.get('return'))}, "
            f"metric {_num(summary.get('metric'))} ({how})")
        self._store(cell).write_summary()

    def _exited(self, cell: Cell, training: _Training, code: int) -> None:
        """Handles the exit of a training: finished, taken over, restarted or given up."""
        store = self._store(cell)
        if (result := store.result(cell)) is not None:
            self._record(cell, result, f"{time.monotonic() - training.started:.0f} s")
        elif store.lost(cell, training.generation):
            log(f"{cell.label()}: taken over by another process")
        elif self.attempts[cell] >= MAX_ATTEMPTS:
            log(f"{cell.label()}: training died {self.attempts[cell]} times (exit {code}); giving up")
            self.given_up.append(cell)
            self.pending.remove(cell)
        else:
            log(f"{cell.label()}: training died (exit {code}); restart {self.attempts[cell]} from its checkpoint")
            self._start(cell, training.generation)

    def _beat(self) -> None:
        """Touches the claims of running cells; stops those another process has taken over."""
        for cell, training in list(self.running.items()):
            store = self._store(cell)
            if store.lost(cell, training.generation):
                self._kill(training, signal.SIGKILL)
                continue
            store.beat(cell, training.generation)

    def _stop_all(self) -> None:
        for training in self.running.values():
            self._kill(training, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        for training in self.running.values():
            try:
                training.proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                self._kill(training, signal.SIGKILL)
                training.proc.wait()
        self.running.clear()


def _num(value) -> str:
    return f"{value:.2f}" if isinstance(value, int | float) else "-"


def evaluate(cells: Sequence[Cell], views: Sequence[RunView], overrides: Sequence[str], workers: int,
             nproc: int = 1) -> int:
    """Trains every unfinished cell of the runs ``views`` (``nproc`` data-parallel ranks each) and writes each
    run's ``eval/summary.json``; returns the exit code.

    A folder of ``eval/`` that is a symbolic link or a file (``NotAFolder``) is one line on stderr and
    ``EXIT_FATAL``, as in the search (a rerun would meet it again): refused before anything is read or
    written (``EvalDir.check_folders``), or, met while the cells train, after stopping them.
    """
    try:
        for view in views:
            EvalDir(view.run, 0.0).check_folders(cell for cell in cells if cell.run == view.run.root)
        return Evaluation(cells, views, overrides, workers, nproc).run()
    except NotAFolder as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return EXIT_FATAL
