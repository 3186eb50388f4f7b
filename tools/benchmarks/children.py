"""The benchmarks' one child-process protocol: every process a benchmark starts is started here.

Two kinds of child. A *JSON child* (``run_json``): ``python -m MODULE SPEC`` with SPEC a JSON
object; the module's ``__main__`` is ``serve(handler)``, which prints ``handler(spec)`` as the last
line of stdout. A *command* (``run_command``, ``Child``): a tool run as a user runs it (``tools/train_ppo.py``,
``evo_single_proc.py``, ``tools/train_ddp.sh``), its output to a log, its results in the files it writes.

Either way the child starts in the checkout's root, the benchmarks' folder on its ``PYTHONPATH``
(``with_benchmarks``: they are not installed with derl), in a process group of its own, which is killed
whole at its time limit and when this process stops waiting for it (Ctrl-C, an error): a stopped
benchmark leaves no training behind. ``dies_with_parent`` starts a Python command through this
module's launcher (``python -m benchmarks.children PARENT SCRIPT|-m MODULE ARGS...``), which sets
Linux's parent-death signal first, so that it dies even when this process is killed outright. A
failure is one line (``ChildError``, ``failure``): what, how it ended, the last line it printed.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from derl.fileio.reads import JsonFileError, parse_json
from derl.lifetime import die_with_parent
from derl.paths import REPO_ROOT

BENCHMARKS_PARENT = Path(__file__).resolve().parents[1]  # tools/, the folder that holds this package
POLL_SECONDS = 0.05  # how often a child with a time limit or a ``poll`` is looked at
TAIL_CHARS = 2000


class ChildError(RuntimeError):
    """A child failed, ran past its time limit or answered no JSON; the message is one line."""


def last_line(text: str) -> str:
    """The last non-blank line of a child's output (300 characters at most), or ``no output``."""
    line = next((line for line in reversed(text.splitlines()) if line.strip()), "no output")
    return line.strip()[:300]


def failure(what: str, returncode: int | None, output: str, timeout: float | None) -> str | None:
    """The one line that says how a child ended badly (``returncode`` None: killed at ``timeout``), or None."""
    if returncode is None:
        return f"{what} still running after {timeout:.0f} s: killed"
    if returncode != 0:
        return f"{what} exited {returncode}: {last_line(output)}"
    return None


@dataclass
class Ended:
    """How a child ended: its exit code (None: killed at its time limit), the tail of its output (stdout
    and stderr together; a JSON child's stderr), its wall seconds and CPU seconds (its own and those of
    the descendants it waited for)."""

    what: str
    returncode: int | None
    output: str
    seconds: float
    cpu_seconds: float
    timeout: float | None = None

    def check(self) -> Ended:
        """Itself, or ``ChildError`` with ``failure``'s line."""
        line = failure(self.what, self.returncode, self.output, self.timeout)
        if line is not None:
            raise ChildError(line)
        return self


def with_benchmarks(env: Mapping[str, str], *first: Path) -> dict[str, str]:
    """``env`` with ``first`` and then the benchmarks' parent folder in front of its ``PYTHONPATH``: a child
    imports them by name (``python -m benchmarks.ppo_runs``, ``DERL_EVO_BACKEND=benchmarks.sim_backend:...``),
    and only ``tools/bench.py``'s own process has their folder on its path (the folder of the script it runs)."""
    path = [*map(str, first), str(BENCHMARKS_PARENT), env.get("PYTHONPATH")]
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, path))}


