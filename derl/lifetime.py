"""Processes that die with their parent: no worker, training or pool process outlives its starter.

Linux's parent-death signal (``PR_SET_PDEATHSIG``) reaches a child even when its parent is
killed with SIGKILL, which no handler sees. A parent that dies before the child asks for it is
caught by comparing the parent's pid (docs/guides/evolution.md#stop).

An evolution worker dies with its coordinator at once, by SIGKILL (``die_with_parent``): a SIGTERM
would be honoured only at the end of a PPO iteration, minutes of training for nobody. Its writes are
atomic, so a hard stop loses nothing published. The worker's own children (an encoder, a probe) get
no signal from the kernel when it dies, so a guard, a small process of the worker's process group
(``guard_group``), SIGKILLs the whole group once the worker is gone, however it ended.

``map_in_processes`` is derl's process pool: it stops in bounded time whatever interrupts it.
``multiprocessing.Pool`` does not: its ``terminate()`` kills the workers, then joins its task
handler thread with no timeout, and a handler that was pickling a task bigger than a pipe's
buffer when the stop began (``_help_stuff_finish`` had found the pipe empty) then blocks for good
writing it to workers that are gone: the coordinator hung with zombie pool workers after a SIGTERM.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar, cast

_PR_SET_PDEATHSIG = 1
# Seconds to wait for each SIGKILLed pool process to be reaped (one in uninterruptible sleep is left).
REAP_SECONDS = 5.0

Job = TypeVar("Job")
Result = TypeVar("Result")


def die_with_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> None:
    """Asks Linux to send ``sig`` to this process when its parent dies; exits at once if ``parent``
    (the pid it was started by) is already gone."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


# The guard's parent-death signal: never one the coordinator sends a group to stop it (SIGINT, SIGTERM).
_GUARD_SIGNAL = signal.SIGUSR1


def guard_group() -> Any | None:
    """Starts a guard of this process's group (``python -m derl.lifetime PID``), which SIGKILLs the group
    once this process is gone (killed, or exited): nothing this process started outlives it. Only a
    process that leads its group has one (a coordinator's worker, started in a session of its own); else
    None (its group is its starter's, a shell's job: never killed from here)."""
    if not sys.platform.startswith("linux") or os.getpgrp() != os.getpid():
        return None
    import subprocess  # noqa: PLC0415 - only a group leader pays for it

    return subprocess.Popen([sys.executable, "-m", "derl.lifetime", str(os.getpid())], stdin=subprocess.DEVNULL)


