"""A scheduler's SIGTERM ends a node in bounded time, also on a machine whose cores are all busy.

Before, a coordinator drawing the initial population in a ``multiprocessing.Pool`` could hang for good
after SIGTERM (once in the project's own tests on a loaded 2-core machine: 34 minutes, zombie pool
workers, the pool's task handler blocked writing to a pipe): ``Pool.terminate()`` joins its task handler
with no timeout, after killing the workers that would have read the task it was pickling
(``derl.lifetime``). These tests repeat the stop many times with every core kept busy by spinning
processes, so that each phase of the pool (starting, receiving its jobs, computing, sending results)
is hit by some try (slow: ``make test-slow``). The fast tests below check ``derl.lifetime.map_in_processes``,
the pool that replaced it, interrupted at several moments by a handler that raises, as the coordinator's does.
"""

import math
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from derl.lifetime import map_in_processes
from tests.evolution import test_evolution_protocol as protocol

TRIES = 50
# The pool's end after SIGTERM: the coordinator exits 143 and no pool process is left by then (a generous
# bound for a busy machine: a hang, as before, never ends).
BOUND_SECONDS = 60


@pytest.fixture(scope="module")
def busy_cores():
    """One spinning process per core for the whole module (killed at its end)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    yield
    for spinner in spinners:
        spinner.kill()
        spinner.wait()


def _pool_processes(pid: int) -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process(pid).children(recursive=True)
                if "spawn_main" in " ".join(p.cmdline())]
    except psutil.NoSuchProcess:
        return []


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(TRIES))
def test_the_initial_population_pool_ends_after_sigterm_on_busy_cores(tmp_path, busy_cores, attempt):
    """SIGTERM lands at a different moment of the pool's life in each try (0 to 4.5 s after its processes
    appear): the coordinator exits 143 and every pool process is gone within ``BOUND_SECONDS``."""
    from derl.evolution.node_size import usable_cores

    if usable_cores() < 2:
        pytest.skip("one core: the initial population is built without a pool")
    env = {key: value for key, value in protocol.ENV.items() if key != "DERL_EVO_BACKEND"}  # the real pool
    coordinator = protocol.start(tmp_path / "run", "EVO.INIT_POPULATION_SIZE", "5000", "EVO.SEARCH_SPACE_SIZE",
                                 "5000", env=env)
    tree: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while len(pool := _pool_processes(coordinator.pid)) < 2 and coordinator.poll() is None:
            assert time.monotonic() < deadline, "no pool started"
            time.sleep(0.05)
        assert len(pool) >= 2, (tmp_path / "run-coordinator.log").read_text()[-2000:]
        time.sleep(attempt % 10 * 0.5)
        tree = psutil.Process(coordinator.pid).children(recursive=True)
        coordinator.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        assert coordinator.wait(timeout=BOUND_SECONDS) == 128 + signal.SIGTERM
        while any(protocol.alive(p.pid) for p in pool) and time.monotonic() < stopped + BOUND_SECONDS:
            time.sleep(0.1)
        assert not any(protocol.alive(p.pid) for p in pool)
    finally:  # a hung coordinator is not left spinning with the next try
        for process in [*tree, psutil.Process(coordinator.pid)] if coordinator.poll() is None else tree:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        coordinator.wait()


def test_map_in_processes_returns_in_order_and_raises_what_a_job_raised():
    assert map_in_processes(math.sqrt, [4, 9, 16, 25, 36], 2) == [2, 3, 4, 5, 6]
    assert [len(b) for b in map_in_processes(bytes, [300_000, 1, 200_000, 2, 3], 2, batch=2)] == [300_000, 1, 200_000,
                                                                                                 2, 3]
    assert map_in_processes(math.sqrt, [], 2) == []
    with pytest.raises(ValueError, match="math domain error"):
        map_in_processes(math.sqrt, [4, -1, 9], 2)
    assert _pool_processes(os.getpid()) == []


class _Interrupted(KeyboardInterrupt):
    pass


def _interrupt(signum, frame):
    raise _Interrupted


class _SignalOnceIterated(list):
    """Jobs that start the SIGTERM timer when ``map_in_processes`` has iterated them (its first step):
    the signal cannot arrive before the call is entered, nor before ``pytest.raises`` is."""

    def __init__(self, jobs: list, timer: threading.Timer):
        super().__init__(jobs)
        self.timer = timer

    def __iter__(self):
        yield from super().__iter__()
        self.timer.start()


@pytest.mark.parametrize("after", [0.001, 0.02, 0.05, 0.3, 2.0])
def test_map_in_processes_ends_its_processes_in_bounded_time_whenever_a_signal_handler_raises(after):
    """SIGTERM's handler raises while the processes start, receive their jobs (more than a pipe's buffer)
    or compute: the call ends (its 200,000 jobs would take minutes) and no pool process is left."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    timer = threading.Timer(after, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        with pytest.raises(_Interrupted):
            map_in_processes(time.sleep, _SignalOnceIterated([0.001] * 200_000, timer), 2)  # 900 kB of jobs each
    finally:
        timer.cancel()  # never fired after the handler is gone
        if timer.is_alive():
            timer.join()
        signal.signal(signal.SIGTERM, previous)
    assert _pool_processes(os.getpid()) == []


def test_a_pool_process_that_dies_is_an_error_not_a_hang():
    def kill_one():
        while not (pool := _pool_processes(os.getpid())):
            time.sleep(0.05)
        pool[0].kill()

    threading.Thread(target=kill_one, daemon=True).start()
    with pytest.raises(ChildProcessError, match="died \\(exit code -9\\)"):
        map_in_processes(time.sleep, [30.0] * 4, 2)
    assert _pool_processes(os.getpid()) == []