class Child:
    """One started child (module docstring); ``wait`` for it, or ``stop`` it."""

    def __init__(self, command: Sequence[str], what: str, log: Path | None = None, env: Mapping[str, str] | None = None,
                 dies_with_parent: bool = False, answers: bool = False):
        command = [str(part) for part in command]
        if dies_with_parent:  # command[0] is this Python
            command = [sys.executable, "-m", __name__, str(os.getpid()), *command[1:]]
        self.what = what
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[str] = (log.open("w+", errors="replace") if log is not None
                              else tempfile.TemporaryFile("w+", errors="replace"))
        self._answer: IO[str] | None = tempfile.TemporaryFile("w+", errors="replace") if answers else None
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(command, cwd=REPO_ROOT, env=with_benchmarks(os.environ if env is None else env),
                                     stdout=self._answer or self._log, stderr=self._log, process_group=0)

    def _kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group: a tool's own children too
        except ProcessLookupError:
            pass
        self.proc.wait()

    def wait(self, timeout: float | None = None, poll: Callable[[], None] | None = None,
             every: float = POLL_SECONDS) -> Ended:
        """Waits until the child exits, or kills its group ``timeout`` seconds after its start;
        ``poll()`` meanwhile, every ``every`` seconds."""
        deadline = None if timeout is None else self.started + timeout
        try:
            while True:
                pid, status, usage = os.wait4(self.proc.pid, 0 if deadline is None and poll is None else os.WNOHANG)
                if pid:
                    self.proc.returncode = os.waitstatus_to_exitcode(status)
                    code, cpu = self.proc.returncode, usage.ru_utime + usage.ru_stime
                    break
                if deadline is not None and time.perf_counter() >= deadline:
                    self._kill()
                    code, cpu = None, 0.0
                    break
                if poll is not None:
                    poll()
                time.sleep(every)
        except BaseException:
            self._kill()
            raise
        seconds = time.perf_counter() - self.started
        return Ended(self.what, code, _tail(self._log), seconds, cpu, timeout)

    def answer(self) -> str:
        """What a JSON child printed on stdout."""
        return _tail(self._answer, None)

    def stop(self) -> None:
        """SIGTERM to the group, SIGKILL after 10 s (a background child, as ``Sampling``'s)."""
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except ProcessLookupError:
            self.proc.wait()
        except subprocess.TimeoutExpired:
            self._kill()


def _tail(stream: IO[str], chars: int | None = TAIL_CHARS) -> str:
    stream.flush()
    stream.seek(0)
    text = stream.read()
    return text if chars is None else text[-chars:]


def run_command(command: Sequence[str], what: str, *, log: Path | None = None, timeout: float | None = None,
        env: Mapping[str, str] | None = None, poll: Callable[[], None] | None = None,
        every: float = POLL_SECONDS, dies_with_parent: bool = False) -> Ended:
    """Runs a command to its end (``Child``, then ``wait``); ``ChildError`` unless it exited 0."""
    return Child(command, what, log, env, dies_with_parent).wait(timeout, poll, every).check()


def run_json(module: str, spec: dict, what: str, *, timeout: float | None = None,
             env: Mapping[str, str] | None = None) -> dict:
    """``python -m module SPEC``'s answer (``serve``), with its wall seconds as ``child_seconds``."""
    child = Child([sys.executable, "-m", module, json.dumps(spec)], what, env=env, answers=True)
    ended = child.wait(timeout).check()
    lines = child.answer().strip().splitlines()
    try:
        answer = parse_json(lines[-1], f"{what}'s answer") if lines else None
    except JsonFileError:
        answer = None
    if not isinstance(answer, dict):
        raise ChildError(f"{what} answered no JSON object: {last_line(ended.output)}")
    return {**answer, "child_seconds": ended.seconds}


def serve(handler: Callable[[dict], dict]) -> None:
    """A JSON child's ``__main__``: ``handler`` of the spec in ``sys.argv[1]``, printed as one JSON line."""
    print(json.dumps(handler(parse_json(sys.argv[1], "the spec on the command line"))))


def main(argv: list[str]) -> None:
    """``PARENT SCRIPT ARGS...`` or ``PARENT -m MODULE ARGS...``: runs it as ``__main__``, killed when the
    process PARENT dies (the parent-death signal set here, not in a ``preexec_fn``, which is unsafe in a
    process with threads; it survives an ``exec``)."""
    parent, target, *args = argv
    die_with_parent(signal.SIGKILL, int(parent))
    if target == "-m":
        module, *args = args
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    sys.argv = [target, *args]
    sys.path[0] = str(Path(target).resolve().parent)
    runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