def _guard(leader: int) -> None:
    """The guard of ``leader``'s group: waits for ``leader``'s death, then SIGKILLs the group (itself too).

    It ignores SIGINT and SIGTERM (a group stopped gently stops its leader; the guard outlives it by a
    moment, then kills what the leader left behind) and asks for ``_GUARD_SIGNAL`` when ``leader`` dies."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(_GUARD_SIGNAL, lambda signum, frame: os.killpg(leader, signal.SIGKILL))
    die_with_parent(_GUARD_SIGNAL)
    if os.getppid() != leader:  # gone before the signal was asked for
        os.killpg(leader, signal.SIGKILL)
    while True:
        signal.pause()


def pool_process_init(parent: int) -> None:
    """Initializer of derl's process pools: dies with ``parent``; Ctrl-C is the parent's to handle
    (a terminal sends it to the whole group, and a pool process would print a traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(signal.SIGKILL, parent)


def map_in_processes(function: Callable[[Job], Result], jobs: Sequence[Job], num_workers: int, *,
                     batch: int = 1, done: Callable[[int], Any] | None = None) -> list[Result]:
    """``[function(job) for job in jobs]``, computed in ``num_workers`` spawned processes.

    Process ``w`` takes jobs ``w, w + num_workers, ...`` and sends their results back in batches of
    ``batch``; ``done(n)`` is called as ``n`` more results arrive (a progress bar). The processes die
    with this one (``pool_process_init``), and however this call ends (an exception, a signal's
    handler raising in it) each is SIGKILLed and reaped within ``REAP_SECONDS``: this process has no
    helper thread and never writes to a pipe that nobody reads.

    Raises:
        Exception: what ``function`` raised in a pool process.
        ChildProcessError: a pool process died before sending all its results (killed, out of memory).
    """
    context = multiprocessing.get_context("spawn")  # no forked copies of threads or rng state
    jobs = list(jobs)
    results: list[Any] = [None] * len(jobs)
    procs: dict[Connection, Any] = {}
    try:
        for worker in range(min(num_workers, len(jobs))):
            mine, theirs = context.Pipe()
            proc = context.Process(target=_serve, args=(function, theirs, os.getpid(), batch), daemon=True,
                                   name=f"derl-pool-{worker}")
            procs[mine] = proc
            with _stop_signals_deferred():  # started, or not at all: never a process this call cannot kill
                proc.start()
            theirs.close()
        count = len(procs)
        left: dict[Connection, int] = {}  # results each process still owes
        for worker, conn in enumerate(procs):  # sent once each process is up: it dies with this one by then
            left[conn] = len(range(worker, len(jobs), count))
            try:
                conn.send((range(worker, len(jobs), count), jobs[worker::count]))
            except OSError:  # a broken pipe: it died
                _died(procs[conn])
        waiting = list(procs)
        while waiting:
            for conn in cast(list[Connection], wait(waiting)):
                try:
                    received = conn.recv()
                except (EOFError, OSError):  # closed when done; reset if it died with data unread
                    waiting.remove(conn)
                    if left[conn]:
                        _died(procs[conn])
                    continue
                if isinstance(received, BaseException):
                    raise received  # the job's own error, as the pool process raised it
                for index, result in received:
                    results[index] = result
                left[conn] -= len(received)
                if done is not None:
                    done(len(received))
    finally:
        _end(procs)
    return results


@contextlib.contextmanager
def _stop_signals_deferred() -> Iterator[None]:
    """Holds the handlers of SIGINT and SIGTERM back for the block (milliseconds: a process's start) and
    runs the first one caught after it. A handler that raised inside ``Process.start`` would leave a
    started process whose pid its caller never learns (``Process.pid`` is None until ``start`` returns).
    In the main thread only, the one that handles signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, Any]] = []
    previous: dict[int, Any] = {sig: signal.signal(sig, lambda signum, frame: caught.append((signum, frame)))
                                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        for signum, frame in caught[:1]:
            handler = previous[signum]
            if callable(handler):
                handler(signum, frame)
            elif handler != signal.SIG_IGN:
                signal.raise_signal(signum)  # the default: the process ends as the signal says


def _died(proc: Any) -> None:
    proc.join(REAP_SECONDS)
    raise ChildProcessError(f"pool process {proc.name} died (exit code {proc.exitcode}) before sending all its "
                            "results")


def _serve(function: Callable[[Any], Any], conn: Connection, parent: int, batch: int) -> None:
    """A pool process: its jobs from ``conn``, then their ``(index, result)`` pairs back in batches (or
    the first job's exception)."""
    pool_process_init(parent)
    indices, jobs = conn.recv()
    out = []
    try:
        for index, job in zip(indices, jobs, strict=True):
            out.append((index, function(job)))
            if len(out) >= batch:
                conn.send(out)
                out = []
    except Exception as err:  # raised again in the parent
        conn.send(err)
        return
    if out:
        conn.send(out)
    conn.close()


def _end(procs: dict[Connection, Any]) -> None:
    """SIGKILLs every pool process that started, reaps each within ``REAP_SECONDS``, closes the pipes."""
    for proc in procs.values():
        if proc.pid is not None:  # a signal may have come before or during its start
            with contextlib.suppress(OSError):
                proc.kill()
    for conn, proc in procs.items():
        if proc.pid is not None:
            proc.join(REAP_SECONDS)
        conn.close()


if __name__ == "__main__":
    _guard(int(sys.argv[1]))
